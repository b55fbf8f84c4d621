//go:build linux && !amd64 && !arm64

package seccomp

// xsysNumbers is nil: there is no syscall table for this architecture.
var xsysNumbers map[string]int
