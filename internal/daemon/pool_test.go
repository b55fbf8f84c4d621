package daemon

import (
	"testing"

	"github.com/hutch-sandbox/hutch/internal/policy"
)

// testPool is a pool of p, as New makes it with the default tier, not
// started.
func testPool(t *testing.T, name string, p policy.Spec) *pool {
	t.Helper()
	return testTierPool(t, name, p, policy.DefaultTier)
}

// testTierPool is a pool of p in a daemon whose default tier is tier.
func testTierPool(t *testing.T, name string, p policy.Spec, tier string) *pool {
	t.Helper()
	key, ok := normalPolicy(p, tier)
	if !ok {
		t.Fatalf("pool %s: the policy does not normalize", name)
	}
	ref, _ := p.Image()
	return &pool{name: name, policy: p, key: key, ref: ref}
}

func TestWarmMatch(t *testing.T) {
	e2b := policy.Spec{Root: policy.ImagePrefix + "python:3", Filesystem: policy.Filesystem{Workspace: "/home/user"},
		Network: policy.Network{Mode: "proxy", AllowedDomains: []string{"*:80", "*:443"}}}
	m := &Manager{pools: []*pool{testPool(t, "", policy.Spec{}), testPool(t, "py", e2b)}}
	for _, c := range []struct {
		name string
		r    CreateRequest
		want string // the pool's name; "-" for none
	}{
		{"empty", CreateRequest{}, ""},
		{"labels, env and timeouts", CreateRequest{Labels: map[string]string{"a": "b"}, Env: map[string]string{"X": "1"}, Timeout: 1, IdleTimeout: 1}, ""},
		{"defaults spelled out", CreateRequest{Policy: policy.Spec{
			Root:       policy.DefaultRoot,
			Filesystem: policy.Filesystem{Workspace: DefaultWorkspace, DenyRead: []string{}},
			Network:    policy.Network{Mode: policy.DefaultNetworkMode, AllowedDomains: []string{}},
			Resources:  policy.Resources{Pids: policy.DefaultPids},
		}}, ""},
		{"HOME", CreateRequest{Env: map[string]string{"HOME": "/root"}}, "-"},
		{"allowed domain", CreateRequest{Policy: policy.Spec{Network: policy.Network{AllowedDomains: []string{"example.com"}}}}, "-"},
		{"memory", CreateRequest{Policy: policy.Spec{Resources: policy.Resources{MemoryBytes: 1 << 28}}}, "-"},
		{"policy timeout", CreateRequest{Policy: policy.Spec{Resources: policy.Resources{Timeout: 1}}}, "-"},
		{"workspace", CreateRequest{Policy: policy.Spec{Filesystem: policy.Filesystem{Workspace: "/src"}}}, "-"},
		{"env.set", CreateRequest{Policy: policy.Spec{Env: policy.Env{Set: map[string]string{"A": "1"}}}}, "-"},
		{"deny read", CreateRequest{Policy: policy.Spec{Filesystem: policy.Filesystem{DenyRead: []string{"/etc"}}}}, "-"},
		{"the template's", CreateRequest{Policy: e2b, Labels: map[string]string{"a": "b"}}, "py"},
		{"the template's, the image in its normal form", CreateRequest{Policy: func() policy.Spec {
			p := clonePolicy(e2b)
			p.Root = policy.ImagePrefix + "docker.io/library/python:3"
			return p
		}()}, "py"},
		{"another image", CreateRequest{Policy: func() policy.Spec {
			p := clonePolicy(e2b)
			p.Root = policy.ImagePrefix + "python:3.12"
			return p
		}()}, "-"},
		{"the template's image, another network", CreateRequest{Policy: func() policy.Spec {
			p := clonePolicy(e2b)
			p.Network = policy.Network{Mode: "none"}
			return p
		}()}, "-"},
		{"the template's image, hutch's workspace", CreateRequest{Policy: policy.Spec{Root: e2b.Root}}, "-"},
		{"the template's, PATH", CreateRequest{Policy: e2b, Env: map[string]string{"PATH": "/opt/bin"}}, "-"},
		{"the default, PATH", CreateRequest{Env: map[string]string{"PATH": "/opt/bin"}}, ""},
		{"the default tier named", CreateRequest{Policy: policy.Spec{Tier: policy.TierNamespace}}, ""},
		{"another tier", CreateRequest{Policy: policy.Spec{Tier: policy.TierGVisor}}, "-"},
		{"the template's, another tier", CreateRequest{Policy: func() policy.Spec {
			p := clonePolicy(e2b)
			p.Tier = policy.TierGVisor
			return p
		}()}, "-"},
	} {
		got := "-"
		if p := m.warmPool(c.r); p != nil {
			got = p.name
		}
		if got != c.want {
			t.Errorf("%s: the pool is %q, want %q", c.name, got, c.want)
		}
	}
}

