// Package apitest provides a stand-in for the daemon's manager, for tests
// of the API and its clients that must run without root: its sandboxes are
// plain directories, and their agents (agent.Serve) run in the test's own
// process, connected over in-memory pipes. Commands run on the host as the
// test's user, without any isolation: use it only with commands a test
// controls.
package apitest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/hutch-sandbox/hutch/internal/agent"
	"github.com/hutch-sandbox/hutch/internal/daemon"
	"github.com/hutch-sandbox/hutch/internal/image"
	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/store"
)

// Manager implements api.Manager with unisolated sandboxes. Safe for
// concurrent use.
type Manager struct {
	// Quota, when positive, is the most sandboxes a tenant may have;
	// Create fails with daemon.ErrQuota beyond it.
	Quota int

	dir   string
	store *store.Store

	mu     sync.Mutex
	next   int
	boxes  map[string]*box
	events map[string]*eventsOf // of every sandbox made, ended or not
	last   daemon.CreateRequest
	lastID string
}

// eventsOf is the event log of a sandbox and its tenant.
type eventsOf struct {
	tenant string
	log    *daemon.EventLog
}

type box struct {
	info   daemon.Info
	client *agent.Client
	served chan struct{} // closed when agent.Serve returned
	// filesOnly: paused without its memory (PauseWith).
	filesOnly bool
}

// NewManager returns a manager that keeps its store and its sandboxes'
// directories in dir.
func NewManager(dir string) (*Manager, error) {
	s, err := store.Open(filepath.Join(dir, "state.db"))
	if err != nil {
		return nil, err
	}
	return &Manager{dir: dir, store: s, boxes: map[string]*box{}, events: map[string]*eventsOf{}}, nil
}

// Close destroys every sandbox and closes the store.
func (m *Manager) Close() error {
	m.mu.Lock()
	ids := slices.Collect(maps.Keys(m.boxes))
	m.mu.Unlock()
	for _, id := range ids {
		_ = m.Destroy(context.Background(), "", id)
	}
	return m.store.Close()
}

// Store is the manager's store, for tokens.
func (m *Manager) Store() store.Backend { return m.store }

// Unknown is false: the manager keeps no view of a store others write.
func (m *Manager) Unknown(context.Context, string) bool { return false }

// NotStopped lists the manager's sandboxes that are not stopped.
func (m *Manager) NotStopped(context.Context) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var ids []string
	for id, b := range m.boxes {
		if b.info.State != store.StateStopped {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// Images is an image store in the manager's directory.
func (m *Manager) Images() *image.Store {
	st, err := image.Open(m.dir)
	if err != nil {
		panic(err)
	}
	return st
}

// CheckTenantRule checks a tenant's egress rule as the daemon does with
// nothing opened by its configuration.
func (m *Manager) CheckTenantRule(field, entry string, cidr bool) error {
	return daemon.TenantRule(field, entry, cidr, nil)
}

// LastCreate is the last request Create got.
func (m *Manager) LastCreate() daemon.CreateRequest {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.last
}

// LastCreateID is the id of the last sandbox Create made.
func (m *Manager) LastCreateID() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.lastID
}

// Create makes a directory and starts an agent whose commands run in it.
func (m *Manager) Create(ctx context.Context, tenant string, r daemon.CreateRequest) (daemon.Info, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.last = r
	if m.Quota > 0 {
		n := 0
		for _, b := range m.boxes {
			if b.info.Tenant == tenant {
				n++
			}
		}
		if n >= m.Quota {
			return daemon.Info{}, fmt.Errorf("tenant %s has %d sandboxes: %w", tenant, n, daemon.ErrQuota)
		}
	}
	m.next++
	id := fmt.Sprintf("sb-%d", m.next)
	ws := filepath.Join(m.dir, id)
	if err := os.MkdirAll(ws, 0o755); err != nil {
		return daemon.Info{}, err
	}
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + ws, "LANG=C.UTF-8"}
	for k, v := range r.Env {
		env = append(env, k+"="+v)
	}
	a, b := net.Pipe()
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = agent.Serve(b, agent.ServeOptions{DefaultDir: ws, DefaultEnv: env})
	}()
	timeout := r.Timeout
	if timeout == 0 {
		timeout = 5 * time.Minute
	}
	now := time.Now().UTC()
	info := daemon.Info{
		ID: id, Tenant: tenant, State: store.StateRunning, Labels: r.Labels,
		CreatedAt: now, ExpiresAt: now.Add(timeout), Workspace: ws,
		Tier: cmp.Or(r.Policy.Tier, policy.DefaultTier), // the tier it would have (it runs in none)
	}
	m.boxes[id] = &box{info: info, client: agent.NewClient(a), served: served}
	ev := &eventsOf{tenant: tenant, log: daemon.NewEventLog()}
	ev.log.Append(daemon.EventCreated, map[string]any{"expires": info.ExpiresAt})
	ev.log.Append(daemon.EventStarted, nil)
	m.events[id] = ev
	m.lastID = id
	return info, nil
}

