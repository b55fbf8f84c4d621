//go:build !linux

package gvisor

import (
	"context"
	"io"

	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/sandbox"
)

// Runtime is the gVisor tier, which needs Linux.
type Runtime struct {
	Runsc    string
	StateDir string
	Binary   string
}

// InitCommand is the hidden command of a gVisor sandbox's first process.
const InitCommand = "gvisor-init"

// InitMain is not available outside Linux.
func InitMain(args []string, stderr io.Writer) int {
	return sandbox.ExitHutchError
}

// Tier returns policy.TierGVisor.
func (*Runtime) Tier() string { return policy.TierGVisor }

// Run is not available outside Linux.
func (*Runtime) Run(ctx context.Context, c sandbox.Config) (sandbox.Result, error) {
	return sandbox.Result{ExitCode: sandbox.ExitHutchError}, sandbox.ErrNotSupported
}

// Start is not available outside Linux.
func (*Runtime) Start(c sandbox.Config) (sandbox.Instance, error) {
	return nil, sandbox.ErrNotSupported
}
