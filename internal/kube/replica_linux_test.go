package kube

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
		return c
	}
	a, b, other := connect("hutch"), connect("hutch"), connect("elsewhere")

	r1, err := a.Join(ctx, "r1", "https://10.0.0.1:8443")
	if err != nil {
		t.Fatal(err)
	}
	if addr, err := b.ReplicaAddress(ctx, "r1"); err != nil || addr != "https://10.0.0.1:8443" {
		t.Errorf("r1 from another connection: %q %v", addr, err)
	}
	if _, err := other.ReplicaAddress(ctx, "r1"); !errors.Is(err, ErrNoReplica) {
		t.Errorf("r1 seen by another daemon's name: %v", err)
	}
	if _, err := b.Join(ctx, "r1", "https://10.0.0.2:8443"); err == nil || !strings.Contains(err.Error(), "is live at https://10.0.0.1:8443") {
		t.Errorf("a second r1 at another address: %v", err)
	}
	if _, err := b.ReplicaAddress(ctx, "r2"); !errors.Is(err, ErrNoReplica) {
		t.Errorf("a replica that never was: %v", err)
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
	if _, err := b.ReplicaAddress(ctx, "r2"); !errors.Is(err, ErrNoReplica) {
		t.Errorf("a replica whose Lease expired: %v", err)
	}
	r2b, err := b.Join(ctx, "r2", "https://10.0.0.4:8443")
	if err != nil {
		t.Fatalf("the name of a replica gone: %v", err)
	}
	if addr, err := a.ReplicaAddress(ctx, "r2"); err != nil || addr != "https://10.0.0.4:8443" {
		t.Errorf("r2 again: %q %v", addr, err)
	}

	for _, r := range []*Replica{r1, r2b} {
		if err := r.Close(); err != nil {
			t.Error(err)
		}
	}
	if _, err := b.ReplicaAddress(ctx, "r1"); !errors.Is(err, ErrNoReplica) {
		t.Errorf("a replica closed: %v", err)
	}
	if _, err := a.Join(ctx, "Not_A_Name", "x"); err == nil {
		t.Error("a replica name that is no label value was taken")
	}
}
