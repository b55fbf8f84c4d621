package daemon

import (
	"context"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/store"
)

// viewStore is a store with a view of its records (as a cluster's has),
// current or not, that counts the lists of its records.
type viewStore struct {
	*store.Store
	current bool
	lists   atomic.Int32
}

func (v *viewStore) ListSandboxes(ctx context.Context, f store.Filter) ([]store.Sandbox, error) {
	v.lists.Add(1)
	return v.Store.ListSandboxes(ctx, f)
}

func (v *viewStore) OwnerOf(id string) (owner, state, tier string, ok bool) {
	sb, err := v.Store.GetSandbox(context.Background(), "", id)
	if err != nil || !v.current {
		return "", "", "", false
	}
	return sb.Owner, sb.State, sb.Tier, true
}

func (v *viewStore) Has(ctx context.Context, id string) (has, current bool) {
	_, err := v.Store.GetSandbox(ctx, "", id)
	return err == nil && v.current, v.current
}

func (v *viewStore) NotStopped() ([]string, bool) {
	if !v.current {
		return nil, false
	}
	sbs, _ := v.Store.ListSandboxes(context.Background(), store.Filter{})
	var ids []string
	for _, sb := range sbs {
		if sb.State != store.StateStopped {
			ids = append(ids, sb.ID)
		}
	}
	return ids, true
}

// oneReplica is the replica "a", alone; it keeps what its last prune kept.
type oneReplica struct{ kept []string }

func (*oneReplica) Self() string { return "a" }
func (*oneReplica) Live(context.Context, bool) (map[string]string, error) {
	return map[string]string{"a": "http://127.0.0.1:1"}, nil
}
func (r *oneReplica) Prune(_ context.Context, keep func(string) bool) (int, error) {
	r.kept = nil
	for _, name := range []string{"a", "b", "c"} {
		if keep(name) {
			r.kept = append(r.kept, name)
		}
	}
	return 0, nil
}

// TestTakeOrphansView: a replica's scan for the sandboxes of replicas gone
// reads the owners from the store's view of the records while it is
// current — no list of the records every few seconds — and lists them
// when it is not; either way the prune keeps the replicas a record not
// stopped names, and those only.
func TestTakeOrphansView(t *testing.T) {
	scan := replicaScan
	replicaScan = time.Hour // the test scans, not the daemon
	t.Cleanup(func() { replicaScan = scan })
	dir := stateDir(t)
	st, err := store.Open(filepath.Join(dir, "records.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	v := &viewStore{Store: st}
	r := &oneReplica{}
	m := newManager(t, Config{StateDir: dir, Store: v, Replicas: r})
	ctx := testCtx(t)
	now := time.Now()
	for _, sb := range []store.Sandbox{
		{ID: "sb-of-b", Tenant: "acme", State: store.StateRunning, Owner: "b"},
		{ID: "sb-of-c", Tenant: "acme", State: store.StateStopped, Owner: "c"},
	} {
		sb.Created, sb.Expires, sb.Tier = now, now.Add(time.Hour), "namespace"
		if err := st.InsertSandbox(ctx, sb); err != nil {
			t.Fatal(err)
		}
	}
	for _, current := range []bool{true, false} {
		v.current = current
		v.lists.Store(0)
		m.pruned = time.Time{}
		if err := m.takeOrphans(ctx); err != nil {
			t.Fatal(err)
		}
		want := int32(1)
		if current {
			want = 0
		}
		if n := v.lists.Load(); n != want {
			t.Errorf("view current %v: %d lists of the records, want %d", current, n, want)
		}
		if !slices.Equal(r.kept, []string{"a", "b"}) {
			t.Errorf("view current %v: the prune kept %v, want a (itself) and b (a record running names it)", current, r.kept)
		}
		if ids, err := m.NotStopped(ctx); err != nil || !slices.Equal(ids, []string{"sb-of-b"}) {
			t.Errorf("view current %v: not stopped %v, %v", current, ids, err)
		}
	}
}
