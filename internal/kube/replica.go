package kube

import (
	"context"
	"crypto/rand"
	"fmt"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/watch"
)

// The replicas of one hutch serve (its Options.Daemon) in the cluster:
// each holds a Lease of its own, renewed while it runs, which names the
// address at which the others reach it. A replica whose Lease was not
// renewed within its duration is gone: what it served is for another to
// take.

// AnnotationAddress is the annotation of a replica's Lease that holds the
// address (URL) at which the other replicas reach it.
const AnnotationAddress = "hutch.dev/address"

// LabelReplica marks the Leases of replicas.
const LabelReplica = "hutch.dev/replica"

// ReplicaLease is how long a replica's Lease lasts unrenewed, and
// ReplicaRenew how often a replica renews it.
var (
	ReplicaLease = 20 * time.Second
	ReplicaRenew = 5 * time.Second
)

// Replica is this hutch serve's membership among the replicas of its name.
type Replica struct {
	c         *Cluster
	name      string
	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

// leaseName is the name of replica name's Lease.
func (c *Cluster) leaseName(name string) string { return "hutch-" + c.opts.Daemon + "-" + name }

// Join makes replica name (a DNS label: its pod's name, say), reached at
// addr, one of the replicas of the daemon's name: its Lease is taken (a
// previous run's of the same name too) and renewed until Close. A Lease
// another live replica holds under that name is a conflict.
func (c *Cluster) Join(ctx context.Context, name, addr string) (*Replica, error) {
	if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
		return nil, fmt.Errorf("kubernetes: replica name %q: %s", name, strings.Join(errs, "; "))
	}
	r := &Replica{c: c, name: name, stop: make(chan struct{}), done: make(chan struct{})}
	if err := r.renew(ctx, addr, true); err != nil {
		return nil, err
	}
	go r.renewing(addr)
	return r, nil
}

// Name is the replica's name.
func (r *Replica) Name() string { return r.name }

// renew takes or renews the replica's Lease; first says it is the
// replica's start, when a Lease of the name that is still live is
// another process's.
func (r *Replica) renew(ctx context.Context, addr string, first bool) error {
	c, name := r.c, r.c.leaseName(r.name)
	secs := int32(ReplicaLease / time.Second)
	var l coordinationv1.Lease
	err := c.coord.get(ctx, c.ns, "leases", name, &l)
	// The time of the renewal is taken once the read answered: a read
	// slow to come back must not leave the Lease older than it is.
	now := metav1.NewMicroTime(time.Now())
	switch {
	case apierrors.IsNotFound(err):
		l = coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.ns,
				Labels:      map[string]string{LabelManaged: "hutch", LabelDaemon: c.opts.Daemon, LabelReplica: r.name},
				Annotations: map[string]string{AnnotationAddress: addr}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &r.name, LeaseDurationSeconds: &secs, AcquireTime: &now, RenewTime: &now},
		}
		if err := c.coord.create(ctx, c.ns, "leases", &l, &l); err != nil {
			return fmt.Errorf("kubernetes: lease %s: %w", name, err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("kubernetes: lease %s: %w", name, err)
	}
	if first && leaseAlive(&l, time.Now()) && l.Annotations[AnnotationAddress] != addr {
		return fmt.Errorf("kubernetes: replica %s is live at %s (its Lease %s was renewed %s ago)", r.name, l.Annotations[AnnotationAddress], name, time.Since(l.Spec.RenewTime.Time).Round(time.Second))
	}
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	l.Annotations[AnnotationAddress] = addr
	l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds, l.Spec.RenewTime = &r.name, &secs, &now
	if first {
		l.Spec.AcquireTime = &now
	}
	if err := c.coord.update(ctx, c.ns, "leases", name, &l, &l); err != nil {
		return fmt.Errorf("kubernetes: lease %s: %w", name, err)
	}
	return nil
}

