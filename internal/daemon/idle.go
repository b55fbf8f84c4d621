package daemon

import (
	"context"
	"time"
)

// busyTimeout bounds the question the reaper asks the agent of a sandbox
// about to end for idleness: whether a command it started still runs.
const busyTimeout = 2 * time.Second

// busy reports whether a command started in l (through exec) still runs:
// a long build that prints nothing is not idleness. An agent that does not
// answer counts as idle.
func (m *Manager) busy(l *live) bool {
	ctx, cancel := context.WithTimeout(context.Background(), busyTimeout)
	defer cancel()
	m.mu.Lock()
	client := l.client
	m.mu.Unlock()
	procs, err := client.ListProcesses(ctx)
	return err == nil && len(procs) > 0
}