// lookup returns tenant's sandbox id ("" tenant: any).
func (m *Manager) lookup(tenant, id string) (*box, error) {
	b := m.boxes[id]
	if b == nil || (tenant != "" && b.info.Tenant != tenant) {
		return nil, fmt.Errorf("sandbox %q: %w", id, daemon.ErrNotFound)
	}
	return b, nil
}

// Get describes a sandbox.
func (m *Manager) Get(ctx context.Context, tenant, id string) (daemon.Info, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, err := m.lookup(tenant, id)
	if err != nil {
		return daemon.Info{}, err
	}
	return b.info, nil
}

// List lists tenant's sandboxes with all of labels (and state).
func (m *Manager) List(ctx context.Context, tenant string, labels map[string]string, state string) ([]daemon.Info, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []daemon.Info
	for _, b := range m.boxes {
		if b.info.Tenant != tenant || (state != "" && b.info.State != state) {
			continue
		}
		match := true
		for k, v := range labels {
			if got, ok := b.info.Labels[k]; !ok || got != v {
				match = false
			}
		}
		if match {
			out = append(out, b.info)
		}
	}
	slices.SortFunc(out, func(a, b daemon.Info) int { return a.CreatedAt.Compare(b.CreatedAt) })
	return out, nil
}

// Destroy stops the sandbox's agent (which kills its commands) and
// removes its directory.
func (m *Manager) Destroy(ctx context.Context, tenant, id string) error {
	m.mu.Lock()
	b, err := m.lookup(tenant, id)
	if err == nil {
		delete(m.boxes, id)
	}
	ev := m.events[id]
	m.mu.Unlock()
	if err != nil {
		return err
	}
	ev.log.Append(daemon.EventDestroyed, map[string]any{"reason": "destroyed"})
	cerr := b.client.Close()
	<-b.served
	ev.log.End("destroyed")
	return errors.Join(cerr, os.RemoveAll(b.info.Workspace))
}

// eventLog is the event log of tenant's sandbox id ("" tenant: any), kept
// after it ended.
func (m *Manager) eventLog(tenant, id string) (*daemon.EventLog, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ev := m.events[id]
	if ev == nil || (tenant != "" && ev.tenant != tenant) {
		return nil, fmt.Errorf("sandbox %q: %w", id, daemon.ErrNotFound)
	}
	return ev.log, nil
}

// Emit records an event of a sandbox.
func (m *Manager) Emit(tenant, id, typ string, data map[string]any) {
	if lg, err := m.eventLog(tenant, id); err == nil {
		lg.Append(typ, data)
	}
}

// Events follows a sandbox's events, as daemon.Manager.Events does.
func (m *Manager) Events(ctx context.Context, tenant, id string, since int64) (<-chan daemon.Event, error) {
	lg, err := m.eventLog(tenant, id)
	if err != nil {
		return nil, err
	}
	return lg.Subscribe(ctx, since), nil
}

