package daemon

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hutch-sandbox/hutch/internal/metrics"
	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/store"
)

// The warm pool (Config.Warm) keeps sandboxes of the default policy
// started, their agents answering, so that a create with that policy
// takes one at once instead of waiting for a start.
//
// A warm sandbox starts exactly as a created one (launch, with the
// request CreateRequest{}) and is recorded in the store under warmTenant,
// a name no real tenant can have: so it shows in no tenant's List, counts
// against no tenant's quota, and a daemon started after this one died
// finds and ends it like any other leftover. A create takes one under the
// quota lock: its record is replaced by the tenant's, with the request's
// labels, timeout (counted from the take) and idle timeout, and its event
// log starts with EventCreated (data "warm": true) as a cold one's does.
// The request's environment, which a cold sandbox gets at start, is given
// to the agent client instead (agent.Client.SetEnv), under every exec's
// own; only HOME changes how a sandbox is started, so a request that sets
// it starts cold.

// warmTenant is the tenant of the warm sandboxes' records until they are
// taken. Tenant names (tokens, hutch token create) start with a letter or
// a digit, and Create refuses this one.
const warmTenant = "@warm"

// Bounds of the pool's refilling.
const (
	// maxWarmStarts is the most warm sandboxes starting at once.
	maxWarmStarts = 2
	// warmBackoffMin and warmBackoffMax bound the wait after a warm
	// sandbox failed to start: it doubles with each failure in a row.
	warmBackoffMin = 500 * time.Millisecond
	warmBackoffMax = time.Minute
	// warmRefillDelay is how long after a take the pool starts refilling.
	warmRefillDelay = 50 * time.Millisecond
	// warmPingTimeout bounds the check that a warm sandbox's agent still
	// answers when a create takes it: generous, since a busy machine
	// answers slowly, while an agent that is gone fails at once.
	warmPingTimeout = 10 * time.Second
)

// warmCount is the number of warm sandboxes ready, in every manager of the
// process.
var warmCount atomic.Int64

// WarmSandboxes is the gauge hutch_warm_sandboxes: the warm sandboxes
// ready to be taken, in every manager of the process; package api adds it
// to what GET /metrics writes.
var WarmSandboxes = metrics.NewGaugeFunc("hutch_warm_sandboxes",
	"Warm sandboxes of the default policy, started and ready to be taken by a create.", nil,
	func() ([]metrics.Sample, error) {
		return []metrics.Sample{{Value: float64(warmCount.Load())}}, nil
	})

// pool is the warm pool of a manager.
type pool struct {
	size int

	mu       sync.Mutex
	ready    []*warm // oldest first
	starting int     // starts in progress
	halted   bool
	failures int       // starts failed in a row
	retryAt  time.Time // no start before then, after a failure

	kickc  chan struct{} // wakes the filler; buffered
	stopc  chan struct{} // closed by halt
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // the filler and the starts in progress

	// took counts the sandboxes taken, for tests.
	took atomic.Int64
}

// warm is a ready warm sandbox.
type warm struct {
	l     *live
	taken chan struct{} // closed once a create took it
}

// startPool starts a pool of size warm sandboxes and its filler.
func (m *Manager) startPool(size int) {
	ctx, cancel := context.WithCancel(context.Background())
	p := &pool{
		size:   size,
		kickc:  make(chan struct{}, 1),
		stopc:  make(chan struct{}),
		ctx:    ctx,
		cancel: cancel,
	}
	m.pool = p
	m.log.Info("warm pool", "size", size)
	p.wg.Add(1)
	go m.fill()
	p.kick()
}

// kick wakes the filler.
func (p *pool) kick() {
	select {
	case p.kickc <- struct{}{}:
	default:
	}
}

// fill starts warm sandboxes whenever the pool is short, at most
// maxWarmStarts at once, until halt.
func (m *Manager) fill() {
	p := m.pool
	defer p.wg.Done()
	for {
		var (
			retry <-chan time.Time
			t     *time.Timer
		)
		if wait := m.startSome(); wait > 0 {
			t = time.NewTimer(wait)
			retry = t.C
		}
		select {
		case <-p.stopc:
		case <-p.kickc:
		case <-retry:
		}
		if t != nil {
			t.Stop()
		}
		select {
		case <-p.stopc:
			return
		default:
		}
	}
}

