// Package storetest is the conformance suite of store.Backend: what every
// place hutch serve keeps its state in (the SQLite file, a cluster's
// namespace) must do alike, run by each backend's tests against a real
// one.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"regexp"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/store"
)

// Backends makes the backends the suite runs against.
type Backends struct {
	// New makes a new, empty state and returns open, which returns a
	// Backend on it: a new one each call (as each replica of hutch serve
	// has its own), closed by the test's end.
	New func(t *testing.T) (open func(t *testing.T) store.Backend)
	// Snapshots says whether the backend keeps snapshots; one that does
	// not must refuse them with an error wrapping store.ErrUnsupported.
	Snapshots bool
}

// Run runs the suite, each test on a new state.
func Run(t *testing.T, b Backends) {
	tests := []struct {
		name string
		fn   func(*testing.T, func(*testing.T) store.Backend)
	}{
		{"InsertGet", testInsertGet},
		{"List", testList},
		{"Update", testUpdate},
		{"UpdateConcurrent", testUpdateConcurrent},
		{"Delete", testDelete},
		{"Counts", testCounts},
		{"Tokens", testTokens},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, b.New(t)) })
	}
	t.Run("Snapshots", func(t *testing.T) { testSnapshots(t, b.New(t)(t), b.Snapshots) })
}

// base is when the test sandboxes were created: not in UTC, which the
// backends read back in.
var base = time.Date(2026, 3, 1, 10, 0, 0, 123456789, time.FixedZone("CET", 3600))

// sandbox is a sandbox record with every field set.
func sandbox(id, tenant string, created time.Time) store.Sandbox {
	return store.Sandbox{
		ID:          id,
		Tenant:      tenant,
		State:       store.StateRunning,
		Labels:      map[string]string{"team": "infra", "purpose": "ci"},
		Spec:        []byte(`{"resources": {"memory": 1048576}, "network": {"allow": ["example.com:443"]}}`),
		Created:     created,
		Expires:     created.Add(time.Hour),
		LastActive:  created.Add(time.Minute),
		IdleTimeout: 10 * time.Minute,
		PID:         4242,
		PIDStart:    1<<64 - 2,
		Dir:         "/var/lib/hutch/sandboxes/" + id,
		Image:       "sha256:abab",
		Tier:        "gvisor",
		Volumes:     []byte(`[{"name":"data","dir":"/var/lib/hutch/volumes/v1","at":"/data"}]`),
		Owner:       "replica-a",
		Notes:       map[string]string{"e2b": `{"template":"base"}`},
	}
}

// equal says how got differs from want, normalized, or "".
func equal(got, want store.Sandbox) string {
	if err := store.Normalize(&want); err != nil {
		return err.Error()
	}
	for _, tm := range []time.Time{got.Created, got.Expires, got.LastActive} {
		if !tm.IsZero() && tm.Location() != time.UTC {
			return fmt.Sprintf("time %v not in UTC", tm)
		}
	}
	if len(got.Labels) == 0 && got.Labels != nil {
		return "empty labels read back as an empty map, want nil"
	}
	if got.Spec != nil && len(got.Spec) == 0 || got.Volumes != nil && len(got.Volumes) == 0 {
		return "empty spec or volumes read back as not nil"
	}
	g, w := got, want
	g.Labels, w.Labels = nil, nil
	g.Notes, w.Notes = nil, nil
	g.Spec, w.Spec, g.Volumes, w.Volumes = nil, nil, nil, nil
	g.Created, g.Expires, g.LastActive = time.Time{}, time.Time{}, time.Time{}
	w.Created, w.Expires, w.LastActive = time.Time{}, time.Time{}, time.Time{}
	if !reflect.DeepEqual(g, w) || !maps.Equal(got.Labels, want.Labels) || !maps.Equal(got.Notes, want.Notes) || string(got.Spec) != string(want.Spec) ||
		string(got.Volumes) != string(want.Volumes) || !got.Created.Equal(want.Created) ||
		!got.Expires.Equal(want.Expires) || !got.LastActive.Equal(want.LastActive) ||
		got.Expires.IsZero() != want.Expires.IsZero() {
		return fmt.Sprintf("\n got %+v\nwant %+v", got, want)
	}
	return ""
}

