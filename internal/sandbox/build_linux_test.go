package sandbox

import (
	"strings"
	"testing"
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
	b.dieWithHutch(3)
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
