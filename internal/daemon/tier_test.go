package daemon

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/sandbox"
	"github.com/hutch-sandbox/hutch/internal/store"
)

// nsState is the key of Counts for a state of the namespace tier.
func nsState(state string) store.StateTier {
	return store.StateTier{State: state, Tier: policy.TierNamespace}
}

// errFakeStart is what fakeRuntime's Start answers.
var errFakeStart = errors.New("the test's runtime starts nothing")

// fakeRuntime stands for a tier the daemon does not run yet: it records
// the configs it was asked to start and starts nothing.
type fakeRuntime struct {
	tier string

	mu     sync.Mutex
	starts []sandbox.Config
}

func (f *fakeRuntime) Tier() string { return f.tier }

func (f *fakeRuntime) Run(context.Context, sandbox.Config) (sandbox.Result, error) {
	return sandbox.Result{}, errFakeStart
}

func (f *fakeRuntime) Start(c sandbox.Config) (sandbox.Instance, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.starts = append(f.starts, c)
	return nil, errFakeStart
}

// started returns the configs Start was called with.
func (f *fakeRuntime) started() []sandbox.Config {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]sandbox.Config(nil), f.starts...)
}

// TestConfigTiers: the default tier is namespace, or the minimum tier if
// stronger; a default weaker than the minimum, an unknown tier, a runtime
// under another tier's name and a default tier without a runtime (gvisor,
// today) are refused, the last with the message a create of it gets.
func TestConfigTiers(t *testing.T) {
	gv := func() map[string]sandbox.Runtime {
		return map[string]sandbox.Runtime{policy.TierNamespace: sandbox.Namespaces{}, policy.TierGVisor: &fakeRuntime{tier: policy.TierGVisor}}
	}
	for _, c := range []struct {
		name             string
		cfg              Config
		wantDef, wantMin string
		err              string // in the error; "" for none
	}{
		{"defaults", Config{}, policy.TierNamespace, policy.TierNamespace, ""},
		{"namespace named", Config{DefaultTier: "namespace", MinTier: "namespace"}, policy.TierNamespace, policy.TierNamespace, ""},
		{"default gvisor", Config{DefaultTier: "gvisor"}, "", "", "default tier gvisor (hutch serve --default-tier, or --min-tier): hutch serve does not run the gvisor tier (it runs: namespace)"},
		{"min gvisor", Config{MinTier: "gvisor"}, "", "", "default tier gvisor (hutch serve --default-tier, or --min-tier): hutch serve does not run the gvisor tier (it runs: namespace)"},
		{"default weaker than min", Config{DefaultTier: "namespace", MinTier: "gvisor"}, "", "", "the default tier namespace is weaker than the minimum tier gvisor"},
		{"unknown default", Config{DefaultTier: "kvm"}, "", "", `default tier (--default-tier): unknown tier "kvm"`},
		{"unknown min", Config{MinTier: "kvm"}, "", "", `minimum tier (--min-tier): unknown tier "kvm"`},
		{"gvisor run", Config{DefaultTier: "gvisor", Runtimes: gv()}, policy.TierGVisor, policy.TierNamespace, ""},
		{"min gvisor run", Config{MinTier: "gvisor", Runtimes: gv()}, policy.TierGVisor, policy.TierGVisor, ""},
		{"runtime of another tier", Config{Runtimes: map[string]sandbox.Runtime{policy.TierNamespace: &fakeRuntime{tier: policy.TierGVisor}}}, "", "", "the runtime of tier namespace is not that tier's"},
		{"runtime of an unknown tier", Config{Runtimes: map[string]sandbox.Runtime{"kvm": &fakeRuntime{tier: "kvm"}, policy.TierNamespace: sandbox.Namespaces{}}}, "", "", `unknown tier "kvm"`},
		{"no runtimes", Config{Runtimes: map[string]sandbox.Runtime{}}, "", "", "hutch serve does not run the namespace tier (it runs: )"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := c.cfg
			cfg.StateDir = "/x"
			err := cfg.withDefaults()
			switch {
			case c.err == "" && err != nil:
				t.Fatalf("withDefaults: %v", err)
			case c.err != "" && (!errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.err)):
				t.Fatalf("withDefaults = %v, want ErrInvalid with %q", err, c.err)
			case c.err == "" && (cfg.DefaultTier != c.wantDef || cfg.MinTier != c.wantMin):
				t.Fatalf("default tier %q, minimum %q; want %q, %q", cfg.DefaultTier, cfg.MinTier, c.wantDef, c.wantMin)
			}
		})
	}
}