// Extend sets the sandbox to expire timeout from now.
func (m *Manager) Extend(ctx context.Context, tenant, id string, timeout time.Duration) (daemon.Info, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, err := m.lookup(tenant, id)
	if err != nil {
		return daemon.Info{}, err
	}
	b.info.ExpiresAt = time.Now().UTC().Add(timeout)
	return b.info, nil
}

// Pause marks the sandbox paused: its agent refuses calls until Resume,
// as daemon.Manager's does (its commands are not frozen here).
func (m *Manager) Pause(ctx context.Context, tenant, id string) (daemon.Info, error) {
	return m.PauseWith(ctx, tenant, id, daemon.PauseOptions{})
}

// PauseWith marks the sandbox paused as Pause does; with o.FilesOnly its
// paused event says memory false (its commands are not killed here).
func (m *Manager) PauseWith(ctx context.Context, tenant, id string, o daemon.PauseOptions) (daemon.Info, error) {
	var data map[string]any
	if o.FilesOnly {
		data = map[string]any{"memory": false}
	}
	return m.setState(tenant, id, store.StateRunning, store.StatePaused, daemon.EventPaused, data, o.FilesOnly)
}

// PausedWithMemory reports whether the sandbox is paused and kept its
// memory (Pause, not PauseWith FilesOnly).
func (m *Manager) PausedWithMemory(ctx context.Context, tenant, id string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, err := m.lookup(tenant, id)
	if err != nil {
		return false, err
	}
	return b.info.State == store.StatePaused && !b.filesOnly, nil
}

// Resume marks a paused sandbox running again.
func (m *Manager) Resume(ctx context.Context, tenant, id string) (daemon.Info, error) {
	return m.setState(tenant, id, store.StatePaused, store.StateRunning, daemon.EventResumed, nil, false)
}

// ResumeWith resumes as Resume does; with o.Reboot its resumed event
// says {"boot": "cold"} (nothing is killed here).
func (m *Manager) ResumeWith(ctx context.Context, tenant, id string, o daemon.ResumeOptions) (daemon.Info, error) {
	var data map[string]any
	if o.Reboot {
		data = map[string]any{"boot": "cold"}
	}
	return m.setState(tenant, id, store.StatePaused, store.StateRunning, daemon.EventResumed, data, false)
}

// setState moves tenant's sandbox id from state from to state to, and
// records an event of type kind with data; filesOnly says whether it is
// paused without its memory. A sandbox in another state is a conflict.
func (m *Manager) setState(tenant, id, from, to, kind string, data map[string]any, filesOnly bool) (daemon.Info, error) {
	m.mu.Lock()
	b, err := m.lookup(tenant, id)
	if err == nil && b.info.State != from {
		err = fmt.Errorf("sandbox %s is %s: %w", id, b.info.State, daemon.ErrConflict)
	}
	if err != nil {
		m.mu.Unlock()
		return daemon.Info{}, err
	}
	b.info.State, b.filesOnly = to, filesOnly
	info, ev := b.info, m.events[id]
	m.mu.Unlock()
	ev.log.Append(kind, data)
	return info, nil
}

// Counts returns the number of sandboxes in each of daemon.CountedStates,
// by tier.
func (m *Manager) Counts(ctx context.Context) (map[store.StateTier]int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[store.StateTier]int{}
	for _, b := range m.boxes {
		if slices.Contains(daemon.CountedStates, b.info.State) {
			out[store.StateTier{State: b.info.State, Tier: b.info.Tier}]++
		}
	}
	return out, nil
}

// Agent is the client of the sandbox's agent.
func (m *Manager) Agent(ctx context.Context, tenant, id string) (*agent.Client, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, err := m.lookup(tenant, id)
	if err != nil {
		return nil, err
	}
	if b.info.State == store.StatePaused {
		return nil, fmt.Errorf("sandbox %s is paused (resume it first): %w", id, daemon.ErrConflict)
	}
	return b.client, nil
}
