package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hutch-sandbox/hutch/internal/agent"
	"github.com/hutch-sandbox/hutch/internal/approve"
	"github.com/hutch-sandbox/hutch/internal/changes"
	"github.com/hutch-sandbox/hutch/internal/egress"
	"github.com/hutch-sandbox/hutch/internal/image"
	"github.com/hutch-sandbox/hutch/internal/interp"
	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/store"
)

// Defaults of Config, and the bounds of the manager's own waits.
const (
	defaultTimeout      = 5 * time.Minute
	defaultMaxTimeout   = 24 * time.Hour
	defaultMaxSandboxes = 100

	// reapEvery is how often the reaper looks for sandboxes past their
	// timeout or idle timeout.
	reapEvery = time.Second
	// flushEvery bounds how often a sandbox's last activity is written to
	// the store; in between it is kept in memory only.
	flushEvery = 5 * time.Second
	// readyTimeout bounds the wait for a new sandbox's agent to answer:
	// against an agent that hangs, not a slow one (a pod's agent on a
	// node busy starting dozens of others answered after more than 10 s).
	readyTimeout = time.Minute
	// destroyTimeout bounds how long Destroy waits for a sandbox to end.
	destroyTimeout = 30 * time.Second
	// closeTimeout bounds how long Close waits for every sandbox to end.
	closeTimeout = time.Minute
	// killTimeout bounds the wait for a leftover sandbox of a previous
	// daemon to end once killed.
	killTimeout = 10 * time.Second
	// maxTeardowns bounds the sandboxes being torn down at once.
	maxTeardowns = 16
)

// Manager keeps the sandboxes of every tenant. Safe for concurrent use.
type Manager struct {
	cfg    Config // defaults applied, StateDir absolute
	log    *slog.Logger
	st     store.Backend
	images *image.Store // the images sandboxes may start from (hutch image, same state dir)
	lock   *os.File     // the state directory's lock, held while the manager lives
	sbRoot string       // <StateDir>/sandboxes
	// closeStore: st is state.db, which the manager opened (not
	// Config.Store), and closes.
	closeStore bool

	// snapRoot is the snapshot layer store, <StateDir>/snapshots
	// (snapshot.go); snapMu makes snapshots one at a time, refMu guards
	// layerRefs, how many running sandboxes stack each layer, by digest;
	// erofsMu guards the EROFS roots of snapshots (snapshotEROFS, which
	// holds snapMu too, and collectEROFS), taken after snapMu.
	snapRoot  string
	snapMu    sync.Mutex
	refMu     sync.Mutex
	layerRefs map[string]int
	erofsMu   sync.Mutex

	// changes are the change sets of review workspaces (review.go),
	// <StateDir>/changes; reviewMu makes a quota check and a set's
	// creation, an apply and a discard one at a time.
	changes  *changes.Store
	reviewMu sync.Mutex

	// quotaMu makes a tenant's quota check and the insertion of the new
	// sandbox's row one step, so that concurrent creates cannot overrun it.
	quotaMu sync.Mutex

	// reattachMu makes taking a remote sandbox again one at a time
	// (remote.go), so that a request and another take it once.
	reattachMu sync.Mutex
	// replicasDone is closed once watchReplicas returned; pruned is
	// when it last pruned what is left of replicas gone (its goroutine's).
	replicasDone chan struct{}
	pruned       time.Time

	// leaving makes Close leave the sandboxes that outlive the daemon
	// running (LeaveRunning).
	leaving atomic.Bool

	mu     sync.Mutex
	closed bool
	live   map[string]*live // the running sandboxes of this daemon
	// dormant are the sandboxes paused to disk (checkpoint.go): no
	// process, a record, a checkpoint.
	dormant map[string]*dormant
	// reviewing maps the change sets whose sandboxes run to the upper
	// directory they are written in.
	reviewing map[string]string
	// setOf maps each sandbox with a change set to it, so that answers
	// name it without reading the change-set store.
	setOf map[string]string
	// applying maps the ended sandboxes whose change sets are being
	// applied to their tenants, for the questions of their file rules
	// (approvals.go).
	applying map[string]string
	// ops counts the calls in progress; it is only added to under mu
	// while closed is false, so that Close can wait for them.
	ops sync.WaitGroup

	// reapMu makes rounds of the reaper one at a time; it guards the
	// flush fields of live.
	reapMu sync.Mutex

	// evMu guards events, the event logs of the sandboxes that run or
	// ended recently.
	evMu   sync.Mutex
	events map[string]*eventLog

	// usageMu guards usage, the samples of the running sandboxes
	// (usage.go), by id.
	usageMu sync.Mutex
	usage   map[string]*usageRing

	// pools keep the warm sandboxes (pool.go): Config.Warm's first, if
	// any, then Config.Pools'.
	pools []*pool
	// warmSlots is a semaphore of maxWarmStarts, shared by the pools.
	warmSlots chan struct{}

	// broker holds the questions of the sandboxes' approval gates
	// (approvals.go); Config.Audit gets their decisions.
	broker *approve.Broker

	teardowns  chan struct{} // a semaphore of maxTeardowns
	exports    chan struct{} // a semaphore of maxExports (export.go)
	stop       chan struct{} // closed to stop the reaper
	reaperDone chan struct{} // closed once the reaper returned
}

