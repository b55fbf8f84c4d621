package sandbox

import (
	"io"
	"os"
	"os/signal"
	"sync"

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
	keyTap.mu.Lock()
	keyTap.relays++
	keyTap.mu.Unlock()
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
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := r.in.Read(buf)
			if n > 0 && !keyTap.divert(buf[:n]) {
				if _, werr := r.master.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	go func() {
		_, _ = io.Copy(r.out, r.master) // ends with EIO once the sandbox let go of the slave
		close(r.outDone)
	}()
	return r
}

// keyTap diverts what pty relays read from the caller's terminal while
// hutch asks its user something on that terminal (TapTerminal).
var keyTap tap

type tap struct {
	mu     sync.Mutex
	relays int           // running relays
	keys   chan<- []byte // where keystrokes go instead of the sandbox; nil: to the sandbox
}

func (t *tap) divert(p []byte) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.keys == nil {
		return false
	}
	select {
	case t.keys <- append([]byte(nil), p...):
	default: // typed ahead of the question: dropped, not given to the sandbox
	}
	return true
}

// TapTerminal diverts the keystrokes a running pty relay reads from the
// caller's terminal (raw, unechoed) to keys until release: hutch asks its
// user a question mid-run on the terminal the sandbox's command uses,
// and none of the answer reaches the command. ok is false, and nothing is
// diverted, when no relay runs (the caller then reads the terminal
// itself) or another question holds the tap.
func TapTerminal() (keys <-chan []byte, release func(), ok bool) {
	keyTap.mu.Lock()
	defer keyTap.mu.Unlock()
	if keyTap.relays == 0 || keyTap.keys != nil {
		return nil, nil, false
	}
	ch := make(chan []byte, 16)
	keyTap.keys = ch
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			keyTap.mu.Lock()
			keyTap.keys = nil
			keyTap.mu.Unlock()
		})
	}, true
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
	keyTap.mu.Lock()
	keyTap.relays--
	keyTap.mu.Unlock()
	signal.Stop(r.winch)
	close(r.winch)
	if r.saved != nil {
		_ = unix.IoctlSetTermios(int(r.in.Fd()), unix.TCSETS, r.saved)
	}
	r.master.Close()
}
