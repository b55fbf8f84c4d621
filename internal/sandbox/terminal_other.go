//go:build !linux

package sandbox

import "os"

// IsTerminal reports whether f is a terminal; never outside Linux.
func IsTerminal(f *os.File) bool { return false }

// RawTerminal is not available outside Linux.
func RawTerminal(f *os.File) (restore func(), err error) { return nil, ErrNotSupported }

// TerminalSize is not available outside Linux.
func TerminalSize(f *os.File) (rows, cols uint16, err error) { return 0, 0, ErrNotSupported }

// TapTerminal never diverts anything outside Linux: no pty relay runs.
func TapTerminal() (keys <-chan []byte, release func(), ok bool) { return nil, nil, false }