// endReasoner is an instance that can say why it ended on its own (the
// gVisor tier's: the host's OOM killer ends a gVisor sandbox whole).
type endReasoner interface {
	// EndReason says why, "" when it does not know; oom is set when the
	// OOM killer ended it.
	EndReason() (why string, oom bool)
}

// instance is a started sandbox (a *sandbox.Sandbox on Linux).
type instance interface {
	PID() int
	Done() <-chan struct{}
	Close() error
	// Freeze stops every process of the sandbox until Thaw.
	Freeze() error
	// Thaw lets the processes Freeze stopped go on.
	Thaw() error
}

// live is a sandbox this daemon runs, from the moment its agent answered
// until it has been torn down.
type live struct {
	id, tenant string
	dir        string // <StateDir>/sandboxes/<id>, removed at the end
	inst       instance
	client     *agent.Client
	proxy      *egress.Proxy // its egress proxy; nil unless the network mode is proxy
	ev         *eventLog
	idle       time.Duration
	// release lets go of the image the sandbox started from (its layers
	// held in use); nil without one.
	release func()
	// image is the digest of that image ("" for the host's root).
	image string
	// resources are its policy's limits.
	resources policy.Resources
	// tier is the isolation tier it runs in, root its policy's root.
	tier, root string
	// keep is where its root layer's tmpfs is attached too (namespace
	// tier), for snapshots; "" when it is not.
	keep string
	// snapLayers are the layers of the snapshot it started from (none
	// without one), snapSize their size.
	snapLayers []string
	snapSize   int64
	// imageDirs are its image's layer directories and snapDirs those of
	// the snapshot stacked over them, bottom first (over an image only).
	imageDirs, snapDirs []string
	// What a sandbox paused to disk needs to start again (checkpoint.go):
	// whether its policy is the operator's (its proxy's rules), whether it
	// has secrets (which are in the daemon's memory only, so it is paused
	// in memory), and the environment and user its client adds to every
	// exec.
	operator, secrets bool
	// volumes: host directories are shown in it (CreateRequest.Volumes),
	// so that its snapshots keep its files only: its memory holds the
	// volumes' mounts, which a copy of it is not given.
	volumes bool
	execEnv []string
	// gate applies its policy's approvals (approvals.go); nil without
	// any.
	gate *approve.Gate
	// bootEnv is its agent's environment at its start, for a start
	// afresh of it paused to disk (ResumeOptions).
	bootEnv  []string
	execUser *agent.Credential
	// interp: its root has Jupyter kernels, and so hutch's code
	// interpreter (interp.go).
	interp bool
	// interpClient speaks to its interpreter through interpAgent, the
	// agent client it was made with (under Manager.mu).
	interpClient *interp.Client
	interpAgent  *agent.Client
	// unwatch stops watch, and watched is closed once it returned (for a
	// pause to disk, which ends the processes on purpose); both under
	// pauseMu once the sandbox runs.
	unwatch, watched chan struct{}

	lastActive atomic.Int64 // Unix nanoseconds of the last Agent call
	flushedAt  time.Time    // when lastActive was last written (reapMu)
	oomKills   int64        // the OOM kills recorded so far (reapMu)
	flushed    int64        // the value written then (reapMu)

	// Guarded by Manager.mu.
	expires  time.Time
	stopping bool
	paused   bool // frozen by Pause, or being frozen
	// filesOnly: paused without its memory (PauseOptions), once paused.
	filesOnly bool
	// life is what its timeout does (CreateRequest.Lifecycle), lifetime
	// the timeout it was created with; autoPaused: paused on its timeout
	// (relive gives it its lifetime again on resume); timeoutBusy: the
	// reaper's onTimeout runs for it.
	life                    Lifecycle
	lifetime                time.Duration
	autoPaused, timeoutBusy bool

	// pauseMu makes Pause and Resume of the sandbox one at a time, and
	// teardown waits for them; a pause to disk replaces client under it,
	// and under Manager.mu.
	pauseMu sync.Mutex

	once  sync.Once
	ended chan struct{} // closed once torn down
}

// Images is the daemon's image store (below its state directory), which
// sandboxes start from.
func (m *Manager) Images() *image.Store { return m.images }

