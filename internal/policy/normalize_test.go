package policy

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestNormalize(t *testing.T) {
	const cwd, home = "/home/u/proj", "/home/u"
	defaults := Resources{Pids: DefaultPids, TmpBytes: DefaultTmpBytes}
	tests := []struct {
		name string
		in   Spec
		want Spec
	}{
		{
			name: "zero spec gets defaults",
			in:   Spec{Filesystem: Filesystem{NoDefaultDenies: true}},
			want: Spec{
				Root:       "host",
				Filesystem: Filesystem{Workspace: cwd, NoDefaultDenies: true},
				Network:    Network{Mode: "none"},
				Resources:  defaults,
			},
		},
		{
			name: "paths expanded, made absolute, cleaned and deduplicated",
			in: Spec{
				Root: "rootfs/",
				Filesystem: Filesystem{
					Workspace:       "~/src/../src/app/",
					AllowWrite:      []string{"~", "build", "./build/", "/tmp//x", "~/src/app"},
					DenyRead:        []string{"~/.secret", "/etc/../etc/secret", "/etc/secret"},
					AllowRead:       []string{"~/.ssh/known_hosts"},
					DenyWrite:       []string{".env", "/abs/file"},
					NoDefaultDenies: true,
				},
				Network: Network{AllowedDomains: []string{"GitHub.com", "github.com"}},
				Env:     Env{Pass: []string{"A", "B", "A"}},
			},
			want: Spec{
				Root: "/home/u/proj/rootfs",
				Filesystem: Filesystem{
					Workspace:       "/home/u/src/app",
					AllowWrite:      []string{"/home/u", "/home/u/proj/build", "/tmp/x"},
					DenyRead:        []string{"/home/u/.secret", "/etc/secret"},
					AllowRead:       []string{"/home/u/.ssh/known_hosts"},
					DenyWrite:       []string{"/home/u/proj/.env", "/abs/file"},
					NoDefaultDenies: true,
				},
				Network:   Network{Mode: "proxy", AllowedDomains: []string{"github.com"}},
				Env:       Env{Pass: []string{"A", "B"}},
				Resources: defaults,
			},
		},
		{
			name: "default denies come first",
			in:   Spec{Filesystem: Filesystem{DenyRead: []string{"~/.ssh", "/data/secret"}}},
			want: Spec{
				Root: "host",
				Filesystem: Filesystem{
					Workspace: cwd,
					DenyRead:  append(DefaultDenyRead(home), "/data/secret"),
				},
				Network:   Network{Mode: "none"},
				Resources: defaults,
			},
		},
		{
			name: "explicit values kept",
			in: Spec{
				Root:       "host",
				Filesystem: Filesystem{Workspace: "/elsewhere", NoDefaultDenies: true},
				Network:    Network{Mode: "none"},
				Resources:  Resources{MemoryBytes: 512 * mib, CPUs: 2, Pids: 100, Timeout: time.Minute, TmpBytes: 8 * mib},
			},
			want: Spec{
				Root:       "host",
				Filesystem: Filesystem{Workspace: "/elsewhere", NoDefaultDenies: true},
				Network:    Network{Mode: "none"},
				Resources:  Resources{MemoryBytes: 512 * mib, CPUs: 2, Pids: 100, Timeout: time.Minute, TmpBytes: 8 * mib},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.in
			if err := got.Normalize(cwd, home); err != nil {
				t.Fatalf("Normalize: %v", err)
			}
			if tt.want.Filesystem.Home == "" {
				tt.want.Filesystem.Home = DefaultHome // every mode but the default is in the input
			}
			if tt.want.Tier == "" {
				tt.want.Tier = DefaultTier
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Normalize\n got: %+v\nwant: %+v", got, tt.want)
			}
			again := got
			again.Filesystem.DenyRead = append([]string(nil), got.Filesystem.DenyRead...)
			if err := again.Normalize(cwd, home); err != nil || !reflect.DeepEqual(again, got) {
				t.Errorf("Normalize is not idempotent:\n once: %+v\ntwice: %+v (%v)", got, again, err)
			}
		})
	}
}

