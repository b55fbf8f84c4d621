package daemon

import (
	"context"
	"fmt"

	"github.com/hutch-sandbox/hutch/internal/egress"
	"github.com/hutch-sandbox/hutch/internal/metrics"
	"github.com/hutch-sandbox/hutch/internal/store"
)

// Metrics of the egress proxies of every manager in the process; package
// api adds them to what GET /metrics writes.
var (
	// EgressRefused counts the connections egress proxies refused.
	EgressRefused = metrics.NewCounter("hutch_egress_refused_total",
		"Connections the sandboxes' egress proxies refused.")
	// EgressBytes counts the bytes egress proxies relayed, by direction
	// (out: from a sandbox; in: to it), added when a sandbox ends.
	EgressBytes = metrics.NewCounter("hutch_egress_bytes_total",
		"Bytes the sandboxes' egress proxies relayed, counted when a sandbox ends.", "direction")
)

func init() {
	// Both directions are written from the start, at 0.
	EgressBytes.With("in")
	EgressBytes.With("out")
}

// countTraffic adds the bytes p relayed to EgressBytes; p may be nil.
func countTraffic(p *egress.Proxy) {
	if p == nil {
		return
	}
	var in, out int64
	for _, e := range p.Traffic() {
		in += e.BytesIn
		out += e.BytesOut
	}
	EgressBytes.With("in").Add(float64(in))
	EgressBytes.With("out").Add(float64(out))
}

// CountedStates are the states Counts counts.
var CountedStates = []string{store.StateStarting, store.StateRunning, store.StatePaused, store.StateStopping}

// Counts returns the number of sandboxes of every tenant in each of
// CountedStates; warm sandboxes, which belong to no tenant, are not
// counted.
func (m *Manager) Counts(ctx context.Context) (map[string]int, error) {
	if err := m.enter(); err != nil {
		return nil, err
	}
	defer m.leave()
	out, err := m.st.CountStates(ctx, warmTenant) // warm ones are counted by WarmSandboxes
	if err != nil {
		return nil, fmt.Errorf("count sandboxes: %w", err)
	}
	return out, nil
}