// New opens the daemon's state in cfg.StateDir and cleans up whatever a
// previous daemon left behind (sandboxes whose processes are gone).
func New(cfg Config, log *slog.Logger) (*Manager, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := cfg.withDefaults(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(cfg.StateDir), 0o755); err != nil {
		return nil, fmt.Errorf("state directory: %w", err)
	}
	if err := private(cfg.StateDir); err != nil {
		return nil, err
	}
	lock, err := lockStateDir(cfg.StateDir)
	if err != nil {
		return nil, err
	}
	sbRoot := filepath.Join(cfg.StateDir, "sandboxes")
	if err := private(sbRoot); err != nil {
		lock.Close()
		return nil, err
	}
	st, closeStore := cfg.Store, false
	if st == nil {
		if st, err = store.Open(filepath.Join(cfg.StateDir, "state.db")); err != nil {
			lock.Close()
			return nil, err
		}
		closeStore = true
	}
	// closeAll releases what New took when it fails.
	closeAll := func() {
		if closeStore {
			st.Close()
		}
		lock.Close()
	}
	images, err := image.Open(cfg.StateDir)
	if err != nil {
		closeAll()
		return nil, err
	}
	m := &Manager{
		cfg:          cfg,
		log:          log,
		st:           st,
		closeStore:   closeStore,
		images:       images,
		lock:         lock,
		sbRoot:       sbRoot,
		live:         make(map[string]*live),
		dormant:      make(map[string]*dormant),
		usage:        make(map[string]*usageRing),
		reviewing:    make(map[string]string),
		setOf:        make(map[string]string),
		changes:      changes.NewStore(filepath.Join(cfg.StateDir, "changes")),
		teardowns:    make(chan struct{}, maxTeardowns),
		exports:      make(chan struct{}, maxExports),
		stop:         make(chan struct{}),
		reaperDone:   make(chan struct{}),
		replicasDone: make(chan struct{}),
		warmSlots:    make(chan struct{}, maxWarmStarts),
	}
	m.broker = m.newBroker()
	if err := m.cleanupLeftovers(context.Background()); err != nil {
		closeAll()
		return nil, err
	}
	if err := m.openSnapshots(context.Background()); err != nil {
		closeAll()
		return nil, fmt.Errorf("snapshots: %w", err)
	}
	if sets, err := m.changes.List(); err == nil {
		for _, s := range sets {
			if sb := s.Meta().Sandbox; sb != "" {
				m.setOf[sb] = s.ID()
			}
		}
	}
	go closedPaths() // the first create need not wait for the whole scan
	pools := cfg.Pools
	if cfg.Warm > 0 {
		pools = append([]WarmPool{{Size: cfg.Warm}}, pools...)
	}
	for _, wp := range pools {
		p, err := m.newPool(wp)
		if err != nil {
			closeAll()
			return nil, err
		}
		m.pools = append(m.pools, p)
	}
	go m.reaper()
	if m.self() != "" {
		go m.watchReplicas()
	} else {
		close(m.replicasDone)
	}
	for _, p := range m.pools {
		m.start(p)
	}
	return m, nil
}