// startSome starts as many warm sandboxes as the pool lacks and may start
// now; after a failure it starts none before the back-off passed and
// returns how long that is.
func (m *Manager) startSome() time.Duration {
	p := m.pool
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.halted {
		return 0
	}
	if wait := time.Until(p.retryAt); wait > 0 {
		return wait
	}
	for len(p.ready)+p.starting < p.size && p.starting < maxWarmStarts {
		p.starting++
		p.wg.Add(1)
		go m.warmOne()
	}
	return 0
}

// warmOne starts one warm sandbox and adds it to the pool.
func (m *Manager) warmOne() {
	p := m.pool
	defer p.wg.Done()
	defer p.kick()
	l, err := m.startWarm(p.ctx)
	p.mu.Lock()
	p.starting--
	if err != nil {
		halted := p.halted
		p.failures++
		wait := min(warmBackoffMin<<min(p.failures-1, 16), warmBackoffMax)
		p.retryAt = time.Now().Add(wait)
		p.mu.Unlock()
		if !halted {
			m.log.Warn("warm sandbox failed to start", "err", err, "retry_in", wait)
		}
		return
	}
	p.failures = 0
	if p.halted {
		p.mu.Unlock()
		<-m.end(l, "", "the daemon is shutting down")
		return
	}
	w := &warm{l: l, taken: make(chan struct{})}
	p.ready = append(p.ready, w)
	n := len(p.ready)
	warmCount.Add(1)
	p.mu.Unlock()
	go m.watchWarm(w)
	m.log.Info("warm sandbox ready", "sandbox", l.id, "warm", n, "size", p.size)
}

// startWarm starts a sandbox of the default policy for the pool: the same
// preparation and start as Create's, recorded under warmTenant.
func (m *Manager) startWarm(ctx context.Context) (*live, error) {
	spec, _, err := m.prepare(CreateRequest{}, workspaceOf(policy.Spec{}))
	if err != nil {
		return nil, err
	}
	now := time.Now()
	row := store.Sandbox{Tenant: warmTenant, Created: now, LastActive: now}
	if err := m.record(ctx, &row, spec); err != nil {
		return nil, err
	}
	id, dir := row.ID, row.Dir
	log := m.log.With("sandbox", id, "tenant", warmTenant)
	l, err := m.launch(ctx, id, dir, spec, environ(spec.Env, nil), nil, false, log, nil)
	if err == nil {
		l.tenant = warmTenant
		if _, err = m.markRunning(id); err != nil {
			l.close(log)
		}
	}
	if err != nil {
		m.abandon(id, dir, log, nil, err)
		return nil, fmt.Errorf("warm sandbox %s: %w", id, err)
	}
	log.Debug("warm sandbox started", "pid", l.inst.PID())
	return l, nil
}

// watchWarm discards w if its sandbox ends while it waits in the pool.
func (m *Manager) watchWarm(w *warm) {
	var why string
	select {
	case <-w.taken:
		return
	case <-w.l.inst.Done():
		why = "its PID 1 ended while warm"
	case <-w.l.client.Done():
		why = fmt.Sprintf("its agent connection ended while warm: %v", w.l.client.Err())
	}
	if !m.pool.remove(w) {
		return // taken meanwhile (the taker sees it dead), or halted
	}
	m.log.Warn("warm sandbox discarded", "sandbox", w.l.id, "reason", why)
	m.end(w.l, "", why)
	m.pool.kick()
}

// remove takes w out of the pool; it reports false if w was no longer in
// it.
func (p *pool) remove(w *warm) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	i := slices.Index(p.ready, w)
	if i < 0 {
		return false
	}
	p.ready = slices.Delete(p.ready, i, i+1)
	warmCount.Add(-1)
	return true
}

