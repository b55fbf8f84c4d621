package daemon

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/policy"
)

func TestNewID(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		id := newID()
		if !validID(id) || len(id) != len(idPrefix)+idChars || strings.ToLower(id) != id {
			t.Fatalf("newID gave %q", id)
		}
		if seen[id] {
			t.Fatalf("newID gave %q twice", id)
		}
		seen[id] = true
	}
	for _, id := range []string{"", "sb-", "sb-aaaaaaaaaaa", "sb-aaaaaaaaaaaaa", "sb-AAAAAAAAAAAA", "sb-aaaaaaaaaaa1", "xx-aaaaaaaaaaaa", "sb-../../etc/x", "sb-aaaaaaaaaaa/"} {
		if validID(id) {
			t.Errorf("validID(%q) = true", id)
		}
	}
}

func TestConfigDefaults(t *testing.T) {
	c := Config{StateDir: "rel"}
	if err := c.withDefaults(); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(c.StateDir, "/") || c.DefaultTimeout != 5*time.Minute || c.MaxTimeout != 24*time.Hour || c.MaxSandboxes != 100 {
		t.Errorf("defaults: %+v", c)
	}
	for _, bad := range []Config{
		{},
		{StateDir: "/x", DefaultTimeout: time.Hour, MaxTimeout: time.Minute},
		{StateDir: "/x", MaxSandboxes: -1},
		{StateDir: "/x", DefaultTimeout: -time.Second},
	} {
		if err := bad.withDefaults(); !errors.Is(err, ErrInvalid) {
			t.Errorf("config %+v: %v, want ErrInvalid", bad, err)
		}
	}
}

func TestCheckLabels(t *testing.T) {
	many := map[string]string{}
	for i := range MaxLabels + 1 {
		many[strings.Repeat("k", i+1)] = ""
	}
	for _, tc := range []struct {
		labels map[string]string
		ok     bool
	}{
		{nil, true},
		{map[string]string{"team": "infra", "empty": ""}, true},
		{map[string]string{"": "v"}, false},
		{map[string]string{"a\nb": "v"}, false},
		{map[string]string{"\xff": "v"}, false},
		{map[string]string{strings.Repeat("k", MaxLabelKey+1): "v"}, false},
		{map[string]string{"k": strings.Repeat("v", MaxLabelValue+1)}, false},
		{map[string]string{"k": "\x00"}, false},
		{many, false},
	} {
		err := CheckLabels("labels", tc.labels)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrInvalid)) {
			t.Errorf("checkLabels(%.40q): %v", tc.labels, err)
		}
	}
}

func TestCheckEnv(t *testing.T) {
	for _, tc := range []struct {
		env map[string]string
		ok  bool
	}{
		{nil, true},
		{map[string]string{"A": "1", "lower_case": "", "B": "x=y"}, true},
		{map[string]string{"": "v"}, false},
		{map[string]string{"A=B": "v"}, false},
		{map[string]string{"A\x00": "v"}, false},
		{map[string]string{"A": "v\x00"}, false},
		{map[string]string{"A": strings.Repeat("v", MaxEnvBytes)}, false},
	} {
		err := CheckEnv("env", tc.env)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrInvalid)) {
			t.Errorf("checkEnv(%.40q): %v", tc.env, err)
		}
	}
}

func TestEnviron(t *testing.T) {
	got := environ(policy.Env{Pass: []string{"PATH", "SECRET"}, Set: map[string]string{"A": "policy", "B": "policy"}},
		map[string]string{"B": "request", "C": "request"})
	want := []string{"A=policy", "B=request", "C=request", "HOME=/root", "PATH=" + defaultPath}
	if !slices.Equal(got, want) {
		t.Errorf("environ: %q, want %q", got, want)
	}
	got = environ(policy.Env{Set: map[string]string{"HOME": "/work", "PATH": "/bin"}}, nil)
	if want := []string{"HOME=/work", "PATH=/bin"}; !slices.Equal(got, want) {
		t.Errorf("environ: %q, want %q", got, want)
	}
}

