package kube

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
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
	watched
	recs map[string]usageRec // by sandbox ID
}

// watched is what a view fed by a watch keeps besides its data: the lock
// over both, whether the view is current (filled, its watch running), the
// channel that stops its watch, and its start, once.
type watched struct {
	mu     sync.Mutex
	synced bool
	stop   chan struct{}
	once   sync.Once
}

// lost marks the view not current until it is listed again (follow's
// lost): what changed meanwhile may be missing from it.
func (w *watched) lost() {
	w.mu.Lock()
	w.synced = false
	w.mu.Unlock()
}

// start runs run in a goroutine of its own, once, until close closes
// the channel it is given.
func (w *watched) start(run func(stop chan struct{})) {
	w.once.Do(func() {
		stop := make(chan struct{})
		w.mu.Lock()
		w.stop = stop
		w.mu.Unlock()
		go run(stop)
	})
}

// close stops the view's watch.
func (w *watched) close() {
	w.mu.Lock()
	stop := w.stop
	w.stop = nil
	w.mu.Unlock()
	if stop != nil {
		close(stop)
	}
}

// usageRec is what usage keeps of a record.
type usageRec struct {
	tenant, state, tier, owner string
	memory                     int64
}

func recOf(sb store.Sandbox) usageRec {
	return usageRec{tenant: sb.Tenant, state: sb.State, tier: sb.Tier, owner: sb.Owner, memory: memoryLimit(sb.Spec)}
}

// OwnerOf is what the view of the records has of sandbox id: its owner
// (the replica serving it), state and tier; ok is false when the view
// does not have it (not filled yet, or a record made a moment ago by
// another replica): read the record then. The view is a watch's delay
// behind the records, which a take-over's own update checks.
func (s *Store) OwnerOf(id string) (owner, state, tier string, ok bool) {
	s.startUsage()
	u := &s.usage
	u.mu.Lock()
	defer u.mu.Unlock()
	r, ok := u.recs[id]
	if !u.synced || !ok {
		return "", "", "", false
	}
	return r.owner, r.state, r.tier, true
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

// of is tenant's count of sandboxes not stopped ("": every tenant's) and
// the sum of their memory limits; ok is false until the view has been
// filled.
func (u *usage) of(tenant string) (n int, mem int64, ok bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if !u.synced {
		return 0, 0, false
	}
	for _, r := range u.recs {
		if (tenant == "" || r.tenant == tenant) && r.state != store.StateStopped {
			n++
			mem += r.memory
		}
	}
	return n, mem, true
}

// startUsage fills the view and keeps it current, once, until close.
func (s *Store) startUsage() {
	u := &s.usage
	u.start(func(stop chan struct{}) {
		follow(s.core, s.ns, stop, "configmaps", s.selector(KindSandbox), func() runtime.Object { return &corev1.ConfigMapList{} },
			func(list runtime.Object) {
				items := list.(*corev1.ConfigMapList).Items
				recs := make(map[string]usageRec, len(items))
				for i := range items {
					if sb, err := decode(&items[i]); err == nil {
						recs[sb.ID] = recOf(sb)
					}
				}
				u.mu.Lock()
				u.recs, u.synced = recs, true
				u.mu.Unlock()
			},
			func(t watch.EventType, obj runtime.Object) {
				cm, ok := obj.(*corev1.ConfigMap)
				if !ok {
					return
				}
				sb, err := decode(cm)
				if err != nil {
					return
				}
				if t == watch.Deleted {
					u.gone(sb.ID)
				} else {
					u.set(sb)
				}
			}, u.lost)
	})
}

// Has reports whether the view of the records has sandbox id, having
// waited up to viewGrace for a record it lacks (one another replica made a
// moment ago reaches it a watch's delay later); current is false when the
// view cannot tell (not filled yet, or its watch ended and it is being
// filled again): read the record then. Without a read, an id that names
// no sandbox costs the API server nothing, whoever sends it.
func (s *Store) Has(ctx context.Context, id string) (has, current bool) {
	s.startUsage()
	u := &s.usage
	return await(ctx, func() (bool, bool) {
		u.mu.Lock()
		defer u.mu.Unlock()
		_, has := u.recs[id]
		return has && u.synced, u.synced
	})
}

// viewGrace is how long a view fed by a watch is waited for to show what a
// client names that it lacks (a record or a token made a moment ago by
// another replica, which the watch brings), before the view's answer —
// there is none — is taken.
const viewGrace = time.Second

// await asks look (has, current) until it has or the view is not current,
// for up to viewGrace, and returns its last answer.
func await(ctx context.Context, look func() (has, current bool)) (bool, bool) {
	deadline := time.Now().Add(viewGrace)
	for {
		has, current := look()
		if has || !current || time.Now().After(deadline) {
			return has, current
		}
		select {
		case <-ctx.Done():
			return has, current
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// NotStopped lists the sandboxes of the view of the records that are not
// stopped; ok is false while the view is not current.
func (s *Store) NotStopped() (ids []string, ok bool) {
	s.startUsage()
	u := &s.usage
	u.mu.Lock()
	defer u.mu.Unlock()
	if !u.synced {
		return nil, false
	}
	for id, r := range u.recs {
		if r.state != store.StateStopped {
			ids = append(ids, id)
		}
	}
	return ids, true
}

// follow keeps a view of the objects of resource in namespace ns of a
// that sel selects, until stop: reset is given each full list (a new one
// of newList), apply each event of the watch that follows from the list's
// version; a watch that ends is followed by lost (when not nil) and a new
// list, a second later.
func follow(a api, ns string, stop chan struct{}, resource, sel string, newList func() runtime.Object, reset func(runtime.Object), apply func(watch.EventType, runtime.Object), lost func()) {
	for {
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			select {
			case <-stop:
			case <-ctx.Done():
			}
			cancel()
		}()
		list := newList()
		if err := a.list(ctx, ns, resource, metav1.ListOptions{LabelSelector: sel}, list); err == nil {
			reset(list)
			if m, err := meta.ListAccessor(list); err == nil {
				followWatch(ctx, a, ns, resource, sel, m.GetResourceVersion(), apply)
			}
			if lost != nil {
				lost()
			}
		}
		cancel()
		select {
		case <-stop:
			return
		case <-time.After(time.Second):
		}
	}
}

// followWatch applies a watch's events from version from until it ends.
func followWatch(ctx context.Context, a api, ns, resource, sel, from string, apply func(watch.EventType, runtime.Object)) {
	w, err := a.watch(ctx, ns, resource, metav1.ListOptions{LabelSelector: sel, ResourceVersion: from})
	if err != nil {
		return
	}
	defer w.Stop()
	for ev := range w.ResultChan() {
		if ev.Type == watch.Error {
			return // list again
		}
		apply(ev.Type, ev.Object)
	}
}

// closeUsage stops the views' watches.
func (s *Store) closeUsage() {
	s.usage.close()
	s.tokens.close()
}
