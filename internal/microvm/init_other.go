//go:build !linux

package microvm

import (
	"fmt"
	"io"
	"os"
)

// InitCommand is the argument that makes hutch's binary the guest's init.
const InitCommand = "microvm-init"

// PortName is the name of the virtio-serial port that carries the agent's
// connection.
const PortName = "hutch.agent"

// MainIfInit runs InitMain and exits when the process was started as
// "PROGRAM microvm-init".
func MainIfInit() {
	if len(os.Args) >= 2 && os.Args[1] == InitCommand {
		os.Exit(InitMain(os.Args[2:], os.Stderr))
	}
}

// InitMain is the guest's init, which runs only in a Linux guest.
func InitMain(args []string, stderr io.Writer) int {
	fmt.Fprintf(stderr, "hutch: %s: %v\n", InitCommand, ErrNotSupported)
	return 2
}
