package daemon

import (
	"github.com/hutch-sandbox/hutch/internal/cgroups"
	"github.com/hutch-sandbox/hutch/internal/metrics"
)

// OOMKills counts the processes of sandboxes the kernel's OOM killer ended;
// package api adds it to what GET /metrics writes.
var OOMKills = metrics.NewCounter("hutch_oom_kills_total",
	"Processes of sandboxes that the kernel killed for exceeding their memory limit.")

// statser is an instance whose cgroup can be read (a *sandbox.Sandbox).
type statser interface {
	Stats() (cgroups.Stats, error)
}

// checkOOM records, for each sandbox of list, the processes the OOM killer
// ended since the previous round (every reapEvery): an "oom" event, the
// metric and a log line. It runs in the reaper, under reapMu.
func (m *Manager) checkOOM(list []*live) {
	for _, l := range list {
		s, ok := l.inst.(statser)
		if !ok {
			continue
		}
		st, err := s.Stats()
		if err != nil || st.OOMKills <= l.oomKills {
			continue
		}
		n := st.OOMKills - l.oomKills
		l.oomKills = st.OOMKills
		OOMKills.With().Add(float64(n))
		m.log.Warn("out of memory: processes killed", "sandbox", l.id, "tenant", l.tenant, "kills", n)
		if l.ev != nil {
			l.ev.append(EventOOM, map[string]any{"kills": n, "total": st.OOMKills}, false)
		}
	}
}
