package daemon

import (
	"context"
	"fmt"

	"github.com/hutch-sandbox/hutch/internal/egress"
	"github.com/hutch-sandbox/hutch/internal/metrics"
	"github.com/hutch-sandbox/hutch/internal/policy"
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

// ImageCache counts what found its image, or its layers, in the daemon's
// store, by op and result: op "create" (a create from an image: "hit",
// it was in the store; "miss", refused as missing: the daemon pulls
// nothing on a tenant's word) and op "pull" (a pull that succeeded:
// "hit", every layer was in the store and nothing was fetched; "miss",
// some were fetched). Package api counts the pulls and adds it to what
// GET /metrics writes; what pulls fetched and unpacked is package fetch's
// (hutch_image_layers_total, hutch_image_unpacked_bytes_total,
// hutch_image_layer_seconds).
var ImageCache = metrics.NewCounter("hutch_image_cache_total",
	"Creates from an image (op create: hit, the image was in the store; miss, refused as missing) and pulls (op pull: hit, every layer was in the store; miss, layers were fetched).", "op", "result")

// SandboxesCreated counts the sandboxes created for tenants (cold, or
// taken from a warm pool), by isolation tier: as many series as
// policy.Tiers, whatever a request names.
var SandboxesCreated = metrics.NewCounter("hutch_sandboxes_created_total",
	"Sandboxes created for tenants (warm ones taken included), by isolation tier.", "tier")

func init() {
	// Both directions are written from the start, at 0, every outcome of
	// the image cache and every tier.
	EgressBytes.With("in")
	EgressBytes.With("out")
	for _, op := range []string{"create", "pull"} {
		ImageCache.With(op, "hit")
		ImageCache.With(op, "miss")
	}
	for _, t := range policy.Tiers {
		SandboxesCreated.With(t)
	}
}

// CacheResult is ImageCache's result label: "hit" when hit, else "miss".
func CacheResult(hit bool) string {
	if hit {
		return "hit"
	}
	return "miss"
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
// CountedStates, by tier (policy.Tiers); warm sandboxes, which belong to
// no tenant, are not counted.
func (m *Manager) Counts(ctx context.Context) (map[store.StateTier]int, error) {
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