func TestNormalizeNoMemoryDefault(t *testing.T) {
	var s Spec
	if err := s.Normalize("/w", "/home/u"); err != nil {
		t.Fatal(err)
	}
	if s.Resources.MemoryBytes != 0 || s.Resources.CPUs != 0 {
		t.Errorf("memory = %d, cpus = %g by default, want no limit", s.Resources.MemoryBytes, s.Resources.CPUs)
	}
}

func TestNormalizeErrors(t *testing.T) {
	tests := []struct {
		name      string
		in        Spec
		cwd, home string
		want      string
	}{
		{"relative cwd", Spec{}, "work", "/home/u", `normalize policy: working directory "work" is not absolute`},
		{"relative home", Spec{}, "/w", "home", `normalize policy: home directory "home" is not absolute`},
		{"tilde without home", Spec{Filesystem: Filesystem{DenyRead: []string{"/a", "~/.x"}}}, "/w", "",
			`filesystem.deny_read[1]: cannot expand "~/.x": home directory unknown`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.in.Normalize(tt.cwd, tt.home)
			if err == nil || err.Error() != tt.want {
				t.Errorf("Normalize error = %v, want %s", err, tt.want)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error %v does not match ErrInvalid", err)
			}
		})
	}
}

// validSpec returns a normalized Spec that passes Validate.
func validSpec(t *testing.T) Spec {
	t.Helper()
	s := Spec{Env: Env{Pass: []string{"GOPATH"}, Set: map[string]string{"CI": "1"}}}
	if err := s.Normalize(t.TempDir(), "/home/u"); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestValidate(t *testing.T) {
	if err := validSpec(t).Validate(); err != nil {
		t.Fatalf("Validate of a normalized spec: %v", err)
	}
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		modify func(*Spec)
		want   string
	}{
		{"root relative", func(s *Spec) { s.Root = "rootfs" }, `root: must be "host", an absolute directory or image:REF, got "rootfs"`},
		{"root missing", func(s *Spec) { s.Root = "/nonexistent/rootfs" }, `root: "/nonexistent/rootfs" does not exist`},
		{"root file", func(s *Spec) { s.Root = file }, `root: "` + file + `" is not a directory`},
		{"workspace empty", func(s *Spec) { s.Filesystem.Workspace = "" }, `filesystem.workspace: must be an absolute path, got ""`},
		{"workspace missing", func(s *Spec) { s.Filesystem.Workspace = "/nonexistent/ws" }, `filesystem.workspace: "/nonexistent/ws" does not exist`},
		{"workspace file", func(s *Spec) { s.Filesystem.Workspace = file }, `filesystem.workspace: "` + file + `" is not a directory`},
		{"allow_write relative", func(s *Spec) { s.Filesystem.AllowWrite = []string{"/ok", "build"} }, `filesystem.allow_write[1]: must be an absolute path, got "build"`},
		{"deny_read relative", func(s *Spec) { s.Filesystem.DenyRead = []string{"~/.ssh"} }, `filesystem.deny_read[0]: must be an absolute path, got "~/.ssh"`},
		{"allow_read relative", func(s *Spec) { s.Filesystem.AllowRead = []string{"x"} }, `filesystem.allow_read[0]: must be an absolute path, got "x"`},
		{"deny_write pattern", func(s *Spec) { s.Filesystem.DenyWrite = []string{"/w/*.env"} }, `filesystem.deny_write[0]: "/w/*.env" is a pattern; hutch takes literal paths only`},
		{"workspace_at with the host's root", func(s *Spec) { s.Filesystem.WorkspaceAt = "/src" }, `filesystem.workspace_at: only a sandbox from an image (root: image:REF) has its workspace elsewhere than at its host path (root is "host")`},
		{"workspace_at over /usr", func(s *Spec) { s.Root = "image:x"; s.Filesystem.WorkspaceAt = "/usr" }, `filesystem.workspace_at: "/usr" would cover the image's system files or the sandbox's own filesystems`},
		{"workspace_at relative", func(s *Spec) { s.Root = "image:x"; s.Filesystem.WorkspaceAt = "src" }, `filesystem.workspace_at: must be a clean absolute path in the sandbox, got "src"`},
		{"home", func(s *Spec) { s.Filesystem.Home = "rw" }, `filesystem.home: unknown home "rw" (allowed: "ro", "tmp", "persist")`},
		{"mode", func(s *Spec) { s.Network.Mode = "wifi" }, `network.mode: unknown mode "wifi" (allowed: "none", "proxy", "host")`},
		{"mode empty", func(s *Spec) { s.Network.Mode = "" }, `network.mode: unknown mode "" (allowed: "none", "proxy", "host")`},
		{"secret needs proxy", func(s *Spec) { s.Secrets = []Secret{{Name: "GH", Hosts: []string{"github.com"}, From: "env:GH"}} }, `secrets: need network mode "proxy" (the proxy puts their values in), got "none"`},
		{"secret twice", func(s *Spec) {
			s.Network.Mode = "proxy"
			s.Secrets = []Secret{{Name: "GH", Hosts: []string{"github.com"}, From: "env:GH"}, {Name: "GH", Hosts: []string{"x.test"}, From: "env:GH"}}
		}, `secrets[1].name: GH is already the name of secrets[0]`},
		{"host refused", func(s *Spec) { f := false; s.Network.Mode = "host"; s.Network.AllowHost = &f }, `network.mode: "host" is refused: the policy says network.allow_host: false`},
		{"cidr", func(s *Spec) { s.Network.AllowedCIDRs = []string{"10.0.0.0/8:22", "[fd00::/8]:x"} }, `network.allowed_cidrs[1]: invalid CIDR "[fd00::/8]:x": port must be a number from 1 to 65535`},
		{"private", func(s *Spec) { s.Network.AllowPrivate = []string{"127.0.0.1"} }, `network.allow_private[0]: invalid CIDR "127.0.0.1": want an address range like 10.0.0.0/8 or fd00::/8`},
		{"pin", func(s *Spec) { s.Network.Hosts = []string{"*.x.test:1.2.3.4"} }, `network.hosts[0]: invalid host pin "*.x.test:1.2.3.4": wildcards cannot be pinned`},
		{"allowed domain", func(s *Spec) { s.Network.AllowedDomains = []string{"*", "a*.com"} }, `network.allowed_domains[1]: invalid domain "a*.com": wildcards are allowed only as a leading "*." (e.g. *.example.com)`},
		{"denied domain", func(s *Spec) { s.Network.DeniedDomains = []string{"*", "x.com:99999"} }, `network.denied_domains[1]: invalid domain "x.com:99999": port must be a number from 1 to 65535, or * for every port`},
		{"env pass", func(s *Spec) { s.Env.Pass = []string{"A=B"} }, `env.pass[0]: invalid variable name "A=B": names cannot contain "="`},
		{"env set name", func(s *Spec) { s.Env.Set = map[string]string{"": "x"} }, `env.set: empty variable name`},
		{"env set value", func(s *Spec) { s.Env.Set = map[string]string{"A": "a\x00b"} }, `env.set.A: value must not contain a NUL byte`},
		{"memory small", func(s *Spec) { s.Resources.MemoryBytes = mib }, `resources.memory: 1m is below the minimum of 4m`},
		{"memory negative", func(s *Spec) { s.Resources.MemoryBytes = -1 }, `resources.memory: -1 is below the minimum of 4m`},
		{"tmp zero", func(s *Spec) { s.Resources.TmpBytes = 0 }, `resources.tmp_size: 0 is below the minimum of 1m`},
		{"tmp small", func(s *Spec) { s.Resources.TmpBytes = 1000 }, `resources.tmp_size: 1000 is below the minimum of 1m`},
		{"timeout", func(s *Spec) { s.Resources.Timeout = -time.Second }, `resources.timeout: must not be negative, got -1s`},
		{"pids", func(s *Spec) { s.Resources.Pids = 4 }, `resources.pids: 4 is below the minimum of 8`},
		{"cpus negative", func(s *Spec) { s.Resources.CPUs = -1 }, `resources.cpus: must be a positive number, got -1`},
		{"cpus nan", func(s *Spec) { s.Resources.CPUs = math.NaN() }, `resources.cpus: must be a positive number, got NaN`},
		{"two problems", func(s *Spec) { s.Resources.Pids = 1; s.Network.Mode = "x" },
			"network.mode: unknown mode \"x\" (allowed: \"none\", \"proxy\", \"host\")\nresources.pids: 1 is below the minimum of 8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := validSpec(t)
			tt.modify(&s)
			err := s.Validate()
			if err == nil || err.Error() != tt.want {
				t.Fatalf("Validate error = %v\nwant %s", err, tt.want)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error %v does not match ErrInvalid", err)
			}
		})
	}
}

