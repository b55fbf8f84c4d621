package daemon

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/sandbox"
	"github.com/hutch-sandbox/hutch/internal/store"
)

// Isolation tiers in hutch serve. A sandbox's tier is its policy's, or
// the daemon's default (Config.DefaultTier) when the policy names none;
// it is resolved before anything else of the policy is looked at, so that
// a warm pool's sandboxes are of the tier their policy resolves to and a
// create takes one only if the tiers match (the tier is part of the
// normalized policy pools compare). A tier weaker than Config.MinTier is
// refused, and so is one the daemon has no runtime for (Config.Runtimes):
// a sandbox never runs in another tier than its record says (S2).

// DefaultRuntimes are the tiers every hutch serve runs: the namespace
// tier. hutch serve adds the gVisor tier (internal/gvisor) when it finds
// a runsc of the pinned version.
func DefaultRuntimes() map[string]sandbox.Runtime {
	return map[string]sandbox.Runtime{policy.TierNamespace: sandbox.Namespaces{}}
}

// checkTiers fills in c's tiers and checks them: known tiers, the default
// not weaker than the minimum, a runtime of the tier its key names for
// each entry of Runtimes, and one for the default tier (a daemon that
// failed every create of the default, or ran it weaker, would be worse
// than none).
func (c *Config) checkTiers() error {
	if c.Runtimes == nil {
		c.Runtimes = DefaultRuntimes()
	}
	for _, t := range slices.Sorted(maps.Keys(c.Runtimes)) {
		if err := policy.CheckTier(t); err != nil {
			return fmt.Errorf("daemon config: runtimes: %v: %w", err, ErrInvalid)
		}
		if rt := c.Runtimes[t]; rt == nil || rt.Tier() != t {
			return fmt.Errorf("daemon config: runtimes: the runtime of tier %s is not that tier's: %w", t, ErrInvalid)
		}
	}
	if c.MinTier == "" {
		c.MinTier = policy.Tiers[0]
	}
	if err := policy.CheckTier(c.MinTier); err != nil {
		return fmt.Errorf("daemon config: minimum tier (--min-tier): %v: %w", err, ErrInvalid)
	}
	if c.DefaultTier == "" {
		c.DefaultTier = policy.StrongerTier(policy.DefaultTier, c.MinTier)
	}
	if err := policy.CheckTier(c.DefaultTier); err != nil {
		return fmt.Errorf("daemon config: default tier (--default-tier): %v: %w", err, ErrInvalid)
	}
	if !policy.TierAtLeast(c.DefaultTier, c.MinTier) {
		return fmt.Errorf("daemon config: the default tier %s is weaker than the minimum tier %s: every create without a tier would be refused (hutch serve --default-tier %s, or a weaker --min-tier): %w",
			c.DefaultTier, c.MinTier, c.MinTier, ErrInvalid)
	}
	if c.Runtimes[c.DefaultTier] == nil {
		return fmt.Errorf("daemon config: default tier %s (hutch serve --default-tier, or --min-tier): %s: %w", c.DefaultTier, c.noRuntime(c.DefaultTier), ErrInvalid)
	}
	return nil
}

// noRuntime says that the daemon does not run tier, and which tiers it
// runs.
func (c *Config) noRuntime(tier string) string {
	if why := c.Unavailable[tier]; why != "" {
		return fmt.Sprintf("hutch serve does not run the %s tier: %s", tier, why)
	}
	return fmt.Sprintf("hutch serve does not run the %s tier (it runs: %s)", tier, strings.Join(slices.Sorted(maps.Keys(c.Runtimes)), ", "))
}

// resolveTier gives spec, a tenant's policy not yet normalized, the
// daemon's default tier when it names none.
func (m *Manager) resolveTier(spec *policy.Spec) {
	if spec.Tier == "" {
		spec.Tier = m.cfg.DefaultTier
	}
}

// checkTier refuses a sandbox of tier: unknown, weaker than the daemon's
// minimum, or one the daemon has no runtime for.
func (m *Manager) checkTier(tier string) error {
	if err := policy.CheckTier(tier); err != nil {
		return invalid("create sandbox: policy: tier: %v", err)
	}
	if !policy.TierAtLeast(tier, m.cfg.MinTier) {
		return invalid("create sandbox: policy: tier: %s is weaker than %s, the minimum tier of this daemon (hutch serve --min-tier %s)", tier, m.cfg.MinTier, m.cfg.MinTier)
	}
	if m.cfg.Runtimes[tier] == nil {
		return invalid("create sandbox: policy: tier: %s", m.cfg.noRuntime(tier))
	}
	return nil
}

// runtime is the runtime of tier; checkTier has checked that there is one.
func (m *Manager) runtime(tier string) (sandbox.Runtime, error) {
	rt := m.cfg.Runtimes[tier]
	if rt == nil {
		return nil, invalid("tier: %s", m.cfg.noRuntime(tier))
	}
	return rt, nil
}

// What the daemon does that a tier's sandboxes cannot yet: each is
// refused with an error of category ErrUnsupported naming the tier and
// what (S2), never dropped. The microvm tier's guest keeps its root and
// workspace in its own memory (no layer on the host to stack a
// snapshot's files under).
const (
	lackImage     = "an image as the root"
	lackFromFiles = "a start from a snapshot's files over the host's root (one over an image is served: its guest's root is the image's and the snapshot's layers)"
	lackVolumes   = "volumes"
	lackColdBoot  = "a pause without memory and a resume as a cold boot (a guest's boot ID is its kernel's)"
)

// tierLacks lists, for each tier that lacks any, what it lacks.
var tierLacks = map[string][]string{
	policy.TierMicroVM: {lackFromFiles, lackVolumes, lackColdBoot},
}

// fromMemory reports whether a sandbox of tier started from snap with
// volumes goes on from its source's saved memory (restoreCopy): the
// snapshot kept it, its source ran in tier, and it has no volumes (with
// them it boots afresh over the snapshot's files: the saved kernel knows
// only the source's mounts).
func fromMemory(snap *store.Snapshot, tier string, volumes int) bool {
	return snap != nil && snap.Memory > 0 && snap.Tier == tier && volumes == 0
}

// tierRefuses is the refusal of what, which a sandbox of tier cannot do
// in this version; nil when it can.
func tierRefuses(tier, what string) error {
	if slices.Contains(tierLacks[tier], what) {
		return fmt.Errorf("tier %s: %s: not supported in this version: %w", tier, what, ErrUnsupported)
	}
	return nil
}

// tierAllows refuses a create r (from snap, nil for none) of a sandbox of
// tier that asks for what the tier lacks.
func tierAllows(tier string, r CreateRequest, snap *store.Snapshot) error {
	for _, c := range []struct {
		asks bool
		what string
	}{
		{snap != nil && snap.Image == "" && !fromMemory(snap, tier, len(r.Volumes)), lackFromFiles},
		{len(r.Volumes) > 0, lackVolumes},
		{r.Lifecycle.PauseOnTimeout && r.Lifecycle.FilesOnly, lackColdBoot},
	} {
		if c.asks {
			if err := tierRefuses(tier, c.what); err != nil {
				return fmt.Errorf("create sandbox: %w", err)
			}
		}
	}
	return nil
}
