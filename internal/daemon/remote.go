package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/hutch-sandbox/hutch/internal/agent"
	"github.com/hutch-sandbox/hutch/internal/audit"
	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/sandbox"
	"github.com/hutch-sandbox/hutch/internal/store"
)

// remoteRuntime is a runtime whose sandboxes run elsewhere — a cluster's
// pods (package kube) — and reach nothing of this machine's: its image
// store, its egress proxies (the node's runtime enforces the allow-list),
// its directories, snapshots and volumes. The daemon keeps their records
// and their agents' connections only.
type remoteRuntime interface {
	sandbox.Runtime
	// Remote names where the sandboxes run, for messages ("Kubernetes").
	Remote() string
	// Unsupported says what of a policy the runtime cannot honour, or "".
	Unsupported(policy.Spec) string
	// Attach takes sandbox id, which a previous daemon of the same name
	// started and left running, again (its agent's connection taken
	// over); an error for which Gone is true says the sandbox is gone
	// (its pod deleted or ended), any other may pass.
	Attach(id string) (sandbox.Instance, error)
	// Gone reports whether an error of Attach says the sandbox is gone.
	Gone(err error) bool
	// Sweep ends the sandboxes a previous daemon of the same name left
	// running, at the daemon's start, but those keep wants, given each
	// one's id and the replica that started it ("" for a daemon alone).
	Sweep(ctx context.Context, keep func(id, replica string) bool) error
	// Remove ends sandbox id whatever its state, without its instance: a
	// sandbox of a replica gone.
	Remove(ctx context.Context, id string) error
}

// releaser is an instance of a remote runtime that can be let go of
// without ending it, for another daemon to take.
type releaser interface{ Release() }

// remote is the remote runtime of tier, or nil.
func (m *Manager) remote(tier string) remoteRuntime {
	r, _ := m.cfg.Runtimes[tier].(remoteRuntime)
	return r
}

// checkRemote refuses what a sandbox of a remote runtime cannot have.
func (m *Manager) checkRemote(r CreateRequest, spec policy.Spec) error {
	rt := m.remote(spec.Tier)
	if rt == nil {
		return nil
	}
	refuse := func(what string) error {
		return invalid("create sandbox: %s: not for sandboxes on %s", what, rt.Remote())
	}
	switch {
	case r.Snapshot != "":
		return refuse("snapshot")
	case len(r.Volumes) > 0:
		return refuse("volumes")
	case len(r.Secrets) > 0:
		return refuse("secrets")
	case r.Policy.Filesystem.WorkspaceMode != "":
		return refuse("policy: filesystem.workspace_mode")
	case len(r.Policy.Filesystem.DenyRead) > 0 || len(r.Policy.Filesystem.AllowRead) > 0:
		// Its own lists; the defaults hide the host's files, which a
		// pod's image does not hold.
		return refuse("policy: filesystem.deny_read and allow_read")
	case len(r.Policy.Filesystem.DenyWrite) > 0:
		return refuse("policy: filesystem.deny_write")
	}
	if why := rt.Unsupported(spec); why != "" {
		return invalid("create sandbox: policy: %s (on %s)", why, rt.Remote())
	}
	return nil
}

// launchRemote starts sandbox id on rt: the part of launch a remote
// sandbox has — its approvals' gate, its agent's environment, its start
// and its agent's first answer.
func (m *Manager) launchRemote(ctx context.Context, rt remoteRuntime, id, dir string, spec policy.Spec, env []string, log *slog.Logger, ev *eventLog) (*live, error) {
	l := &live{id: id, dir: dir, ev: ev, ended: make(chan struct{}), resources: spec.Resources}
	fail := func(err error) (*live, error) {
		l.close(log)
		return nil, err
	}
	var err error
	if l.gate, err = m.newGate(id, spec, log); err != nil {
		return fail(err)
	}
	l.root, l.tier, l.bootEnv = spec.Root, spec.Tier, env
	inst, conn, err := startSandbox(rt, sandbox.Config{Spec: spec, Environ: env, Log: log, Name: id})
	if err != nil {
		return fail(fmt.Errorf("on %s: %w", rt.Remote(), err))
	}
	l.inst = inst
	l.attach(agent.NewClient(conn))
	if err := m.recordReady(ctx, id, l, nil); err != nil {
		return fail(err)
	}
	return l, nil
}

