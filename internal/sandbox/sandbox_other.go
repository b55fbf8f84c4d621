//go:build !linux

package sandbox

import "context"

// Run is not available outside Linux.
func Run(ctx context.Context, c Config) (Result, error) {
	return Result{ExitCode: ExitHutchError}, ErrNotSupported
}

// IsInit reports whether this process is hutch's sandbox init; never on
// platforms without sandboxes.
func IsInit() bool { return false }

// Init never runs outside Linux.
func Init() int { return ExitHutchError }
