//go:build !linux

package landlock

// ABI returns 0: Landlock exists only on Linux.
func ABI() int { return 0 }

// Restrict returns ErrNotSupported: Landlock exists only on Linux.
func Restrict(c Config) (Status, error) {
	return Status{Dropped: []string{"landlock: not supported on this platform"}}, ErrNotSupported
}
