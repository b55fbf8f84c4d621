package sandbox

import (
	"slices"
	"strings"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/policy"
)

// TestBuildOrder: the first process's program applies the layers in the
// fixed order of the design — identity, mounts, pivot_root, hostname and
// loopback, capabilities, no_new_privs, Landlock, seccomp last — and only
// then prepares the command.
func TestBuildOrder(t *testing.T) {
	cfg := initConfig{
		Args: []string{"true"}, Env: []string{"PATH=/bin"}, Dir: "/w", Root: "host",
		Writable: []bindSrc{{Path: "/w", FD: -1}}, DenyRead: []string{"/etc/shadow"},
		DenyWrite: []string{"/w/.bashrc"}, Hostname: "hutch", Tty: true, Net: "proxy", Listen: true, Files: []fileBind{{Path: "/usr/bin/hutch", Target: "/dev/hutch", Create: true, FD: -1, Exec: true}},
		Rlimits: []rlimit{{Resource: 6, Value: 100}}, AgentFD: -1,
		HostWrites: true, Umask: 0o022, Withheld: 0o022,
	}
	b := &builder{}
	b.identity(ids{uid: 1000, gid: 1000})
	b.dieWithHutch(3, true)
	b.mounts(cfg, nil, []pathKind{{path: "/etc/shadow"}})
	if err := b.harden(cfg, 99, 3); err != nil {
		t.Fatal(err)
	}
	if _, err := b.command(cfg, 3); err != nil {
		t.Fatal(err)
	}
	order := []string{
		"identity: uid", "die with hutch", "make mounts private", "attach root",
		"/dev/hutch: attach", "name lookups: /etc/resolv.conf: attach", "protect /w/.bashrc", "deny read /etc/shadow", "pivot_root", "hostname",
		"network: bring up lo", "proxy: listen on 127.0.0.1:3128", "proxy: listen on 127.0.0.1:1080", "name lookups: bind 127.0.0.1:53",
		"network: hand the proxy's and the name lookups' sockets", "not dumpable", "capabilities: capset", "no_new_privs", "landlock: restrict",
		"umask", "seccomp", "terminal: open /dev/ptmx", "rlimit 6", "close inherited descriptors", "exec pipe",
	}
	last := -1
	for _, want := range order {
		at := -1
		for i, d := range b.p.descs {
			if strings.HasPrefix(d, want) {
				at = i
				break
			}
		}
		if at < 0 {
			t.Fatalf("the program has no step %q", want)
		}
		if at < last {
			t.Errorf("step %q (op %d) comes before the step listed ahead of it (op %d)", want, at, last)
		}
		last = at
	}
	for i, d := range b.p.descs {
		if strings.HasPrefix(d, "seccomp") {
			for _, later := range b.p.descs[i+1:] {
				if strings.HasPrefix(later, "landlock") || strings.HasPrefix(later, "capabilities") || strings.Contains(later, "mount") {
					t.Errorf("%q comes after seccomp", later)
				}
			}
		}
	}
}

