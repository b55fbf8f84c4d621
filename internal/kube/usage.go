package kube

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/hutch-sandbox/hutch/internal/store"
)

// usage is a view of every record's tenant, state and memory limit, fed by
// a watch of the records' ConfigMaps and by the Store's own writes, for
// the counts a create checks its tenant's quota with (CountSandboxes,
// MemoryOf): two lists of the tenant's records per create, made under the
// daemon's quota lock, made concurrent claims wait on the API server in
// line. Another replica's writes reach it within the watch's delay, so a
// tenant creating on two replicas at once may pass its quota by what
// that delay lets through; until its first list it is not used.
type usage struct {
	mu     sync.Mutex
	recs   map[string]usageRec // by sandbox ID
	synced bool
	stop   chan struct{}
	once   sync.Once
}

// usageRec is what usage keeps of a record.
type usageRec struct {
	tenant, state string
	memory        int64
}

func recOf(sb store.Sandbox) usageRec {
	return usageRec{tenant: sb.Tenant, state: sb.State, memory: memoryLimit(sb.Spec)}
}

// set records sb; gone removes id.
func (u *usage) set(sb store.Sandbox) {
	u.mu.Lock()
	if u.recs != nil {
		u.recs[sb.ID] = recOf(sb)
	}
	u.mu.Unlock()
}

func (u *usage) gone(id string) {
	u.mu.Lock()
	delete(u.recs, id)
	u.mu.Unlock()
}

// of is tenant's count of sandboxes not stopped and the sum of their
// memory limits; ok is false until the view has been filled.
func (u *usage) of(tenant string) (n int, mem int64, ok bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if !u.synced {
		return 0, 0, false
	}
	for _, r := range u.recs {
		if r.tenant == tenant && r.state != store.StateStopped {
			n++
			mem += r.memory
		}
	}
	return n, mem, true
}

// startUsage fills the view and keeps it current, once, until close.
func (s *Store) startUsage() {
	s.usage.once.Do(func() {
		stop := make(chan struct{})
		s.usage.mu.Lock()
		s.usage.stop = stop
		s.usage.mu.Unlock()
		go s.watchUsage(stop)
	})
}

// watchUsage lists the records, then watches them from the list's
// version, again from a new list whenever the watch ends.
func (s *Store) watchUsage(stop chan struct{}) {
	u := &s.usage
	sel := s.selector(KindSandbox)
	for {
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			select {
			case <-stop:
			case <-ctx.Done():
			}
			cancel()
		}()
		var l corev1.ConfigMapList
		err := s.core.list(ctx, s.ns, "configmaps", metav1.ListOptions{LabelSelector: sel}, &l)
		if err == nil {
			recs := make(map[string]usageRec, len(l.Items))
			for i := range l.Items {
				if sb, err := decode(&l.Items[i]); err == nil {
					recs[sb.ID] = recOf(sb)
				}
			}
			u.mu.Lock()
			u.recs, u.synced = recs, true
			u.mu.Unlock()
			s.followUsage(ctx, sel, l.ResourceVersion)
		}
		cancel()
		select {
		case <-stop:
			return
		case <-time.After(time.Second):
		}
	}
}

// followUsage applies the watch's events to the view until it ends.
func (s *Store) followUsage(ctx context.Context, sel, from string) {
	w, err := s.core.watch(ctx, s.ns, "configmaps", metav1.ListOptions{LabelSelector: sel, ResourceVersion: from})
	if err != nil {
		return
	}
	defer w.Stop()
	for ev := range w.ResultChan() {
		cm, ok := ev.Object.(*corev1.ConfigMap)
		if !ok {
			return // an error: list again
		}
		sb, err := decode(cm)
		if err != nil {
			continue
		}
		switch ev.Type {
		case watch.Added, watch.Modified:
			s.usage.set(sb)
		case watch.Deleted:
			s.usage.gone(sb.ID)
		}
	}
}

// closeUsage stops the view's watch.
func (s *Store) closeUsage() {
	s.usage.mu.Lock()
	stop := s.usage.stop
	s.usage.stop = nil
	s.usage.mu.Unlock()
	if stop != nil {
		close(stop)
	}
}