func TestValidateAllowsNoLimits(t *testing.T) {
	s := validSpec(t)
	s.Resources = Resources{TmpBytes: MinTmpBytes}
	s.Root = t.TempDir()
	if err := s.Validate(); err != nil {
		t.Errorf("Validate with no limits and a directory root: %v", err)
	}
}

func TestDenyWriteRules(t *testing.T) {
	s := Spec{Filesystem: Filesystem{
		Workspace:  "/w",
		AllowWrite: []string{"/tmp/cache", "/w"},
		DenyWrite:  []string{"/w/.env"},
	}}
	var want []string
	for _, n := range DefaultDenyWrite() {
		want = append(want, n.Name)
	}
	want = append(want, "/w/.env")
	if got := s.DenyWriteRules(); !reflect.DeepEqual(got, want) {
		t.Errorf("DenyWriteRules = %q, want %q", got, want)
	}
	if got, want := s.WritableRoots(), []string{"/w", "/tmp/cache"}; !reflect.DeepEqual(got, want) {
		t.Errorf("WritableRoots = %q, want %q", got, want)
	}
	s.Filesystem.NoDefaultDenies = true
	if got, want := s.DenyWriteRules(), []string{"/w/.env"}; !reflect.DeepEqual(got, want) {
		t.Errorf("DenyWriteRules with no_default_denies = %q, want %q", got, want)
	}
}

