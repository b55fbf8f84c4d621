package runner

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
)

// ServeBinary is the daemon's binary: `hutch serve` and `hutch token`
// are its commands. It is not part of hutch, so that hutch run and the
// client commands do not pay at every start for what only the daemon uses
// (docs/ARCHITECTURE.md).
const ServeBinary = "hutch-serve"

// FindServe returns hutch-serve next to hutch's own binary (as built and
// installed together), else the one on PATH.
func FindServe() (string, error) {
	var next string
	if exe, err := os.Executable(); err == nil {
		next = filepath.Join(filepath.Dir(exe), ServeBinary)
		if fi, err := os.Stat(next); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return next, nil
		}
	}
	if p, err := exec.LookPath(ServeBinary); err == nil {
		return filepath.Abs(p)
	}
	where := "on PATH"
	if next != "" {
		where = "next to hutch (" + next + ") nor on PATH"
	}
	return "", errors.New(ServeBinary + ", the daemon's binary, is not installed " + where +
		": build it with hutch, e.g. CGO_ENABLED=0 go build -o " + filepath.Dir(next) + "/ ./cmd/hutch ./cmd/hutch-serve ./cmd/hutch-agent")
}
