package kube

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hutch-sandbox/hutch/internal/store"
	"github.com/hutch-sandbox/hutch/internal/store/storetest"
	"github.com/hutch-sandbox/hutch/internal/testutil"
	"github.com/hutch-sandbox/hutch/internal/testutil/k8stest"
)

// TestStore runs store.Backend's suite against a real API server, each
// state a namespace of its own and each Backend a connection of its own
// (a replica), then what is the cluster's own: the objects' layout, and
// the bound on a record's size.
func TestStore(t *testing.T) {
	srv := k8stest.StartAPIServer(t)
	var n atomic.Int32
	// newState makes a namespace and returns a function that connects a
	// new Store to it.
	newState := func(t *testing.T) func(*testing.T) store.Backend {
		ns := fmt.Sprintf("hutch-store-%d", n.Add(1))
		srv.Kubectl(t, "create", "namespace", ns)
		return func(t *testing.T) store.Backend {
			c, err := Connect(context.Background(), Options{Kubeconfig: srv.Kubeconfig, Namespace: ns})
			if err != nil {
				t.Fatal(err)
			}
			return c.Store()
		}
	}
	t.Run("Conformance", func(t *testing.T) {
		storetest.Run(t, storetest.Backends{New: newState})
	})
	t.Run("ConflictRetry", func(t *testing.T) {
		open := newState(t)
		testStoreConflict(t, open(t).(*Store), open(t).(*Store))
	})
	t.Run("Layout", func(t *testing.T) { testStoreLayout(t, newState(t)(t).(*Store)) })
	t.Run("TokenView", func(t *testing.T) {
		open := newState(t)
		testStoreTokenView(t, open(t).(*Store), open(t).(*Store))
	})
	t.Run("Unseen", func(t *testing.T) {
		open := newState(t)
		testStoreUnseen(t, open(t).(*Store), open(t).(*Store))
	})
	t.Run("Daemons", func(t *testing.T) {
		ns := fmt.Sprintf("hutch-store-%d", n.Add(1))
		srv.Kubectl(t, "create", "namespace", ns)
		open := func(daemon string) *Store {
			c, err := Connect(context.Background(), Options{Kubeconfig: srv.Kubeconfig, Namespace: ns, Daemon: daemon})
			if err != nil {
				t.Fatal(err)
			}
			return c.Store()
		}
		testStoreDaemons(t, open("one"), open("two"))
	})
	t.Run("Bounded", func(t *testing.T) { testStoreBounded(t, newState(t)(t).(*Store)) })
}