// private makes sure dir exists and that only root may enter it (mode
// 0700, owned by root): nothing of the daemon's is for anyone else, and the
// sandboxes, whose roots are their own layers, never reach it.
func private(dir string) error {
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("state directory: %w", err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("state directory: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("state directory: %s is not a directory: %w", dir, ErrInvalid)
	}
	if fi.Mode().Perm() != 0o700 {
		if err := os.Chmod(dir, 0o700); err != nil {
			return fmt.Errorf("state directory: %w", err)
		}
	}
	return nil
}

// withDefaults fills in c's zero fields and checks the rest.
func (c *Config) withDefaults() error {
	if c.StateDir == "" {
		return fmt.Errorf("daemon config: no state directory: %w", ErrInvalid)
	}
	abs, err := filepath.Abs(c.StateDir)
	if err != nil {
		return fmt.Errorf("daemon config: state directory: %w", err)
	}
	c.StateDir = abs
	if c.Replicas != nil && c.Store == nil {
		return fmt.Errorf("daemon config: replicas share a store: none given: %w", ErrInvalid)
	}
	if c.DefaultTimeout == 0 {
		c.DefaultTimeout = defaultTimeout
	}
	if c.MaxTimeout == 0 {
		c.MaxTimeout = defaultMaxTimeout
	}
	if c.MaxSandboxes == 0 {
		c.MaxSandboxes = defaultMaxSandboxes
	}
	if c.MetricsInterval == 0 {
		c.MetricsInterval = defaultMetricsInterval
	}
	if c.MetricsInterval < reapEvery || c.MetricsInterval > metricsWindow {
		return fmt.Errorf("daemon config: metrics interval %s: must be between %s and %s: %w", c.MetricsInterval, reapEvery, metricsWindow, ErrInvalid)
	}
	if c.MaxSnapshots == 0 {
		c.MaxSnapshots = defaultMaxSnapshots
	}
	if c.MaxSnapshotBytes == 0 {
		c.MaxSnapshotBytes = defaultMaxSnapshotBytes
	}
	if c.MaxChangeSets == 0 {
		c.MaxChangeSets = defaultMaxSnapshots
	}
	for name, ws := range c.ReviewWorkspaces {
		if !validWorkspaceName(name) || !filepath.IsAbs(ws.Dir) {
			return fmt.Errorf("daemon config: review workspace %q=%q: want a name of letters, digits, '-', '_' and '.' and an absolute directory: %w", name, ws.Dir, ErrInvalid)
		}
		if rel, err := filepath.Rel(c.StateDir, ws.Dir); err == nil && !strings.HasPrefix(rel, "..") {
			return fmt.Errorf("daemon config: review workspace %q: %s is in the daemon's state directory: %w", name, ws.Dir, ErrInvalid)
		}
	}
	if c.MaxSnapshots < 0 || c.MaxSnapshotBytes < 0 {
		return fmt.Errorf("daemon config: negative snapshot quota: %w", ErrInvalid)
	}
	if c.DefaultDisk == 0 {
		c.DefaultDisk = defaultDisk
	}
	if c.MaxDisk == 0 {
		c.MaxDisk = max(defaultMaxDisk, c.DefaultDisk)
	}
	if c.DefaultMemory == 0 {
		c.DefaultMemory = defaultMemory
		if c.TenantMemory > 0 {
			c.DefaultMemory = min(c.DefaultMemory, c.TenantMemory)
		}
	}
	if c.MaxMemory == 0 {
		c.MaxMemory = max(defaultMaxMemory, c.DefaultMemory)
	}
	if c.MaxTmp == 0 {
		c.MaxTmp = defaultMaxTmp
	}
	if c.ApprovalTimeout == 0 {
		c.ApprovalTimeout = approve.DefaultTimeout
	}
	switch {
	case c.ApprovalTimeout < 0:
		return fmt.Errorf("daemon config: negative approval timeout %s: %w", c.ApprovalTimeout, ErrInvalid)
	case c.DefaultTimeout < 0 || c.MaxTimeout < 0 || c.MaxSandboxes < 0:
		return fmt.Errorf("daemon config: negative timeout or sandbox count: %w", ErrInvalid)
	case c.Warm < 0 || c.Warm > MaxWarm:
		return fmt.Errorf("daemon config: %d warm sandboxes is not between 0 and %d: %w", c.Warm, MaxWarm, ErrInvalid)
	case c.Warm > c.MaxSandboxes:
		return fmt.Errorf("daemon config: %d warm sandboxes exceed the %d sandboxes a tenant may have: %w", c.Warm, c.MaxSandboxes, ErrInvalid)
	case c.TenantMemory < 0 || c.DefaultMemory < 0 || c.MaxMemory < 0:
		return fmt.Errorf("daemon config: negative memory: %w", ErrInvalid)
	case c.DefaultMemory < policy.MinMemoryBytes || c.DefaultMemory > c.MaxMemory:
		return fmt.Errorf("daemon config: default memory %s is not between %s and the maximum %s: %w",
			policy.FormatSize(c.DefaultMemory), policy.FormatSize(policy.MinMemoryBytes), policy.FormatSize(c.MaxMemory), ErrInvalid)
	case c.MaxTmp < policy.MinTmpBytes:
		return fmt.Errorf("daemon config: maximum tmp size %s is below the minimum of %s: %w", policy.FormatSize(c.MaxTmp), policy.FormatSize(policy.MinTmpBytes), ErrInvalid)
	case c.TenantMemory > 0 && c.DefaultMemory > c.TenantMemory:
		return fmt.Errorf("daemon config: default memory %s exceeds a tenant's %s: %w", policy.FormatSize(c.DefaultMemory), policy.FormatSize(c.TenantMemory), ErrInvalid)
	case c.DefaultDisk < policy.MinDiskBytes || c.DefaultDisk > c.MaxDisk:
		return fmt.Errorf("daemon config: default disk %s is not between %s and the maximum %s: %w",
			policy.FormatSize(c.DefaultDisk), policy.FormatSize(policy.MinDiskBytes), policy.FormatSize(c.MaxDisk), ErrInvalid)
	case slices.ContainsFunc(c.AllowPrivate, func(p netip.Prefix) bool { return !p.IsValid() || p != p.Masked() }):
		return fmt.Errorf("daemon config: allow-private: want valid prefixes without host bits, got %v: %w", c.AllowPrivate, ErrInvalid)
	case c.DefaultTimeout > c.MaxTimeout:
		return fmt.Errorf("daemon config: default timeout %s exceeds the maximum %s: %w", c.DefaultTimeout, c.MaxTimeout, ErrInvalid)
	}
	if err := c.checkTiers(); err != nil {
		return err
	}
	return c.checkPools()
}

// checkPools checks c.Pools: named, each once, of 1 to MaxSandboxes
// sandboxes, at most MaxWarm with Warm's, and without secrets.
func (c *Config) checkPools() error {
	total := c.Warm
	seen := map[string]bool{}
	for _, p := range c.Pools {
		switch {
		case p.Name == "":
			return fmt.Errorf("daemon config: a warm pool without a name: %w", ErrInvalid)
		case seen[p.Name]:
			return fmt.Errorf("daemon config: warm pool %s: given twice: %w", p.Name, ErrInvalid)
		case p.Size < 1 || p.Size > c.MaxSandboxes:
			return fmt.Errorf("daemon config: warm pool %s: %d warm sandboxes is not between 1 and the %d sandboxes a tenant may have: %w", p.Name, p.Size, c.MaxSandboxes, ErrInvalid)
		case len(p.Policy.Secrets) > 0:
			return fmt.Errorf("daemon config: warm pool %s: a warm sandbox's policy names no secrets: %w", p.Name, ErrInvalid)
		}
		seen[p.Name] = true
		total += p.Size
	}
	if total > MaxWarm {
		return fmt.Errorf("daemon config: %d warm sandboxes in all, more than %d: %w", total, MaxWarm, ErrInvalid)
	}
	return nil
}

// Close destroys every sandbox but those paused to disk, which a daemon
// started later on the same state directory resumes, and those of a
// remote runtime (a cluster's pods), which run on for the next daemon of
// the same name to take again (reattach) — and, after LeaveRunning, those
// of this machine that can outlive the daemon (readopt.go) — and closes
// the store.
func (m *Manager) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return errClosed()
	}
	m.closed = true
	m.mu.Unlock()

	close(m.stop)
	<-m.reaperDone
	<-m.replicasDone
	var warm []*live
	for _, p := range m.pools {
		warm = append(warm, p.halt()...)
	}
	m.ops.Wait()

	m.mu.Lock()
	ls := append(slices.Collect(maps.Values(m.live)), warm...)
	m.mu.Unlock()
	var ended []<-chan struct{}
	for _, l := range ls {
		m.mu.Lock()
		stopping := l.stopping // ending already: waited for below
		// A sandbox paused in memory is not taken again (the next daemon
		// would end it): it ends here.
		leave := m.leaving.Load() && !l.paused && isLasting(l.dir)
		m.mu.Unlock()
		if !stopping && (m.remote(l.tier) != nil || leave) && l.tenant != warmTenant {
			// It runs on without the daemon: the next one takes it.
			m.letGo(l)
			continue
		}
		why := "the daemon is shutting down"
		if _, again := m.cfg.Runtimes[l.tier].(reattacher); m.leaving.Load() && !again && m.remote(l.tier) == nil {
			// Told to leave its sandboxes running: this one cannot be.
			why += fmt.Sprintf(" (a sandbox of tier %s does not outlive it in this version)", l.tier)
		}
		ended = append(ended, m.end(l, "", why))
	}
	deadline := time.NewTimer(closeTimeout)
	defer deadline.Stop()
	var errs []error
