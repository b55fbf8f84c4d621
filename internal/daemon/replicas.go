package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/hutch-sandbox/hutch/internal/audit"
	"github.com/hutch-sandbox/hutch/internal/store"
)

// Several daemons (replicas of one hutch serve) may share one store, a
// cluster's, and serve the sandboxes of a remote runtime together. Each
// sandbox is served by one replica, its record's Owner: the one holding
// its agent's connection and its timers. A request for it that reaches
// another replica is sent on to the owner (Locate tells the front ends
// where); a sandbox whose owner is gone (its membership lapsed) is taken
// over by the first replica that needs it or sees it (takeOver): its
// record names the new owner, written only if it still names the old
// one, so that two replicas never both take it.

// Replicas is a daemon's membership among the replicas sharing its Store
// (Config.Replicas).
type Replicas interface {
	// Self is this replica's name.
	Self() string
	// Live are the replicas alive, this one among them: name → the
	// address (URL) at which the others reach it. fresh asks for them
	// as they are now; without it a view a moment behind may answer (a
	// replica that joined a moment ago may be missing from it).
	Live(ctx context.Context, fresh bool) (map[string]string, error)
	// Prune deletes what is left of replicas gone long ago (their
	// Leases), but of those keep wants (some record still names them).
	Prune(ctx context.Context, keep func(replica string) bool) (int, error)
}

// replicaPrune is how often a daemon prunes what is left of replicas gone.
const replicaPrune = time.Minute

// replicaScan is how often a daemon looks for the sandboxes of replicas
// gone.
var replicaScan = 3 * time.Second

// self is this replica's name, "" for a daemon alone.
func (m *Manager) self() string {
	if m.cfg.Replicas == nil {
		return ""
	}
	return m.cfg.Replicas.Self()
}

// liveReplicas are the replicas alive: name → address; fresh: as they
// are now (Replicas.Live).
func (m *Manager) liveReplicas(ctx context.Context, fresh bool) (map[string]string, error) {
	live, err := m.cfg.Replicas.Live(ctx, fresh)
	if err != nil {
		return nil, fmt.Errorf("the replicas of hutch serve: %w", err)
	}
	return live, nil
}

// ElsewhereError is the error for a sandbox another replica serves: the
// request is for that replica (Locate). It wraps ErrUnavailable.
type ElsewhereError struct {
	ID, Replica, Address string
}

func (e *ElsewhereError) Error() string {
	return fmt.Sprintf("sandbox %s is served by replica %s of hutch serve (%s)", e.ID, e.Replica, e.Address)
}

func (e *ElsewhereError) Unwrap() error { return ErrUnavailable }

// elsewhere is an *ElsewhereError if sb is a remote sandbox another live
// replica serves; nil if it is (or becomes, taken over from a replica
// gone) this replica's, or is not one a replica serves (stopped, or on
// this machine). fresh asks the replicas as they are now from the start;
// a take-over always does.
func (m *Manager) elsewhere(ctx context.Context, sb store.Sandbox, fresh bool) error {
	self := m.self()
	if self == "" || sb.Owner == self || sb.State == store.StateStopped || m.remote(sb.Tier) == nil {
		return nil
	}
	// A few rounds: each but the first follows a replica that took it
	// first.
	for range 4 {
		live, err := m.liveReplicas(ctx, fresh)
		if err != nil {
			return fmt.Errorf("sandbox %s: %v: %w", sb.ID, err, ErrUnavailable)
		}
		if addr, ok := live[sb.Owner]; ok && sb.Owner != "" {
			if sb.Owner == self {
				return nil
			}
			return &ElsewhereError{ID: sb.ID, Replica: sb.Owner, Address: addr}
		}
		if !fresh {
			// Gone from a view: make sure before taking it.
			fresh = true
			continue
		}
		took, err := m.takeOver(ctx, sb)
		if err != nil {
			return fmt.Errorf("sandbox %s: %v: %w", sb.ID, err, ErrUnavailable)
		}
		if took.Owner == self || took.State == store.StateStopped {
			return nil
		}
		sb = took // another replica took it first
	}
	return fmt.Errorf("sandbox %s: replicas take it from each other: %w", sb.ID, ErrUnavailable)
}