// reattach takes sb, the record of a sandbox that a previous daemon left
// running (on rt's remote runtime, or on this machine), as m's again: its
// agent's connection, its timeout and idle timeout, its approvals, and
// what rt holds here for it. An error wrapping errGone says the sandbox
// is gone (its pod went), and the caller ends its record; any other
// leaves it for a later try (a request for it: running). Commands the
// previous daemon started run on, without their streams; its events
// start afresh.
func (m *Manager) reattach(ctx context.Context, rt attacher, sb store.Sandbox) (*live, error) {
	m.reattachMu.Lock()
	defer m.reattachMu.Unlock()
	m.mu.Lock()
	l := m.live[sb.ID]
	m.mu.Unlock()
	if l != nil {
		return l, nil // taken again meanwhile
	}
	log := m.log.With("sandbox", sb.ID, "tenant", sb.Tenant)
	if sb.State != store.StateRunning || sb.Tenant == warmTenant {
		return nil, fmt.Errorf("it is %s: %w", sb.State, errGone)
	}
	var spec policy.Spec
	if err := json.Unmarshal(sb.Spec, &spec); err != nil {
		return nil, fmt.Errorf("its policy: %v: %w", err, errGone)
	}
	dir := filepath.Join(m.sbRoot, sb.ID)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	ev := m.newEvents(sb.Tenant, sb.ID)
	l = &live{id: sb.ID, dir: dir, ev: ev, ended: make(chan struct{}), resources: spec.Resources}
	fail := func(err error) (*live, error) {
		l.close(log)
		m.endEvents(sb.ID, ev, "it could not be taken again")
		return nil, err
	}
	var err error
	if l.gate, err = m.newGate(sb.ID, spec, log); err != nil {
		return fail(err)
	}
	inst, err := rt.attach(m, l, sb, spec, log)
	if err != nil {
		if rt.gone(err) {
			err = fmt.Errorf("%v: %w", err, errGone)
		}
		return fail(err)
	}
	in, ok := inst.(instance)
	if !ok {
		_ = inst.Close()
		return fail(fmt.Errorf("tier %s: no instance", sb.Tier))
	}
	l.inst = in
	l.root, l.tier = spec.Root, sb.Tier
	l.lifetime = sb.Expires.Sub(sb.Created)
	l.attach(agent.NewClient(inst.Conn()))
	if err := agentAnswers(ctx, l); err != nil {
		return fail(err)
	}
	if err := m.adopt(l, sb.Tenant, sb.IdleTimeout, sb.LastActive, sb.Expires); err != nil {
		return fail(err)
	}
	log.Info("sandbox taken again", "on", rt.where(), "expires", sb.Expires)
	if al := m.cfg.Audit; al != nil {
		if err := al.Append(audit.Entry{Tenant: sb.Tenant, Action: "take_back", Sandbox: sb.ID, Subject: rt.where()}); err != nil {
			log.Error("audit a take-back", "err", err)
		}
	}
	return l, nil
}

// loosen lets go of l, a remote sandbox, here — its watch, its agent's
// connection, its instance — without ending it. Under l.pauseMu.
func loosen(l *live) {
	if l.unwatch != nil {
		close(l.unwatch)
		<-l.watched
		l.unwatch = nil
	}
	_ = l.client.Close()
	if r, ok := l.inst.(releaser); ok {
		r.Release()
	}
}

// errGone is reattach's error for a sandbox that is gone.
var errGone = errors.New("the sandbox is gone")

// letGo lets go of l, a remote sandbox, at the daemon's close: its watch
// and its agent's connection end, its last activity is recorded, and it
// runs on for the next daemon of the same name (reattach). Its commands
// lose their streams, as at a detach.
func (m *Manager) letGo(l *live) {
	l.pauseMu.Lock()
	loosen(l)
	l.pauseMu.Unlock()
	last := time.Unix(0, l.lastActive.Load())
	if _, err := m.st.UpdateSandbox(context.Background(), l.id, func(sb *store.Sandbox) error {
		sb.LastActive = last
		return nil
	}); err != nil {
		m.log.Error("record a sandbox left running", "sandbox", l.id, "err", err)
	}
	m.mu.Lock()
	delete(m.live, l.id)
	m.mu.Unlock()
	m.log.Info("sandbox left running for the next hutch serve", "sandbox", l.id, "tenant", l.tenant)
}
