//go:build !linux

package agent

// undumpable does nothing off Linux, where the agent runs only in tests
// and has no /proc to close.
func undumpable() error { return nil }

// superviseListener does nothing off Linux, where there is no seccomp.
func superviseListener() (interface{ Close() error }, error) { return nil, nil }

// clearInitialEnv does nothing off Linux.
func clearInitialEnv([]string) error { return nil }
