package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/store"
	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// warmRows are the records of m's warm sandboxes that are not stopped.
func warmRows(t *testing.T, st store.Backend) []store.Sandbox {
	t.Helper()
	rows, err := st.ListSandboxes(context.Background(), store.Filter{Tenant: warmTenant})
	if err != nil {
		t.Fatal(err)
	}
	var out []store.Sandbox
	for _, sb := range rows {
		if sb.State != store.StateStopped {
			out = append(out, sb)
		}
	}
	return out
}

// waitWarm waits until m's pool holds n ready sandboxes.
func waitWarm(t *testing.T, m *Manager, n int) {
	t.Helper()
	if !testutil.Eventually(30*time.Second, func() bool { return m.pools[0].readyCount() == n }) {
		t.Fatalf("the pool holds %d warm sandboxes, want %d", m.pools[0].readyCount(), n)
	}
}

// firstEvent is the first event of tenant's sandbox id.
func firstEvent(t *testing.T, m *Manager, tenant, id string) Event {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := m.Events(ctx, tenant, id, 0)
	if err != nil {
		t.Fatal(err)
	}
	return <-ch
}

// TestWarmPool: the pool fills; a create with the default policy takes a
// warm sandbox, which then is the tenant's like a cold one (labels,
// environment, timeout from the take), and the pool refills; warm
// sandboxes are in no tenant's list, count or quota.
func TestWarmPool(t *testing.T) {
	m := newManager(t, Config{Warm: 2, MaxSandboxes: 2})
	ctx := testCtx(t)
	waitWarm(t, m, 2)
	rows := warmRows(t, m.st)
	if len(rows) != 2 {
		t.Fatalf("warm records %+v, want 2", rows)
	}
	for _, sb := range rows {
		if sb.State != store.StateRunning || sb.PID <= 0 || gone(sb.PID) {
			t.Errorf("warm record %+v: want running with a live PID 1", sb)
		}
	}
	if list, err := m.List(ctx, "a", nil, ""); err != nil || len(list) != 0 {
		t.Errorf("list with only warm sandboxes: %+v, %v", list, err)
	}
	if c, err := m.Counts(ctx); err != nil || c[nsState(store.StateRunning)] != 0 {
		t.Errorf("counts with only warm sandboxes: %v, %v", c, err)
	}
	if v := warmReady(""); v < 2 {
		t.Errorf("hutch_warm_sandboxes is %d, want at least 2", v)
	}
	if _, err := m.Create(ctx, warmTenant, CreateRequest{}); !errors.Is(err, ErrInvalid) {
		t.Errorf("create as the warm pool's tenant: %v, want ErrInvalid", err)
	}

	time.Sleep(1100 * time.Millisecond) // the timeout counts from the take
	info := mustCreate(t, m, "a", CreateRequest{
		Labels:  map[string]string{"team": "x"},
		Env:     map[string]string{"GREETING": "hello", "PATH": "/opt/none:/usr/bin:/bin"},
		Timeout: 10 * time.Second,
	})
	if got := m.pools[0].took.Load(); got != 1 {
		t.Fatalf("%d sandboxes taken from the pool, want 1", got)
	}
	if e := firstEvent(t, m, "a", info.ID); e.Type != EventCreated || e.Data["warm"] != true {
		t.Errorf("first event %+v, want created with warm", e)
	}
	if info.Tenant != "a" || info.State != store.StateRunning || info.Labels["team"] != "x" || !validID(info.ID) {
		t.Errorf("info %+v", info)
	}
	if d := time.Until(info.ExpiresAt); d < 9*time.Second || d > 10*time.Second {
		t.Errorf("expires in %s, want 10s from the take", d)
	}
	if d := time.Since(info.CreatedAt); d > 5*time.Second {
		t.Errorf("created %s ago, want the take's time", d)
	}
	// The request's environment, under the exec's own.
	out := mustRun(t, m, "a", info.ID, `echo "$GREETING $PATH $HOME"`)
	if out != "hello /opt/none:/usr/bin:/bin /root\n" {
		t.Errorf("output %q", out)
	}
	if out, _, err := run(ctx, m, "a", info.ID, `echo $GREETING`); err != nil || out != "hello\n" {
		t.Errorf("second exec: %q, %v", out, err)
	}
	got, err := m.Get(ctx, "a", info.ID)
	if err != nil || got.ID != info.ID || got.Tenant != "a" || !got.ExpiresAt.Equal(info.ExpiresAt) || got.Workspace != info.Workspace {
		t.Errorf("get %+v, %v; created %+v", got, err, info)
	}
	if list, err := m.List(ctx, "a", map[string]string{"team": "x"}, ""); err != nil || len(list) != 1 || list[0].ID != info.ID {
		t.Errorf("list: %+v, %v", list, err)
	}
	waitWarm(t, m, 2)

	// The quota counts the taken sandbox only.
	mustCreate(t, m, "a", CreateRequest{})
	if _, err := m.Create(ctx, "a", CreateRequest{}); !errors.Is(err, ErrQuota) {
		t.Errorf("third create: %v, want ErrQuota", err)
	}
	if got := m.pools[0].took.Load(); got != 2 {
		t.Errorf("%d sandboxes taken from the pool, want 2", got)
	}
	if err := m.Destroy(ctx, "a", info.ID); err != nil {
		t.Fatal(err)
	}
	if sb, err := m.st.GetSandbox(ctx, "a", info.ID); err != nil || sb.State != store.StateStopped {
		t.Errorf("record after destroy %+v, %v", sb, err)
	}
}

