//go:build !linux

package seccomp

import (
	"fmt"
	"runtime"
)

// Install fails with [ErrNotSupported]: seccomp is Linux-only. (Build,
// which returns Linux BPF instructions, exists only on Linux.)
func Install(Options) (int, error) {
	return -1, fmt.Errorf("seccomp: install filter on %s: %w", runtime.GOOS, ErrNotSupported)
}

// Supported fails with [ErrNotSupported]: seccomp is Linux-only.
func Supported() error {
	return fmt.Errorf("seccomp: %s: %w", runtime.GOOS, ErrNotSupported)
}

// Supervisor answers a filter's notifications; Linux-only.
type Supervisor struct{}

// Supervise fails with [ErrNotSupported]: seccomp is Linux-only.
func Supervise(int) (*Supervisor, error) {
	return nil, fmt.Errorf("seccomp: supervise on %s: %w", runtime.GOOS, ErrNotSupported)
}

// Close does nothing.
func (*Supervisor) Close() error { return nil }