// take takes the oldest warm sandbox whose agent still answers out of
// the pool, nil if there is none; the dead ones it meets are discarded.
// Two callers never get the same sandbox.
func (m *Manager) take() *live {
	p := m.pool
	// The refill waits a moment: on a small machine, starting the next
	// warm sandbox at once would compete with the first commands of the
	// one just taken.
	defer time.AfterFunc(warmRefillDelay, p.kick)
	for {
		p.mu.Lock()
		if len(p.ready) == 0 {
			p.mu.Unlock()
			return nil
		}
		w := p.ready[0]
		p.ready = slices.Delete(p.ready, 0, 1)
		warmCount.Add(-1)
		close(w.taken)
		p.mu.Unlock()
		if err := alive(w.l); err != nil {
			why := fmt.Sprintf("it ended while warm: %v", err)
			m.log.Warn("warm sandbox discarded", "sandbox", w.l.id, "reason", why)
			m.end(w.l, "", why)
			continue
		}
		return w.l
	}
}

// alive checks that l's PID 1 runs and its agent answers (a round trip:
// a sandbox killed a moment ago may not have been noticed yet).
func alive(l *live) error {
	select {
	case <-l.inst.Done():
		return errors.New("its PID 1 ended")
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), warmPingTimeout)
	defer cancel()
	if _, err := l.client.ListProcesses(ctx); err != nil {
		return fmt.Errorf("its agent did not answer: %w", err)
	}
	return nil
}

// halt stops refilling, waits for the starts in progress (which end what
// they started) and returns the warm sandboxes that were ready, for the
// caller to end.
func (p *pool) halt() []*live {
	p.mu.Lock()
	p.halted = true
	p.mu.Unlock()
	p.cancel()
	close(p.stopc)
	p.wg.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*live, 0, len(p.ready))
	for _, w := range p.ready {
		close(w.taken)
		out = append(out, w.l)
	}
	warmCount.Add(-int64(len(p.ready)))
	p.ready = nil
	return out
}

// readyCount is the number of warm sandboxes ready.
func (p *pool) readyCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.ready)
}

// warmMatch reports whether a warm sandbox can serve r: its policy is the
// default and its environment does not set HOME (which decides, at start,
// whether the sandbox gets a private home).
func warmMatch(r CreateRequest) bool {
	if _, ok := r.Env["HOME"]; ok {
		return false
	}
	return defaultPolicy(r.Policy)
}

// defaultPolicy reports whether p, normalized, is the default policy (what
// an empty policy normalizes to).
func defaultPolicy(p policy.Spec) bool {
	if reflect.DeepEqual(p, policy.Spec{}) {
		return true
	}
	ws := workspaceOf(policy.Spec{})
	if workspaceOf(p) != ws {
		return false
	}
	want, ok := normalDefault()
	got := clonePolicy(p)
	got.Filesystem.Workspace = ws
	if !ok || got.Normalize(ws, "") != nil {
		return false
	}
	return reflect.DeepEqual(compactPolicy(got), want)
}

// normalDefault is the default policy normalized and compacted, as
// defaultPolicy compares it; ok is false if it does not normalize.
var normalDefault = sync.OnceValues(func() (policy.Spec, bool) {
	ws := workspaceOf(policy.Spec{})
	p := policy.Spec{}
	p.Filesystem.Workspace = ws
	if p.Normalize(ws, "") != nil {
		return p, false
	}
	return compactPolicy(p), true
})