func TestFormatRoundTrip(t *testing.T) {
	specs := map[string]Spec{
		"zero":       {},
		"normalized": {},
		"full": {
			Root: "/srv/root fs",
			Filesystem: Filesystem{
				Workspace:       "/w",
				AllowWrite:      []string{"/tmp/a: b", "/x#y"},
				DenyRead:        []string{"/etc/secret", "/data/'quoted'"},
				AllowRead:       []string{"/etc/secret/public"},
				DenyWrite:       []string{"/w/.env"},
				NoDefaultDenies: true,
			},
			Network: Network{Mode: "none", AllowedDomains: []string{"*.example.com", "[::1]:443"}, DeniedDomains: []string{"*:22"}},
			Env: Env{Pass: []string{"GOPATH", "MYAPP_*"}, Set: map[string]string{
				"NUM": "1", "BOOL": "true", "NULLISH": "null", "EMPTY": "", "MULTI": "a\nb", "SPACE": " x ",
			}},
			Resources:  Resources{MemoryBytes: 3*gib/2 + 1, CPUs: 0.25, Pids: 64, Timeout: 90*time.Minute + 500*time.Millisecond, TmpBytes: 64 * mib},
			BestEffort: true,
		},
	}
	n := specs["normalized"]
	if err := n.Normalize("/w", "/home/u"); err != nil {
		t.Fatal(err)
	}
	specs["normalized"] = n
	for name, s := range specs {
		t.Run(name, func(t *testing.T) {
			out, err := s.Format()
			if err != nil {
				t.Fatalf("Format: %v", err)
			}
			back, err := Parse("effective.yaml", out)
			if err != nil {
				t.Fatalf("Parse(Format()): %v\n%s", err, out)
			}
			if !reflect.DeepEqual(back, s) {
				t.Errorf("round trip changed the spec\n got: %+v\nwant: %+v\n%s", back, s, out)
			}
		})
	}
}