wait:
	for _, c := range ended {
		select {
		case <-c:
		case <-deadline.C:
			errs = append(errs, fmt.Errorf("close: sandboxes did not end within %s", closeTimeout))
			break wait
		}
	}
	if m.closeStore {
		errs = append(errs, m.st.Close())
	}
	errs = append(errs, m.lock.Close())
	return errors.Join(errs...)
}

// Store is the daemon's state (tokens).
func (m *Manager) Store() store.Backend { return m.st }

// errClosed is the error of every call once Close was called.
func errClosed() error {
	return fmt.Errorf("hutch serve is shutting down: %w", ErrUnavailable)
}

// enter counts a call in progress, or fails once Close was called; leave
// ends it.
func (m *Manager) enter() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return errClosed()
	}
	m.ops.Add(1)
	return nil
}

func (m *Manager) leave() { m.ops.Done() }

// Get describes one of tenant's sandboxes ("" tenant: any).
func (m *Manager) Get(ctx context.Context, tenant, id string) (Info, error) {
	if err := m.enter(); err != nil {
		return Info{}, err
	}
	defer m.leave()
	sb, err := m.row(ctx, tenant, id)
	if err != nil {
		return Info{}, err
	}
	out := []Info{infoOf(sb)}
	m.withChangeSets(out)
	return out[0], nil
}

