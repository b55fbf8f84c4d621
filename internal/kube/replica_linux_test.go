package kube

import (
	"context"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hutch-sandbox/hutch/internal/testutil"
	"github.com/hutch-sandbox/hutch/internal/testutil/k8stest"
)

// TestReplicas: a replica's Lease names its address while it runs; a
// second process cannot join under a live replica's name; a replica
// whose Lease was not renewed in time is gone, and its name can be taken
// again; one that closes is gone at once; replicas of another daemon's
// name are not seen.
func TestReplicas(t *testing.T) {
	srv := k8stest.StartAPIServer(t)
	srv.Kubectl(t, "create", "namespace", "replicas")
	ctx := context.Background()
	connect := func(daemon string) *Cluster {
		c, err := Connect(ctx, Options{Kubeconfig: srv.Kubeconfig, Namespace: "replicas", Daemon: daemon})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c
	}
	a, b, other := connect("hutch"), connect("hutch"), connect("elsewhere")
	// addrOf is replica name's address as c reads the Leases now, ok
	// false when it is not live.
	addrOf := func(c *Cluster, name string) (string, bool) {
		t.Helper()
		live, err := c.Replicas(ctx, true)
		if err != nil {
			t.Fatal(err)
		}
		addr, ok := live[name]
		return addr, ok
	}

	r1, err := a.Join(ctx, "r1", "https://10.0.0.1:8443")
	if err != nil {
		t.Fatal(err)
	}
	if addr, ok := addrOf(b, "r1"); !ok || addr != "https://10.0.0.1:8443" {
		t.Errorf("r1 from another connection: %q %v", addr, ok)
	}
	if _, ok := addrOf(other, "r1"); ok {
		t.Error("r1 seen by another daemon's name")
	}
	// The view (fed by a watch) says the same.
	viewHas := func(c *Cluster, name string) bool {
		live, err := c.Replicas(ctx, false)
		_, ok := live[name]
		return err == nil && ok
	}
	if !testutil.Eventually(time.Minute, func() bool { return viewHas(b, "r1") }) {
		t.Error("r1 not in another connection's view")
	}
	if _, err := b.Join(ctx, "r1", "https://10.0.0.2:8443"); err == nil || !strings.Contains(err.Error(), "is live at https://10.0.0.1:8443") {
		t.Errorf("a second r1 at another address: %v", err)
	}
	if _, ok := addrOf(b, "r2"); ok {
		t.Error("a replica that never was is live")
	}

	// r2 crashed: its Lease stays, not renewed any more.
	var l coordinationv1.Lease
	r2, err := a.Join(ctx, "r2", "https://10.0.0.3:8443")
	if err != nil {
		t.Fatal(err)
	}
	close(r2.stop)
	<-r2.done
	if err := a.coord.get(ctx, a.ns, "leases", a.leaseName("r2"), &l); err != nil {
		t.Fatal(err)
	}
	old := metav1.NewMicroTime(time.Now().Add(-ReplicaLease - time.Second))
	l.Spec.RenewTime = &old
	if err := a.coord.update(ctx, a.ns, "leases", l.Name, &l, &l); err != nil {
		t.Fatal(err)
	}
	if _, ok := addrOf(b, "r2"); ok {
		t.Error("a replica whose Lease expired is live")
	}
	r2b, err := b.Join(ctx, "r2", "https://10.0.0.4:8443")
	if err != nil {
		t.Fatalf("the name of a replica gone: %v", err)
	}
	if addr, ok := addrOf(a, "r2"); !ok || addr != "https://10.0.0.4:8443" {
		t.Errorf("r2 again: %q %v", addr, ok)
	}

	for _, r := range []*Replica{r1, r2b} {
		if err := r.Close(); err != nil {
			t.Error(err)
		}
	}
	if _, ok := addrOf(b, "r1"); ok {
		t.Error("a replica closed is live")
	}
	if !testutil.Eventually(time.Minute, func() bool { return !viewHas(b, "r1") }) {
		t.Error("a replica closed stays in the view")
	}
	// Replicas gone long ago: r3's and r4's Leases lapsed ReplicaGone
	// ago, r5's a moment ago; r4 is kept (a record names it), r1 is
	// live. Only r3's is deleted, and not another daemon's of its name.
	lapse := func(c *Cluster, name string, ago time.Duration) {
		t.Helper()
		r, err := c.Join(ctx, name, "https://10.0.0.9:8443")
		if err != nil {
			t.Fatal(err)
		}
		close(r.stop)
		<-r.done
		var l coordinationv1.Lease
		if err := c.coord.get(ctx, c.ns, "leases", c.leaseName(name), &l); err != nil {
			t.Fatal(err)
		}
		at := metav1.NewMicroTime(time.Now().Add(-ReplicaLease - ago))
		l.Spec.RenewTime = &at
		if err := c.coord.update(ctx, c.ns, "leases", l.Name, &l, &l); err != nil {
			t.Fatal(err)
		}
	}
	r1, err = a.Join(ctx, "r1", "https://10.0.0.1:8443")
	if err != nil {
		t.Fatal(err)
	}
	lapse(a, "r3", ReplicaGone+time.Minute)
	lapse(a, "r4", ReplicaGone+time.Minute)
	lapse(a, "r5", time.Second)
	lapse(other, "r3", ReplicaGone+time.Minute)
	if n, err := b.PruneReplicas(ctx, func(r string) bool { return r == "r4" }); err != nil || n != 1 {
		t.Errorf("prune: %d %v, want 1", n, err)
	}
	for c, names := range map[*Cluster]map[string]bool{a: {"r1": true, "r3": false, "r4": true, "r5": true}, other: {"r3": true}} {
		for name, want := range names {
			var l coordinationv1.Lease
			err := c.coord.get(ctx, c.ns, "leases", c.leaseName(name), &l)
			if got := err == nil; got != want {
				t.Errorf("the Lease of %s (daemon %s) after a prune: there %v, want %v (%v)", name, c.opts.Daemon, got, want, err)
			}
		}
	}
	if err := r1.Close(); err != nil {
		t.Error(err)
	}
	if _, err := a.Join(ctx, "Not_A_Name", "x"); err == nil {
		t.Error("a replica name that is no label value was taken")
	}
}