// renewing renews the Lease every ReplicaRenew until Close. An attempt
// may take half the Lease (an API server slow under load answers late,
// not never), and one that failed is tried again at once, a moment
// later, rather than a period later: a Lease lapses only when the API
// server could not be reached for most of its duration.
func (r *Replica) renewing(addr string) {
	defer close(r.done)
	retry := max(ReplicaRenew/8, 100*time.Millisecond)
	t := time.NewTimer(ReplicaRenew)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), ReplicaLease/2)
			err := r.renew(ctx, addr, false)
			cancel()
			if err != nil {
				t.Reset(retry)
			} else {
				t.Reset(ReplicaRenew)
			}
		}
	}
}

// closeLeaseFor bounds Close's attempts to delete the Lease.
const closeLeaseFor = 25 * time.Second

// Close stops renewing the Lease and deletes it: the replica is gone at
// once for the others.
func (r *Replica) Close() error {
	var err error
	r.closeOnce.Do(func() {
		close(r.stop)
		<-r.done
		// Tried again within the pod's default grace (30 s): an API
		// server slow under load let one attempt of 10 s pass, and the
		// Lease, which nothing else deletes, was left to lapse.
		deadline := time.Now().Add(closeLeaseFor)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			e := r.c.coord.delete(ctx, r.c.ns, "leases", r.c.leaseName(r.name), metav1.DeleteOptions{})
			cancel()
			if e == nil || apierrors.IsNotFound(e) {
				err = nil
				return
			}
			err = fmt.Errorf("kubernetes: lease of replica %s: %w", r.name, e)
			if time.Now().Add(time.Second).After(deadline) {
				return
			}
			time.Sleep(time.Second)
		}
	})
	return err
}

// Replicas are the live replicas of the daemon's name: name → address.
// Unless fresh they come from a view of the replicas' Leases fed by a
// watch (a Lease lapses by time, so the view tells a replica lapsed as
// soon as a read would; one that joined or left a moment ago may not be
// in it yet); fresh, or until the view is filled, from a list.
func (c *Cluster) Replicas(ctx context.Context, fresh bool) (map[string]string, error) {
	c.startLeases()
	now, live := time.Now(), map[string]string{}
	v := &c.leases
	v.mu.Lock()
	if v.synced && !fresh {
		for _, l := range v.m {
			if leaseAlive(&l, now) && l.Spec.HolderIdentity != nil {
				live[*l.Spec.HolderIdentity] = l.Annotations[AnnotationAddress]
			}
		}
		v.mu.Unlock()
		return live, nil
	}
	v.mu.Unlock()
	var ls coordinationv1.LeaseList
	if err := c.coord.list(ctx, c.ns, "leases", metav1.ListOptions{LabelSelector: c.replicaSelector()}, &ls); err != nil {
		return nil, fmt.Errorf("kubernetes: the replicas' leases: %w", err)
	}
	for i := range ls.Items {
		l := &ls.Items[i]
		if leaseAlive(l, now) && l.Spec.HolderIdentity != nil {
			live[*l.Spec.HolderIdentity] = l.Annotations[AnnotationAddress]
		}
	}
	return live, nil
}

// ReplicaGone is how long a replica's Lease stays once lapsed before
// PruneReplicas deletes it: long past any take-over of its sandboxes.
var ReplicaGone = 10 * time.Minute

