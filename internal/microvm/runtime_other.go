//go:build !linux

package microvm

import (
	"context"

	"github.com/hutch-sandbox/hutch/internal/sandbox"
)

// Run is not supported on this platform.
func (*Runtime) Run(context.Context, sandbox.Config) (sandbox.Result, error) {
	return sandbox.Result{ExitCode: sandbox.ExitHutchError}, ErrNotSupported
}

// Start is not supported on this platform.
func (*Runtime) Start(sandbox.Config) (sandbox.Instance, error) {
	return nil, ErrNotSupported
}
