package sandbox

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// The caller's terminal, for `hutch exec -t`: the command runs on a
// terminal in a sandbox of the daemon, and the local terminal only relays
// bytes, so it is put in raw mode like the relay of `hutch run` does.

// IsTerminal reports whether f is a terminal.
func IsTerminal(f *os.File) bool { return isTerminal(f) }

// RawTerminal puts the terminal f in raw mode (no echo, no line editing,
// no signals from keys, no output processing) and returns the function
// that restores its previous mode. It leaves f's blocking mode alone, so
// deadlines keep working on it.
func RawTerminal(f *os.File) (restore func(), err error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("terminal mode: %w", err)
	}
	var saved *unix.Termios
	if cerr := rc.Control(func(fd uintptr) {
		if saved, err = unix.IoctlGetTermios(int(fd), unix.TCGETS); err != nil {
			err = fmt.Errorf("terminal mode: %w", err)
			return
		}
		if err = setRaw(int(fd), *saved); err != nil {
			err = fmt.Errorf("terminal raw mode: %w", err)
		}
	}); cerr != nil {
		return nil, fmt.Errorf("terminal mode: %w", cerr)
	}
	if err != nil {
		return nil, err
	}
	return func() {
		_ = rc.Control(func(fd uintptr) { _ = unix.IoctlSetTermios(int(fd), unix.TCSETS, saved) })
	}, nil
}

// TerminalSize returns the size of the terminal f.
func TerminalSize(f *os.File) (rows, cols uint16, err error) {
	ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
	if err != nil {
		return 0, 0, fmt.Errorf("terminal size: %w", err)
	}
	return ws.Row, ws.Col, nil
}
