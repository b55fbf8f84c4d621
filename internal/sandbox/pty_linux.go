package sandbox

import (
	"fmt"
	"io"
	"os"
	"os/signal"

	"golang.org/x/sys/unix"
)

// ptyRelay gives the command a terminal of its own when hutch's stdin is a
// terminal: the command gets a new session with the pty's slave as its
// controlling terminal, so it can never inject input into the caller's
// terminal (ESCAPES item 14), and hutch relays bytes and window sizes.
type ptyRelay struct {
	master, slave *os.File
	in, out       *os.File
	saved         *unix.Termios
	outDone       chan struct{}
	winch         chan os.Signal
}

func newPtyRelay(in, out *os.File) (*ptyRelay, error) {
	mfd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open pty: %w", err)
	}
	if err := unix.IoctlSetPointerInt(mfd, unix.TIOCSPTLCK, 0); err != nil {
		unix.Close(mfd)
		return nil, fmt.Errorf("unlock pty: %w", err)
	}
	n, err := unix.IoctlGetUint32(mfd, unix.TIOCGPTN)
	if err != nil {
		unix.Close(mfd)
		return nil, fmt.Errorf("pty number: %w", err)
	}
	sfd, err := unix.Open(fmt.Sprintf("/dev/pts/%d", n), unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		unix.Close(mfd)
		return nil, fmt.Errorf("open pty slave: %w", err)
	}
	r := &ptyRelay{
		master: os.NewFile(uintptr(mfd), "pty-master"),
		slave:  os.NewFile(uintptr(sfd), "pty-slave"),
		in:     in, out: out,
		outDone: make(chan struct{}),
	}
	r.resize()
	return r, nil
}

func (r *ptyRelay) resize() {
	if ws, err := unix.IoctlGetWinsize(int(r.in.Fd()), unix.TIOCGWINSZ); err == nil {
		_ = unix.IoctlSetWinsize(int(r.master.Fd()), unix.TIOCSWINSZ, ws)
	}
}

// Start puts the caller's terminal in raw mode and starts relaying. The
// command owns the slave by now, so hutch's copy is closed: reading the
// master ends once every process of the sandbox has let go of it.
func (r *ptyRelay) Start() {
	r.slave.Close()
	if t, err := unix.IoctlGetTermios(int(r.in.Fd()), unix.TCGETS); err == nil {
		saved := *t
		r.saved = &saved
		raw := *t
		raw.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
		raw.Oflag &^= unix.OPOST
		raw.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
		raw.Cflag &^= unix.CSIZE | unix.PARENB
		raw.Cflag |= unix.CS8
		raw.Cc[unix.VMIN], raw.Cc[unix.VTIME] = 1, 0
		_ = unix.IoctlSetTermios(int(r.in.Fd()), unix.TCSETS, &raw)
	}
	r.winch = make(chan os.Signal, 1)
	signal.Notify(r.winch, unix.SIGWINCH)
	go func() {
		for range r.winch {
			r.resize()
		}
	}()
	go func() { _, _ = io.Copy(r.master, r.in) }()
	go func() {
		_, _ = io.Copy(r.out, r.master)
		close(r.outDone)
	}()
}

// Drain waits until the command's output has been relayed.
func (r *ptyRelay) Drain() { <-r.outDone }

// Close restores the caller's terminal.
func (r *ptyRelay) Close() {
	if r.winch != nil {
		signal.Stop(r.winch)
		close(r.winch)
	}
	if r.saved != nil {
		_ = unix.IoctlSetTermios(int(r.in.Fd()), unix.TCSETS, r.saved)
	}
	r.master.Close()
	r.slave.Close()
}
