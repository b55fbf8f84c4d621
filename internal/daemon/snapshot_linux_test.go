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
)

// writeChanges makes, in sandbox id, the changes the snapshot tests look
// for: a file added in the workspace and one in /opt, a base file changed
// (/etc/issue) and one deleted (/etc/issue.net).
func writeChanges(t *testing.T, m *Manager, tenant, id string) {
	t.Helper()
	for _, f := range []string{"/etc/issue", "/etc/issue.net"} {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("the host needs %s for this test: %v", f, err)
		}
	}
	mustRun(t, m, tenant, id, `set -e
echo added > /workspace/new.txt
mkdir -p /opt/snaptest && echo deep > /opt/snaptest/deep.txt
ln /workspace/new.txt /workspace/hardlink.txt
ln -s new.txt /workspace/link
echo changed > /etc/issue
rm /etc/issue.net`)
}

// checkChanges checks that sandbox id sees what writeChanges made.
func checkChanges(t *testing.T, m *Manager, tenant, id string) {
	t.Helper()
	out := mustRun(t, m, tenant, id, `cat /workspace/new.txt /opt/snaptest/deep.txt /etc/issue; readlink /workspace/link
stat -c %h /workspace/new.txt; test -e /etc/issue.net && echo issue.net is there || echo issue.net is gone
stat -c %U /workspace/new.txt; cat /etc/debian_version >/dev/null && echo base is there`)
	want := "added\ndeep\nchanged\nnew.txt\n2\nissue.net is gone\nroot\nbase is there\n"
	if out != want {
		t.Errorf("the sandbox from the snapshot sees\n%s\nwant\n%s", out, want)
	}
}