// TestWarmCold: a create that needs another sandbox than the default one
// starts cold, and leaves the pool alone.
func TestWarmCold(t *testing.T) {
	m := newManager(t, Config{Warm: 1})
	waitWarm(t, m, 1)
	for i, r := range []CreateRequest{
		{Policy: policy.Spec{Network: policy.Network{AllowedDomains: []string{"example.com"}}}},
		{Policy: policy.Spec{Resources: policy.Resources{MemoryBytes: 256 << 20}}},
		{Policy: policy.Spec{Filesystem: policy.Filesystem{Workspace: "/src"}}},
		{Env: map[string]string{"HOME": "/root"}},
	} {
		info := mustCreate(t, m, "a", r)
		if e := firstEvent(t, m, "a", info.ID); e.Type != EventCreated || e.Data["warm"] != nil {
			t.Errorf("request %d: first event %+v, want created without warm", i, e)
		}
		if got := m.pools[0].took.Load(); got != 0 {
			t.Fatalf("request %d: %d sandboxes taken from the pool, want 0", i, got)
		}
		if m.pools[0].readyCount() != 1 {
			t.Errorf("request %d: the pool holds %d", i, m.pools[0].readyCount())
		}
	}
}

// TestWarmConcurrent: concurrent creates each get a sandbox of their own,
// warm or cold.
func TestWarmConcurrent(t *testing.T) {
	m := newManager(t, Config{Warm: 3})
	waitWarm(t, m, 3)
	const n = 10
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		seen = map[string]bool{}
	)
	for i := range n {
		wg.Go(func() {
			ctx := testCtx(t)
			tenant := fmt.Sprintf("t%d", i%2)
			info, err := m.Create(ctx, tenant, CreateRequest{Env: map[string]string{"N": strconv.Itoa(i)}})
			if err != nil {
				t.Errorf("create %d: %v", i, err)
				return
			}
			mu.Lock()
			if seen[info.ID] {
				t.Errorf("sandbox %s given twice", info.ID)
			}
			seen[info.ID] = true
			mu.Unlock()
			out, code, err := run(ctx, m, tenant, info.ID, `echo $N`)
			if err != nil || code != 0 || out != strconv.Itoa(i)+"\n" {
				t.Errorf("sandbox %d: output %q, code %d, %v", i, out, code, err)
			}
		})
	}
	wg.Wait()
	if len(seen) != n {
		t.Errorf("%d distinct sandboxes, want %d", len(seen), n)
	}
	if took := m.pools[0].took.Load(); took < 1 {
		t.Errorf("%d taken from the pool", took)
	}
	t.Logf("%d of %d creates took a warm sandbox", m.pools[0].took.Load(), n)
}

// TestWarmDiscarded: a warm sandbox that died while waiting is discarded,
// never handed out, and replaced.
func TestWarmDiscarded(t *testing.T) {
	m := newManager(t, Config{Warm: 1})
	waitWarm(t, m, 1)
	dead := warmRows(t, m.st)[0]
	if err := syscall.Kill(dead.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	info := mustCreate(t, m, "a", CreateRequest{})
	if info.ID == dead.ID {
		t.Fatal("a dead warm sandbox was handed out")
	}
	mustRun(t, m, "a", info.ID, "true")
	if !testutil.Eventually(time.Minute, func() bool {
		sb, err := m.st.GetSandbox(context.Background(), "", dead.ID)
		return err == nil && sb.State == store.StateStopped
	}) {
		t.Error("the dead warm sandbox was not recorded as stopped")
	}
	waitWarm(t, m, 1)
}

// TestWarmClose: Close ends every warm sandbox, and the next daemon finds
// no warm record to clean up.
func TestWarmClose(t *testing.T) {
	m := newManager(t, Config{Warm: 2})
	waitWarm(t, m, 2)
	rows := warmRows(t, m.st)
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	for _, sb := range rows {
		if !gone(sb.PID) {
			t.Errorf("PID 1 of warm sandbox %s (host pid %d) still runs", sb.ID, sb.PID)
		}
	}
	m2 := newManager(t, Config{StateDir: m.cfg.StateDir})
	if left := warmRows(t, m2.st); len(left) != 0 {
		t.Errorf("warm records not stopped: %+v", left)
	}
}

// TestWarmCrash: the warm sandboxes of a daemon that died are ended by
// the next one.
func TestWarmCrash(t *testing.T) {
	testutil.RequireRoot(t)
	dir := stateDir(t)
	old, err := New(Config{StateDir: dir, Warm: 2}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	waitWarm(t, old, 2)
	rows := warmRows(t, old.st)
	old.pools[0].halt() // its filler stops; the sandboxes are left running
	crash(old)
	for _, sb := range rows {
		if gone(sb.PID) {
			t.Fatalf("warm sandbox %s ended with the crash", sb.ID)
		}
	}
	m := newManager(t, Config{StateDir: dir})
	for _, sb := range rows {
		if !testutil.Eventually(time.Minute, func() bool { return gone(sb.PID) }) {
			t.Errorf("PID 1 of warm sandbox %s (host pid %d) still runs", sb.ID, sb.PID)
		}
	}
	if left := warmRows(t, m.st); len(left) != 0 {
		t.Errorf("warm records not stopped: %+v", left)
	}
}