func TestFormatText(t *testing.T) {
	s := Spec{
		Root:       "host",
		Filesystem: Filesystem{Workspace: "/w", AllowWrite: []string{"/tmp/x"}},
		Network:    Network{Mode: "none"},
		Resources:  Resources{MemoryBytes: 512 * mib, Timeout: 30 * time.Second, TmpBytes: 256 * mib, Pids: 4096},
	}
	out, err := s.Format()
	if err != nil {
		t.Fatal(err)
	}
	want := `root: host
filesystem:
  workspace: /w
  allow_write:
    - /tmp/x
  deny_read: []
  allow_read: []
  deny_write: []
  no_default_denies: false
network:
  mode: none
  allowed_domains: []
  denied_domains: []
  allowed_cidrs: []
  allow_private: []
  hosts: []
secrets: []
env:
  pass: []
  set: {}
resources:
  memory: 512m
  pids: 4096
  timeout: 30s
  tmp_size: 256m
best_effort: false
`
	if string(out) != want {
		t.Errorf("Format:\n%s\nwant:\n%s", out, want)
	}
}

func TestValidateRefusesSystemDirs(t *testing.T) {
	for _, dir := range []string{"/", "/usr", "/etc", "/var"} {
		s := validSpec(t)
		s.Filesystem.Workspace = dir
		if err := s.Validate(); err == nil || !strings.Contains(err.Error(), "filesystem.workspace") {
			t.Errorf("workspace %s: Validate = %v, want an error naming filesystem.workspace", dir, err)
		}
		s = validSpec(t)
		s.Filesystem.AllowWrite = []string{dir}
		if err := s.Validate(); err == nil || !strings.Contains(err.Error(), "filesystem.allow_write[0]") {
			t.Errorf("allow_write %s: Validate = %v, want an error naming filesystem.allow_write[0]", dir, err)
		}
	}
}

// TestNormalizeSecrets: a secret reads hutch's variable of its own name
// unless told otherwise, a file it comes from is hidden from the sandbox,
// and a secret makes the network mode "proxy".
func TestNormalizeSecrets(t *testing.T) {
	s := Spec{Secrets: []Secret{
		{Name: "GH", Hosts: []string{"API.GitHub.com", "api.github.com"}},
		{Name: "KEY", Hosts: []string{"*.example.com"}, From: "file:~/keys/key.txt"},
	}}
	if err := s.Normalize("/w", "/home/u"); err != nil {
		t.Fatal(err)
	}
	if s.Network.Mode != "proxy" {
		t.Errorf("mode = %q, want proxy", s.Network.Mode)
	}
	if got := s.Secrets[0]; got.From != "env:GH" || !reflect.DeepEqual(got.Hosts, []string{"api.github.com"}) {
		t.Errorf("secret 0 = %+v, want from env:GH and one lower-case host", got)
	}
	if got := s.Secrets[1].From; got != "file:/home/u/keys/key.txt" {
		t.Errorf("secret 1 from = %q, want the expanded path", got)
	}
	if !slices.Contains(s.Filesystem.DenyRead, "/home/u/keys/key.txt") {
		t.Errorf("deny_read %q lacks the secret's file", s.Filesystem.DenyRead)
	}
	if err := s.Validate(); err != nil && !strings.Contains(err.Error(), "workspace") {
		t.Errorf("Validate: %v", err)
	}
}