// PruneReplicas deletes the Leases of the replicas gone — lapsed for
// ReplicaGone — that keep does not want (one some record still names),
// each only as it was read (a replica that renewed its Lease meanwhile
// keeps it), and returns how many it deleted. A replica killed, or whose
// way to the API server went before it could delete its own Lease, would
// otherwise leave it for good, and a Deployment's pods change names.
func (c *Cluster) PruneReplicas(ctx context.Context, keep func(replica string) bool) (int, error) {
	var ls coordinationv1.LeaseList
	if err := c.coord.list(ctx, c.ns, "leases", metav1.ListOptions{LabelSelector: c.replicaSelector()}, &ls); err != nil {
		return 0, fmt.Errorf("kubernetes: the replicas' leases: %w", err)
	}
	n := 0
	for i := range ls.Items {
		l := &ls.Items[i]
		if leaseAlive(l, time.Now().Add(-ReplicaGone)) || l.Spec.RenewTime == nil || keep(l.Labels[LabelReplica]) {
			continue
		}
		rv := l.ResourceVersion
		err := c.coord.delete(ctx, c.ns, "leases", l.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &rv}})
		switch {
		case err == nil:
			n++
		case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
			// Deleted by another replica, or renewed.
		default:
			return n, fmt.Errorf("kubernetes: lease %s: %w", l.Name, err)
		}
	}
	return n, nil
}

// replicaSelector selects the Leases of the daemon's replicas.
func (c *Cluster) replicaSelector() string {
	return LabelManaged + "=hutch," + LabelDaemon + "=" + c.opts.Daemon + "," + LabelReplica
}

// leaseView is the replicas' Leases by name, fed by a watch.
type leaseView struct {
	watched
	m map[string]coordinationv1.Lease
}

// startLeases fills the view of the Leases and keeps it current, once,
// until Close.
func (c *Cluster) startLeases() {
	v := &c.leases
	v.start(func(stop chan struct{}) {
		follow(c.coord, c.ns, stop, "leases", c.replicaSelector(), func() runtime.Object { return &coordinationv1.LeaseList{} },
			func(list runtime.Object) {
				m := map[string]coordinationv1.Lease{}
				for _, l := range list.(*coordinationv1.LeaseList).Items {
					m[l.Name] = l
				}
				v.mu.Lock()
				v.m, v.synced = m, true
				v.mu.Unlock()
			},
			func(t watch.EventType, obj runtime.Object) {
				l, ok := obj.(*coordinationv1.Lease)
				if !ok {
					return
				}
				v.mu.Lock()
				defer v.mu.Unlock()
				if v.m == nil {
					return
				}
				if t == watch.Deleted {
					delete(v.m, l.Name)
				} else {
					v.m[l.Name] = *l
				}
			}, v.lost)
	})
}

// Close stops the cluster's views' watches.
func (c *Cluster) Close() { c.leases.close() }

// leaseAlive reports whether l was renewed within its duration at now.
func leaseAlive(l *coordinationv1.Lease, now time.Time) bool {
	if l.Spec.RenewTime == nil || l.Spec.LeaseDurationSeconds == nil {
		return false
	}
	return now.Before(l.Spec.RenewTime.Add(time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second))
}

// SharedKey is the key named name that every replica of the daemon's
// name shares (size random bytes), kept in a Secret of the namespace:
// made by the first replica that asks for it.
func (c *Cluster) SharedKey(ctx context.Context, name string, size int) ([]byte, error) {
	secret := "hutch-key-" + c.opts.Daemon + "-" + name
	var s corev1.Secret
	err := c.core.get(ctx, c.ns, "secrets", secret, &s)
	if apierrors.IsNotFound(err) {
		key := make([]byte, size)
		if _, err := rand.Read(key); err != nil {
			return nil, err
		}
		s = corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: secret, Namespace: c.ns,
				Labels: map[string]string{LabelManaged: "hutch", LabelDaemon: c.opts.Daemon}},
			Data: map[string][]byte{"key": key},
		}
		err = c.core.create(ctx, c.ns, "secrets", &s, &s)
		if apierrors.IsAlreadyExists(err) {
			err = c.core.get(ctx, c.ns, "secrets", secret, &s)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes: secret %s: %w", secret, err)
	}
	if len(s.Data["key"]) != size {
		return nil, fmt.Errorf("kubernetes: secret %s: its key is %d bytes, want %d", secret, len(s.Data["key"]), size)
	}
	return s.Data["key"], nil
}
