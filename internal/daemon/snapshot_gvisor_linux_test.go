package daemon

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/image/fetch"
	"github.com/hutch-sandbox/hutch/internal/image/imagetest"
	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/secrets"
	"github.com/hutch-sandbox/hutch/internal/store"
	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// startRemembering starts, in sandbox id, a process that holds a value
// only in its memory: it reads it from a file it then deletes, and writes
// it to /tmp/alive every tenth of a second. A copy of the sandbox whose
// /tmp/alive comes back with the value has the process going on.
func startRemembering(t *testing.T, m *Manager, tenant, id, value string) {
	t.Helper()
	mustRun(t, m, tenant, id, fmt.Sprintf(`echo %s > /tmp/seed
sh -c 'read v < /tmp/seed; rm /tmp/seed; while :; do echo "$v" > /tmp/alive.new; mv /tmp/alive.new /tmp/alive; sleep 0.1; done' >/dev/null 2>&1 &
while ! test -e /tmp/alive; do sleep 0.05; done`, value))
}

// remembers reports what sandbox id's remembering process writes anew
// (after /tmp/alive is removed), or "none" when nothing comes within a
// generous while.
func remembers(t *testing.T, m *Manager, tenant, id string) string {
	t.Helper()
	return strings.TrimSpace(mustRun(t, m, tenant, id, `rm -f /tmp/alive; i=0
while ! test -e /tmp/alive && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
cat /tmp/alive 2>/dev/null || echo none`))
}

