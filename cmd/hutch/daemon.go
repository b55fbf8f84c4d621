package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
)

// serveBinary is the daemon's binary: `hutch serve` and `hutch token`
// are its commands. It is not part of hutch, so that hutch run and the
// client commands do not pay at every start for what only the daemon uses
// (docs/ARCHITECTURE.md).
const serveBinary = "hutch-serve"

// execServe runs hutch-serve with args ("serve ...", "token ..."),
// replacing hutch: the daemon keeps hutch's pid, its signals and its exit
// code. It returns only when hutch-serve cannot be run.
func execServe(args []string, stderr io.Writer) int {
	bin, err := findServe()
	if err != nil {
		fmt.Fprintf(stderr, "hutch: %s: %v\n", args[0], err)
		return 2
	}
	err = syscall.Exec(bin, append([]string{serveBinary}, args...), os.Environ())
	fmt.Fprintf(stderr, "hutch: %s: run %s: %v\n", args[0], bin, err)
	return 1
}

// findServe returns hutch-serve next to hutch's own binary (as built and
// installed together), else the one on PATH.
func findServe() (string, error) {
	var next string
	if exe, err := os.Executable(); err == nil {
		next = filepath.Join(filepath.Dir(exe), serveBinary)
		if fi, err := os.Stat(next); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return next, nil
		}
	}
	if p, err := exec.LookPath(serveBinary); err == nil {
		return filepath.Abs(p)
	}
	where := "on PATH"
	if next != "" {
		where = "next to hutch (" + next + ") nor on PATH"
	}
	return "", errors.New(serveBinary + ", the daemon's binary, is not installed " + where +
		": build it with hutch, e.g. CGO_ENABLED=0 go build -o " + filepath.Dir(next) + "/ ./cmd/hutch ./cmd/hutch-serve ./cmd/hutch-agent")
}
