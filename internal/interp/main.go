package interp

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"
)

// Command is the subcommand of hutch's agent binary that runs the code
// interpreter in a sandbox (Main): /dev/hutch code-interpreter.
const Command = "code-interpreter"

// Main is `code-interpreter [--listen ADDR] [--home DIR]`: it serves E2B's
// Code Interpreter API on ADDR (default 127.0.0.1:49999, the sandbox's
// own loopback) until SIGTERM or SIGINT, with the process's environment
// as its kernels'. It prints "listening ADDR" on stderr once it accepts
// connections. It returns the process's exit code.
func Main(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet(Command, flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:"+strconv.Itoa(Port), "the `address` to serve on")
	home := fs.String("home", "", "the working `directory` of contexts created without one (default $HOME)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "hutch: %s: unexpected argument %q\n", Command, fs.Arg(0))
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintf(stderr, "hutch: %s: %v\n", Command, err)
		return 1
	}
	s, err := NewServer(Config{Home: *home, Log: log, KernelLog: stderr})
	if err != nil {
		ln.Close()
		fmt.Fprintf(stderr, "hutch: %s: %v\n", Command, err)
		return 1
	}
	defer s.Close()
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: time.Minute}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	fmt.Fprintf(stderr, "listening %s\n", ln.Addr())
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintf(stderr, "hutch: %s: %v\n", Command, err)
		return 1
	}
	return 0
}

// MainIfCommand runs Main and exits when the process was started as
// "PROGRAM code-interpreter ...": how a test binary that a daemon under
// test starts as its sandboxes' agent serves as their interpreter too.
func MainIfCommand() {
	if len(os.Args) >= 2 && os.Args[1] == Command {
		os.Exit(Main(os.Args[2:], os.Stderr))
	}
}