// Locate says where a request for sandbox id is served: "" here (it is
// this replica's, or not one a replica serves, or does not exist: the
// request's own answer says so), else the address of the replica that
// serves it. A sandbox whose replica is gone is taken over first. fresh
// reads the record and the replicas as they are now (the replica Locate
// named did not answer) rather than views a moment behind.
func (m *Manager) Locate(ctx context.Context, id string, fresh bool) (string, error) {
	if m.self() == "" || id == "" {
		return "", nil
	}
	m.mu.Lock()
	l := m.live[id]
	m.mu.Unlock()
	if l != nil || !fresh && m.Unknown(ctx, id) {
		return "", nil
	}
	if v, ok := m.st.(ownerView); ok && !fresh {
		// Sent on without a read of the record when a view has it
		// served by another live replica.
		if owner, state, tier, ok := v.OwnerOf(id); ok && owner != m.self() && owner != "" && state != store.StateStopped && m.remote(tier) != nil {
			live, err := m.liveReplicas(ctx, false)
			if err != nil {
				return "", err
			}
			if addr, ok := live[owner]; ok {
				return addr, nil
			}
		}
	}
	sb, err := m.st.GetSandbox(ctx, "", id)
	if err != nil {
		return "", nil
	}
	var e *ElsewhereError
	if err := m.elsewhere(ctx, sb, fresh); errors.As(err, &e) {
		return e.Address, nil
	} else if err != nil {
		return "", err
	}
	return "", nil
}

// ownerView is a store that keeps a view of its records (a cluster's:
// kube.Store), a watch's delay behind them: their owners, whether it has
// a record (waiting a moment for one it lacks; current false when it
// cannot tell), the sandboxes not stopped (ok false when it cannot tell).
type ownerView interface {
	OwnerOf(id string) (owner, state, tier string, ok bool)
	Has(ctx context.Context, id string) (has, current bool)
	NotStopped() (ids []string, ok bool)
}

// Unknown reports whether id names no sandbox as far as can be told
// without reading the store: a view of the records (a cluster's), current,
// has not had it within a watch's delay. Front ends ask before they read
// the record a request not yet authenticated names, so that ids nobody
// made cost the store nothing. False when there is no such view.
func (m *Manager) Unknown(ctx context.Context, id string) bool {
	m.mu.Lock()
	l := m.live[id]
	m.mu.Unlock()
	v, ok := m.st.(ownerView)
	if l != nil || !ok {
		return false
	}
	has, current := v.Has(ctx, id)
	return current && !has
}

// NotStopped lists the sandboxes of the store (every tenant's) that are
// not stopped: from the view of the records when it is current, else
// read.
func (m *Manager) NotStopped(ctx context.Context) ([]string, error) {
	rows, err := m.owners(ctx)
	if err != nil {
		return nil, err
	}
	ids := make([]string, len(rows))
	for i, r := range rows {
		ids[i] = r.id
	}
	return ids, nil
}

// errTakenFirst is takeOver's when another replica took the sandbox first.
var errTakenFirst = errors.New("another replica took it first")

// takeOver makes sb, a remote sandbox whose replica is gone, this
// replica's: its record names this replica (written only if it still
// names the one gone), then a running sandbox is taken again (reattach)
// and any other — starting, stopping, a warm one, or one whose pod went
// — is ended. It returns the record as it is now: another replica's if
// that one took it first.
func (m *Manager) takeOver(ctx context.Context, sb store.Sandbox) (store.Sandbox, error) {
	rt := m.remote(sb.Tier)
	self, from := m.self(), sb.Owner
	took, err := m.st.UpdateSandbox(ctx, sb.ID, func(cur *store.Sandbox) error {
		if cur.Owner != from {
			return errTakenFirst
		}
		cur.Owner = self
		return nil
	})
	if errors.Is(err, errTakenFirst) {
		return m.st.GetSandbox(ctx, "", sb.ID)
	}
	if err != nil {
		return sb, err
	}
	log := m.log.With("sandbox", sb.ID, "tenant", sb.Tenant)
	log.Warn("sandbox taken over from a replica gone", "from", from, "state", took.State)
	if al := m.cfg.Audit; al != nil && took.Tenant != warmTenant {
		if err := al.Append(audit.Entry{Tenant: took.Tenant, Action: "take_over", Sandbox: sb.ID, Subject: from}); err != nil {
			log.Error("audit a take-over", "err", err)
		}
	}
	if took.State == store.StateStopped {
		return took, nil
	}
	if took.State == store.StateRunning && took.Tenant != warmTenant {
		_, err := m.reattach(ctx, remoteAttach{rt}, took)
		if err == nil || !errors.Is(err, errGone) {
			// Not gone: taken again, or kept for a request to try again
			// (running).
			return took, nil
		}
	}
	// Nobody will drive it: it ends.
	if err := rt.Remove(ctx, sb.ID); err != nil {
		return took, err
	}
	if took.Tenant == warmTenant {
		if err := m.st.DeleteSandbox(ctx, sb.ID); err != nil && !errors.Is(err, store.ErrNotFound) {
			return took, err
		}
		took.State = store.StateStopped
		return took, nil
	}
	return m.st.UpdateSandbox(ctx, sb.ID, func(cur *store.Sandbox) error {
		cur.State, cur.Checkpoint = store.StateStopped, ""
		return nil
	})
}