// TestWarmMatchTier: in a daemon whose default tier is gvisor, the pool
// of the default policy is of gvisor; a create that names gvisor takes
// from it, one that names namespace does not.
func TestWarmMatchTier(t *testing.T) {
	m := &Manager{cfg: Config{DefaultTier: policy.TierGVisor}, pools: []*pool{testTierPool(t, "", policy.Spec{}, policy.TierGVisor)}}
	if m.pools[0].key.Tier != policy.TierGVisor {
		t.Fatalf("the default pool's tier is %q", m.pools[0].key.Tier)
	}
	for _, c := range []struct {
		name string
		r    CreateRequest
		want bool
	}{
		{"empty", CreateRequest{}, true},
		{"the default tier named", CreateRequest{Policy: policy.Spec{Tier: policy.TierGVisor}}, true},
		{"a default spelled out, no tier", CreateRequest{Policy: policy.Spec{Resources: policy.Resources{Pids: policy.DefaultPids}}}, true},
		{"the namespace tier", CreateRequest{Policy: policy.Spec{Tier: policy.TierNamespace}}, false},
	} {
		if got := m.warmPool(c.r) != nil; got != c.want {
			t.Errorf("%s: takes from the pool %v, want %v", c.name, got, c.want)
		}
	}
}

func TestWarmConfig(t *testing.T) {
	for _, c := range []struct {
		cfg Config
		ok  bool
	}{
		{Config{StateDir: "/x", Warm: 0}, true},
		{Config{StateDir: "/x", Warm: 100}, true},
		{Config{StateDir: "/x", Warm: -1}, false},
		{Config{StateDir: "/x", Warm: MaxWarm + 1, MaxSandboxes: 2000}, false},
		{Config{StateDir: "/x", Warm: 5, MaxSandboxes: 4}, false},
		{Config{StateDir: "/x", Warm: 1, Pools: []WarmPool{{Name: "a", Size: 2}, {Name: "b", Size: 3}}}, true},
		{Config{StateDir: "/x", Pools: []WarmPool{{Name: "", Size: 2}}}, false},
		{Config{StateDir: "/x", Pools: []WarmPool{{Name: "a", Size: 1}, {Name: "a", Size: 1}}}, false},
		{Config{StateDir: "/x", Pools: []WarmPool{{Name: "a", Size: 0}}}, false},
		{Config{StateDir: "/x", MaxSandboxes: 4, Pools: []WarmPool{{Name: "a", Size: 5}}}, false},
		{Config{StateDir: "/x", Warm: 600, MaxSandboxes: 2000, Pools: []WarmPool{{Name: "a", Size: 401}}}, false},
		{Config{StateDir: "/x", Pools: []WarmPool{{Name: "a", Size: 1, Policy: policy.Spec{Secrets: []policy.Secret{{Name: "T"}}}}}}, false},
	} {
		err := c.cfg.withDefaults()
		if (err == nil) != c.ok {
			t.Errorf("warm %d, max sandboxes %d: %v", c.cfg.Warm, c.cfg.MaxSandboxes, err)
		}
	}
}
