//go:build !linux

package seccomp

import (
	"fmt"
	"runtime"
)

// Install fails with [ErrNotSupported]: seccomp is Linux-only. (Build,
// which returns Linux BPF instructions, exists only on Linux.)
func Install() error {
	return fmt.Errorf("seccomp: install filter on %s: %w", runtime.GOOS, ErrNotSupported)
}

// Supported fails with [ErrNotSupported]: seccomp is Linux-only.
func Supported() error {
	return fmt.Errorf("seccomp: %s: %w", runtime.GOOS, ErrNotSupported)
}
