package sandbox

import (
	"errors"
	"fmt"
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// Sandbox is a long-lived sandbox whose PID 1 is hutch's agent (package
// agent): a daemon runs commands and file operations in it over the agent
// connection until it closes the sandbox or the sandbox ends.
type Sandbox struct {
	l    *launched
	conn net.Conn
}

// Start starts a long-lived sandbox with c's policy; c.Args, c.Stdin,
// c.Stdout and c.Stderr are not used. The agent serves its end of Conn.
func Start(c Config) (*Sandbox, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("agent socketpair: %w", err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "hutch-agent"), os.NewFile(uintptr(fds[1]), "hutch-agent-sandbox")
	defer ours.Close()
	l, err := launch(c, theirs)
	theirs.Close()
	if err != nil {
		return nil, err
	}
	conn, err := net.FileConn(ours)
	if err != nil {
		l.close()
		return nil, fmt.Errorf("agent connection: %w", err)
	}
	return &Sandbox{l: l, conn: conn}, nil
}

// Conn is the connection to the sandbox's agent.
func (s *Sandbox) Conn() net.Conn { return s.conn }

// PID is the host pid of the sandbox's PID 1.
func (s *Sandbox) PID() int { return s.l.pid }

// Dropped lists the layers hutch could not set up under best effort.
func (s *Sandbox) Dropped() []string { return s.l.dropped }

// Done is closed when the sandbox's PID 1 has ended (and with it every
// process of the sandbox).
func (s *Sandbox) Done() <-chan struct{} { return s.l.exited }

// ExitCode is PID 1's exit code once Done is closed.
func (s *Sandbox) ExitCode() int {
	select {
	case <-s.l.exited:
		return exitCode(s.l.ps, nil)
	default:
		return -1
	}
}

// Close ends the sandbox, every process in it, and releases what hutch
// held for it (placeholders, cgroup, the proxy).
func (s *Sandbox) Close() error {
	err := s.conn.Close()
	s.l.close()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}
