package main

import (
	"strings"
	"testing"
)

// TestSnapshotCLI: hutch snapshot, snapshots, create --snapshot, fork,
// diff and snapshot rm against a real daemon: a sandbox made from the
// snapshot, and each fork, start with what the source had written, what
// they write reaches neither the source nor each other, and hutch diff
// shows it against the base, the snapshot and the source.
func TestSnapshotCLI(t *testing.T) {
	d := startDaemonWith(t, nil)
	src := d.adminID(t, "create")
	wantOK(t, d.admin(t, "exec", src, "--", "sh", "-c", "echo from-source > f"))
	sid := d.adminID(t, "snapshot", src)
	if !strings.HasPrefix(sid, "snap-") {
		t.Fatalf("hutch snapshot printed %q", sid)
	}
	if r := d.admin(t, "snapshots", "-q"); !strings.Contains(r.stdout, sid) {
		t.Errorf("hutch snapshots -q: %s", r)
	}
	if r := d.admin(t, "snapshots"); !strings.Contains(r.stdout, "SOURCE") || !strings.Contains(r.stdout, src) {
		t.Errorf("hutch snapshots: %s", r)
	}
	copy := d.adminID(t, "create", "--snapshot", sid)
	if r := d.admin(t, "exec", copy, "--", "sh", "-c", "cat f; echo from-copy > f"); r.stdout != "from-source\n" {
		t.Errorf("the sandbox from the snapshot: %s", r)
	}
	if r := d.admin(t, "exec", src, "--", "cat", "f"); r.stdout != "from-source\n" {
		t.Errorf("the copy's write reached the source: %s", r)
	}

	// hutch diff: against the base, the snapshot, the source.
	r := d.admin(t, "diff", "--name-only", copy)
	wantOK(t, r)
	if r.stdout != "workspace/f\n" {
		t.Fatalf("hutch diff --name-only: %s", r)
	}
	if r := d.admin(t, "diff", copy); !strings.Contains(r.stdout, "diff --git a/workspace/f b/workspace/f\nnew file mode 100644\n") || !strings.Contains(r.stdout, "+from-copy\n") {
		t.Errorf("hutch diff: %s", r)
	}
	for _, against := range []string{sid, src} {
		if r := d.admin(t, "diff", "--against", against, copy, "workspace"); !strings.Contains(r.stdout, "-from-source\n+from-copy\n") {
			t.Errorf("hutch diff --against %s: %s", against, r)
		}
	}
	if r := d.admin(t, "diff", "--stat", copy, "--against", src); !strings.Contains(r.stdout, " workspace/f | 2 +-\n 1 file changed, 1 insertion(+), 1 deletion(-)\n") {
		t.Errorf("hutch diff --stat: %s", r)
	}
	if r := d.admin(t, "diff", "--color=always", "--against", src, copy); !strings.Contains(r.stdout, "\x1b[32m+from-copy\x1b[m\n") {
		t.Errorf("hutch diff --color=always: %q", r.stdout)
	}
	if r := d.admin(t, "diff", src, "nothing/here"); r.code != 1 || !strings.Contains(r.stderr, "nothing/here") {
		t.Errorf("hutch diff of a path without changes: %s", r)
	}
	if r := d.admin(t, "diff", "--against", "snap-doesnotexist", src); r.code != 1 || !strings.Contains(r.stderr, "snap-doesnotexist") {
		t.Errorf("hutch diff against an unknown snapshot: %s", r)
	}
	r = d.admin(t, "fork", "-n", "2", src)
	wantOK(t, r)
	forks := strings.Fields(r.stdout)
	if len(forks) != 2 {
		t.Fatalf("hutch fork -n 2 printed %q", r.stdout)
	}
	wantOK(t, d.admin(t, "exec", forks[0], "--", "sh", "-c", "echo fork0 > f"))
	if r := d.admin(t, "exec", forks[1], "--", "cat", "f"); r.stdout != "from-source\n" {
		t.Errorf("one fork's write reached the other: %s", r)
	}
	wantOK(t, d.admin(t, "snapshot", "rm", sid))
	if r := d.admin(t, "snapshots", "-q"); strings.Contains(r.stdout, sid) {
		t.Errorf("hutch snapshot rm left it listed: %s", r)
	}
	if r := d.admin(t, "snapshot", "rm", "snap-doesnotexist"); r.code == 0 || !strings.Contains(r.stderr, "snap-doesnotexist") {
		t.Errorf("hutch snapshot rm of an unknown id: %s", r)
	}
}
