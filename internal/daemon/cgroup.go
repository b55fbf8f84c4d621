package daemon

import (
	"log/slog"

	"github.com/hutch-sandbox/hutch/internal/cgroups"
)

// sandboxCgroupPrefix starts the name of every served sandbox's cgroup,
// which the sandbox's ID completes (sandbox.Config.CgroupName).
const sandboxCgroupPrefix = "hutch-"

// endCgroup kills what is left in the cgroup of a previous daemon's
// sandbox id, thawing it if it was paused, and removes the cgroup's
// directories: nothing else would, even once every process in it is gone,
// and a task a v1 freezer holds does not die of a SIGKILL to PID 1 alone.
func endCgroup(id string, log *slog.Logger) {
	g, err := cgroups.Named(sandboxCgroupPrefix + id)
	if err != nil {
		log.Warn("find the cgroup of a leftover sandbox", "err", err)
		return
	}
	if err := g.Destroy(); err != nil {
		log.Warn("remove the cgroup of a leftover sandbox", "dirs", g.Paths(), "err", err)
	}
}
