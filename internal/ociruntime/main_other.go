//go:build !linux

package ociruntime

import (
	"fmt"
	"io"
)

// Main fails: hutch-runc runs Linux containers on Linux only.
func Main(args []string, stderr io.Writer) int {
	fmt.Fprintln(stderr, "hutch-runc: OCI containers need Linux")
	return 1
}