// TestWorkspaceTargets: with the workspace shown elsewhere than at its
// host path (a sandbox from an image), no mount target in the view is
// made from a host path of the workspace — every protection is bound
// where the sandbox sees it — while the workspace's source is the host
// path, and targets that are paths of the view (a host path that only
// looks like the workspace's) stay where they are.
func TestWorkspaceTargets(t *testing.T) {
	const ws = "/srv/proj"
	cfg := initConfig{
		Args: []string{"true"}, Env: []string{"PATH=/bin"}, Dir: "/workspace", Root: "host",
		Workspace:    viewMap{Host: ws, At: "/workspace"},
		Writable:     []bindSrc{{Path: ws, FD: -1}, {Path: "/var/cache/x", FD: -1}},
		DenyWrite:    []string{ws + "/.bashrc", ws + "/.vscode", "/var/cache/x/.envrc"},
		Placeholders: map[string]placeholderKind{ws + "/.vscode": placeholderDir},
		Pin:          []string{ws + "/.git"},
		Files: []fileBind{
			{Path: "/tmp/exclude", Target: ws + "/.git/info/exclude", HostTarget: true, FD: -1},
			{Path: "/tmp/bundle", Target: ws + "/ca.pem", FD: -1}, // a path of the view
		},
		AgentFD: -1, RootLayer: -1, HomeLayer: -1, MasksLayer: -1,
	}
	b := &builder{}
	b.mounts(cfg, nil, []pathKind{{path: ws + "/secret"}, {path: "/etc/shadow"}})
	var strs []string
	for _, k := range b.p.keep {
		if s, ok := k.([]byte); ok && len(s) > 0 && s[len(s)-1] == 0 {
			strs = append(strs, string(s[:len(s)-1]))
		}
	}
	has := func(s string) bool { return slices.Contains(strs, s) }
	for _, want := range []string{"workspace", "workspace/.bashrc", "workspace/.vscode", "workspace/.git", "workspace/.git/info/exclude",
		"workspace/secret", "var/cache/x", "var/cache/x/.envrc", "etc/shadow", "srv/proj/ca.pem", ws} {
		if !has(want) {
			t.Errorf("the program names no %q", want)
		}
	}
	for _, s := range strs {
		if strings.HasPrefix(s, "srv/proj") && s != "srv/proj/ca.pem" {
			t.Errorf("a target in the view at the workspace's host path: %q", s)
		}
	}
}

// TestPlaceWorkspace: where the view shows the workspace and the
// command's directory, and the writable paths that would be confused
// with it there.
func TestPlaceWorkspace(t *testing.T) {
	v := viewMap{Host: "/home/u/p", At: "/workspace"}
	for in, want := range map[string]string{"/home/u/p": "/workspace", "/home/u/p/.git/config": "/workspace/.git/config", "/home/u/px": "/home/u/px", "/home/u": "/home/u", "/etc": "/etc"} {
		if got := v.of(in); got != want {
			t.Errorf("of(%q) = %q, want %q", in, got, want)
		}
	}
	spec := func(at string) (s policy.Spec) {
		s.Filesystem.Workspace, s.Filesystem.WorkspaceAt = "/home/u/p", at
		return s
	}
	for _, tt := range []struct {
		at, dir string
		roots   []string
		wantDir string
		makeDir bool
		err     string
	}{
		{at: "/workspace", roots: []string{"/home/u/p", "/home/u/cache"}, wantDir: "/workspace"},
		{at: "", roots: []string{"/home/u/p"}, wantDir: "/home/u/p"},
		{at: "/src", dir: "/app", roots: []string{"/home/u/p"}, wantDir: "/app", makeDir: true},
		{at: "/src", dir: "/src/app", roots: []string{"/home/u/p"}, wantDir: "/src/app"},
		{at: "/src", dir: "/var/cache/x/app", roots: []string{"/home/u/p", "/var/cache/x"}, wantDir: "/var/cache/x/app"},
		{at: "/workspace", roots: []string{"/home/u/p", "/workspace/cache"}, err: "writable path /workspace/cache"},
		{at: "/opt/w", roots: []string{"/home/u/p", "/opt"}, err: "writable path /opt"},
		{at: "/workspace", roots: []string{"/home/u/p", "/home/u"}, err: "writable path /home/u holds the workspace"},
		{at: "/workspace", roots: []string{"/home/u/p", "/home/u/p/build"}, wantDir: "/workspace"},
	} {
		cfg := initConfig{}
		err := placeWorkspace(&cfg, spec(tt.at), &ImageRoot{Dir: tt.dir}, false, tt.roots)
		switch {
		case tt.err != "":
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%+v: error %v, want %q", tt, err, tt.err)
			}
		case err != nil:
			t.Errorf("%+v: %v", tt, err)
		case cfg.Dir != tt.wantDir || cfg.MakeDir != tt.makeDir || !slices.Contains(cfg.Env, "PWD="+tt.wantDir):
			t.Errorf("%+v: dir %q (made: %v), env %q", tt, cfg.Dir, cfg.MakeDir, cfg.Env)
		}
	}
	if err := placeWorkspace(&initConfig{}, spec("/workspace"), nil, false, nil); err == nil {
		t.Error("workspace_at with the host's root was taken")
	}
}