// watchReplicas takes over, every replicaScan until Close, the sandboxes
// of replicas gone: their timeouts are kept, their pods not left to run
// with nobody holding them.
func (m *Manager) watchReplicas() {
	defer close(m.replicasDone)
	t := time.NewTicker(replicaScan)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			if err := m.takeOrphans(ctx); err != nil {
				m.log.Warn("look for the sandboxes of replicas gone", "err", err)
			}
			cancel()
		}
	}
}

// takeOrphans takes over the sandboxes whose replica is gone, and once
// every replicaPrune deletes what is left of replicas gone long ago that
// no record names. It reads the owners from the store's view of the
// records when it has a current one (a cluster's: a scan every
// replicaScan costs the API server nothing), and a record only to take
// it over.
func (m *Manager) takeOrphans(ctx context.Context) error {
	rows, err := m.owners(ctx)
	if err != nil {
		return err
	}
	if time.Since(m.pruned) >= replicaPrune {
		m.pruned = time.Now()
		named := map[string]bool{m.self(): true}
		for _, r := range rows {
			named[r.owner] = true
		}
		if n, err := m.cfg.Replicas.Prune(ctx, func(r string) bool { return named[r] }); err != nil {
			m.log.Warn("remove what is left of replicas gone", "err", err)
		} else if n > 0 {
			m.log.Info("removed the leases of replicas gone", "count", n)
		}
	}
	var live map[string]string
	for _, r := range rows {
		if r.owner == m.self() || m.remote(r.tier) == nil {
			continue
		}
		if live == nil {
			if live, err = m.liveReplicas(ctx, true); err != nil {
				return err
			}
		}
		if _, ok := live[r.owner]; ok {
			continue
		}
		sb, err := m.st.GetSandbox(ctx, "", r.id)
		if err != nil || sb.Owner != r.owner || sb.State == store.StateStopped {
			continue // gone, or taken meanwhile: the view was behind
		}
		if err := m.enter(); err != nil {
			return nil // closing
		}
		_, err = m.takeOver(ctx, sb)
		m.leave()
		if err != nil {
			m.log.Warn("take over a sandbox of a replica gone", "sandbox", sb.ID, "from", sb.Owner, "err", err)
		}
	}
	return nil
}

// ownerRow is what takeOrphans reads of a record not stopped.
type ownerRow struct{ id, owner, tier string }

// owners are the records not stopped, with their owners and tiers: from
// the store's view of the records when it is current, else read.
func (m *Manager) owners(ctx context.Context) ([]ownerRow, error) {
	if v, ok := m.st.(ownerView); ok {
		if ids, ok := v.NotStopped(); ok {
			rows := make([]ownerRow, 0, len(ids))
			for _, id := range ids {
				if owner, state, tier, ok := v.OwnerOf(id); ok && state != store.StateStopped {
					rows = append(rows, ownerRow{id, owner, tier})
				}
			}
			return rows, nil
		}
	}
	sbs, err := m.st.ListSandboxes(ctx, store.Filter{})
	if err != nil {
		return nil, err
	}
	rows := make([]ownerRow, 0, len(sbs))
	for _, sb := range sbs {
		if sb.State != store.StateStopped {
			rows = append(rows, ownerRow{sb.ID, sb.Owner, sb.Tier})
		}
	}
	return rows, nil
}

// handOver lets go of l, which another replica took over as this one
// ended it (teardown, under l.pauseMu): it runs on, the other's.
func (m *Manager) handOver(l *live, log *slog.Logger) {
	loosen(l)
	m.mu.Lock()
	if m.live[l.id] == l {
		delete(m.live, l.id)
	}
	m.mu.Unlock()
	m.dropUsage(l.id)
	m.endEvents(l.id, l.ev, "another replica of hutch serve serves it now")
	log.Warn("sandbox taken over by another replica: let go")
}
