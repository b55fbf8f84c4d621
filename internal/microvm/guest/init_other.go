//go:build !linux

package guest

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// MainIfInit runs InitMain and exits when the process was started as
// "PROGRAM microvm-init".
func MainIfInit() {
	if len(os.Args) >= 2 && os.Args[1] == InitCommand {
		os.Exit(InitMain(os.Args[2:], os.Stderr))
	}
}

// InitMain is the guest's init, which runs only in a Linux guest.
func InitMain(args []string, stderr io.Writer) int {
	fmt.Fprintf(stderr, "hutch: %s: %v\n", InitCommand, errors.New("not supported on this platform"))
	return 2
}
