package main

import (
	"fmt"
	"io"
	"os"
	"syscall"

	"github.com/hutch-sandbox/hutch/internal/runner"
)

// execServe runs hutch-serve with args ("serve ...", "token ...", "mcp ..."),
// replacing hutch: the daemon keeps hutch's pid, its signals and its exit
// code. It returns only when hutch-serve cannot be run.
func execServe(args []string, stderr io.Writer) int {
	bin, err := runner.FindServe()
	if err != nil {
		fmt.Fprintf(stderr, "hutch: %s: %v\n", args[0], err)
		return 2
	}
	err = syscall.Exec(bin, append([]string{runner.ServeBinary}, args...), os.Environ())
	fmt.Fprintf(stderr, "hutch: %s: run %s: %v\n", args[0], bin, err)
	return 1
}
