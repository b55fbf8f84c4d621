package landlock

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// makeTree creates, under a new temporary directory, the entries listed:
// "d/" is a directory, "l -> target" a symbolic link ("{}" in the target
// stands for the tree), anything else an empty file. It returns the directory with symbolic links resolved.
func makeTree(t testing.TB, entries ...string) string {
	t.Helper()
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		var err error
		switch name, target, ok := strings.Cut(e, " -> "); {
		case ok:
			err = os.Symlink(strings.ReplaceAll(target, "{}", root), filepath.Join(root, name))
		case strings.HasSuffix(e, "/"):
			err = os.MkdirAll(filepath.Join(root, e), 0o755)
		default:
			err = os.WriteFile(filepath.Join(root, e), nil, 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestPlan(t *testing.T) {
	tree := []string{
		"a.txt", "bin/", "bin/sh",
		"etc/", "etc/passwd", "etc/shadow", "etc/ssl/", "etc/ssl/certs/", "etc/ssl/private/", "etc/ssl/private/key",
		"etc/mtab -> /proc/self/mounts", "etc/sneaky -> ../home/u/.ssh",
		"home/", "home/u/", "home/u/.bashrc", "home/u/.ssh/", "home/u/.ssh/id_ed25519", "home/u/src/",
		"home/u/tools/", "home/u/tools/run", "home/u/tools/token",
		"link -> etc",
	}
	const (
		rt  = readTreeAccess
		rf  = readFileAccess
		rd  = AccessReadDir
		rw  = writeTreeAccess
		dev = deviceAccess
	)
	all, _ := handled(maxABI)
	tests := []struct {
		name    string
		abi     int
		config  Config
		rules   map[string]uint64 // path relative to the tree ("" is the tree)
		dropped []string
	}{{
		name:   "no deny grants the root",
		abi:    7,
		config: Config{ReadOnly: []string{""}, ReadWrite: []string{"home/u/src"}},
		rules:  map[string]uint64{"": rt, "home/u/src": rw},
	}, {
		name: "deny paths are carved out",
		abi:  7,
		config: Config{
			ReadOnly:  []string{""},
			ReadWrite: []string{"home/u/src", "missing/dir"},
			Devices:   []string{"a.txt"},
			DenyRead:  []string{"etc/shadow", "etc/ssl/private", "home/u/.ssh", "nowhere/x", "etc/ssl/private/key"},
		},
		rules: map[string]uint64{
			"":               rd,
			"a.txt":          rf | dev,
			"bin":            rt,
			"etc":            rd,
			"etc/passwd":     rf,
			"etc/ssl":        rd,
			"etc/ssl/certs":  rt,
			"home":           rd,
			"home/u":         rd,
			"home/u/.bashrc": rf,
			"home/u/tools":   rt,
			"home/u/src":     rw,
			"missing/dir":    rw,
		},
	}, {
		name: "deeper deny path composes with a shallower one",
		abi:  7,
		config: Config{
			ReadOnly: []string{""},
			DenyRead: []string{"home/u/.ssh", "etc/shadow", "home/u/tools/token"},
		},
		rules: map[string]uint64{
			"":                 rd,
			"a.txt":            rf,
			"bin":              rt,
			"etc":              rd,
			"etc/passwd":       rf,
			"etc/ssl":          rt,
			"home":             rd,
			"home/u":           rd,
			"home/u/.bashrc":   rf,
			"home/u/src":       rt,
			"home/u/tools":     rd,
			"home/u/tools/run": rf,
		},
	}, {
		name: "deny path through a symbolic link is resolved",
		abi:  7,
		config: Config{
			ReadOnly: []string{""},
			DenyRead: []string{"link/shadow"},
		},
		rules: map[string]uint64{
			"":           rd,
			"a.txt":      rf,
			"bin":        rt,
			"etc":        rd,
			"etc/passwd": rf,
			"etc/ssl":    rt,
			"home":       rt,
		},
	}, {
		name: "read-only root inside a deny path wins",
		abi:  7,
		config: Config{
			ReadOnly: []string{"", "home/u/tools"},
			DenyRead: []string{"home", "home/u/tools/token"},
		},
		rules: map[string]uint64{
			"":                 rd,
			"a.txt":            rf,
			"bin":              rt,
			"etc":              rt,
			"home/u/tools":     rd,
			"home/u/tools/run": rf,
		},
	}, {
		name: "denied root is not granted",
		abi:  7,
		config: Config{
			ReadOnly: []string{"etc", "bin"},
			DenyRead: []string{"etc"},
		},
		rules: map[string]uint64{"bin": rt},
	}, {
		name: "read-only file root with a deny path below",
		abi:  7,
		config: Config{
			ReadOnly: []string{"a.txt"},
			DenyRead: []string{"a.txt/x"},
		},
		rules: map[string]uint64{"a.txt": rf},
	}, {
		name: "deny path inside a writable root is dropped",
		abi:  7,
		config: Config{
			ReadOnly:  []string{"etc"},
			ReadWrite: []string{"home/u"},
			DenyRead:  []string{"home/u/.ssh"},
		},
		rules:   map[string]uint64{"etc": rt, "home/u": rw},
		dropped: []string{"deny-read {}/home/u/.ssh: inside writable {}/home/u, not enforced by landlock"},
	}, {
		name:   "old ABI masks rights and reports what it lacks",
		abi:    2,
		config: Config{ReadOnly: []string{"bin"}, ReadWrite: []string{"etc"}, Devices: []string{"a.txt"}, Scope: true},
		rules: map[string]uint64{
			"bin":   rt,
			"etc":   rw,
			"a.txt": AccessReadFile | AccessWriteFile,
		},
		dropped: []string{
			"landlock ABI 2 < 3: truncation of files",
			"landlock ABI 2 < 5: ioctl on device files",
			"landlock ABI 2 < 6: abstract unix socket and signal scoping",
		},
	}, {
		name:    "ABI 5 without scope loses nothing",
		abi:     5,
		config:  Config{ReadWrite: []string{"etc"}},
		rules:   map[string]uint64{"etc": rw},
		dropped: nil,
	}, {
		name:    "ABI 5 with scope",
		abi:     5,
		config:  Config{ReadWrite: []string{"etc"}, Scope: true},
		rules:   map[string]uint64{"etc": rw},
		dropped: []string{"landlock ABI 5 < 6: abstract unix socket and signal scoping"},
	}, {
		name:   "newer ABI is used as the newest known",
		abi:    9,
		config: Config{ReadWrite: []string{"etc"}, Scope: true},
		rules:  map[string]uint64{"etc": all &^ AccessIoctlDev},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := makeTree(t, tree...)
			abs := func(ps []string) []string {
				var out []string
				for _, p := range ps {
					out = append(out, filepath.Join(root, p))
				}
				return out
			}
			c := Config{
				ReadOnly:  abs(tt.config.ReadOnly),
				ReadWrite: abs(tt.config.ReadWrite),
				Devices:   abs(tt.config.Devices),
				DenyRead:  abs(tt.config.DenyRead),
				Scope:     tt.config.Scope,
			}
			rules, dropped, err := Plan(c, tt.abi)
			if err != nil {
				t.Fatal(err)
			}
			fsAccess, _ := handled(tt.abi)
			var want []Rule
			for p, a := range tt.rules {
				if a&fsAccess != 0 {
					want = append(want, Rule{Path: filepath.Join(root, p), Access: a & fsAccess})
				}
			}
			slices.SortFunc(want, func(a, b Rule) int { return strings.Compare(a.Path, b.Path) })
			if !reflect.DeepEqual(rules, want) {
				t.Errorf("rules:\n%s\nwant:\n%s", formatRules(rules, root), formatRules(want, root))
			}
			var wantDropped []string
			for _, d := range tt.dropped {
				wantDropped = append(wantDropped, strings.ReplaceAll(d, "{}", root))
			}
			if !slices.Equal(dropped, wantDropped) {
				t.Errorf("dropped = %q, want %q", dropped, wantDropped)
			}
		})
	}
}

func formatRules(rules []Rule, root string) string {
	var b strings.Builder
	for _, r := range rules {
		p, _ := filepath.Rel(root, r.Path)
		b.WriteString("  " + p + " " + accessString(r.Access) + "\n")
	}
	return b.String()
}

// accessString names the rights in a, for test failure messages.
func accessString(a uint64) string {
	names := []string{"execute", "write_file", "read_file", "read_dir", "remove_dir", "remove_file",
		"make_char", "make_dir", "make_reg", "make_sock", "make_fifo", "make_block", "make_sym",
		"refer", "truncate", "ioctl_dev"}
	var out []string
	for i, n := range names {
		if a&(1<<i) != 0 {
			out = append(out, n)
		}
	}
	return strings.Join(out, "|")
}

func TestResolve(t *testing.T) {
	root := makeTree(t,
		"real/", "real/file", "real/sub/",
		"abs -> {}/real", "rel -> real", "up -> real/sub/../../real", "chain -> rel",
		"dangling -> nowhere", "loop1 -> loop2", "loop2 -> loop1", "real/sub/back -> ..",
	)
	tests := []struct{ in, want string }{
		{"real/file", "real/file"},
		{"abs/file", "real/file"},
		{"rel/file", "real/file"},
		{"up/file", "real/file"},
		{"chain/sub", "real/sub"},
		{"real/sub/back/file", "real/file"},
		{"real/sub/back/../real", "real"},
		{"rel/missing/deeper", "real/missing/deeper"},
		{"dangling/x", "nowhere/x"}, // where dangling/x would be created
		{"loop1/x", "loop1/x"},      // the rest is taken as is after maxLinks
		{"real//./file", "real/file"},
		{"missing/../rel/file", "real/file"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			r := resolver{}
			for range 2 { // the second time from memory
				if got := r.resolve(root + "/" + tt.in); got != filepath.Join(root, tt.want) {
					t.Errorf("resolve(%s) = %s, want %s", tt.in, got, filepath.Join(root, tt.want))
				}
			}
		})
	}
}

func TestPlanErrors(t *testing.T) {
	tests := []struct {
		name string
		abi  int
		c    Config
	}{
		{"no landlock", 0, Config{ReadOnly: []string{"/"}}},
		{"relative read-only", 7, Config{ReadOnly: []string{"usr"}}},
		{"empty deny-read", 7, Config{DenyRead: []string{""}}},
		{"relative device", 7, Config{Devices: []string{"dev/null"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, _, err := Plan(tt.c, tt.abi); err == nil {
				t.Errorf("Plan(%+v, %d) succeeded, want an error", tt.c, tt.abi)
			}
		})
	}
}

func TestHandled(t *testing.T) {
	tests := []struct {
		abi    int
		fs     uint64
		scoped uint64
	}{
		{0, 0, 0},
		{1, 1<<13 - 1, 0},
		{2, 1<<14 - 1, 0},
		{3, 1<<15 - 1, 0},
		{4, 1<<15 - 1, 0},
		{5, 1<<16 - 1, 0},
		{6, 1<<16 - 1, 3},
		{7, 1<<16 - 1, 3},
	}
	for _, tt := range tests {
		fs, scoped := handled(tt.abi)
		if fs != tt.fs || scoped != tt.scoped {
			t.Errorf("handled(%d) = %#x, %#x; want %#x, %#x", tt.abi, fs, scoped, tt.fs, tt.scoped)
		}
	}
}

// realisticConfig is a sandbox's Config on this machine: the host's root
// read-only, a few writable places, the usual devices and forty paths of
// credentials and secrets under /root, /etc and /run, most of which do not
// exist on any one machine.
func realisticConfig(workspace string) Config {
	home := "/root"
	deny := []string{
		".ssh", ".aws", ".azure", ".config/gcloud", ".config/gh", ".kube", ".docker", ".gnupg",
		".netrc", ".npmrc", ".pypirc", ".git-credentials", ".bash_history", ".zsh_history",
		".terraform.d", ".vault-token", ".cargo/credentials.toml", ".config/hub", ".m2/settings.xml",
		".gradle/gradle.properties", ".password-store", ".local/share/keyrings", ".config/op",
	}
	for i, d := range deny {
		deny[i] = filepath.Join(home, d)
	}
	deny = append(deny,
		"/etc/shadow", "/etc/gshadow", "/etc/shadow-", "/etc/gshadow-", "/etc/sudoers", "/etc/sudoers.d",
		"/etc/ssh/ssh_host_rsa_key", "/etc/ssh/ssh_host_ecdsa_key", "/etc/ssh/ssh_host_ed25519_key",
		"/etc/ssl/private", "/etc/krb5.keytab", "/etc/docker/key.json",
		"/run/secrets", "/run/docker.sock", "/run/containerd", "/run/user", "/run/credentials",
	)
	return Config{
		ReadOnly:  []string{"/"},
		ReadWrite: []string{workspace, "/tmp", "/dev/shm", filepath.Join(home, ".cache")},
		Devices: []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom",
			"/dev/tty", "/dev/ptmx", "/dev/pts"},
		DenyRead: deny,
		Scope:    true,
	}
}

func BenchmarkPlan(b *testing.B) {
	c := realisticConfig(b.TempDir())
	if len(c.DenyRead) != 40 {
		b.Fatalf("realistic config has %d deny paths, want 40", len(c.DenyRead))
	}
	var rules []Rule
	for b.Loop() {
		var err error
		if rules, _, err = Plan(c, maxABI); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(rules)), "rules")
}
