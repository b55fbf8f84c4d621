package sandbox

import (
	"errors"
	"fmt"
	"net"
	"os"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/cgroups"
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
	if c.AgentSocket != "" {
		return startListening(c)
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("agent socketpair: %w", err)
	}
	if fds[1], err = aboveStdio(fds[1]); err != nil {
		unix.Close(fds[0])
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
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	if g := s.l.group; g != nil {
		// A frozen sandbox too: a task a v1 freezer holds does not die of
		// SIGKILL until thawed, and Kill thaws the group once it signalled
		// every process.
		if kerr := g.Kill(); kerr != nil {
			err = errors.Join(err, fmt.Errorf("close sandbox: %w", kerr))
		}
	}
	s.l.close()
	return err
}

// ErrNoCgroup is the error of Freeze and Thaw on a sandbox started
// without a cgroup (see Config.Cgroup).
var ErrNoCgroup = errors.New("the sandbox has no cgroup")

// Freeze stops every process of the sandbox where it is, PID 1 included,
// until Thaw; it returns once the kernel reports them all frozen. Close
// still ends a frozen sandbox.
func (s *Sandbox) Freeze() error {
	if s.l.group == nil {
		return fmt.Errorf("freeze sandbox: %w", ErrNoCgroup)
	}
	if err := s.l.group.Freeze(); err != nil {
		return fmt.Errorf("freeze sandbox: %w", err)
	}
	return nil
}

// Thaw lets the processes of a sandbox Freeze stopped go on.
func (s *Sandbox) Thaw() error {
	if s.l.group == nil {
		return fmt.Errorf("thaw sandbox: %w", ErrNoCgroup)
	}
	if err := s.l.group.Thaw(); err != nil {
		return fmt.Errorf("thaw sandbox: %w", err)
	}
	return nil
}

// Usage is what the sandbox's processes use now, as its cgroup counts it.
func (s *Sandbox) Usage() (cgroups.Usage, error) {
	if s.l.group == nil {
		return cgroups.Usage{}, fmt.Errorf("sandbox usage: %w", ErrNoCgroup)
	}
	return s.l.group.Usage()
}

// OOMKills is how many of the sandbox's processes the kernel's OOM killer
// ended.
func (s *Sandbox) OOMKills() (int64, error) {
	if s.l.group == nil {
		return 0, fmt.Errorf("sandbox OOM kills: %w", ErrNoCgroup)
	}
	return s.l.group.OOMKills()
}
