package agent

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"

	"github.com/hutch-sandbox/hutch/internal/relay"
)

// MainIfAgent runs Main and exits when the process was started as
// "PROGRAM agent [--relay DIR] [--stdin]" (SudoMain for "PROGRAM sudo"): how a test binary, which a
// daemon under test starts as the sandboxes' PID 1 (its own binary),
// stands in for hutch.
func MainIfAgent() {
	if len(os.Args) >= 2 && os.Args[1] == "agent" {
		os.Exit(Main(os.Args[2:], os.Stderr))
	}
	if len(os.Args) >= 2 && os.Args[1] == "sudo" {
		os.Exit(SudoMain(os.Args[2:], os.Stderr))
	}
}

// ConnFD is the descriptor on which a sandbox's first process hands the
// agent its connection to the daemon (see sandbox.Start), and ListenerFD
// the one of its seccomp filter's listener, when the filter hands calls
// over (a sandbox with host paths to write): the agent, PID 1, answers
// them (seccomp.Supervisor).
const (
	ConnFD     = 3
	ListenerFD = 4
)

// Main is `hutch agent [--relay DIR] [--stdin | --listen ADDR | --accept | --accept-at PATH]`:
// it serves the daemon on ConnFD (on descriptor 0 with --stdin; on the
// connections a TCP listener at ADDR accepts with --listen, the unix
// listener on ConnFD with --accept, or a unix listener it makes at PATH
// with --accept-at, see listenMain), as PID 1 when it is, with the
// process's working directory and environment as the commands'
// defaults. It returns the process's exit code: 0 when the daemon closed
// the connection, 1 when serving failed, 2 when there is no agent
// connection (the agent runs only inside a sandbox).
//
// Its first act, before it reads anything from the daemon and so before
// any code of the sandbox can run, makes the process not dumpable: the
// exec that started it made it dumpable again. With --relay DIR (a
// sandbox whose kernel has no route to the host, gVisor) it then relays
// the sandbox's loopback proxy addresses to the egress proxy's sockets in
// DIR (package relay) for the sandbox's life. --stdin is for gVisor,
// which gives a sandbox restored from a checkpoint its standard streams
// again but no other descriptor of the host's.
func Main(args []string, stderr io.Writer) int {
	if err := undumpable(); err != nil {
		fmt.Fprintf(stderr, "hutch: agent: %v\n", err)
		return 1
	}
	connFD := ConnFD
	relayDir, listen, acceptAt, accept := "", "", "", false
	for len(args) > 0 {
		switch {
		case args[0] == "--accept" && !accept:
			accept, args = true, args[1:]
		case args[0] == "--accept-at" && len(args) >= 2 && args[1] != "" && acceptAt == "":
			acceptAt, args = args[1], args[2:]
		case args[0] == "--stdin":
			connFD, args = 0, args[1:]
		case args[0] == "--listen" && len(args) >= 2 && args[1] != "" && listen == "":
			listen, args = args[1], args[2:]
		case args[0] == "--relay" && len(args) >= 2 && args[1] != "" && relayDir == "":
			relayDir, args = args[1], args[2:]
		default:
			fmt.Fprintf(stderr, "hutch: agent: usage: agent [--relay DIR] [--stdin | --listen ADDR | --accept | --accept-at PATH] (inside a sandbox of hutch serve)\n")
			return 2
		}
	}
	if relayDir != "" {
		if err := relay.Start(relayDir); err != nil {
			fmt.Fprintf(stderr, "hutch: agent: %v\n", err)
			return 1
		}
	}
	sup, err := superviseListener()
	if err != nil {
		fmt.Fprintf(stderr, "hutch: agent: %v\n", err)
		return 1
	}
	if sup != nil {
		defer sup.Close()
	}
	if listen != "" || accept || acceptAt != "" {
		return listenMain(listen, acceptAt, connFD, stderr)
	}
	f := os.NewFile(uintptr(connFD), "agent-connection")
	conn, err := net.FileConn(f)
	f.Close()
	if err != nil {
		fmt.Fprintf(stderr, "hutch: agent: no agent connection on descriptor %d (the agent runs only inside a sandbox that hutch serve started): %v\n", connFD, err)
		return 2
	}
	dir, _ := os.Getwd()
	_, marker := os.Lstat(SudoMarker)
	err = Serve(conn, ServeOptions{
		Sudo:       marker == nil && os.Getpid() == 1,
		PID1:       os.Getpid() == 1,
		Log:        slog.New(slog.DiscardHandler),
		DefaultDir: dir,
		DefaultEnv: os.Environ(),
	})
	if err != nil {
		return 1
	}
	return 0
}