// testStoreLayout: a record is the ConfigMap the package's doc describes,
// its labels following its state; a token's Secret holds its hash, not
// the token.
func testStoreLayout(t *testing.T, st *Store) {
	ctx := context.Background()
	sb := store.Sandbox{ID: "sb-layout", Tenant: "Acme Corp/ü", State: store.StateRunning, Spec: []byte(`{"a": 1}`)}
	if err := st.InsertSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	// What another part of hutch puts on the ConfigMap stays.
	var cm corev1.ConfigMap
	if err := st.core.get(ctx, st.ns, "configmaps", "hutch-rec-sb-layout", &cm); err != nil {
		t.Fatal(err)
	}
	cm.Labels["example.com/other"] = "x"
	cm.Annotations = map[string]string{"example.com/note": "y"}
	if err := st.core.update(ctx, st.ns, "configmaps", cm.Name, &cm, &corev1.ConfigMap{}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.UpdateSandbox(ctx, sb.ID, func(sb *store.Sandbox) error { sb.State = store.StateStopped; return nil }); err != nil {
		t.Fatal(err)
	}
	cm = corev1.ConfigMap{}
	if err := st.core.get(ctx, st.ns, "configmaps", "hutch-rec-sb-layout", &cm); err != nil {
		t.Fatal(err)
	}
	if cm.Labels["example.com/other"] != "x" || cm.Annotations["example.com/note"] != "y" {
		t.Errorf("an update dropped others' label or annotation: %v, %v", cm.Labels, cm.Annotations)
	}
	wantLabels := map[string]string{LabelManaged: "hutch", LabelKind: KindSandbox, LabelTenant: tenantHash(sb.Tenant), LabelState: store.StateStopped}
	for k, v := range wantLabels {
		if cm.Labels[k] != v {
			t.Errorf("ConfigMap's label %s = %q, want %q (labels %v)", k, cm.Labels[k], v, cm.Labels)
		}
	}
	if len(tenantHash(sb.Tenant)) != 32 || cm.Labels[LabelDaemon] != "hutch" {
		t.Errorf("ConfigMap's labels %v", cm.Labels)
	}
	if rec := cm.Data[recordKey]; !strings.Contains(rec, `"spec":"{\"a\": 1}"`) || !strings.Contains(rec, `"tenant":"Acme Corp/ü"`) {
		t.Errorf("ConfigMap's record %s", rec)
	}

	tok, err := st.CreateToken(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	var l corev1.SecretList
	if err := st.core.list(ctx, st.ns, "secrets", metav1.ListOptions{LabelSelector: st.selector(KindToken)}, &l); err != nil {
		t.Fatal(err)
	}
	if len(l.Items) != 1 {
		t.Fatalf("%d Secrets of tokens, want 1", len(l.Items))
	}
	sec := l.Items[0]
	if !strings.HasPrefix(sec.Name, "hutch-token-") || len(sec.Name) != len("hutch-token-")+40 || sec.Labels[LabelTenant] != tenantHash("acme") {
		t.Errorf("token's Secret %s, labels %v", sec.Name, sec.Labels)
	}
	for k, v := range sec.Data {
		if strings.Contains(string(v), tok) || strings.Contains(string(v), tok[len("hutch_"):]) {
			t.Errorf("the token's Secret holds the token in %s", k)
		}
	}
	if string(sec.Data[tokenTenantKey]) != "acme" || len(sec.Data[tokenHashKey]) != 64 {
		t.Errorf("token's Secret data %q", sec.Data)
	}
}

// testStoreBounded: a record larger than a ConfigMap holds is refused, at
// insert and at update, with an error that says so, and nothing written.
func testStoreBounded(t *testing.T, st *Store) {
	ctx := context.Background()
	big := []byte(`{"x":"` + strings.Repeat("a", maxConfigMap) + `"}`)
	sb := store.Sandbox{ID: "sb-big", Tenant: "acme", State: store.StateRunning, Spec: big}
	err := st.InsertSandbox(ctx, sb)
	if err == nil || !strings.Contains(err.Error(), "more than a ConfigMap holds") {
		t.Errorf("insert of a record too large: %v", err)
	}
	if _, err := st.GetSandbox(ctx, "", sb.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the record too large was written: %v", err)
	}
	sb.Spec = nil
	if err := st.InsertSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	_, err = st.UpdateSandbox(ctx, sb.ID, func(sb *store.Sandbox) error { sb.Spec = big; return nil })
	if err == nil || !strings.Contains(err.Error(), "more than a ConfigMap holds") {
		t.Errorf("update to a record too large: %v", err)
	}
	if got, err := st.GetSandbox(ctx, "", sb.ID); err != nil || got.Spec != nil {
		t.Errorf("after the refused update: spec of %d bytes, %v", len(got.Spec), err)
	}
	// An ID no ConfigMap can be named after.
	sb.ID = "SB_Upper"
	if err := st.InsertSandbox(ctx, sb); err == nil || !strings.Contains(err.Error(), "cannot name a ConfigMap") {
		t.Errorf("insert of sandbox %q: %v", sb.ID, err)
	}
	if _, err := st.GetSandbox(ctx, "", sb.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("get of sandbox %q: %v, want ErrNotFound", sb.ID, err)
	}
}

// testStoreConflict: an update whose record another replica changed
// between its read and its write reads it again and runs fn again, both
// changes kept.
func testStoreConflict(t *testing.T, st, other *Store) {
	ctx := context.Background()
	if err := st.InsertSandbox(ctx, store.Sandbox{ID: "sb-conflict", Tenant: "acme", State: store.StateRunning}); err != nil {
		t.Fatal(err)
	}
	calls := 0
	got, err := st.UpdateSandbox(ctx, "sb-conflict", func(sb *store.Sandbox) error {
		calls++
		if calls == 1 {
			// The other replica writes between this read and its write.
			if _, err := other.UpdateSandbox(ctx, "sb-conflict", func(sb *store.Sandbox) error { sb.PID = 7; return nil }); err != nil {
				return err
			}
		}
		sb.Labels["seen"] = fmt.Sprint(sb.PID)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if calls != 2 || got.PID != 7 || got.Labels["seen"] != "7" {
		t.Errorf("after a conflict: fn ran %d times, pid %d, labels %v; want 2, 7, seen=7", calls, got.PID, got.Labels)
	}
	if sb, err := other.GetSandbox(ctx, "", "sb-conflict"); err != nil || sb.PID != 7 || sb.Labels["seen"] != "7" {
		t.Errorf("read back: %+v, %v", sb, err)
	}
}

// testStoreDaemons: two hutch serve of other names in one namespace see
// nothing of each other's: records, lists, tokens.
func testStoreDaemons(t *testing.T, one, two *Store) {
	ctx := context.Background()
	sb := store.Sandbox{ID: "sb-one", Tenant: "acme", State: store.StateRunning, Created: time.Now()}
	if err := one.InsertSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	if _, err := two.GetSandbox(ctx, "", sb.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("another daemon's record read: %v", err)
	}
	if l, err := two.ListSandboxes(ctx, store.Filter{}); err != nil || len(l) != 0 {
		t.Errorf("another daemon's records listed: %v %v", l, err)
	}
	if _, err := two.UpdateSandbox(ctx, sb.ID, func(*store.Sandbox) error { return nil }); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("another daemon's record updated: %v", err)
	}
	tok, err := one.CreateToken(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := two.TenantForToken(ctx, tok); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("another daemon's token taken: %v", err)
	}
	if got, err := one.TenantForToken(ctx, tok); err != nil || got != "acme" {
		t.Errorf("its own token: %q %v", got, err)
	}
}

// testStoreTokenView: two replicas' Stores of one state answer a token
// from their views of the tokens: one made by the other is taken at once
// (its Secret read), one revoked by the other is refused once the watch
// brought the deletion, one revoked by itself at once.
func testStoreTokenView(t *testing.T, one, two *Store) {
	ctx := context.Background()
	early, err := one.CreateToken(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	// Both views filled (a lookup starts them).
	for _, s := range []*Store{one, two} {
		if got, err := s.TenantForToken(ctx, early); err != nil || got != "acme" {
			t.Fatalf("a token: %q %v", got, err)
		}
		if !testutil.Eventually(time.Minute, func() bool { _, ok := s.tokens.lookup(store.TokenHash(early)); return ok }) {
			t.Fatal("the view did not fill")
		}
	}
	late, err := one.CreateToken(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := two.TenantForToken(ctx, late); err != nil || got != "acme" {
		t.Errorf("a token the other replica made a moment ago: %q %v", got, err)
	}
	if n, err := one.RevokeTokens(ctx, "acme"); err != nil || n != 2 {
		t.Fatalf("revoke: %d %v", n, err)
	}
	if _, err := one.TenantForToken(ctx, early); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a token revoked here: %v", err)
	}
	if !testutil.Eventually(time.Minute, func() bool {
		_, err := two.TenantForToken(ctx, early)
		_, err2 := two.TenantForToken(ctx, late)
		return errors.Is(err, store.ErrNotFound) && errors.Is(err2, store.ErrNotFound)
	}) {
		t.Error("the other replica still takes the tokens revoked")
	}
}

// gets counts a Store's API reads of one object (GETs of a name).
type gets struct {
	next http.RoundTripper
	n    atomic.Int32
}

func (g *gets) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodGet && r.URL.Query().Get("watch") == "" && !strings.HasSuffix(r.URL.Path, "/configmaps") && !strings.HasSuffix(r.URL.Path, "/secrets") {
		g.n.Add(1)
	}
	return g.next.RoundTrip(r)
}

// testStoreUnseen: a replica whose views are current answers an id or a
// token nobody made without reading anything (a request not yet
// authenticated names them), and still answers what the other replica
// made a moment ago (its views wait a watch's delay for it).
func testStoreUnseen(t *testing.T, one, two *Store) {
	ctx := context.Background()
	tok, err := one.CreateToken(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	// Both of two's views filled.
	if got, err := two.TenantForToken(ctx, tok); err != nil || got != "acme" {
		t.Fatalf("a token: %q %v", got, err)
	}
	if !testutil.Eventually(time.Minute, func() bool {
		_, current := two.Has(ctx, "sb-none")
		_, ok := two.tokens.lookup(store.TokenHash(tok))
		return current && ok
	}) {
		t.Fatal("the views did not fill")
	}
	g := &gets{next: two.core.rc.Client.Transport}
	if g.next == nil {
		g.next = http.DefaultTransport
	}
	two.core.rc.Client.Transport = g

	// A token of the right form that nobody made.
	last := "a"
	if strings.HasSuffix(tok, "a") {
		last = "b"
	}
	if _, err := two.TenantForToken(ctx, tok[:len(tok)-1]+last); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a token nobody made: %v", err)
	}
	if has, current := two.Has(ctx, "sb-nobody-made"); has || !current {
		t.Errorf("an id nobody made: has %v, current %v", has, current)
	}
	if n := g.n.Load(); n != 0 {
		t.Errorf("%d reads for a token and an id nobody made", n)
	}

	// What the other replica made a moment ago is there.
	if err := one.InsertSandbox(ctx, store.Sandbox{ID: "sb-made", Tenant: "acme", State: store.StateRunning}); err != nil {
		t.Fatal(err)
	}
	if has, current := two.Has(ctx, "sb-made"); !has || !current {
		t.Errorf("a record made a moment ago by the other replica: has %v, current %v", has, current)
	}
	late, err := one.CreateToken(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := two.TenantForToken(ctx, late); err != nil || got != "acme" {
		t.Errorf("a token made a moment ago by the other replica: %q %v", got, err)
	}
	if ids, ok := two.NotStopped(); !ok || !slices.Contains(ids, "sb-made") {
		t.Errorf("the view's sandboxes not stopped: %v %v", ids, ok)
	}
}