// ids are the IDs of list.
func ids(list []store.Sandbox) []string {
	out := []string{}
	for _, sb := range list {
		out = append(out, sb.ID)
	}
	return out
}

func insert(t *testing.T, st store.Backend, sbs ...store.Sandbox) {
	t.Helper()
	for _, sb := range sbs {
		if err := st.InsertSandbox(context.Background(), sb); err != nil {
			t.Fatal(err)
		}
	}
}

func get(t *testing.T, st store.Backend, id string) store.Sandbox {
	t.Helper()
	sb, err := st.GetSandbox(context.Background(), "", id)
	if err != nil {
		t.Fatal(err)
	}
	return sb
}

// testInsertGet: a record reads back as written, normalized; a duplicate
// ID conflicts; another tenant's record and a missing one are not found.
func testInsertGet(t *testing.T, open func(*testing.T) store.Backend) {
	ctx := context.Background()
	st := open(t)
	full := sandbox("sb-full", "acme", base)
	bare := store.Sandbox{ID: "sb-bare", Tenant: "acme", State: store.StateStarting, Labels: map[string]string{}, Spec: []byte{}}
	insert(t, st, full, bare)

	for _, want := range []store.Sandbox{full, bare} {
		got, err := st.GetSandbox(ctx, "acme", want.ID)
		if err != nil {
			t.Fatal(err)
		}
		if d := equal(got, want); d != "" {
			t.Errorf("sandbox %s: %s", want.ID, d)
		}
	}
	if got := get(t, st, "sb-bare"); got.Tier != store.NamespaceTier || got.Labels != nil || got.Spec != nil || got.Volumes != nil || !got.Created.IsZero() {
		t.Errorf("bare sandbox read back as %+v: want the namespace tier, nil labels, spec and volumes, zero times", got)
	}
	// Another replica reads it too.
	if d := equal(get(t, open(t), "sb-full"), full); d != "" {
		t.Errorf("sandbox sb-full from another backend: %s", d)
	}

	dup := sandbox("sb-full", "other", base)
	if err := st.InsertSandbox(ctx, dup); !errors.Is(err, store.ErrConflict) {
		t.Errorf("insert of an existing ID: %v, want ErrConflict", err)
	}
	if _, err := st.GetSandbox(ctx, "other", "sb-full"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("get of another tenant's sandbox: %v, want ErrNotFound", err)
	}
	if _, err := st.GetSandbox(ctx, "", "sb-missing"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("get of a missing sandbox: %v, want ErrNotFound", err)
	}
	for _, bad := range []store.Sandbox{
		{ID: "sb-x", State: store.StateRunning},
		{ID: "sb-x", Tenant: "acme", State: "flying"},
		{ID: "sb-x", Tenant: "acme", State: store.StateRunning, Spec: []byte("{")},
		{ID: "sb-x", Tenant: "acme", State: store.StateRunning, Checkpoint: "/c"},
	} {
		if err := st.InsertSandbox(ctx, bad); err == nil || errors.Is(err, store.ErrConflict) {
			t.Errorf("insert of %+v: %v, want an error", bad, err)
		}
	}
	if _, err := st.GetSandbox(ctx, "", "sb-x"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("an invalid record was written: %v", err)
	}
}

