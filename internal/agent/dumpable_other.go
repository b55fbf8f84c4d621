//go:build !linux

package agent

// undumpable does nothing off Linux, where the agent runs only in tests
// and has no /proc to close.
func undumpable() error { return nil }
