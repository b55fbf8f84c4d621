package daemon

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/agent"
	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// benchCreate measures create → exec true → destroy with a manager that
// keeps warm sandboxes ready (0: none). With a pool, each round first
// waits, outside the timer, for the pool to be full again, so that every
// create takes a warm sandbox.
func benchCreate(b *testing.B, warm int) {
	testutil.RequireRoot(b)
	dir, err := os.MkdirTemp("/var/tmp", "hutch-daemon-bench-")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(dir)
	m, err := New(Config{StateDir: dir, Warm: warm}, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	ctx := context.Background()
	refill := func() {
		if warm == 0 {
			return
		}
		for end := time.Now().Add(30 * time.Second); m.pools[0].readyCount() < warm; time.Sleep(time.Millisecond) {
			if time.Now().After(end) {
				b.Fatal("the pool did not refill")
			}
		}
	}
	took := m.poolTook()
	var creating time.Duration
	b.ResetTimer()
	for b.Loop() {
		b.StopTimer()
		refill()
		b.StartTimer()
		start := time.Now()
		info, err := m.Create(ctx, "bench", CreateRequest{})
		creating += time.Since(start)
		if err != nil {
			b.Fatal(err)
		}
		c, err := m.Agent(ctx, "bench", info.ID)
		if err != nil {
			b.Fatal(err)
		}
		p, err := c.Exec(ctx, agent.ExecRequest{Args: []string{"true"}})
		if err != nil {
			b.Fatal(err)
		}
		if st, err := p.Wait(); err != nil || st.Code != 0 {
			b.Fatalf("true: %+v, %v", st, err)
		}
		if err := m.Destroy(ctx, "bench", info.ID); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(creating.Microseconds())/1000/float64(b.N), "create-ms/op")
	if warm > 0 && m.poolTook()-took != int64(b.N) {
		b.Errorf("%d of %d creates took a warm sandbox", m.poolTook()-took, b.N)
	}
}

// poolTook is how many creates took a warm sandbox.
func (m *Manager) poolTook() int64 {
	if len(m.pools) == 0 {
		return 0
	}
	return m.pools[0].took.Load()
}

// BenchmarkCreateCold: create (a sandbox started for it), exec true,
// destroy.
func BenchmarkCreateCold(b *testing.B) { benchCreate(b, 0) }

// BenchmarkCreateWarm: the same, each create taking a warm sandbox.
func BenchmarkCreateWarm(b *testing.B) { benchCreate(b, 2) }
