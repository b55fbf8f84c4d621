package daemon

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/policy"
)

// TestUsage: the daemon samples what a running sandbox uses, under each
// tier: a sandbox that burns CPU shows a CPU share above 0, one that
// writes 50 MiB into its root shows its disk grow by about that, its
// memory is above 0 and within its limit. Another tenant's sandbox is
// not found; the samples go with the sandbox.
func TestUsage(t *testing.T) {
	for _, tier := range []string{policy.TierNamespace, policy.TierGVisor} {
		t.Run(tier, func(t *testing.T) {
			cfg := tierConfig(t, tier)
			cfg.MetricsInterval = time.Second
			m := newManager(t, cfg)
			var p policy.Spec
			p.Tier = tier
			p.Resources.CPUs = 1
			p.Resources.MemoryBytes = 512 << 20
			info := mustCreate(t, m, "a", CreateRequest{Policy: p})
			first := waitUsage(t, m, info.ID, "a first sample", func(u Usage) bool { return true })
			if first.CPUCount != 1 || first.MemoryLimit != 512<<20 || first.MemoryBytes <= 0 || first.MemoryBytes > first.MemoryLimit || first.DiskLimit <= 0 {
				t.Errorf("first sample %+v: want 1 CPU, a 512 MiB limit, memory within it, a disk size", first)
			}
			mustRun(t, m, "a", info.ID, `end=$(( $(date +%s) + 3 )); while [ "$(date +%s)" -lt "$end" ]; do :; done`)
			waitUsage(t, m, info.ID, "a CPU share above 0", func(u Usage) bool { return u.CPUPercent > 0 && u.CPUPercent <= 100 })
			mustRun(t, m, "a", info.ID, `dd if=/dev/zero of=big bs=1M count=50 2>/dev/null && sync`)
			grown := waitUsage(t, m, info.ID, "the disk 50 MiB fuller", func(u Usage) bool { return u.DiskBytes >= first.DiskBytes+45<<20 })
			if grown.DiskBytes > grown.DiskLimit {
				t.Errorf("sample %+v: more on disk than its size", grown)
			}

			ctx := testCtx(t)
			if _, err := m.Usage(ctx, "b", info.ID, time.Time{}, time.Time{}); !errors.Is(err, ErrNotFound) {
				t.Errorf("another tenant's usage: %v, want not found", err)
			}
			if us, err := m.Usage(ctx, "a", info.ID, time.Now().Add(time.Hour), time.Time{}); err != nil || len(us) != 0 {
				t.Errorf("samples from an hour on: %v, %v; want none", us, err)
			}
			all, _ := m.Usage(ctx, "a", info.ID, time.Time{}, time.Time{})
			if !slices.IsSortedFunc(all, func(a, b Usage) int { return a.Time.Compare(b.Time) }) {
				t.Error("samples not oldest first")
			}
			if err := m.Destroy(ctx, "a", info.ID); err != nil {
				t.Fatal(err)
			}
			if us, err := m.Usage(ctx, "a", info.ID, time.Time{}, time.Time{}); err != nil || len(us) != 0 {
				t.Errorf("usage of a destroyed sandbox: %d samples, %v; want none", len(us), err)
			}
		})
	}
}

// waitUsage waits for a sample of tenant a's sandbox id that ok accepts
// and returns it.
func waitUsage(t *testing.T, m *Manager, id, what string, ok func(Usage) bool) Usage {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		us, err := m.Usage(testCtx(t), "a", id, time.Time{}, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		if i := slices.IndexFunc(us, ok); i >= 0 {
			return us[i]
		}
		if time.Now().After(deadline) {
			t.Fatalf("no sample with %s in a minute: %+v", what, us)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// tierConfig is a daemon config that runs tier.
func tierConfig(t *testing.T, tier string) Config {
	if tier == policy.TierGVisor {
		return gvisorConfig(t)
	}
	return Config{}
}
