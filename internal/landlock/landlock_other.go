//go:build !linux

package landlock

// ABI returns 0: Landlock exists only on Linux.
func ABI() int { return 0 }

// Restrict returns ErrNotSupported: Landlock exists only on Linux.
func Restrict(c Config) (Status, error) {
	return Status{Dropped: []string{"landlock: not supported on this platform"}}, ErrNotSupported
}

// Ruleset exists only on Linux.
type Ruleset struct{}

// Prepare returns ErrNotSupported: Landlock exists only on Linux.
func Prepare(c Config) (*Ruleset, Status, error) { return nil, Status{}, ErrNotSupported }

// FromFD returns an empty ruleset: Landlock exists only on Linux.
func FromFD(fd int) *Ruleset { return &Ruleset{} }

// FD returns -1.
func (r *Ruleset) FD() int { return -1 }

// Add returns ErrNotSupported.
func (r *Ruleset) Add(c Config) ([]string, error) { return nil, ErrNotSupported }

// AddWritableTree returns ErrNotSupported: Landlock exists only on Linux.
func (r *Ruleset) AddWritableTree(fd int) error { return ErrNotSupported }

// WritableTreeAccess returns 0.
func (r *Ruleset) WritableTreeAccess() uint64 { return 0 }

// RestrictSelf returns ErrNotSupported.
func (r *Ruleset) RestrictSelf() error { return ErrNotSupported }

// Close does nothing.
func (r *Ruleset) Close() error { return nil }
