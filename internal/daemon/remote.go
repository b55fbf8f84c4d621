package daemon

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/hutch-sandbox/hutch/internal/agent"
	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/sandbox"
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
	// Sweep ends the sandboxes a previous daemon of the same name left
	// running, at the daemon's start.
	Sweep(ctx context.Context) error
}

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