// TestServePolicy: what a tenant may not ask of hutch serve.
func TestServePolicy(t *testing.T) {
	no := false
	for _, tc := range []struct {
		name       string
		spec       policy.Spec
		noInternet bool
		want       string // "" for allowed
	}{
		{"defaults", policy.Spec{}, false, ""},
		{"every host", policy.Spec{Network: policy.Network{AllowedDomains: []string{"*"}}}, false, ""},
		{"every host, no internet", policy.Spec{Network: policy.Network{AllowedDomains: []string{"a.example", "*:8080"}}}, true, `allowed_domains[1]: "*:8080"`},
		{"named hosts, no internet", policy.Spec{Network: policy.Network{AllowedDomains: []string{"*.example.com"}}}, true, ""},
		{"more denies", policy.Spec{Filesystem: policy.Filesystem{DenyRead: []string{"/srv"}, DenyWrite: []string{"/w/x"}}}, false, ""},
		{"limits", policy.Spec{Resources: policy.Resources{MemoryBytes: 64 << 20, Pids: 100}}, false, ""},
		{"no network", policy.Spec{Network: policy.Network{Mode: "none", AllowHost: &no}}, false, ""},
		{"proxy", policy.Spec{Network: policy.Network{AllowedDomains: []string{"example.com"}}}, false, ""},
		{"host network", policy.Spec{Network: policy.Network{Mode: "host"}}, false, "network.mode"},
		{"root", policy.Spec{Root: "/srv/rootfs"}, false, "root"},
		{"allow_write", policy.Spec{Filesystem: policy.Filesystem{AllowWrite: []string{"/srv"}}}, false, "allow_write"},
		{"allow_read", policy.Spec{Filesystem: policy.Filesystem{AllowRead: []string{"/root/.ssh"}}}, false, "allow_read"},
		{"no default denies", policy.Spec{Filesystem: policy.Filesystem{NoDefaultDenies: true}}, false, "no_default_denies"},
		{"best effort", policy.Spec{BestEffort: true}, false, "best_effort"},
		{"home persist", policy.Spec{Filesystem: policy.Filesystem{Home: "persist"}}, false, "filesystem.home"},
		{"approvals", policy.Spec{Approvals: policy.Approvals{Preset: "read-only"}}, false, ""},
		{"on_unknown", policy.Spec{Network: policy.Network{OnUnknown: "ask"}}, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := clonePolicy(tc.spec)
			s.Filesystem.Workspace = "/w"
			if err := s.Normalize("/w", ""); err != nil {
				t.Fatal(err)
			}
			err := servePolicy(s, tc.noInternet)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.want != "" && (!errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("got %v, want ErrInvalid mentioning %q", err, tc.want)
			}
		})
	}
}

// TestClonePolicy: normalizing the manager's copy leaves the caller's
// policy as it was.
func TestClonePolicy(t *testing.T) {
	orig := policy.Spec{
		Filesystem: policy.Filesystem{DenyRead: []string{"rel"}, DenyWrite: []string{"rel2"}},
		Network:    policy.Network{AllowedDomains: []string{"EXAMPLE.com"}},
		Env:        policy.Env{Set: map[string]string{"A": "1"}},
	}
	c := clonePolicy(orig)
	if err := c.Normalize("/w", ""); err != nil {
		t.Fatal(err)
	}
	c.Env.Set["B"] = "2"
	if orig.Filesystem.DenyRead[0] != "rel" || orig.Filesystem.DenyWrite[0] != "rel2" || orig.Network.AllowedDomains[0] != "EXAMPLE.com" || len(orig.Env.Set) != 1 {
		t.Errorf("the caller's policy changed: %+v", orig)
	}
}

// TestResourceMaxima: every size that makes the host hold memory for a
// sandbox — its memory limit, its writable root, its /tmp and /dev/shm —
// has a default and a maximum; a policy beyond one is refused naming the
// field and the flag.
func TestResourceMaxima(t *testing.T) {
	c := Config{StateDir: t.TempDir(), MaxTmp: 512 << 20}
	if err := c.withDefaults(); err != nil {
		t.Fatal(err)
	}
	m := &Manager{cfg: c, sbRoot: t.TempDir()}
	spec, _, err := m.prepare(CreateRequest{}, DefaultWorkspace)
	if err != nil {
		t.Fatal(err)
	}
	if r := spec.Resources; r.MemoryBytes != 1<<30 || r.DiskBytes != 1<<30 || r.TmpBytes != policy.DefaultTmpBytes {
		t.Errorf("defaults: %+v", r)
	}
	// A maximum below the default tmp size lowers it.
	m.cfg.MaxTmp = 64 << 20
	if spec, _, err := m.prepare(CreateRequest{}, DefaultWorkspace); err != nil || spec.Resources.TmpBytes != 64<<20 {
		t.Errorf("tmp size under a 64m maximum: %d, %v", spec.Resources.TmpBytes, err)
	}
	for _, tc := range []struct {
		r    policy.Resources
		want string
	}{
		{policy.Resources{TmpBytes: 100 << 40}, "resources.tmp_size: 100t is above the maximum of 64m (hutch serve --max-tmp-size)"},
		{policy.Resources{MemoryBytes: 17 << 30}, "resources.memory: 17g is above the maximum of 16g (hutch serve --max-memory)"},
		{policy.Resources{DiskBytes: 1 << 40}, "resources.disk: 1t is above the maximum of 16g (hutch serve --max-disk)"},
	} {
		var p policy.Spec
		p.Resources = tc.r
		_, _, err := m.prepare(CreateRequest{Policy: p}, DefaultWorkspace)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want ErrInvalid with %q", tc.r, err, tc.want)
		}
	}
}
