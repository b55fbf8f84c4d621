package main

import (
	"fmt"
	"io"

	"github.com/hutch-sandbox/hutch/internal/agent"
)

// cmdAgent is PID 1 of a long-lived sandbox: hutch's agent, serving the
// daemon on descriptor 3 (see sandbox.Start). It is not for people: run
// anywhere else it finds no agent connection and says so.
func cmdAgent(args []string, stderr io.Writer) int {
	if len(args) != 0 {
		fmt.Fprintln(stderr, "hutch: agent takes no arguments")
		return 2
	}
	return agent.Main(stderr)
}
