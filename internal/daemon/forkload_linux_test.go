package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/image/fetch"
	"github.com/hutch-sandbox/hutch/internal/image/imagetest"
	"github.com/hutch-sandbox/hutch/internal/mountinfo"
	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/store"
	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// What TestForkLoad's source writes into data/ of its workspace: four
// large files of 20 MiB and forkSmall small ones of 10 KiB, 100 MiB in
// all, once a fifth large file (4 MiB) and 48 more small ones were
// written and deleted again.
const (
	forkDataBytes = 100 << 20
	forkSmall     = 2048
	forkCopies    = 10
	// The small files are made by the shell's printf: each a number
	// and the same random 10236 characters.
	forkWrite = `set -e
mkdir -p data/big data/small
exec 3</dev/urandom
for i in 1 2 3 4; do head -c 20971520 <&3 > data/big/f$i; done
head -c 4194304 <&3 > data/big/f5
r=$(head -c 7677 <&3 | base64 | tr -d '\n')
i=0
while [ $i -lt 2096 ]; do printf '%04d%s' $i "$r" > data/small/s$i; i=$((i+1)); done
rm data/big/f5
set --
while [ $i -gt 2048 ]; do i=$((i-1)); set -- "$@" data/small/s$i; done
rm "$@"
`
	// forkList prints the digest of every file of data/ and how many
	// entries it has.
	forkList = `cd data && find . -type f | sort | xargs sha256sum && find . | wc -l`
)

// forkBase is a root TestForkLoad forks sandboxes of: its policy root,
// what prepares a sandbox of it for the test's scripts, and the change
// of a base file the source makes (one changed, one deleted) and how a
// sandbox of the snapshot sees it.
type forkBase struct {
	root, setup, change, check, want string
}

// TestForkLoad: a sandbox writes 100 MiB (large files, 2048 small ones,
// a few deleted again, a base file changed and one deleted), is
// snapshotted and forked into ten copies by one Fork, over an image and
// over the host's root. Each copy runs and sees exactly the source's
// files (every file's digest, from inside), also once the snapshots are
// deleted while the copies run; what one copy writes reaches neither the
// others nor the source. The tenant's snapshot bytes add up what it
// keeps: a snapshot past MaxSnapshotBytes is refused, the deleted ones
// stop counting. When every sandbox is destroyed, nothing is left: no
// layer, record, temporary copy, sandbox directory or mount under the
// state directory. Each base takes 10 to 30 s on two cores, busy or not.
func TestForkLoad(t *testing.T) {
	for name, b := range map[string]forkBase{
		"image": {
			root: policy.ImagePrefix + "hutch.test/fork:1",
			// The image has busybox and links for a few of its applets.
			setup:  `for a in find sort xargs sha256sum head wc base64 tr tail; do ln -s busybox /bin/$a; done`,
			change: `echo changed > /etc/motd; rm /opq/new`,
			check:  `cat /etc/motd; test -e /opq/new && echo new is there || echo new is gone`,
			want:   "changed\nnew is gone\n",
		},
		"host": {
			change: `echo changed > /etc/issue; rm /etc/issue.net`,
			check:  `cat /etc/issue; test -e /etc/issue.net && echo issue.net is there || echo issue.net is gone`,
			want:   "changed\nissue.net is gone\n",
		},
	} {
		t.Run(name, func(t *testing.T) { forkLoad(t, b) })
	}
}

