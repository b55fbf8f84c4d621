package daemon

import (
	"github.com/hutch-sandbox/hutch/internal/metrics"
)

// OOMKills counts the processes of sandboxes the kernel's OOM killer ended;
// package api adds it to what GET /metrics writes.
var OOMKills = metrics.NewCounter("hutch_oom_kills_total",
	"Processes of sandboxes that the kernel killed for exceeding their memory limit.")

// oomCounter is an instance whose OOM kills can be read (a
// *sandbox.Sandbox).
type oomCounter interface {
	OOMKills() (int64, error)
}

// checkOOM records, for each sandbox of list, the processes the OOM killer
// ended since the previous round (every reapEvery): an "oom" event, the
// metric and a log line. It runs in the reaper, under reapMu.
func (m *Manager) checkOOM(list []*live) {
	for _, l := range list {
		c, ok := l.inst.(oomCounter)
		if !ok {
			continue
		}
		total, err := c.OOMKills()
		if err != nil || total <= l.oomKills {
			continue
		}
		n := total - l.oomKills
		l.oomKills = total
		OOMKills.With().Add(float64(n))
		m.log.Warn("out of memory: processes killed", "sandbox", l.id, "tenant", l.tenant, "kills", n)
		if l.ev != nil {
			l.ev.append(EventOOM, map[string]any{"kills": n, "total": total}, false)
		}
	}
}