// List lists tenant's sandboxes that have all of labels (and the state,
// when not empty).
func (m *Manager) List(ctx context.Context, tenant string, labels map[string]string, state string) ([]Info, error) {
	if err := m.enter(); err != nil {
		return nil, err
	}
	defer m.leave()
	switch state {
	case "", store.StateStarting, store.StateRunning, store.StatePaused, store.StateStopping, store.StateStopped:
	default:
		return nil, fmt.Errorf("list sandboxes: unknown state %q: %w", state, ErrInvalid)
	}
	rows, err := m.st.ListSandboxes(ctx, store.Filter{Tenant: tenant, State: state, Labels: labels})
	if err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	out := make([]Info, 0, len(rows))
	for _, sb := range rows {
		if (state == "" && sb.State == store.StateStopped) || sb.Tenant == warmTenant {
			continue
		}
		out = append(out, infoOf(sb))
	}
	m.withChangeSets(out)
	return out, nil
}

// Destroy ends a sandbox and removes everything it had.
func (m *Manager) Destroy(ctx context.Context, tenant, id string) error {
	if err := m.enter(); err != nil {
		return err
	}
	defer m.leave()
	if ok, err := m.destroyDormant(ctx, tenant, id); ok {
		return err
	}
	l, err := m.running(ctx, tenant, id)
	if err != nil {
		return err
	}
	t := time.NewTimer(destroyTimeout)
	defer t.Stop()
	select {
	case <-m.end(l, EventDestroyed, "destroyed"):
		return nil
	case <-ctx.Done():
		return fmt.Errorf("sandbox %s: destroy: %w", id, ctx.Err())
	case <-t.C:
		return fmt.Errorf("sandbox %s: destroy: it did not end within %s", id, destroyTimeout)
	}
}

// Extend sets the sandbox to expire timeout from now (at most MaxTimeout).
func (m *Manager) Extend(ctx context.Context, tenant, id string, timeout time.Duration) (Info, error) {
	if err := m.enter(); err != nil {
		return Info{}, err
	}
	defer m.leave()
	if timeout <= 0 || timeout > m.cfg.MaxTimeout {
		return Info{}, fmt.Errorf("sandbox %s: timeout %s is not between 0 and the maximum of %s: %w", id, timeout, m.cfg.MaxTimeout, ErrInvalid)
	}
	if info, ok, err := m.extendDormant(ctx, tenant, id, timeout); ok {
		return info, err
	}
	l, err := m.running(ctx, tenant, id)
	if err != nil {
		return Info{}, err
	}
	expires := time.Now().Add(timeout)
	m.mu.Lock()
	stopping := l.stopping
	if !stopping {
		l.expires = expires
	}
	m.mu.Unlock()
	if stopping {
		return Info{}, fmt.Errorf("sandbox %s is stopping: %w", id, ErrConflict)
	}
	sb, err := m.st.UpdateSandbox(ctx, id, func(sb *store.Sandbox) error {
		sb.Expires = expires
		return nil
	})
	if err != nil {
		return Info{}, fmt.Errorf("sandbox %s: extend: %w", id, err)
	}
	return infoOf(sb), nil
}

// Agent is the client of the sandbox's agent, for commands and files; the
// call counts as activity for the idle timeout.
func (m *Manager) Agent(ctx context.Context, tenant, id string) (*agent.Client, error) {
	if err := m.enter(); err != nil {
		return nil, err
	}
	defer m.leave()
	l, err := m.running(ctx, tenant, id)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	paused, client := l.paused, l.client
	m.mu.Unlock()
	if paused {
		return nil, errPaused(id)
	}
	if err := client.Err(); err != nil {
		return nil, fmt.Errorf("sandbox %s: its agent connection ended (%v): %w", id, err, ErrConflict)
	}
	l.lastActive.Store(time.Now().UnixNano())
	return client, nil
}

