//go:build !linux

package cgroups

import "fmt"

// Group is one sandbox's cgroup. Off Linux only the empty Group exists.
type Group struct{}

// Create fails with ErrNotSupported off Linux, unless l sets no limit.
func Create(name string, l Limits) (*Group, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	if l != (Limits{}) {
		return nil, fmt.Errorf("cgroups: limits need Linux: %w", ErrNotSupported)
	}
	return &Group{}, nil
}

// CreateAlways fails with ErrNotSupported off Linux.
func CreateAlways(name string, l Limits) (*Group, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("cgroups: groups need Linux: %w", ErrNotSupported)
}

// Available fails with ErrNotSupported off Linux.
func Available() (Info, error) {
	return Info{}, fmt.Errorf("cgroups: need Linux: %w", ErrNotSupported)
}

// Add does nothing: the group is empty.
func (g *Group) Add(pid int) error { return nil }

// FD reports no cgroup directory.
func (g *Group) FD() (int, bool) { return -1, false }

// Kill does nothing: the group is empty.
func (g *Group) Kill() error { return nil }

// Destroy does nothing: the group is empty.
func (g *Group) Destroy() error { return nil }

// Paths returns nothing: the group has no directories.
func (g *Group) Paths() []string { return nil }

// Stats returns zeros: the group has no counters.
func (g *Group) Stats() (Stats, error) { return Stats{}, nil }

// Usage returns zeros: the group has no counters.
func (g *Group) Usage() (Usage, error) { return Usage{}, nil }

// OOMKills returns 0: cgroups are Linux only.
func (g *Group) OOMKills() (int64, error) { return 0, nil }

// MemoryLimitHits is 0: cgroups are Linux only.
func (g *Group) MemoryLimitHits() (int64, error) { return 0, nil }

// Freeze fails with ErrNotSupported: the group has no freezer.
func (g *Group) Freeze() error {
	return fmt.Errorf("cgroups: freeze: %w", ErrNotSupported)
}

// Thaw fails with ErrNotSupported: the group has no freezer.
func (g *Group) Thaw() error {
	return fmt.Errorf("cgroups: thaw: %w", ErrNotSupported)
}

// Own returns a Group whose methods do nothing: cgroups are Linux only.
func Own() (*Group, error) { return &Group{}, nil }

// Named returns a Group whose methods do nothing: cgroups are Linux only.
func Named(name string) (*Group, error) { return &Group{}, nil }