// TestCheckTier: a create's tier below the minimum is refused naming both
// tiers and the flag; one without a runtime says that hutch serve does not
// run it yet.
func TestCheckTier(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		tier string
		err  string
	}{
		{Config{}, policy.TierNamespace, ""},
		{Config{}, policy.TierGVisor, "create sandbox: policy: tier: hutch serve does not run the gvisor tier (it runs: namespace)"},
		{Config{}, "kvm", `create sandbox: policy: tier: unknown tier "kvm" (allowed: "namespace", "gvisor", "microvm")`},
		{Config{MinTier: policy.TierGVisor, Runtimes: map[string]sandbox.Runtime{policy.TierGVisor: &fakeRuntime{tier: policy.TierGVisor}}}, policy.TierNamespace,
			"create sandbox: policy: tier: namespace is weaker than gvisor, the minimum tier of this daemon (hutch serve --min-tier gvisor)"},
		{Config{MinTier: policy.TierGVisor, Runtimes: map[string]sandbox.Runtime{policy.TierGVisor: &fakeRuntime{tier: policy.TierGVisor}}}, policy.TierGVisor, ""},
	} {
		cfg := c.cfg
		cfg.StateDir = "/x"
		if err := cfg.withDefaults(); err != nil {
			t.Fatal(err)
		}
		m := &Manager{cfg: cfg}
		err := m.checkTier(c.tier)
		switch {
		case c.err == "" && err != nil:
			t.Errorf("min %s, tier %s: %v", cfg.MinTier, c.tier, err)
		case c.err != "" && (!errors.Is(err, ErrInvalid) || err.Error() != c.err+": invalid"):
			t.Errorf("min %s, tier %s: %v, want %q", cfg.MinTier, c.tier, err, c.err)
		}
	}
}

// TestTierLacks: what the microvm tier lacks is refused as unsupported,
// naming the tier and what; the other tiers are refused none of it. A
// start from a snapshot of a microVM guest with its memory is not
// refused, nor one from the files of a snapshot of an image; one from
// the files of a snapshot of the host's root is.
func TestTierLacks(t *testing.T) {
	files := &store.Snapshot{ID: "snap-x", Tier: policy.TierNamespace}
	for _, c := range []struct {
		r    CreateRequest
		snap *store.Snapshot
		what string
	}{
		{CreateRequest{Snapshot: "snap-x"}, files, "a start from a snapshot's files"},
		{CreateRequest{Snapshot: "snap-x"}, &store.Snapshot{ID: "snap-x", Tier: policy.TierGVisor, Memory: 1}, "a start from a snapshot's files"},
		{CreateRequest{Volumes: []Volume{{}}}, nil, "volumes"},
		{CreateRequest{Lifecycle: Lifecycle{PauseOnTimeout: true, FilesOnly: true}}, nil, "a pause without memory"},
	} {
		err := tierAllows(policy.TierMicroVM, c.r, c.snap)
		if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "create sandbox: tier microvm: "+c.what) {
			t.Errorf("a create of tier microvm asking for %s: %v, want it unsupported, named", c.what, err)
		}
		for _, tier := range []string{policy.TierNamespace, policy.TierGVisor} {
			if err := tierAllows(tier, c.r, c.snap); err != nil {
				t.Errorf("a create of tier %s asking for %s: %v", tier, c.what, err)
			}
		}
	}
	if err := tierAllows(policy.TierMicroVM, CreateRequest{Lifecycle: Lifecycle{PauseOnTimeout: true}}, nil); err != nil {
		t.Errorf("a microvm sandbox paused in memory on its timeout: %v", err)
	}
	ofImage := &store.Snapshot{ID: "snap-x", Tier: policy.TierNamespace, Image: "sha256:0123"}
	if err := tierAllows(policy.TierMicroVM, CreateRequest{Snapshot: "snap-x"}, ofImage); err != nil {
		t.Errorf("a microvm sandbox started from the files of a snapshot of an image: %v", err)
	}
	withMemory := &store.Snapshot{ID: "snap-x", Tier: policy.TierMicroVM, Memory: 1}
	if err := tierAllows(policy.TierMicroVM, CreateRequest{Snapshot: "snap-x"}, withMemory); err != nil {
		t.Errorf("a microvm sandbox started from a microVM's snapshot with memory: %v", err)
	}
	if err := tierAllows(policy.TierMicroVM, CreateRequest{Snapshot: "snap-x", Volumes: []Volume{{}}}, withMemory); !errors.Is(err, ErrUnsupported) {
		t.Errorf("a microvm sandbox with volumes started from a microVM's snapshot with memory: %v, want it unsupported", err)
	}
	for _, what := range []string{lackFromFiles, lackColdBoot} {
		if err := tierRefuses(policy.TierMicroVM, what); !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "tier microvm: "+what+": not supported in this version") {
			t.Errorf("tier microvm, %s: %v", what, err)
		}
	}
}