// layerCount is how many layers m's snapshot store holds.
func layerCount(t *testing.T, m *Manager) int {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(m.snapRoot, "layers"))
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// TestSnapshotCreate: a snapshot of a sandbox that added, changed and
// deleted files starts a sandbox that sees exactly that; its own writes
// reach neither the snapshot nor the source, and the source's later
// writes do not reach it. Another tenant can neither see, use nor delete
// the snapshot: the same 404 as for one that does not exist.
func TestSnapshotCreate(t *testing.T) {
	m := newManager(t, Config{})
	ctx := testCtx(t)
	src := mustCreate(t, m, "a", CreateRequest{})
	writeChanges(t, m, "a", src.ID)
	sn, err := m.Snapshot(ctx, "a", src.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(sn.ID, snapPrefix) || sn.Source != src.ID || sn.Tenant != "a" || sn.Root != "host" || sn.Image != "" || sn.Layers != 1 {
		t.Errorf("snapshot %+v", sn)
	}
	if sn.Size != int64(len("added\n")+len("deep\n")+len("changed\n")) {
		t.Errorf("snapshot size %d, want the bytes of the files written (a hard link once)", sn.Size)
	}
	// The source goes on, and runs (thawed).
	mustRun(t, m, "a", src.ID, "echo later > /workspace/later.txt")

	fork := mustCreate(t, m, "a", CreateRequest{Snapshot: sn.ID})
	checkChanges(t, m, "a", fork.ID)
	if out := mustRun(t, m, "a", fork.ID, "test -e /workspace/later.txt && echo leaked || echo ok"); out != "ok\n" {
		t.Errorf("the source's write after the snapshot: %s", out)
	}
	mustRun(t, m, "a", fork.ID, "echo fork > /workspace/new.txt; rm /opt/snaptest/deep.txt")
	if out := mustRun(t, m, "a", src.ID, "cat /workspace/new.txt /opt/snaptest/deep.txt"); out != "added\ndeep\n" {
		t.Errorf("the fork's writes reached the source: %q", out)
	}
	again := mustCreate(t, m, "a", CreateRequest{Snapshot: sn.ID})
	checkChanges(t, m, "a", again.ID)

	// Another tenant: 404 as for an unknown snapshot, for every call.
	_, errUnknown := m.GetSnapshot(ctx, "b", "snap-aaaaaaaaaaaa")
	_, errOther := m.GetSnapshot(ctx, "b", sn.ID)
	if !errors.Is(errOther, ErrNotFound) || !errors.Is(errUnknown, ErrNotFound) ||
		strings.ReplaceAll(errOther.Error(), sn.ID, "ID") != strings.ReplaceAll(errUnknown.Error(), "snap-aaaaaaaaaaaa", "ID") {
		t.Errorf("another tenant's snapshot: %v; an unknown one: %v", errOther, errUnknown)
	}
	if _, err := m.Create(ctx, "b", CreateRequest{Snapshot: sn.ID}); !errors.Is(err, ErrNotFound) {
		t.Errorf("create from another tenant's snapshot: %v", err)
	}
	if err := m.DeleteSnapshot(ctx, "b", sn.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("delete another tenant's snapshot: %v", err)
	}
	if list, err := m.Snapshots(ctx, "b"); err != nil || len(list) != 0 {
		t.Errorf("tenant b lists %v (%v)", list, err)
	}
	if list, err := m.Snapshots(ctx, "a"); err != nil || len(list) != 1 || list[0].ID != sn.ID {
		t.Errorf("tenant a lists %v (%v)", list, err)
	}

	// A snapshot of the sandbox started from one: over the host's root,
	// its layer started as a copy of the first, so it holds everything.
	mustRun(t, m, "a", fork.ID, "echo second > /workspace/second.txt")
	sn2, err := m.Snapshot(ctx, "a", fork.ID)
	if err != nil {
		t.Fatal(err)
	}
	if sn2.Layers != 1 {
		t.Errorf("snapshot of a sandbox from a snapshot: %d layers, want 1", sn2.Layers)
	}
	third := mustCreate(t, m, "a", CreateRequest{Snapshot: sn2.ID})
	if out := mustRun(t, m, "a", third.ID, "cat /workspace/new.txt /workspace/second.txt; test -e /opt/snaptest/deep.txt || echo deep gone; cat /etc/issue"); out != "fork\nsecond\ndeep gone\nchanged\n" {
		t.Errorf("the sandbox from the second snapshot sees %q", out)
	}
}

// TestSnapshotDeleteInUse: deleting a snapshot hides it at once (no new
// sandbox starts from it) while the sandboxes started from it run on;
// its layer goes when the last of them ends.
func TestSnapshotDeleteInUse(t *testing.T) {
	m := newManager(t, Config{})
	ctx := testCtx(t)
	src := mustCreate(t, m, "a", CreateRequest{})
	writeChanges(t, m, "a", src.ID)
	sn, err := m.Snapshot(ctx, "a", src.ID)
	if err != nil {
		t.Fatal(err)
	}
	user := mustCreate(t, m, "a", CreateRequest{Snapshot: sn.ID})
	if err := m.DeleteSnapshot(ctx, "a", sn.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := m.GetSnapshot(ctx, "a", sn.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("get a deleted snapshot: %v", err)
	}
	if _, err := m.Create(ctx, "a", CreateRequest{Snapshot: sn.ID}); !errors.Is(err, ErrNotFound) {
		t.Errorf("create from a deleted snapshot: %v", err)
	}
	if err := m.DeleteSnapshot(ctx, "a", sn.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("delete it twice: %v", err)
	}
	checkChanges(t, m, "a", user.ID)
	if n := layerCount(t, m); n != 1 {
		t.Errorf("%d layers while a sandbox stacks the deleted snapshot's, want 1", n)
	}
	if err := m.Destroy(ctx, "a", user.ID); err != nil {
		t.Fatal(err)
	}
	if n := layerCount(t, m); n != 0 {
		t.Errorf("%d layers once no sandbox stacks the deleted snapshot's, want 0", n)
	}
	if all, err := m.st.ListSnapshots(ctx, "", true); err != nil || len(all) != 0 {
		t.Errorf("records left: %v (%v)", all, err)
	}
}

// TestSnapshotPaused: a paused sandbox can be snapshotted and stays
// paused; a running one is thawed after.
func TestSnapshotPaused(t *testing.T) {
	m := newManager(t, Config{})
	ctx := testCtx(t)
	src := mustCreate(t, m, "a", CreateRequest{})
	mustRun(t, m, "a", src.ID, "echo paused > /workspace/p.txt")
	if _, err := m.Pause(ctx, "a", src.ID); err != nil {
		t.Fatal(err)
	}
	sn, err := m.Snapshot(ctx, "a", src.ID)
	if err != nil {
		t.Fatal(err)
	}
	if info, err := m.Get(ctx, "a", src.ID); err != nil || info.State != "paused" {
		t.Errorf("after the snapshot: %+v %v, want paused", info, err)
	}
	if _, _, err := run(ctx, m, "a", src.ID, "true"); !errors.Is(err, ErrConflict) {
		t.Errorf("exec in the paused sandbox after a snapshot: %v, want a conflict", err)
	}
	if _, err := m.Resume(ctx, "a", src.ID); err != nil {
		t.Fatal(err)
	}
	fork := mustCreate(t, m, "a", CreateRequest{Snapshot: sn.ID})
	if out := mustRun(t, m, "a", fork.ID, "cat /workspace/p.txt"); out != "paused\n" {
		t.Errorf("from a paused sandbox's snapshot: %q", out)
	}
}

// TestSnapshotQuota: the snapshots a tenant keeps are bounded in number
// and bytes, with errors that say so; another tenant's quota is its own.
func TestSnapshotQuota(t *testing.T) {
	m := newManager(t, Config{MaxSnapshots: 2, MaxSnapshotBytes: 1 << 20})
	ctx := testCtx(t)
	src := mustCreate(t, m, "a", CreateRequest{})
	for range 2 {
		if _, err := m.Snapshot(ctx, "a", src.ID); err != nil {
			t.Fatal(err)
		}
	}
	_, err := m.Snapshot(ctx, "a", src.ID)
	if !errors.Is(err, ErrQuota) || !strings.Contains(err.Error(), "2 snapshots") {
		t.Errorf("third snapshot: %v, want a quota error naming the count", err)
	}
	big := mustCreate(t, m, "b", CreateRequest{})
	mustRun(t, m, "b", big.ID, "head -c 2097152 /dev/zero > /workspace/big")
	_, err = m.Snapshot(ctx, "b", big.ID)
	if !errors.Is(err, ErrQuota) || !strings.Contains(err.Error(), "bytes") {
		t.Errorf("a 2 MiB snapshot past 1 MiB: %v, want a quota error naming bytes", err)
	}
	if ents, _ := os.ReadDir(filepath.Join(m.snapRoot, "tmp")); len(ents) != 0 {
		t.Errorf("the refused copy left %d entries", len(ents))
	}
	mustRun(t, m, "b", big.ID, "rm /workspace/big; echo small > /workspace/small")
	if _, err := m.Snapshot(ctx, "b", big.ID); err != nil {
		t.Errorf("tenant b, a small snapshot: %v", err)
	}
}

// TestFork: a fork makes count independent sandboxes from one snapshot,
// each seeing the source's files and none the others' writes; the
// fork's snapshot is not kept.
func TestFork(t *testing.T) {
	m := newManager(t, Config{})
	ctx := testCtx(t)
	src := mustCreate(t, m, "a", CreateRequest{Labels: map[string]string{"k": "v"}})
	writeChanges(t, m, "a", src.ID)
	res, err := m.Fork(ctx, "a", src.ID, 3, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 3 {
		t.Fatalf("%d results", len(res))
	}
	for i, r := range res {
		if r.Sandbox == nil {
			t.Fatalf("fork %d: %s", i, r.Error)
		}
		checkChanges(t, m, "a", r.Sandbox.ID)
		mustRun(t, m, "a", r.Sandbox.ID, fmt.Sprintf("echo %d > /workspace/mine", i))
		if r.Sandbox.Labels["k"] != "v" {
			t.Errorf("fork %d: labels %v", i, r.Sandbox.Labels)
		}
	}
	for i, r := range res {
		if out := mustRun(t, m, "a", r.Sandbox.ID, "cat /workspace/mine"); out != fmt.Sprintf("%d\n", i) {
			t.Errorf("fork %d sees %q", i, out)
		}
	}
	if list, err := m.Snapshots(ctx, "a"); err != nil || len(list) != 0 {
		t.Errorf("the fork's snapshot is listed: %v (%v)", list, err)
	}
	if _, err := m.Fork(ctx, "a", src.ID, MaxForks+1, 0); !errors.Is(err, ErrInvalid) {
		t.Errorf("fork of %d: %v", MaxForks+1, err)
	}
	if _, err := m.Fork(ctx, "b", src.ID, 1, 0); !errors.Is(err, ErrNotFound) {
		t.Errorf("another tenant's fork: %v", err)
	}
}

// TestSnapshotCollectRace: a snapshot keeps its layer while the layers
// no snapshot names are collected meanwhile (as a sandbox's end or a
// deletion elsewhere does at any time): a new layer is never seen
// between its copy and the record that names it.
func TestSnapshotCollectRace(t *testing.T) {
	m := newManager(t, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	src := mustCreate(t, m, "a", CreateRequest{})
	mustRun(t, m, "a", src.ID, "echo mine > /workspace/mine")
	stop := make(chan struct{})
	collected := make(chan error, 1)
	go func() {
		for {
			select {
			case <-stop:
				collected <- nil
				return
			default:
			}
			if err := m.collectLayers(ctx); err != nil {
				collected <- err
				return
			}
		}
	}()
	for range 25 {
		sn, err := m.Snapshot(ctx, "a", src.ID)
		if err != nil {
			t.Fatal(err)
		}
		// What a create from it checks first.
		row, err := m.st.GetSnapshot(ctx, "a", sn.ID)
		if err != nil {
			t.Fatal(err)
		}
		if _, release, err := m.holdLayers(row.Layers); err != nil {
			t.Errorf("snapshot %s, just taken: %v", sn.ID, err)
		} else {
			release()
		}
		// Its layer goes with it: the next snapshot copies it anew.
		if err := m.DeleteSnapshot(ctx, "a", sn.ID); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	if err := <-collected; err != nil {
		t.Fatal(err)
	}
}
