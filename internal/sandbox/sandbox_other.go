//go:build !linux

package sandbox

import "context"

// Run is not available outside Linux.
func Run(ctx context.Context, c Config) (Result, error) {
	return Result{ExitCode: ExitHutchError}, ErrNotSupported
}

// CheckWorkspace is not available outside Linux.
func (l RootLayer) CheckWorkspace(root, workspace string) error {
	return ErrNotSupported
}

// Start is not available outside Linux.
func (Namespaces) Start(c Config) (Instance, error) { return nil, ErrNotSupported }

// SnapshotLayer is not available outside Linux.
func SnapshotLayer(keep, dst string, limit int64) (Snapshot, error) {
	return Snapshot{}, ErrNotSupported
}

// Reattach is not available outside Linux.
func Reattach(r ReattachConfig) (Instance, error) { return nil, ErrNotSupported }
