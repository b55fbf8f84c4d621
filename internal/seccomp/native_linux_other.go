//go:build linux && !amd64 && !arm64

package seccomp

// native is nil: there is no syscall table for this architecture, and
// Build fails with ErrNotSupported.
var native *arch