// TestGVisorSnapshotMemory: a snapshot of a gVisor sandbox keeps its
// memory as well as its files: sandboxes started from it (and forks) go
// on with the source's processes where they were, each a copy of its
// own; the source runs on, undisturbed but for the pause. The same
// snapshot starts a namespace-tier sandbox from its files only, and its
// saved memory goes with it.
func TestGVisorSnapshotMemory(t *testing.T) {
	testutil.HostRootSteady(t)
	m := newManager(t, gvisorConfig(t))
	src := mustCreate(t, m, "a", CreateRequest{})
	writeChanges(t, m, "a", src.ID)
	startRemembering(t, m, "a", src.ID, "only-in-memory")

	sn, err := m.Snapshot(testCtx(t), "a", src.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !sn.Memory || sn.MemorySize <= 0 || sn.Tier != policy.TierGVisor || sn.Layers != 1 {
		t.Errorf("snapshot %+v: want a gVisor snapshot with memory", sn)
	}
	if _, err := os.Stat(m.memoryDir(sn.ID)); err != nil {
		t.Errorf("its saved memory: %v", err)
	}
	// The source goes on: its commands run, its process writes.
	if got := remembers(t, m, "a", src.ID); got != "only-in-memory" {
		t.Errorf("the source after the snapshot: its process writes %q", got)
	}
	mustRun(t, m, "a", src.ID, "echo later > /workspace/later.txt")

	cp := mustCreate(t, m, "a", CreateRequest{Snapshot: sn.ID})
	if cp.Tier != policy.TierGVisor {
		t.Errorf("the copy's tier: %s", cp.Tier)
	}
	checkChanges(t, m, "a", cp.ID)
	if got := remembers(t, m, "a", cp.ID); got != "only-in-memory" {
		t.Errorf("the copy: the source's process writes %q, want the value it held in memory", got)
	}
	if out := mustRun(t, m, "a", cp.ID, "test -e /workspace/later.txt && echo leaked || echo ok; echo copy > /workspace/new.txt"); out != "ok\n" {
		t.Errorf("the source's write after the snapshot: %s", out)
	}
	if out := mustRun(t, m, "a", src.ID, "cat /workspace/new.txt"); out != "added\n" {
		t.Errorf("the copy's write reached the source: %q", out)
	}
	d, err := m.Diff(testCtx(t), "a", cp.ID, "base")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range d.Changes {
		names = append(names, c.Path)
	}
	d.Close()
	if all := strings.Join(names, " "); !strings.Contains(all, "workspace/new.txt") || !strings.Contains(all, "etc/issue.net") {
		t.Errorf("the copy's diff against its base: %s", all)
	}

	res, err := m.Fork(testCtx(t), "a", src.ID, 2, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if r.Sandbox == nil {
			t.Fatalf("fork %d: %s", i, r.Error)
		}
		if got := remembers(t, m, "a", r.Sandbox.ID); got != "only-in-memory" {
			t.Errorf("fork %d: the source's process writes %q", i, got)
		}
		if out := mustRun(t, m, "a", r.Sandbox.ID, "cat /workspace/later.txt"); out != "later\n" {
			t.Errorf("fork %d: the source's files: %q", i, out)
		}
	}

	// Its files only, in the namespace tier.
	files := mustCreate(t, m, "a", CreateRequest{Snapshot: sn.ID, Policy: policy.Spec{Tier: policy.TierNamespace}})
	checkChanges(t, m, "a", files.ID)
	if got := remembers(t, m, "a", files.ID); got != "none" {
		t.Errorf("a namespace-tier sandbox from the snapshot has a process writing %q", got)
	}

	// A create that names the source's workspace takes the rest of its
	// view; one that names other limits is refused, naming them.
	same := mustCreate(t, m, "a", CreateRequest{Snapshot: sn.ID, Policy: policy.Spec{Filesystem: policy.Filesystem{Workspace: src.Workspace}}})
	if got := remembers(t, m, "a", same.ID); got != "only-in-memory" {
		t.Errorf("a copy naming the source's workspace: %q", got)
	}
	_, err = m.Create(testCtx(t), "a", CreateRequest{Snapshot: sn.ID, Policy: policy.Spec{Resources: policy.Resources{MemoryBytes: 123 << 20}}})
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "resources.memory") {
		t.Errorf("a copy with other limits: %v, want refused naming resources.memory", err)
	}

	// Its memory takes no secrets.
	_, err = m.Create(testCtx(t), "a", CreateRequest{Snapshot: sn.ID, Policy: policy.Spec{
		Secrets: []policy.Secret{{Name: "TOKEN", Hosts: []string{"example.test"}, From: policy.SecretFromRequest}},
	}, Secrets: map[string]secrets.Value{"TOKEN": secrets.NewValue([]byte("x"))}})
	if !errors.Is(err, ErrInvalid) {
		t.Errorf("a copy with secrets: %v, want refused", err)
	}

	// A sandbox with secrets is snapshotted as its files only, and the
	// answer says so.
	var p policy.Spec
	p.Secrets = []policy.Secret{{Name: "TOKEN", Hosts: []string{"example.com"}, From: policy.SecretFromRequest}}
	sec := mustCreate(t, m, "a", CreateRequest{Policy: p, Secrets: map[string]secrets.Value{"TOKEN": secrets.NewValue([]byte("hutch-test-secret"))}})
	mustRun(t, m, "a", sec.ID, "echo with-secrets > /workspace/s.txt")
	if sn3, err := m.Snapshot(testCtx(t), "a", sec.ID); err != nil || sn3.Memory || sn3.MemorySize != 0 || sn3.Tier != policy.TierGVisor {
		t.Errorf("a snapshot of a sandbox with secrets: %+v, %v; want its files only", sn3, err)
	}

	if err := m.DeleteSnapshot(testCtx(t), "a", sn.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(m.memoryDir(sn.ID)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the deleted snapshot's memory is still there: %v", err)
	}
	if _, err := m.Create(testCtx(t), "a", CreateRequest{Snapshot: sn.ID}); !errors.Is(err, ErrNotFound) {
		t.Errorf("a create from the deleted snapshot: %v", err)
	}
	// The copies run on.
	if got := remembers(t, m, "a", cp.ID); got != "only-in-memory" {
		t.Errorf("the copy after its snapshot was deleted: %q", got)
	}
}

// TestGVisorSnapshotImage: over an image, a memory snapshot's copies
// stack its layer over the image's; a snapshot of a copy adds its own
// layer and keeps the memory of the copy; a copy over snapshot layers is
// paused in memory (its record names no layers a restore from disk would
// stack) and goes on after resume.
func TestGVisorSnapshotImage(t *testing.T) {
	cfg := gvisorConfig(t)
	cfg.AgentBinary = filepath.Join(filepath.Dir(testutil.Hutch(t)), "hutch-agent")
	m := newManager(t, cfg)
	img := imagetest.Busybox(t, func(ok bool, reason string) { testutil.Need(t, ok, reason) })
	if _, err := fetch.Import(m.images, imagetest.DockerSave(t, img, "hutch.test/gsnap:1", t.TempDir()), "", fetch.Options{Root: true}); err != nil {
		t.Fatal(err)
	}
	req := CreateRequest{Policy: policy.Spec{Root: policy.ImagePrefix + "hutch.test/gsnap:1"}}
	src := mustCreate(t, m, "a", req)
	mustRun(t, m, "a", src.ID, "echo one > /one.txt")
	startRemembering(t, m, "a", src.ID, "image-memory")
	sn, err := m.Snapshot(testCtx(t), "a", src.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !sn.Memory || sn.Layers != 1 || sn.Image != src.Image {
		t.Errorf("snapshot %+v", sn)
	}
	cp := mustCreate(t, m, "a", CreateRequest{Snapshot: sn.ID})
	if got := remembers(t, m, "a", cp.ID); got != "image-memory" {
		t.Errorf("the copy's process writes %q", got)
	}
	mustRun(t, m, "a", cp.ID, "echo two > /two.txt")
	sn2, err := m.Snapshot(testCtx(t), "a", cp.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !sn2.Memory || sn2.Layers != 2 {
		t.Errorf("a snapshot of the copy: %+v, want two layers and memory", sn2)
	}
	cp2 := mustCreate(t, m, "a", CreateRequest{Snapshot: sn2.ID})
	if out := mustRun(t, m, "a", cp2.ID, "cat /one.txt /two.txt"); out != "one\ntwo\n" {
		t.Errorf("the second copy's files: %q", out)
	}
	if got := remembers(t, m, "a", cp2.ID); got != "image-memory" {
		t.Errorf("the second copy's process writes %q", got)
	}

	pid := hostPID(t, m, cp.ID)
	if info, err := m.Pause(testCtx(t), "a", cp.ID); err != nil || info.State != store.StatePaused {
		t.Fatalf("pause of a copy: %+v, %v", info, err)
	}
	if gone(pid) {
		t.Error("a copy over snapshot layers was paused to disk")
	}
	if _, err := m.Resume(testCtx(t), "a", cp.ID); err != nil {
		t.Fatal(err)
	}
	if got := remembers(t, m, "a", cp.ID); got != "image-memory" {
		t.Errorf("the copy after resume: %q", got)
	}
}