// row reads the record of tenant's sandbox id, any state.
func (m *Manager) row(ctx context.Context, tenant, id string) (store.Sandbox, error) {
	if !validID(id) {
		return store.Sandbox{}, fmt.Errorf("sandbox %q: %w", id, ErrNotFound)
	}
	sb, err := m.st.GetSandbox(ctx, tenant, id)
	if errors.Is(err, store.ErrNotFound) {
		return store.Sandbox{}, fmt.Errorf("sandbox %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return store.Sandbox{}, fmt.Errorf("sandbox %s: %w", id, err)
	}
	return sb, nil
}

// running returns tenant's running sandbox id. A sandbox that does not
// exist, belongs to another tenant or is stopped is not found; one that is
// starting or stopping is a conflict.
func (m *Manager) running(ctx context.Context, tenant, id string) (*live, error) {
	m.mu.Lock()
	l := m.live[id]
	stopping := l != nil && l.stopping
	m.mu.Unlock()
	if l != nil && (tenant == "" || l.tenant == tenant) {
		if stopping {
			return nil, fmt.Errorf("sandbox %s is stopping: %w", id, ErrConflict)
		}
		return l, nil
	}
	sb, err := m.row(ctx, tenant, id)
	if err != nil {
		return nil, err
	}
	if sb.State == store.StateStopped {
		return nil, fmt.Errorf("sandbox %s: %w (it is stopped)", id, ErrNotFound)
	}
	if err := m.elsewhere(ctx, sb, false); err != nil {
		return nil, err
	}
	if rt := m.remote(sb.Tier); rt != nil && sb.State == store.StateRunning {
		m.mu.Lock()
		l := m.live[id] // taken over just now
		m.mu.Unlock()
		if l != nil {
			return l, nil
		}
		// Left by a previous daemon and not taken again at the start.
		l, err := m.reattach(ctx, remoteAttach{rt}, sb)
		if err == nil {
			return l, nil
		}
		return nil, fmt.Errorf("sandbox %s on %s: %v: %w", id, rt.Remote(), err, ErrUnavailable)
	}
	return nil, fmt.Errorf("sandbox %s is %s: %w", id, sb.State, ErrConflict)
}

// infoOf describes sb.
func infoOf(sb store.Sandbox) Info {
	ws, res := recordedSpec(sb.Spec)
	return Info{
		ID:        sb.ID,
		Tenant:    sb.Tenant,
		State:     sb.State,
		Labels:    sb.Labels,
		CreatedAt: sb.Created,
		ExpiresAt: sb.Expires,
		Workspace: ws,
		Image:     sb.Image,
		Tier:      sb.Tier,
		Volumes:   recordedVolumes(sb.Volumes),
		Resources: res,
	}
}

// recordedSpec is the workspace (DefaultWorkspace when it names none) and
// the resources of a record's policy, read in one pass.
func recordedSpec(spec []byte) (string, Resources) {
	var s struct {
		Filesystem struct {
			Workspace string `json:"workspace"`
		} `json:"filesystem"`
		Resources struct {
			CPUs   float64 `json:"cpus"`
			Memory int64   `json:"memory"`
			Disk   int64   `json:"disk"`
		} `json:"resources"`
	}
	_ = json.Unmarshal(spec, &s)
	ws := s.Filesystem.Workspace
	if ws == "" {
		ws = DefaultWorkspace
	}
	return ws, Resources{CPUs: s.Resources.CPUs, MemoryBytes: s.Resources.Memory, DiskBytes: s.Resources.Disk}
}

// recordedWorkspace is the workspace path a sandbox's recorded policy
// gives (DefaultWorkspace when it gives none).
func recordedWorkspace(spec []byte) string {
	ws, _ := recordedSpec(spec)
	return ws
}

// recordedVolumes is decodeVolumes, nil for a record it cannot read (the
// daemon wrote it: it can).
func recordedVolumes(b []byte) []Volume {
	vols, _ := decodeVolumes(b)
	return vols
}

// watch ends l when its PID 1 ends on its own or its agent connection
// breaks (the agent closed it or broke the protocol), until unwatch is
// closed.
func (m *Manager) watch(l *live, inst instance, client *agent.Client, unwatch, watched chan struct{}) {
	defer close(watched)
	select {
	case <-inst.Done():
		m.end(l, "", m.endReason(l, "its PID 1 ended"))
	case <-client.Done():
		why := fmt.Sprintf("its agent connection ended: %v", client.Err())
		if _, ok := inst.(endReasoner); ok {
			// A sandbox that ended whole (gVisor's, at its memory limit)
			// breaks the connection first: its reason is worth the wait.
			select {
			case <-inst.Done():
				why = m.endReason(l, why)
			case <-time.After(endReasonWait):
			case <-l.ended:
			case <-unwatch:
				return
			}
		}
		m.end(l, "", why)
	case <-l.ended:
	case <-unwatch:
	}
}

// startWatch starts watch on l's instance and client as they are now, and
// gives the client the daemon's log for the agent's breaches of the
// protocol.
func (m *Manager) startWatch(l *live) {
	l.client.SetLog(m.log.With("sandbox", l.id, "tenant", l.tenant))
	l.unwatch, l.watched = make(chan struct{}), make(chan struct{})
	go m.watch(l, l.inst, l.client, l.unwatch, l.watched)
}

// endReasonWait bounds how long watch waits for a sandbox whose agent
// connection broke to end, to learn why.
const endReasonWait = 2 * time.Second

// endReason is why l's sandbox ended on its own, as its instance says
// (recording an OOM kill as an "oom" event and in the metric), or why.
func (m *Manager) endReason(l *live, why string) string {
	r, ok := l.inst.(endReasoner)
	if !ok {
		return why
	}
	reason, oom := r.EndReason()
	if reason == "" {
		return why
	}
	if oom {
		OOMKills.With().Add(1)
		m.log.Warn("out of memory: the sandbox ended", "sandbox", l.id, "tenant", l.tenant)
		l.ev.append(EventOOM, map[string]any{"kills": int64(1), "reason": reason}, false)
	}
	return reason
}

// end starts tearing l down, once, and returns a channel closed when it is
// done. The first call records an event of type kind, unless empty.
func (m *Manager) end(l *live, kind, why string) <-chan struct{} {
	l.once.Do(func() {
		if kind != "" {
			l.ev.append(kind, map[string]any{"reason": why}, false)
		}
		m.mu.Lock()
		l.stopping = true
		m.mu.Unlock()
		go m.teardown(l, why)
	})
	return l.ended
}

// teardown ends l's sandbox and every process in it, removes its
// directory and records it as stopped (the row stays, for audit).
func (m *Manager) teardown(l *live, why string) {
	defer close(l.ended)
	m.teardowns <- struct{}{}
	defer func() { <-m.teardowns }()
	log := m.log.With("sandbox", l.id, "tenant", l.tenant)
	log.Info("ending sandbox", "reason", why)
	// A pause or resume in progress finishes first: a pause to disk
	// replaces the client and ends the processes on purpose.
	l.pauseMu.Lock()
	defer l.pauseMu.Unlock()
	ctx := context.Background()
	if _, err := m.st.UpdateSandbox(ctx, l.id, func(sb *store.Sandbox) error {
		if self := m.self(); self != "" && sb.Owner != self {
			return errTakenFirst
		}
		sb.State, sb.Checkpoint = store.StateStopping, "" // paused to disk as it was ending: removed below
		return nil
	}); errors.Is(err, errTakenFirst) {
		m.handOver(l, log)
		return
	} else if err != nil {
		log.Error("record sandbox stopping", "err", err)
	}
	_ = l.client.Close()
	// Close kills PID 1, which ends the sandbox's pid namespace, and
	// returns once PID 1 has been reaped.
	if err := l.inst.Close(); err != nil {
		log.Warn("close sandbox", "err", err)
	}
	if l.release != nil {
		l.release()
	}
	m.finishReview(l.dir, log)
	if err := removeSandboxDir(l.dir); err != nil {
		log.Error("remove sandbox directory", "dir", l.dir, "err", err)
	}
	countTraffic(l.proxy)
	last := time.Unix(0, l.lastActive.Load())
	if _, err := m.st.UpdateSandbox(ctx, l.id, func(sb *store.Sandbox) error {
		sb.State = store.StateStopped
		sb.LastActive = last
		return nil
	}); err != nil {
		log.Error("record sandbox stopped", "err", err)
	}
	m.mu.Lock()
	if m.live[l.id] == l {
		delete(m.live, l.id)
	}
	delete(m.dormant, l.id) // paused to disk as it was ending
	m.mu.Unlock()
	m.dropUsage(l.id)
	m.endEvents(l.id, l.ev, why)
	log.Info("sandbox ended")
}

// reaper ends sandboxes past their timeout or idle timeout, and writes
// their last activity to the store now and then.
func (m *Manager) reaper() {
	defer close(m.reaperDone)
	t := time.NewTicker(reapEvery)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case now := <-t.C:
			m.reap(now)
		}
	}
}

