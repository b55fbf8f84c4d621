//go:build !linux

package microvm

import (
	"fmt"
	"io"
)

// ReaperMain refuses: the microVM tier runs on Linux hosts.
func ReaperMain(args []string, stderr io.Writer) int {
	fmt.Fprintf(stderr, "hutch: %s: %v\n", ReaperCommand, ErrNotSupported)
	return 2
}
