package agent

import (
	"github.com/hutch-sandbox/hutch/internal/cgroups"
)

// ownUsage reads what the agent's own cgroup has used (opUsage).
func ownUsage() (Usage, error) {
	g, err := cgroups.Own()
	if err != nil {
		return Usage{}, errorf(CodeInternal, "usage: %v", err)
	}
	u, err := g.Usage()
	if err != nil {
		return Usage{}, errorf(CodeInternal, "usage: %v", err)
	}
	return Usage{CPU: u.CPU, Memory: u.Memory, MemoryCache: u.MemoryCache}, nil
}
