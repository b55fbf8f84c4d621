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

	"github.com/hutch-sandbox/hutch/internal/image"
	"github.com/hutch-sandbox/hutch/internal/metrics"
	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/store"
)

// A warm pool keeps sandboxes of one policy started, their agents
// answering, so that a create with that policy takes one at once instead
// of waiting for a start: Config.Warm's of the default policy, and
// Config.Pools' of others (an E2B template's: its image, workspace and
// network). A create's policy is normalized and compared with each pool's
// (normalPolicy): equal, it takes a sandbox of that pool if one is ready.
//
// A warm sandbox starts exactly as a created one (launch, with the
// request CreateRequest{Policy: the pool's}) and is recorded in the store under warmTenant,
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
	// maxWarmStarts is the most warm sandboxes starting at once, in all
	// of a manager's pools.
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

// MaxWarm bounds the warm sandboxes of a daemon, in all its pools.
const MaxWarm = 1000

// WarmPool is a warm pool of sandboxes of a policy besides the default
// (Config.Pools): an E2B template's, say.
type WarmPool struct {
	// Name names the pool in the log and in metrics: the template's name.
	// Not empty (that is Config.Warm's pool), and unique.
	Name string
	// Size is how many sandboxes it keeps ready (1 to MaxSandboxes).
	Size int
	// Policy is what its sandboxes start with: a create whose policy
	// normalizes to the same takes one. It names no secrets (a warm
	// sandbox has no request to take their values from). An image it
	// starts from must be in the daemon's store when the daemon starts
	// (New fails otherwise), and allowed (Config.AllowImages).
	Policy policy.Spec
}

// livePools are the started pools of every manager of the process, for
// the warm pools' gauges.
var livePools = struct {
	sync.Mutex
	m map[*pool]struct{}
}{m: map[*pool]struct{}{}}

// poolSums is, by pool name ("" for the default policy's, always there),
// the sum of value over the live pools of that name, in every manager.
func poolSums(value func(*pool) float64) map[string]float64 {
	livePools.Lock()
	pools := slices.Collect(maps.Keys(livePools.m))
	livePools.Unlock()
	sums := map[string]float64{"": 0}
	for _, p := range pools {
		sums[p.name] += value(p)
	}
	return sums
}

// poolSamples is poolSums as a gauge's samples, labelled by pool name.
func poolSamples(value func(*pool) float64) ([]metrics.Sample, error) {
	sums := poolSums(value)
	out := make([]metrics.Sample, 0, len(sums))
	for name, v := range sums {
		out = append(out, metrics.Sample{Values: []string{name}, Value: v})
	}
	return out, nil
}

// warmReady is the ready count of the pools named name, in every manager.
func warmReady(name string) int64 {
	return int64(poolSums(func(p *pool) float64 { return float64(p.readyCount()) })[name])
}

// Metrics of the warm pools, in every manager of the process; package api
// adds them to what GET /metrics writes. Their label template is the
// pool's name: "" for the default policy's (--warm N), the template's name
// for the others (--warm NAME=N).
var (
	// WarmSandboxes is the gauge of the warm sandboxes ready to be taken.
	WarmSandboxes = metrics.NewGaugeFunc("hutch_warm_sandboxes",
		"Warm sandboxes started and ready to be taken by a create, by pool (template; \"\" for the default policy's).", []string{"template"},
		func() ([]metrics.Sample, error) {
			return poolSamples(func(p *pool) float64 { return float64(p.readyCount()) })
		})
	// WarmMemory is the gauge of the memory the ready warm sandboxes
	// hold, idle: each one's as its usage reads it (its cgroup's charge;
	// a microVM's, QEMU's resident memory).
	WarmMemory = metrics.NewGaugeFunc("hutch_warm_memory_bytes",
		"Memory held by the warm sandboxes ready to be taken, idle, by pool (template; \"\" for the default policy's), in bytes.", []string{"template"},
		func() ([]metrics.Sample, error) {
			return poolSamples(func(p *pool) float64 { return float64(p.memory()) })
		})
	// WarmCreates counts the creates whose policy is a pool's, by pool
	// and result: "hit" (it took a warm sandbox) or "miss" (none was
	// ready, or none still answered: it started cold).
	WarmCreates = metrics.NewCounter("hutch_warm_creates_total",
		"Creates whose policy is a warm pool's, by pool (template) and result: hit (took a warm sandbox) or miss (started cold).", "template", "result")
)

