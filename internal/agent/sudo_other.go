//go:build !linux

package agent

import (
	"fmt"
	"io"
)

// SudoMain is sudo inside a sandbox; off Linux there is none.
func SudoMain(_ []string, stderr io.Writer) int {
	fmt.Fprintf(stderr, "sudo: %v\n", ErrNotSupported)
	return 1
}

func (s *server) serveSudo() error { return ErrNotSupported }
