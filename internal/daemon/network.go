package daemon

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/store"
)

// Networker is what a front end needs to change the egress rules of a
// running sandbox; *Manager implements it.
type Networker interface {
	// UpdateNetwork replaces the network section of the policy of
	// tenant's sandbox id with nw, checked as a create's (operator as
	// CreateRequest.Operator), and returns it normalized.
	UpdateNetwork(ctx context.Context, tenant, id string, nw policy.Network, operator bool) (policy.Network, error)
}

var _ Networker = (*Manager)(nil)

// UpdateNetwork replaces the egress rules of tenant's running (or paused
// in memory) sandbox id with nw, which replaces its policy's network
// section whole: checked as a create's policy is (the daemon's policy
// rules, --no-internet, and for a tenant's request, operator false, the
// address guard's ranges a tenant may not open), recorded in its record,
// so that its answers and a start from disk agree, and put in force in
// its egress proxy at once (egress.Proxy.SetRules): every new connection
// obeys the new rules, and open ones the new rules refuse are closed;
// those they allow go on. The secrets the sandbox was given stay bound.
//
// network.on_unknown, when nw leaves it out, stays the sandbox's; one
// that would start or stop asking about unknown hosts is refused.
//
// A sandbox with the host's network has no proxy to change (ErrConflict);
// nw may not ask for it. Mode "none" makes the proxy refuse everything.
// Under gVisor a sandbox created offline (mode "none") has no way to its
// proxy at all, so it stays offline.
func (m *Manager) UpdateNetwork(ctx context.Context, tenant, id string, nw policy.Network, operator bool) (policy.Network, error) {
	if err := m.enter(); err != nil {
		return policy.Network{}, err
	}
	defer m.leave()
	l, err := m.running(ctx, tenant, id)
	if err != nil {
		return policy.Network{}, err
	}
	// One change of the sandbox at a time: a pause to disk records the
	// proxy's operator and reads the policy.
	l.pauseMu.Lock()
	defer l.pauseMu.Unlock()
	m.mu.Lock()
	stopping := l.stopping
	m.mu.Unlock()
	if stopping {
		return policy.Network{}, fmt.Errorf("sandbox %s is stopping: %w", id, ErrConflict)
	}
	if rt := m.remote(l.tier); rt != nil {
		return policy.Network{}, fmt.Errorf("sandbox %s: update network: not for sandboxes on %s (a pod's egress is its node's, set at its start): %w", id, rt.Remote(), ErrUnsupported)
	}
	if l.proxy == nil {
		return policy.Network{}, fmt.Errorf("sandbox %s: update network: it has the host's network, no egress proxy: %w", id, ErrConflict)
	}
	sb, err := m.row(ctx, tenant, id)
	if err != nil {
		return policy.Network{}, err
	}
	var spec policy.Spec
	if err := json.Unmarshal(sb.Spec, &spec); err != nil {
		return policy.Network{}, fmt.Errorf("sandbox %s: its policy: %w", id, err)
	}
	was := spec.Network.Mode
	// The proxy's hook of network.on_unknown is the sandbox's from its
	// start: a section that does not name it keeps it, one that would
	// change whether unknown hosts are asked about is refused.
	if nw.OnUnknown == "" {
		nw.OnUnknown = spec.Network.OnUnknown
	} else if (nw.OnUnknown == "ask") != (spec.Network.OnUnknown == "ask") {
		return policy.Network{}, invalid("sandbox %s: update network: network.on_unknown: %q cannot change on a running sandbox (it is %q); create one with it", id, nw.OnUnknown, spec.Network.OnUnknown)
	}
	spec.Network = nw
	if err := spec.Normalize(spec.Filesystem.Workspace, ""); err != nil {
		return policy.Network{}, invalid("sandbox %s: update network: policy: %s", id, oneLine(err))
	}
	if err := m.checkNetwork(spec, operator); err != nil {
		return policy.Network{}, fmt.Errorf("sandbox %s: update network: %w", id, err)
	}
	if was == "none" && spec.Network.Mode == "proxy" && (l.tier == policy.TierGVisor || l.tier == policy.TierMicroVM) {
		under := map[string]string{policy.TierGVisor: "under gVisor", policy.TierMicroVM: "in a microVM (no relay port)"}[l.tier]
		return policy.Network{}, fmt.Errorf("sandbox %s: update network: it was created offline (network mode none), and %s such a sandbox has no way to the egress proxy; create it with network rules to change them later: %w", id, under, ErrConflict)
	}
	if len(spec.Network.Headers) > 0 && !l.secrets {
		return policy.Network{}, invalid("sandbox %s: update network: network.headers: the sandbox was created without secrets or header rules, so its proxy cannot see its HTTPS requests (the sandbox trusts no CA of hutch's); create it with header rules to change them later", id)
	}
	rules, err := proxyRules(spec.Network, m.cfg.AllowPrivate, operator, l.proxy.Secrets())
	if err != nil {
		return policy.Network{}, fmt.Errorf("sandbox %s: update network: %w", id, err)
	}
	b, err := json.Marshal(spec)
	if err != nil {
		return policy.Network{}, err
	}
	if _, err := m.st.UpdateSandbox(ctx, id, func(sb *store.Sandbox) error {
		sb.Spec = b
		return nil
	}); err != nil {
		return policy.Network{}, fmt.Errorf("sandbox %s: update network: %w", id, err)
	}
	closed, err := l.proxy.SetRules(rules)
	if err != nil {
		return policy.Network{}, fmt.Errorf("sandbox %s: update network: %w", id, err)
	}
	m.mu.Lock()
	l.operator = operator
	m.mu.Unlock()
	if err := updateLasting(l.dir, func(ls *lasting) { ls.Operator = operator }); err != nil {
		m.log.Error("record the sandbox's egress rules for the next daemon", "sandbox", id, "err", err)
	}
	m.log.Info("sandbox network updated", "sandbox", id, "tenant", l.tenant, "mode", spec.Network.Mode,
		"allowed_domains", spec.Network.AllowedDomains, "allowed_cidrs", spec.Network.AllowedCIDRs, "denied_domains", spec.Network.DeniedDomains, "closed", closed)
	if l.ev != nil {
		l.ev.append(EventNetwork, map[string]any{"mode": spec.Network.Mode, "allowed_domains": spec.Network.AllowedDomains,
			"allowed_cidrs": spec.Network.AllowedCIDRs, "denied_domains": spec.Network.DeniedDomains, "closed": closed}, false)
	}
	return spec.Network, nil
}

// checkNetwork checks the network section of spec, a sandbox's
// normalized policy with a new one, as a create checks it.
func (m *Manager) checkNetwork(spec policy.Spec, operator bool) error {
	check := spec
	check.Filesystem.Workspace = m.sbRoot
	if err := check.Validate(); err != nil {
		return invalid("policy: %s", oneLine(err))
	}
	if err := servePolicy(spec, m.cfg.NoInternet); err != nil {
		return err
	}
	if !operator {
		return m.tenantNetwork(spec)
	}
	return nil
}
