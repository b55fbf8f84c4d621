package sandbox

import (
	"io"
	"os"
	"os/signal"

	"golang.org/x/sys/unix"
)

// When hutch's stdin is a terminal the command gets a terminal of its own:
// the sandbox's first process opens a pty in the sandbox's devpts (so the
// command's tty has a name there), makes its other end the controlling
// terminal of the command's new session and sends the master to hutch,
// which relays bytes and window sizes. The command can never inject input
// into the caller's terminal (ESCAPES item 14).

// ptyRelay copies between the caller's terminal and the pty master.
type ptyRelay struct {
	master  *os.File
	in, out *os.File
	saved   *unix.Termios
	outDone chan struct{}
	winch   chan os.Signal
}

// startPtyRelay puts the caller's terminal in raw mode and starts relaying.
func startPtyRelay(master, in, out *os.File) *ptyRelay {
	r := &ptyRelay{master: master, in: in, out: out, outDone: make(chan struct{})}
	if saved, err := unix.IoctlGetTermios(int(in.Fd()), unix.TCGETS); err == nil {
		r.saved = saved
		_ = setRaw(int(in.Fd()), *saved)
	}
	r.resize()
	r.winch = make(chan os.Signal, 1)
	signal.Notify(r.winch, unix.SIGWINCH)
	go func() {
		for range r.winch {
			r.resize()
		}
	}()
	go func() { _, _ = io.Copy(r.master, r.in) }()
	go func() {
		_, _ = io.Copy(r.out, r.master) // ends with EIO once the sandbox let go of the slave
		close(r.outDone)
	}()
	return r
}

// setRaw puts the terminal fd, whose mode is t, in raw mode: no echo, no
// line editing, no signals from keys, no output processing.
func setRaw(fd int, t unix.Termios) error {
	t.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
	t.Oflag &^= unix.OPOST
	t.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	t.Cflag &^= unix.CSIZE | unix.PARENB
	t.Cflag |= unix.CS8
	t.Cc[unix.VMIN], t.Cc[unix.VTIME] = 1, 0
	return unix.IoctlSetTermios(fd, unix.TCSETS, &t)
}

func (r *ptyRelay) resize() {
	if ws, err := unix.IoctlGetWinsize(int(r.in.Fd()), unix.TIOCGWINSZ); err == nil {
		_ = unix.IoctlSetWinsize(int(r.master.Fd()), unix.TIOCSWINSZ, ws)
	}
}

// Drain waits until the command's output has been relayed.
func (r *ptyRelay) Drain() { <-r.outDone }

// Close restores the caller's terminal.
func (r *ptyRelay) Close() {
	signal.Stop(r.winch)
	close(r.winch)
	if r.saved != nil {
		_ = unix.IoctlSetTermios(int(r.in.Fd()), unix.TCSETS, r.saved)
	}
	r.master.Close()
}