// reap is one round of the reaper at now.
func (m *Manager) reap(now time.Time) {
	m.reapMu.Lock()
	defer m.reapMu.Unlock()
	type verdict struct {
		l         *live
		kind, why string
	}
	var (
		ending []verdict
		active []*live
	)
	m.mu.Lock()
	for _, l := range m.live {
		if l.stopping {
			continue
		}
		last := time.Unix(0, l.lastActive.Load())
		switch {
		case !l.expires.IsZero() && !now.Before(l.expires) && l.life.PauseOnTimeout:
			if !l.timeoutBusy {
				l.timeoutBusy = true
				go m.onTimeout(l)
			}
		case !l.expires.IsZero() && !now.Before(l.expires):
			ending = append(ending, verdict{l, EventTimeout, "its timeout passed"})
		case l.idle > 0 && !l.paused && now.Sub(last) >= l.idle: // a paused sandbox is not idle
			ending = append(ending, verdict{l, EventIdleTimeout, fmt.Sprintf("idle for %s", l.idle)})
		default:
			active = append(active, l)
		}
	}
	m.mu.Unlock()
	m.reapDormant(now)
	for _, v := range ending {
		if v.kind == EventIdleTimeout && m.busy(v.l) {
			// A command still running is activity, however quiet.
			v.l.lastActive.Store(now.UnixNano())
			active = append(active, v.l)
			continue
		}
		m.end(v.l, v.kind, v.why)
	}
	m.checkOOM(active)
	m.sampleUsage(now, active)
	for _, l := range active {
		last := l.lastActive.Load()
		if last == l.flushed || now.Sub(l.flushedAt) < flushEvery {
			continue
		}
		l.flushed, l.flushedAt = last, now
		if _, err := m.st.UpdateSandbox(context.Background(), l.id, func(sb *store.Sandbox) error {
			sb.LastActive = time.Unix(0, last)
			return nil
		}); err != nil {
			m.log.Warn("record sandbox activity", "sandbox", l.id, "err", err)
		}
	}
}