func forkLoad(t *testing.T, b forkBase) {
	// Room for two snapshots of the source (and a little), not three.
	const maxBytes = 5 * forkDataBytes / 2
	m := newManager(t, Config{AgentBinary: filepath.Join(filepath.Dir(testutil.Hutch(t)), "hutch-agent"), MaxSnapshotBytes: maxBytes})
	if b.root != "" {
		img := imagetest.Busybox(t, func(ok bool, reason string) { testutil.Need(t, ok, reason) })
		if _, err := fetch.Import(m.images, imagetest.DockerSave(t, img, "hutch.test/fork:1", t.TempDir()), "", fetch.Options{Root: true}); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"/etc/issue", "/etc/issue.net"} {
		if _, err := os.Stat(f); err != nil && b.root == "" {
			t.Fatalf("the host needs %s for this test: %v", f, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	sh := func(id, script string) string {
		t.Helper()
		out, code, err := run(ctx, m, "a", id, script)
		if err != nil || code != 0 {
			t.Fatalf("sandbox %s: %q: exit code %d, %v\n%s", id, script, code, err, out)
		}
		return out
	}
	last := time.Now()
	lap := func(what string) {
		t.Logf("%s: %s", what, time.Since(last).Round(time.Millisecond))
		last = time.Now()
	}

	// The disk of every sandbox holds the data and a copy of a large
	// file, whatever the daemon's default.
	spec := policy.Spec{Root: b.root}
	spec.Resources.DiskBytes = 2 * forkDataBytes
	src, err := m.Create(ctx, "a", CreateRequest{Policy: spec, Timeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if b.setup != "" {
		sh(src.ID, b.setup)
	}
	sh(src.ID, forkWrite+b.change)
	want := sh(src.ID, forkList) + sh(src.ID, b.check)
	if n := strings.Count(want, "\n"); n != 4+forkSmall+1+2 {
		t.Fatalf("the source lists %d lines, want %d:\n%.2000s", n, 4+forkSmall+1+2, want)
	}
	if tail := fmt.Sprintf("\n%d\n%s", 1+2+4+forkSmall, b.want); !strings.HasSuffix(want, tail) {
		t.Fatalf("the source's listing ends in\n%s\nwant\n%s", want[max(0, len(want)-len(tail)-20):], tail)
	}
	lap("written and listed")
	sn, err := m.Snapshot(ctx, "a", src.ID)
	if err != nil {
		t.Fatal(err)
	}
	if size := int64(forkDataBytes + len("changed\n")); sn.Size != size {
		t.Errorf("snapshot of %d bytes, want %d (the files written, not those deleted)", sn.Size, size)
	}
	lap("snapshot")
	res, err := m.Fork(ctx, "a", src.ID, forkCopies, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	lap("fork")
	var forks []string
	for i, r := range res {
		if r.Sandbox == nil {
			t.Fatalf("copy %d: %s", i, r.Error)
		}
		if r.Sandbox.State != store.StateRunning {
			t.Errorf("copy %d: %s", i, r.Sandbox.State)
		}
		forks = append(forks, r.Sandbox.ID)
	}
	// The fork's own snapshot is gone, and counts no more; the source's
	// files are the same, so it had the same layer as sn.
	if list, err := m.Snapshots(ctx, "a"); err != nil || len(list) != 1 || list[0].ID != sn.ID {
		t.Errorf("after the fork, the tenant lists %+v (%v), want only %s", list, err, sn.ID)
	}
	if n := layerCount(t, m); n != 1 {
		t.Errorf("%d layers after a snapshot and a fork of the same files, want 1", n)
	}

	// The quota: sn and one more snapshot fit, a third does not, and
	// its copy is removed.
	sn2, err := m.Snapshot(ctx, "a", src.ID)
	if err != nil {
		t.Fatalf("a second snapshot, %d of %d bytes held: %v", sn.Size, maxBytes, err)
	}
	_, err = m.Snapshot(ctx, "a", src.ID)
	if !errors.Is(err, ErrQuota) || !strings.Contains(err.Error(), "bytes") {
		t.Errorf("a third snapshot, %d of %d bytes held: %v, want a quota error naming bytes", sn.Size+sn2.Size, maxBytes, err)
	}
	if ents, _ := os.ReadDir(filepath.Join(m.snapRoot, "tmp")); len(ents) != 0 {
		t.Errorf("the refused copy left %d entries", len(ents))
	}

	lap("quota")
	// Both snapshots deleted while the copies run: every copy still
	// sees every file as the source had it.
	for _, s := range []string{sn.ID, sn2.ID} {
		if err := m.DeleteSnapshot(ctx, "a", s); err != nil {
			t.Fatal(err)
		}
	}
	if n := layerCount(t, m); n != 1 {
		t.Errorf("%d layers while the copies run, the snapshots deleted: want 1 (theirs)", n)
	}
	for i, id := range forks {
		if got := sh(id, forkList) + sh(id, b.check); got != want {
			t.Errorf("copy %d (%s) sees other files than the source:\n%s", i, id, firstDiff(got, want))
		}
	}

	lap("copies listed")
	// Each copy writes: a file of its own, an append to a large file
	// (copied up over the image), a small file deleted.
	for i, id := range forks {
		sh(id, fmt.Sprintf(`cd data && echo fork%02d > mine && echo fork%02d >> big/f1 && rm small/s%d`, i, i, 100+i))
	}
	gone := `cd data; for k in 100 101 102 103 104 105 106 107 108 109; do test -e small/s$k || echo gone $k; done`
	for i, id := range forks {
		mine := fmt.Sprintf("fork%02d\nfork%02d\ngone %d\n", i, i, 100+i)
		if got := sh(id, `cd data && cat mine && tail -c 7 big/f1`) + sh(id, gone); got != mine {
			t.Errorf("copy %d sees %q, want %q", i, got, mine)
		}
	}
	f1 := want[strings.Index(want, "  ./big/f1\n")-64:][:64+len("  ./big/f1\n")]
	if got := sh(src.ID, `cd data && sha256sum ./big/f1 && { test -e mine || echo no mine; }`) + sh(src.ID, gone); got != f1+"no mine\n" {
		t.Errorf("the copies' writes reached the source: %q", got)
	}

	lap("copies written")
	// The deleted snapshots count no more: one of a copy fits, as big
	// as what the copy holds (its writes over the snapshot's layers).
	sn3, err := m.Snapshot(ctx, "a", forks[0])
	if err != nil {
		t.Fatalf("a snapshot of a copy, the others deleted: %v", err)
	}
	size := int64(forkDataBytes+len("changed\n")) + 2*int64(len("fork00\n")) - 10240 // its layer holds everything
	if b.root != "" {
		size = int64(forkDataBytes+len("changed\n")) + (20<<20 + int64(len("fork00\n"))) + int64(len("fork00\n")) // the snapshot's layer, and f1 copied up
	}
	if sn3.Size != size {
		t.Errorf("snapshot of a copy: %d bytes, want %d", sn3.Size, size)
	}
	if err := m.DeleteSnapshot(ctx, "a", sn3.ID); err != nil {
		t.Fatal(err)
	}
	if n := layerCount(t, m); n != 1 {
		t.Errorf("%d layers once the copy's snapshot, which no sandbox stacks, is deleted: want 1", n)
	}

	lap("copy's snapshot")
	for _, id := range append(forks, src.ID) {
		if err := m.Destroy(ctx, "a", id); err != nil {
			t.Fatal(err)
		}
	}
	lap("destroyed")
	assertNoSnapshotLeft(t, m)
}

// assertNoSnapshotLeft checks that nothing of a snapshot or a sandbox is
// left in m's state directory: no layer, temporary copy or record, no
// layer held, no sandbox directory, nothing mounted.
func assertNoSnapshotLeft(t *testing.T, m *Manager) {
	t.Helper()
	for _, d := range []string{filepath.Join(m.snapRoot, "layers"), filepath.Join(m.snapRoot, "tmp"), filepath.Join(m.cfg.StateDir, "sandboxes")} {
		if ents, err := os.ReadDir(d); err != nil || len(ents) != 0 {
			t.Errorf("%s: %d entries left (%v)", d, len(ents), err)
		}
	}
	if all, err := m.st.ListSnapshots(context.Background(), "", true); err != nil || len(all) != 0 {
		t.Errorf("snapshot records left: %+v (%v)", all, err)
	}
	m.refMu.Lock()
	if len(m.layerRefs) != 0 {
		t.Errorf("layers still held: %v", m.layerRefs)
	}
	m.refMu.Unlock()
	mounts, err := mountinfo.Read("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, mt := range mounts {
		if strings.HasPrefix(mt.Point, m.cfg.StateDir+"/") {
			t.Errorf("still mounted: %s (%s)", mt.Point, mt.FSType)
		}
	}
}

// firstDiff shows where two listings part.
func firstDiff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := range min(len(g), len(w)) {
		if g[i] != w[i] {
			return fmt.Sprintf("line %d: %q, want %q (%d lines, want %d)", i+1, g[i], w[i], len(g), len(w))
		}
	}
	return fmt.Sprintf("%d lines, want %d", len(g), len(w))
}
