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
// that restores its previous mode.
func RawTerminal(f *os.File) (restore func(), err error) {
	saved, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	if err != nil {
		return nil, fmt.Errorf("terminal mode: %w", err)
	}
	if err := setRaw(int(f.Fd()), *saved); err != nil {
		return nil, fmt.Errorf("terminal raw mode: %w", err)
	}
	return func() { _ = unix.IoctlSetTermios(int(f.Fd()), unix.TCSETS, saved) }, nil
}

// TerminalSize returns the size of the terminal f.
func TerminalSize(f *os.File) (rows, cols uint16, err error) {
	ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
	if err != nil {
		return 0, 0, fmt.Errorf("terminal size: %w", err)
	}
	return ws.Row, ws.Col, nil
}
