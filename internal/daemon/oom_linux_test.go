package daemon

import (
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/policy"
)

// TestOOMEvent: a command that outgrows its sandbox's memory limit is
// killed by the kernel, and the sandbox's events say so.
func TestOOMEvent(t *testing.T) {
	t.Parallel()
	m := newManager(t, Config{})
	ctx := testCtx(t)
	var p policy.Spec
	p.Resources.MemoryBytes = 32 << 20
	info := mustCreate(t, m, "a", CreateRequest{Policy: p})
	ch, err := m.Events(ctx, "a", info.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	before := OOMKills.With().Value()
	// dd's 128 MiB buffer does not fit in 32 MiB.
	out, code, err := run(ctx, m, "a", info.ID, `dd if=/dev/zero of=/dev/null bs=128M count=1 2>/dev/null; echo "dd: $?"`)
	if err != nil || code != 0 || out != "dd: 137\n" {
		t.Fatalf("the memory hog: %q, exit %d, %v; want it killed (137)", out, code, err)
	}
	timer := time.NewTimer(15 * time.Second)
	defer timer.Stop()
	for {
		select {
		case e := <-ch:
			if e.Type != EventOOM {
				continue
			}
			if k, _ := e.Data["kills"].(int64); k < 1 {
				t.Errorf("oom event data %v", e.Data)
			}
			if after := OOMKills.With().Value(); after < before+1 {
				t.Errorf("hutch_oom_kills_total went from %v to %v", before, after)
			}
			return
		case <-timer.C:
			t.Fatal("no oom event")
		}
	}
}