// compactPolicy makes p's empty lists and maps nil, so that a policy that
// spells them [] or {} compares equal to one that leaves them out.
func compactPolicy(p policy.Spec) policy.Spec {
	nilEmpty := func(s []string) []string {
		if len(s) == 0 {
			return nil
		}
		return s
	}
	fs := &p.Filesystem
	fs.AllowWrite, fs.DenyRead = nilEmpty(fs.AllowWrite), nilEmpty(fs.DenyRead)
	fs.AllowRead, fs.DenyWrite = nilEmpty(fs.AllowRead), nilEmpty(fs.DenyWrite)
	nw := &p.Network
	nw.AllowedDomains, nw.DeniedDomains = nilEmpty(nw.AllowedDomains), nilEmpty(nw.DeniedDomains)
	nw.AllowedCIDRs, nw.AllowPrivate = nilEmpty(nw.AllowedCIDRs), nilEmpty(nw.AllowPrivate)
	nw.Hosts = nilEmpty(nw.Hosts)
	if len(p.Secrets) == 0 {
		p.Secrets = nil
	}
	p.Env.Pass = nilEmpty(p.Env.Pass)
	if len(p.Env.Set) == 0 {
		p.Env.Set = nil
	}
	return p
}

// takeWarm gives tenant a warm sandbox for r, if one is ready: ok reports
// whether it answered (a sandbox or an error); when it did not, the caller
// starts a sandbox cold.
func (m *Manager) takeWarm(ctx context.Context, tenant string, r CreateRequest) (info Info, ok bool, err error) {
	timeout, err := m.lifetime(r.Timeout, 0)
	if err != nil {
		return Info{}, true, err
	}
	if m.pool.readyCount() == 0 {
		return Info{}, false, nil // no need to check the quota twice
	}
	var (
		l   *live
		row store.Sandbox
		now time.Time
	)
	err = m.withQuota(ctx, tenant, m.cfg.DefaultMemory, func() error {
		if l = m.take(); l == nil {
			return nil
		}
		// From here on the sandbox is this call's: nothing may cancel
		// the store's updates halfway.
		now = time.Now()
		var err error
		row, err = m.reassign(l.id, func(sb *store.Sandbox) {
			sb.Tenant = tenant
			sb.State = store.StateRunning
			sb.Labels = maps.Clone(r.Labels)
			sb.Created = now
			sb.Expires = now.Add(timeout)
			sb.LastActive = now
			sb.IdleTimeout = r.IdleTimeout
		})
		return err
	})
	if l == nil { // the quota refused, or the pool was empty
		return Info{}, err != nil, err
	}
	if err != nil {
		<-m.end(l, "", "recording it failed")
		return Info{}, true, fmt.Errorf("create sandbox %s: %w", l.id, err)
	}
	m.pool.took.Add(1)

	id := l.id
	log := m.log.With("sandbox", id, "tenant", tenant)
	if len(r.Env) > 0 {
		l.client.SetEnv(envEntries(r.Env))
	}
	l.ev = m.newEvents(tenant, id)
	l.ev.append(EventCreated, map[string]any{"expires": row.Expires, "warm": true}, false)
	if err := m.adopt(l, tenant, r.IdleTimeout, now, row.Expires); err != nil {
		<-m.end(l, "", "the daemon is shutting down")
		return Info{}, true, fmt.Errorf("create sandbox %s: %w", id, err)
	}
	l.ev.append(EventStarted, nil, false)
	log.Info("sandbox started", "pid", l.inst.PID(), "expires", row.Expires, "warm", true, "warm_left", m.pool.readyCount())
	return infoOf(row), true, nil
}

// reassign replaces the record of warm sandbox id by the one change makes
// of it (its tenant's) and returns it as the store has it. The store keeps
// a record's tenant for its life, so the warm record is deleted and the
// new one inserted: should the daemon die in between, the sandbox, bound
// to the daemon by its parent-death signal, dies with it, and the next
// daemon removes its directory, which has no record.
func (m *Manager) reassign(id string, change func(*store.Sandbox)) (store.Sandbox, error) {
	ctx := context.Background()
	sb, err := m.st.GetSandbox(ctx, warmTenant, id)
	if err != nil {
		return store.Sandbox{}, err
	}
	change(&sb)
	if err := m.st.DeleteSandbox(ctx, id); err != nil {
		return store.Sandbox{}, err
	}
	if err := m.st.InsertSandbox(ctx, sb); err != nil {
		return store.Sandbox{}, err
	}
	return m.st.GetSandbox(ctx, sb.Tenant, id)
}
