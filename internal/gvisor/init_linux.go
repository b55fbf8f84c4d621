package gvisor

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/relay"
	"github.com/hutch-sandbox/hutch/internal/sandbox"
)

// InitCommand is the hidden command of hutch's binary that is the first
// process of a gVisor sandbox with a proxy: `/dev/hutch gvisor-init --
// CMD...` (InitMain).
const InitCommand = "gvisor-init"

// InitMain is `gvisor-init -- CMD...`, run inside gVisor as the sandbox's
// first process: it listens on the sandbox's 127.0.0.1:3128 (HTTP proxy),
// :1080 (SOCKS5) and :53 (DNS, UDP) and relays every connection, and every
// query, to hutch's proxy over the host's unix sockets bound at
// /dev/hutch-proxy; it then runs CMD in a process group of its own (in the
// terminal's foreground when there is one), passes on the signals runsc
// kill delivers to it, reaps orphans, and exits as CMD did (128+N when
// killed by signal N). It holds nothing the command could use: the
// sockets it relays to are in the command's view too.
func InitMain(args []string, stderr io.Writer) int {
	if len(args) < 2 || args[0] != "--" {
		fmt.Fprintln(stderr, "hutch: usage: hutch "+InitCommand+" -- COMMAND [ARGS...] (the first process of a gVisor sandbox)")
		return sandbox.ExitHutchError
	}
	// Not dumpable, as the agent: the command, of the same user, may
	// neither read this process's memory or environment nor trace it
	// (ESCAPES 27). The command is dumpable again after its exec.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		fmt.Fprintf(stderr, "hutch: %s: not dumpable: %v\n", InitCommand, err)
		return sandbox.ExitHutchError
	}
	if err := relay.Start(relay.SandboxDir); err != nil {
		fmt.Fprintf(stderr, "hutch: %s: %v\n", InitCommand, err)
		return sandbox.ExitHutchError
	}
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, forwarded...)
	cmd := exec.Command(args[1], args[2:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if _, err := unix.IoctlGetTermios(0, unix.TCGETS); err == nil {
		// The command's group is the terminal's foreground: the keys
		// that send signals reach it, not this process.
		signal.Ignore(unix.SIGTTOU, unix.SIGTTIN)
		cmd.SysProcAttr.Foreground, cmd.SysProcAttr.Ctty = true, 0
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(stderr, "hutch: %v\n", err)
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			return sandbox.ExitNotFound
		}
		return sandbox.ExitNotExecutable
	}
	pid := cmd.Process.Pid
	go func() {
		for sig := range sigs {
			_ = unix.Kill(-pid, sig.(syscall.Signal))
		}
	}()
	for {
		var ws unix.WaitStatus
		got, err := unix.Wait4(-1, &ws, 0, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			fmt.Fprintf(stderr, "hutch: %s: wait: %v\n", InitCommand, err)
			return sandbox.ExitHutchError
		}
		if got != pid {
			continue // an orphan
		}
		switch {
		case ws.Exited():
			return ws.ExitStatus()
		case ws.Signaled():
			return 128 + int(ws.Signal())
		}
	}
}