// memory is the memory p's ready warm sandboxes hold, as far as their
// usage can be read.
func (p *pool) memory() int64 {
	p.mu.Lock()
	var readers []usageReader
	for _, w := range p.ready {
		if r, ok := w.l.inst.(usageReader); ok {
			readers = append(readers, r)
		}
	}
	p.mu.Unlock()
	var n int64
	for _, r := range readers {
		if u, err := r.Usage(); err == nil {
			n += u.Memory
		}
	}
	return n
}

// pool is a warm pool of a manager.
type pool struct {
	name   string      // "" for Config.Warm's
	size   int         // the warm sandboxes it keeps ready
	policy policy.Spec // what its sandboxes start with
	key    policy.Spec // policy, normalized (normalPolicy)
	ref    string      // the image its sandboxes start from; "" for the host's root

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

// newPool checks the pool wp's policy — as a create's, and its image
// present in the store — and makes the pool, not started.
func (m *Manager) newPool(wp WarmPool) (*pool, error) {
	key, ok := normalPolicy(wp.Policy, m.cfg.DefaultTier)
	if !ok {
		return nil, fmt.Errorf("warm pool %s: its policy does not normalize: %w", wp.Name, ErrInvalid)
	}
	tier := wp.Policy.Tier
	if tier == "" {
		tier = m.cfg.DefaultTier
	}
	p := &pool{name: wp.Name, size: wp.Size, policy: clonePolicy(wp.Policy), key: key}
	p.ref, _ = wp.Policy.Image()
	// A tier without images: its sandboxes would fail to start over and
	// over.
	if err := tierRefuses(tier, lackImage); p.ref != "" && err != nil {
		if wp.Name == "" {
			return nil, fmt.Errorf("warm sandboxes of the default policy (--warm): %w", err)
		}
		return nil, fmt.Errorf("warm pool %s: %w", wp.Name, err)
	}
	if wp.Name != "" {
		// The default policy needs no check; the others' start with
		// their first warm sandbox otherwise, failing over and over.
		if _, _, err := m.prepare(CreateRequest{Policy: wp.Policy}, workspaceOf(wp.Policy)); err != nil {
			return nil, fmt.Errorf("warm pool %s: %w", wp.Name, err)
		}
	}
	return p, nil
}

// start starts p's filler.
func (m *Manager) start(p *pool) {
	ctx, cancel := context.WithCancel(context.Background())
	p.kickc = make(chan struct{}, 1)
	p.stopc = make(chan struct{})
	p.ctx, p.cancel = ctx, cancel
	m.log.Info("warm pool", "template", p.name, "size", p.size, "image", p.ref)
	livePools.Lock()
	livePools.m[p] = struct{}{}
	livePools.Unlock()
	p.wg.Add(1)
	go m.fill(p)
	p.kick()
}

// kickPools wakes every pool's filler: a start slot was freed.
func (m *Manager) kickPools() {
	for _, p := range m.pools {
		p.kick()
	}
}

// kick wakes the filler.
func (p *pool) kick() {
	select {
	case p.kickc <- struct{}{}:
	default:
	}
}

// fill starts warm sandboxes whenever p is short, at most maxWarmStarts
// at once in all pools, until halt.
func (m *Manager) fill(p *pool) {
	defer p.wg.Done()
	for {
		var (
			retry <-chan time.Time
			t     *time.Timer
		)
		if wait := m.startSome(p); wait > 0 {
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

// startSome starts as many warm sandboxes as p lacks and may start now
// (a slot of m.warmSlots free); after a failure it starts none before the
// back-off passed and returns how long that is.
func (m *Manager) startSome(p *pool) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.halted {
		return 0
	}
	if wait := time.Until(p.retryAt); wait > 0 {
		return wait
	}
	for len(p.ready)+p.starting < p.size {
		select {
		case m.warmSlots <- struct{}{}:
		default:
			return 0 // the pool whose start ends next kicks this one
		}
		p.starting++
		p.wg.Add(1)
		go m.warmOne(p)
	}
	return 0
}

// warmOne starts one warm sandbox and adds it to p.
func (m *Manager) warmOne(p *pool) {
	defer p.wg.Done()
	defer m.kickPools()
	l, err := m.startWarm(p)
	<-m.warmSlots
	p.mu.Lock()
	p.starting--
	if err != nil {
		halted := p.halted
		p.failures++
		wait := min(warmBackoffMin<<min(p.failures-1, 16), warmBackoffMax)
		p.retryAt = time.Now().Add(wait)
		p.mu.Unlock()
		if !halted {
			m.log.Warn("warm sandbox failed to start", "template", p.name, "err", err, "retry_in", wait)
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
	p.mu.Unlock()
	go m.watchWarm(p, w)
	m.log.Info("warm sandbox ready", "sandbox", l.id, "template", p.name, "warm", n, "size", p.size)
}

// startWarm starts a sandbox of p's policy: the same preparation and
// start as Create's, recorded under warmTenant.
func (m *Manager) startWarm(p *pool) (*live, error) {
	ctx := p.ctx
	spec, _, err := m.prepare(CreateRequest{Policy: p.policy}, workspaceOf(p.policy))
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
	l, err := m.launch(ctx, id, dir, spec, environ(spec.Env, nil), nil, false, log, nil, nil, nil, nil)
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
	if err := m.interpreterReady(ctx, l); err != nil {
		<-m.end(l, "", "its code interpreter's kernels did not start")
		return nil, fmt.Errorf("warm sandbox %s: %w", id, err)
	}
	log.Debug("warm sandbox started", "pid", l.inst.PID())
	return l, nil
}

// watchWarm discards w if its sandbox ends while it waits in p.
func (m *Manager) watchWarm(p *pool, w *warm) {
	var why string
	select {
	case <-w.taken:
		return
	case <-w.l.inst.Done():
		why = "its PID 1 ended while warm"
	case <-w.l.client.Done():
		why = fmt.Sprintf("its agent connection ended while warm: %v", w.l.client.Err())
	}
	if !p.remove(w) {
		return // taken meanwhile (the taker sees it dead), or halted
	}
	m.log.Warn("warm sandbox discarded", "sandbox", w.l.id, "template", p.name, "reason", why)
	m.end(w.l, "", why)
	p.kick()
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
	return true
}

// take takes the oldest warm sandbox of p whose agent still answers, and
// whose image is still the one p's image name gives in the daemon's store
// (a remote runtime's sandbox: any, its nodes pull it), out of p; nil if
// there is none. The others it meets are discarded. Two callers never get
// the same sandbox.
func (m *Manager) take(p *pool) *live {
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
		close(w.taken)
		p.mu.Unlock()
		why := ""
		if err := alive(w.l); err != nil {
			why = fmt.Sprintf("it ended while warm: %v", err)
		} else if m.remote(w.l.tier) != nil {
			// Its image is the cluster's, pulled by the node; the
			// daemon's store has no say.
		} else if err := m.sameImage(p.ref, w.l.image); err != nil {
			why = err.Error()
		}
		if why != "" {
			m.log.Warn("warm sandbox discarded", "sandbox", w.l.id, "template", p.name, "reason", why)
			m.end(w.l, "", why)
			continue
		}
		return w.l
	}
}

// sameImage checks that the image name ref ("" for the host's root) still
// names the image of digest in the store.
func (m *Manager) sameImage(ref, digest string) error {
	if ref == "" {
		return nil
	}
	img, err := m.images.Get(ref)
	switch {
	case err != nil:
		return fmt.Errorf("its image %s is no longer in the store: %v", ref, err)
	case img.Digest != digest:
		return fmt.Errorf("its image %s is now %s, not %s", ref, img.Digest, digest)
	}
	return nil
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
	livePools.Lock()
	delete(livePools.m, p)
	livePools.Unlock()
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
	p.ready = nil
	return out
}

// readyCount is the number of warm sandboxes ready.
func (p *pool) readyCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.ready)
}

// warmPool is the pool of m whose sandboxes can serve r, nil if none:
// r's policy normalizes to the pool's, and its environment does not set
// HOME (which decides, at start, whether the sandbox gets a private
// home), nor, for a pool of an image, PATH (a cold sandbox of an image
// keeps the image's PATH over the request's, where a warm one's agent
// would put the request's over it).
func (m *Manager) warmPool(r CreateRequest) *pool {
	if len(m.pools) == 0 {
		return nil
	}
	if _, ok := r.Env["HOME"]; ok {
		return nil
	}
	_, setsPath := r.Env["PATH"]
	if reflect.DeepEqual(r.Policy, policy.Spec{}) {
		// The common case, without normalizing.
		for _, p := range m.pools {
			if p.name == "" {
				return p
			}
		}
	}
	key, ok := normalPolicy(r.Policy, m.cfg.DefaultTier)
	if !ok {
		return nil
	}
	for _, p := range m.pools {
		if reflect.DeepEqual(key, p.key) && !(setsPath && p.ref != "") {
			return p
		}
	}
	return nil
}

// normalPolicy is p normalized and compacted, as warm pools compare
// policies: its workspace set (DefaultWorkspace when it names none), its
// tier (tier, the daemon's default, when it names none), an image's name
// in its normal form (docker.io/library/…); ok is false if p does not
// normalize.
func normalPolicy(p policy.Spec, tier string) (policy.Spec, bool) {
	ws := workspaceOf(p)
	got := clonePolicy(p)
	got.Filesystem.Workspace = ws
	if got.Tier == "" {
		got.Tier = tier
	}
	if got.Normalize(ws, "") != nil {
		return got, false
	}
	if ref, ok := got.Image(); ok {
		name, err := image.Normalize(ref)
		if err != nil {
			return got, false
		}
		got.Root = policy.ImagePrefix + name
	}
	return compactPolicy(got), true
}

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

// takeWarm gives tenant a warm sandbox of p for r, if one is ready: ok
// reports whether it answered (a sandbox or an error); when it did not,
// the caller starts a sandbox cold.
func (m *Manager) takeWarm(ctx context.Context, p *pool, tenant string, r CreateRequest) (info Info, ok bool, err error) {
	timeout, err := m.lifetime(r.Timeout, p.policy.Resources.Timeout)
	if err != nil {
		return Info{}, true, err
	}
	if p.readyCount() == 0 {
		WarmCreates.With(p.name, "miss").Inc()
		return Info{}, false, nil // no need to check the quota twice
	}
	var (
		l   *live
		row store.Sandbox
		now time.Time
	)
	memory := p.policy.Resources.MemoryBytes
	if memory == 0 {
		memory = m.cfg.DefaultMemory
	}
	err = m.withQuota(ctx, tenant, memory, func() error {
		if l = m.take(p); l == nil {
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
			sb.Notes = maps.Clone(r.Notes)
			sb.Created = now
			sb.Expires = now.Add(timeout)
			sb.LastActive = now
			sb.IdleTimeout = r.IdleTimeout
		})
		return err
	})
	if l == nil { // the quota refused, or the pool was empty
		if err == nil {
			WarmCreates.With(p.name, "miss").Inc()
		}
		return Info{}, err != nil, err
	}
	if err != nil {
		<-m.end(l, "", "recording it failed")
		return Info{}, true, fmt.Errorf("create sandbox %s: %w", l.id, err)
	}
	p.took.Add(1)
	WarmCreates.With(p.name, "hit").Inc()
	SandboxesCreated.With(row.Tier).Inc()

	id := l.id
	log := m.log.With("sandbox", id, "tenant", tenant)
	if len(r.Env) > 0 {
		l.execEnv = envEntries(r.Env)
		l.client.SetEnv(l.execEnv)
		if err := m.interpreterEnv(ctx, l, r.Env); err != nil {
			<-m.end(l, "", "its code interpreter did not take the create's environment")
			return Info{}, true, fmt.Errorf("create sandbox %s: %w", l.id, err)
		}
	}
	l.ev = m.newEvents(tenant, id)
	l.ev.append(EventCreated, map[string]any{"expires": row.Expires, "tier": row.Tier, "warm": true}, false)
	l.life, l.lifetime = r.Lifecycle, timeout
	m.keepLife(l)
	if err := m.adopt(l, tenant, r.IdleTimeout, now, row.Expires); err != nil {
		<-m.end(l, "", "the daemon is shutting down")
		return Info{}, true, fmt.Errorf("create sandbox %s: %w", id, err)
	}
	l.ev.append(EventStarted, nil, false)
	log.Info("sandbox started", "pid", l.inst.PID(), "expires", row.Expires, "image", l.image, "tier", row.Tier, "warm", true, "template", p.name, "warm_left", p.readyCount())
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