// testList: filters by tenant, state and labels, order by Created then ID.
func testList(t *testing.T, open func(*testing.T) store.Backend) {
	ctx := context.Background()
	st := open(t)
	a1 := sandbox("sb-a1", "acme", base.Add(2*time.Second))
	a2 := sandbox("sb-a2", "acme", base)
	a2.Labels = map[string]string{"team": "web"}
	a3 := sandbox("sb-a3", "acme", base) // same time as a2: by ID
	a3.State = store.StateStopped
	a3.Labels = nil
	b1 := sandbox("sb-b1", "beta.corp_x", base.Add(time.Second))
	insert(t, st, a1, b1, a3, a2)

	for _, tc := range []struct {
		f    store.Filter
		want []string
	}{
		{store.Filter{}, []string{"sb-a2", "sb-a3", "sb-b1", "sb-a1"}},
		{store.Filter{Tenant: "acme"}, []string{"sb-a2", "sb-a3", "sb-a1"}},
		{store.Filter{Tenant: "beta.corp_x"}, []string{"sb-b1"}},
		{store.Filter{Tenant: "nobody"}, []string{}},
		{store.Filter{State: store.StateStopped}, []string{"sb-a3"}},
		{store.Filter{Tenant: "acme", State: store.StateRunning}, []string{"sb-a2", "sb-a1"}},
		{store.Filter{Labels: map[string]string{"team": "infra"}}, []string{"sb-b1", "sb-a1"}},
		{store.Filter{Labels: map[string]string{"team": "infra", "purpose": "ci"}, Tenant: "acme"}, []string{"sb-a1"}},
		{store.Filter{Labels: map[string]string{"team": "web", "purpose": "ci"}}, []string{}},
		{store.Filter{Labels: map[string]string{"team": ""}}, []string{}},
	} {
		got, err := st.ListSandboxes(ctx, tc.f)
		if err != nil {
			t.Fatalf("list %+v: %v", tc.f, err)
		}
		if !slices.Equal(ids(got), tc.want) {
			t.Errorf("list %+v: %v, want %v", tc.f, ids(got), tc.want)
		}
	}
	all, err := st.ListSandboxes(ctx, store.Filter{Tenant: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	for _, got := range all {
		want := map[string]store.Sandbox{"sb-a1": a1, "sb-a2": a2, "sb-a3": a3}[got.ID]
		if d := equal(got, want); d != "" {
			t.Errorf("listed %s: %s", got.ID, d)
		}
	}
	if _, err := st.ListSandboxes(ctx, store.Filter{State: "flying"}); err == nil {
		t.Error("list by an invalid state: no error")
	}
}

// testUpdate: fn's change is written and returned as read back; fn's error
// writes nothing; what may not change is refused; a missing sandbox is not
// found.
func testUpdate(t *testing.T, open func(*testing.T) store.Backend) {
	ctx := context.Background()
	st := open(t)
	insert(t, st, sandbox("sb-u", "acme", base))

	later := time.Date(2026, 5, 1, 12, 0, 0, 1, time.FixedZone("X", -7200))
	got, err := st.UpdateSandbox(ctx, "sb-u", func(sb *store.Sandbox) error {
		if sb.Labels == nil {
			return errors.New("fn given nil labels")
		}
		sb.State = store.StatePaused
		sb.Checkpoint = "/var/lib/hutch/cp"
		sb.LastActive = later
		sb.Owner = "replica-b"
		sb.Notes["mcp"] = "x"
		sb.Labels["new"] = "1"
		delete(sb.Labels, "team")
		sb.Spec = nil
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := sandbox("sb-u", "acme", base)
	want.State, want.Checkpoint, want.LastActive, want.Owner = store.StatePaused, "/var/lib/hutch/cp", later, "replica-b"
	want.Labels = map[string]string{"new": "1", "purpose": "ci"}
	want.Notes = map[string]string{"e2b": `{"template":"base"}`, "mcp": "x"}
	want.Spec = nil
	if d := equal(got, want); d != "" {
		t.Errorf("update returned: %s", d)
	}
	if d := equal(get(t, st, "sb-u"), want); d != "" {
		t.Errorf("updated sandbox read back: %s", d)
	}
	if l, err := st.ListSandboxes(ctx, store.Filter{State: store.StatePaused}); err != nil || !slices.Equal(ids(l), []string{"sb-u"}) {
		t.Errorf("list of paused sandboxes after the update: %v, %v", ids(l), err)
	}

	// Every label removed reads back as nil.
	got, err = st.UpdateSandbox(ctx, "sb-u", func(sb *store.Sandbox) error { clear(sb.Labels); return nil })
	if err != nil || got.Labels != nil || get(t, st, "sb-u").Labels != nil {
		t.Errorf("update removing every label: %v, %v", got.Labels, err)
	}

	before := get(t, st, "sb-u")
	boom := errors.New("boom")
	_, err = st.UpdateSandbox(ctx, "sb-u", func(sb *store.Sandbox) error {
		sb.State = store.StateStopped
		return boom
	})
	if !errors.Is(err, boom) {
		t.Errorf("update whose fn fails: %v, want its error", err)
	}
	for _, change := range []func(*store.Sandbox){
		func(sb *store.Sandbox) { sb.Tenant = "other" },
		func(sb *store.Sandbox) { sb.Tier = "namespace" },
		func(sb *store.Sandbox) { sb.Volumes = nil },
		func(sb *store.Sandbox) { sb.State = "flying" },
	} {
		if _, err := st.UpdateSandbox(ctx, "sb-u", func(sb *store.Sandbox) error { change(sb); return nil }); err == nil {
			t.Error("a forbidden change was accepted")
		}
	}
	if d := equal(get(t, st, "sb-u"), before); d != "" {
		t.Errorf("a refused update wrote: %s", d)
	}

	called := false
	_, err = st.UpdateSandbox(ctx, "sb-missing", func(*store.Sandbox) error { called = true; return nil })
	if !errors.Is(err, store.ErrNotFound) || called {
		t.Errorf("update of a missing sandbox: %v (fn called: %v), want ErrNotFound", err, called)
	}
}

// testUpdateConcurrent: updates from two backends on the same state (two
// replicas), each from its own goroutines, are all applied.
func testUpdateConcurrent(t *testing.T, open func(*testing.T) store.Backend) {
	ctx := context.Background()
	backends := []store.Backend{open(t), open(t)}
	sb := sandbox("sb-c", "acme", base)
	sb.PID = 0
	insert(t, backends[0], sb)

	const each = 10
	var (
		wg   sync.WaitGroup
		errs = make(chan error, 2*each)
	)
	for g, st := range backends {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				_, err := st.UpdateSandbox(ctx, "sb-c", func(sb *store.Sandbox) error {
					sb.PID++
					sb.Labels[fmt.Sprintf("g%d-%d", g, i)] = "x"
					return nil
				})
				if err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	got := get(t, backends[1], "sb-c")
	if got.PID != 2*each {
		t.Errorf("after %d increments from two backends, pid %d", 2*each, got.PID)
	}
	if len(got.Labels) != 2*each+2 {
		t.Errorf("labels after the updates: %v, want %d", got.Labels, 2*each+2)
	}
}

// testDelete: a deleted record is gone; deleting it again is not found.
func testDelete(t *testing.T, open func(*testing.T) store.Backend) {
	ctx := context.Background()
	st := open(t)
	insert(t, st, sandbox("sb-d", "acme", base), sandbox("sb-e", "acme", base))
	if err := st.DeleteSandbox(ctx, "sb-d"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.GetSandbox(ctx, "", "sb-d"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("get of a deleted sandbox: %v, want ErrNotFound", err)
	}
	if err := st.DeleteSandbox(ctx, "sb-d"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("second delete: %v, want ErrNotFound", err)
	}
	if l, err := st.ListSandboxes(ctx, store.Filter{}); err != nil || !slices.Equal(ids(l), []string{"sb-e"}) {
		t.Errorf("list after the delete: %v, %v", ids(l), err)
	}
	// The ID may be used again.
	insert(t, st, sandbox("sb-d", "beta", base))
}

// testCounts: the counts and the memory sum leave stopped sandboxes out.
func testCounts(t *testing.T, open func(*testing.T) store.Backend) {
	ctx := context.Background()
	st := open(t)
	mk := func(id, tenant, state, tier, spec string) store.Sandbox {
		sb := sandbox(id, tenant, base)
		sb.State, sb.Tier, sb.Spec = state, tier, []byte(spec)
		return sb
	}
	insert(t, st,
		mk("sb-1", "acme", store.StateRunning, "gvisor", `{"resources":{"memory":1048576}}`),
		mk("sb-2", "acme", store.StatePaused, "", `{"resources":{"memory":2097152,"cpus":1}}`),
		mk("sb-3", "acme", store.StateStopped, "gvisor", `{"resources":{"memory":4194304}}`),
		mk("sb-4", "acme", store.StateRunning, "gvisor", `{}`),
		mk("sb-5", "beta", store.StateRunning, "gvisor", `{"resources":{"memory":8388608}}`),
		mk("sb-6", "admin", store.StateStarting, "namespace", ``),
	)
	for tenant, want := range map[string]int{"": 5, "acme": 3, "beta": 1, "nobody": 0} {
		if n, err := st.CountSandboxes(ctx, tenant); err != nil || n != want {
			t.Errorf("CountSandboxes(%q) = %d, %v; want %d", tenant, n, err, want)
		}
	}
	states, err := st.CountStates(ctx, "admin")
	if err != nil {
		t.Fatal(err)
	}
	want := map[store.StateTier]int{{State: store.StateRunning, Tier: "gvisor"}: 3, {State: store.StatePaused, Tier: store.NamespaceTier}: 1}
	if !maps.Equal(states, want) {
		t.Errorf("CountStates(admin) = %v, want %v", states, want)
	}
	for tenant, want := range map[string]int64{"acme": 3 << 20, "beta": 8 << 20, "admin": 0, "nobody": 0} {
		if n, err := st.MemoryOf(ctx, tenant); err != nil || n != want {
			t.Errorf("MemoryOf(%q) = %d, %v; want %d", tenant, n, err, want)
		}
	}
}

var (
	tokenShape    = regexp.MustCompile(`^hutch_[A-Za-z0-9_-]{43}$`)
	e2bTokenShape = regexp.MustCompile(`^e2b_[0-9a-f]{40}$`)
)

// testTokens: tokens of both shapes are found, from another backend too;
// unknown, malformed and revoked ones are not; the socket's tenant gets
// none.
func testTokens(t *testing.T, open func(*testing.T) store.Backend) {
	ctx := context.Background()
	st, other := open(t), open(t)
	tok, err := st.CreateToken(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	e2b, err := st.CreateE2BToken(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	beta, err := st.CreateToken(ctx, "beta")
	if err != nil {
		t.Fatal(err)
	}
	if !tokenShape.MatchString(tok) || !e2bTokenShape.MatchString(e2b) {
		t.Errorf("tokens %q and %q: want the shapes %v and %v", tok, e2b, tokenShape, e2bTokenShape)
	}
	for token, want := range map[string]string{tok: "acme", e2b: "acme", beta: "beta"} {
		if got, err := other.TenantForToken(ctx, token); err != nil || got != want {
			t.Errorf("TenantForToken(%q) = %q, %v; want %q", token, got, err, want)
		}
	}
	again, err := st.CreateToken(ctx, "acme")
	if err != nil || again == tok {
		t.Fatalf("a second token of acme: %q, %v (the first %q)", again, err, tok)
	}
	unknown, _ := store.MakeE2BToken()
	for _, bad := range []string{
		"", "hutch_", "Bearer " + tok, unknown,
		tok[:len(tok)-1], tok + "A", tok[:len(tok)-1] + string(tok[len(tok)-1]^1), "xxxxx_" + tok[6:],
		e2b[:len(e2b)-1], e2b + "0", "e2b_" + e2b[4:len(e2b)-1] + "x", "hutch_" + e2b[4:],
	} {
		if _, err := st.TenantForToken(ctx, bad); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("TenantForToken(%q): %v, want ErrNotFound", bad, err)
		}
	}
	for _, tenant := range []string{"", store.SocketTenant} {
		if _, err := st.CreateToken(ctx, tenant); err == nil {
			t.Errorf("a token for tenant %q was made", tenant)
		}
		if _, err := st.CreateE2BToken(ctx, tenant); err == nil {
			t.Errorf("an E2B token for tenant %q was made", tenant)
		}
	}

	if n, err := other.RevokeTokens(ctx, "acme"); err != nil || n != 3 {
		t.Errorf("RevokeTokens(acme) = %d, %v; want 3", n, err)
	}
	// Refused at once by the handle that revoked them; by another (a
	// replica, which learns of it by a watch) within a moment.
	for _, token := range []string{tok, again, e2b} {
		if _, err := other.TenantForToken(ctx, token); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("revoked token, where it was revoked: %v, want ErrNotFound", err)
		}
	}
	for _, token := range []string{tok, again, e2b} {
		var err error
		for end := time.Now().Add(time.Minute); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
			if _, err = st.TenantForToken(ctx, token); errors.Is(err, store.ErrNotFound) {
				break
			}
		}
		if !errors.Is(err, store.ErrNotFound) {
			t.Errorf("revoked token, a minute later: %v, want ErrNotFound", err)
		}
	}
	if got, err := st.TenantForToken(ctx, beta); err != nil || got != "beta" {
		t.Errorf("another tenant's token after the revocation: %q, %v", got, err)
	}
	if n, err := st.RevokeTokens(ctx, "acme"); err != nil || n != 0 {
		t.Errorf("second RevokeTokens(acme) = %d, %v; want 0", n, err)
	}
}

// testSnapshots: a backend that keeps snapshots keeps them; one that does
// not refuses them with ErrUnsupported and lists none.
func testSnapshots(t *testing.T, st store.Backend, keeps bool) {
	ctx := context.Background()
	sn := store.Snapshot{ID: "snap-1", Tenant: "acme", Source: "sb-1", Layers: []string{"sha256:ab"}, Size: 1, Created: base}
	err := st.InsertSnapshot(ctx, sn)
	if !keeps {
		if !errors.Is(err, store.ErrUnsupported) {
			t.Errorf("InsertSnapshot: %v, want ErrUnsupported", err)
		}
		if _, err := st.GetSnapshot(ctx, "acme", "snap-1"); !errors.Is(err, store.ErrUnsupported) {
			t.Errorf("GetSnapshot: %v, want ErrUnsupported", err)
		}
		if err := st.MarkSnapshotDeleted(ctx, "acme", "snap-1"); !errors.Is(err, store.ErrUnsupported) {
			t.Errorf("MarkSnapshotDeleted: %v, want ErrUnsupported", err)
		}
		if l, err := st.ListSnapshots(ctx, "", true); err != nil || len(l) != 0 {
			t.Errorf("ListSnapshots: %v, %v; want none", l, err)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	got, err := st.GetSnapshot(ctx, "acme", "snap-1")
	if err != nil || got.ID != "snap-1" || got.Tier != store.NamespaceTier {
		t.Errorf("GetSnapshot: %+v, %v", got, err)
	}
	if err := st.MarkSnapshotDeleted(ctx, "acme", "snap-1"); err != nil {
		t.Fatal(err)
	}
	if l, err := st.ListSnapshots(ctx, "acme", false); err != nil || len(l) != 0 {
		t.Errorf("ListSnapshots after the delete: %v, %v; want none", l, err)
	}
}
