package daemon

import (
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/sandbox"
	"github.com/hutch-sandbox/hutch/internal/store"
)

// TestCreateTier: a create that names no tier gets the daemon's default,
// namespace; its record, get, list, the counts and the created counter
// say so, also after a restart of the daemon. A create of the gvisor tier,
// which hutch serve does not run yet, is refused before anything is
// recorded: it never runs under namespaces (S2).
func TestCreateTier(t *testing.T) {
	m := newManager(t, Config{})
	ctx := testCtx(t)
	created := SandboxesCreated.With(policy.TierNamespace).Value()
	info := mustCreate(t, m, "a", CreateRequest{})
	named := mustCreate(t, m, "a", CreateRequest{Policy: policy.Spec{Tier: policy.TierNamespace}})
	for _, i := range []Info{info, named} {
		if i.Tier != policy.TierNamespace {
			t.Errorf("create: tier %q, want namespace", i.Tier)
		}
	}
	if got, err := m.Get(ctx, "a", info.ID); err != nil || got.Tier != policy.TierNamespace {
		t.Errorf("get: %+v, %v", got, err)
	}
	if list, err := m.List(ctx, "a", nil, ""); err != nil || len(list) != 2 || list[0].Tier != policy.TierNamespace || list[1].Tier != policy.TierNamespace {
		t.Errorf("list: %+v, %v", list, err)
	}
	if c, err := m.Counts(ctx); err != nil || c[nsState(store.StateRunning)] != 2 || c[store.StateTier{State: store.StateRunning, Tier: policy.TierGVisor}] != 0 {
		t.Errorf("counts: %v, %v", c, err)
	}
	if n := SandboxesCreated.With(policy.TierNamespace).Value() - created; n != 2 {
		t.Errorf("hutch_sandboxes_created_total{tier=namespace} rose by %v, want 2", n)
	}
	out := mustRun(t, m, "a", info.ID, "echo ok")
	if out != "ok\n" {
		t.Errorf("exec: %q", out)
	}
	if e := firstEvent(t, m, "a", info.ID); e.Type != EventCreated || e.Data["tier"] != policy.TierNamespace {
		t.Errorf("the first event %+v, want created with tier namespace", e)
	}

	_, err := m.Create(ctx, "a", CreateRequest{Policy: policy.Spec{Tier: policy.TierGVisor}})
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "hutch serve does not run the gvisor tier") {
		t.Errorf("create of tier gvisor: %v, want refused: hutch serve does not run the gvisor tier", err)
	}
	if rows, err := m.st.ListSandboxes(ctx, store.Filter{}); err != nil || len(rows) != 2 {
		t.Errorf("records after the refused create: %d, %v; want 2", len(rows), err)
	}

	// The record keeps the tier: the next daemon says it of the stopped
	// sandbox.
	m2 := reopen(t, m)
	if got, err := m2.Get(ctx, "a", info.ID); err != nil || got.Tier != policy.TierNamespace || got.State != store.StateStopped {
		t.Errorf("after a restart: %+v, %v; want stopped, tier namespace", got, err)
	}
}

// reopen closes m and opens its state directory in a new manager of the
// default configuration, closed when the test ends.
func reopen(t *testing.T, m *Manager) *Manager {
	t.Helper()
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	m2, err := New(Config{StateDir: m.cfg.StateDir}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m2.Close() })
	return m2
}

// TestCreateTierRuntime: with a runtime for gvisor in the daemon's table
// and --min-tier gvisor, a create that names no tier is started by that
// runtime, with a spec of tier gvisor, and recorded as of that tier; one
// that names namespace is refused, naming both tiers and the flag, and
// starts nothing.
func TestCreateTierRuntime(t *testing.T) {
	gv := &fakeRuntime{tier: policy.TierGVisor}
	m := newManager(t, Config{MinTier: policy.TierGVisor, Runtimes: map[string]sandbox.Runtime{
		policy.TierNamespace: sandbox.Namespaces{},
		policy.TierGVisor:    gv,
	}})
	ctx := testCtx(t)
	_, err := m.Create(ctx, "a", CreateRequest{Policy: policy.Spec{Tier: policy.TierNamespace}})
	want := "tier: namespace is weaker than gvisor, the minimum tier of this daemon (hutch serve --min-tier gvisor)"
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), want) {
		t.Errorf("create of tier namespace: %v, want %q", err, want)
	}
	if n := len(gv.started()); n != 0 {
		t.Errorf("the refused create started %d sandboxes", n)
	}

	_, err = m.Create(ctx, "a", CreateRequest{})
	if !errors.Is(err, errFakeStart) {
		t.Fatalf("create: %v, want the gvisor runtime's error", err)
	}
	starts := gv.started()
	if len(starts) != 1 || starts[0].Spec.Tier != policy.TierGVisor {
		t.Fatalf("the gvisor runtime started %d sandboxes (%+v), want one of tier gvisor", len(starts), starts)
	}
	rows, err := m.st.ListSandboxes(ctx, store.Filter{Tenant: "a"})
	if err != nil || len(rows) != 1 || rows[0].Tier != policy.TierGVisor || rows[0].State != store.StateStopped {
		t.Errorf("records: %+v, %v; want one stopped, of tier gvisor", rows, err)
	}
}

// TestWarmTier: the warm sandboxes of the default policy are of the
// daemon's default tier; a create of another tier does not take one (it
// starts cold, through its own tier's runtime), one that names the
// default tier does.
func TestWarmTier(t *testing.T) {
	gv := &fakeRuntime{tier: policy.TierGVisor}
	m := newManager(t, Config{Warm: 1, Runtimes: map[string]sandbox.Runtime{
		policy.TierNamespace: sandbox.Namespaces{},
		policy.TierGVisor:    gv,
	}})
	waitWarm(t, m, 1)
	if rows := warmRows(t, m.st); len(rows) != 1 || rows[0].Tier != policy.TierNamespace {
		t.Errorf("the warm records: %+v; want one of the namespace tier", rows)
	}
	ctx := testCtx(t)
	if _, err := m.Create(ctx, "a", CreateRequest{Policy: policy.Spec{Tier: policy.TierGVisor}}); !errors.Is(err, errFakeStart) {
		t.Errorf("create of tier gvisor: %v, want the gvisor runtime's error", err)
	}
	if took, starts := m.pools[0].took.Load(), len(gv.started()); took != 0 || starts != 1 {
		t.Errorf("a create of tier gvisor: %d warm sandboxes taken, %d gvisor starts; want 0 and 1", took, starts)
	}
	info := mustCreate(t, m, "a", CreateRequest{Policy: policy.Spec{Tier: policy.TierNamespace}})
	if took := m.pools[0].took.Load(); took != 1 || info.Tier != policy.TierNamespace {
		t.Errorf("a create of tier namespace: %d warm sandboxes taken, tier %q; want 1, namespace", took, info.Tier)
	}
	if e := firstEvent(t, m, "a", info.ID); e.Data["warm"] != true || e.Data["tier"] != policy.TierNamespace {
		t.Errorf("the first event %+v, want created, warm, of tier namespace", e)
	}
}
