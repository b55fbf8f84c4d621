package daemon

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/changes"
	"github.com/hutch-sandbox/hutch/internal/image/fetch"
	"github.com/hutch-sandbox/hutch/internal/image/imagetest"
	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// diffOf returns "KIND PATH" (a rename: "renamed FROM -> PATH") for each
// change of tenant's sandbox id against against, and the diff for them.
func diffOf(t *testing.T, m *Manager, tenant, id, against string) ([]string, string) {
	t.Helper()
	d, err := m.Diff(testCtx(t), tenant, id, against)
	if err != nil {
		t.Fatalf("diff of %s against %q: %v", id, against, err)
	}
	defer d.Close()
	var out []string
	for _, c := range d.Changes {
		s := string(c.Kind) + " " + c.Path
		if c.From != "" {
			s = string(c.Kind) + " " + c.From + " -> " + c.Path
		}
		out = append(out, s)
	}
	var patch bytes.Buffer
	if err := d.Sides.WriteDiff(&patch, d.Changes, changes.ShowOptions{}); err != nil {
		t.Fatalf("diff of %s: %v", id, err)
	}
	return out, patch.String()
}

// wantChanges checks got against want, in order.
func wantChanges(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("%s:\n  %s\nwant\n  %s", what, strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// TestDiffHostRoot: a served sandbox over the host's root diffs against
// what it saw when it started, against a snapshot, and against another
// sandbox. A fresh sandbox has no changes: neither the directories the
// daemon hides (the host's /root), nor the files it closes, nor the
// workspace it made are changes, and nothing of what they hold on the
// host shows.
func TestDiffHostRoot(t *testing.T) {
	// A file only root may read: closed, so the sandbox never sees it.
	closedFile := filepath.Join("/etc", "hutch-difftest-closed")
	if err := os.WriteFile(closedFile, []byte("host secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(closedFile) })
	// A directory of the host's /tmp, closed when the sandbox starts and
	// opened after: the host's /tmp is not the sandbox's (it has its own
	// tmpfs there), so nothing the host does in it is a change.
	hostTmp, err := os.MkdirTemp("/tmp", "hutch-difftest-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(hostTmp) })
	closedPaths() // the first scan, then one that sees the file
	rescanClosed()
	if _, files := closedPaths(); !slices.Contains(files, closedFile) {
		t.Fatalf("%s is not among the closed files", closedFile)
	}
	if ents, err := os.ReadDir("/root"); err != nil || len(ents) == 0 {
		t.Fatalf("this test needs a /root with files on the host (%v)", err)
	}

	m := newManager(t, Config{})
	src := mustCreate(t, m, "a", CreateRequest{})
	if err := os.Chmod(hostTmp, 0o755); err != nil {
		t.Fatal(err)
	}
	got, patch := diffOf(t, m, "a", src.ID, "")
	wantChanges(t, "a fresh sandbox's changes", got)
	if patch != "" {
		t.Errorf("a fresh sandbox's diff: %q", patch)
	}

	writeChanges(t, m, "a", src.ID)
	mustRun(t, m, "a", src.ID, "echo mine > /root/mine; echo hi > /workspace/chmod.sh && chmod 755 /workspace/chmod.sh")
	got, patch = diffOf(t, m, "a", src.ID, AgainstBase)
	wantChanges(t, "changes against the base", got,
		"modified etc/issue", "deleted etc/issue.net", "added opt/snaptest", "added opt/snaptest/deep.txt",
		"added root/mine", "added workspace/chmod.sh", "added workspace/hardlink.txt", "added workspace/link", "added workspace/new.txt")
	issue, err := os.ReadFile("/etc/issue")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"diff --git a/etc/issue b/etc/issue\n", "-" + strings.SplitN(string(issue), "\n", 2)[0] + "\n", "+changed\n",
		"diff --git a/workspace/chmod.sh b/workspace/chmod.sh\nnew file mode 100755\n",
		"diff --git a/workspace/link b/workspace/link\nnew file mode 120000\n",
	} {
		if !strings.Contains(patch, want) {
			t.Errorf("the patch lacks %q:\n%s", want, patch)
		}
	}
	if strings.Contains(patch, "host secret") || strings.Contains(patch, "bashrc") {
		t.Errorf("the patch shows what the sandbox could not see:\n%s", patch)
	}

	sn, err := m.Snapshot(testCtx(t), "a", src.ID)
	if err != nil {
		t.Fatal(err)
	}
	mustRun(t, m, "a", src.ID, "echo later > /workspace/later.txt; rm /workspace/new.txt; mv /opt/snaptest/deep.txt /opt/snaptest/moved.txt")
	got, _ = diffOf(t, m, "a", src.ID, sn.ID)
	wantChanges(t, "changes against the snapshot", got,
		"renamed opt/snaptest/deep.txt -> opt/snaptest/moved.txt", "added workspace/later.txt", "deleted workspace/new.txt")

	fork := mustCreate(t, m, "a", CreateRequest{Snapshot: sn.ID})
	got, _ = diffOf(t, m, "a", fork.ID, "")
	if len(got) != 9 {
		t.Errorf("a sandbox from the snapshot, against its base: %v", got)
	}
	got, _ = diffOf(t, m, "a", fork.ID, sn.ID)
	wantChanges(t, "a sandbox from the snapshot, against it", got)
	// new.txt is hardlink.txt: the write changes both.
	mustRun(t, m, "a", fork.ID, "echo fork > /workspace/new.txt")
	got, _ = diffOf(t, m, "a", fork.ID, src.ID)
	wantChanges(t, "the fork against its source", got,
		"renamed opt/snaptest/moved.txt -> opt/snaptest/deep.txt", "modified workspace/hardlink.txt", "deleted workspace/later.txt", "added workspace/new.txt")

	// Another tenant's sandboxes and snapshots are not there.
	for _, c := range []struct{ tenant, id, against string }{
		{"b", src.ID, ""}, {"a", src.ID, "sb-aaaaaaaaaaaa"}, {"a", src.ID, "snap-aaaaaaaaaaaa"},
	} {
		if _, err := m.Diff(testCtx(t), c.tenant, c.id, c.against); !errors.Is(err, ErrNotFound) {
			t.Errorf("diff by %s of %s against %q: %v, want not found", c.tenant, c.id, c.against, err)
		}
	}
	other := mustCreate(t, m, "b", CreateRequest{})
	if _, err := m.Diff(testCtx(t), "a", src.ID, other.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("diff against another tenant's sandbox: %v, want not found", err)
	}
}

// TestDiffImage: a sandbox over an image diffs against the image (also the
// image's opaque directories and whiteouts read as overlayfs reads them),
// and a sandbox over another base is refused as unrelated.
func TestDiffImage(t *testing.T) {
	m := newManager(t, Config{AgentBinary: filepath.Join(filepath.Dir(testutil.Hutch(t)), "hutch-agent")})
	img := imagetest.Busybox(t, func(ok bool, reason string) { testutil.Need(t, ok, reason) })
	if _, err := fetch.Import(m.images, imagetest.DockerSave(t, img, "hutch.test/diff:1", t.TempDir()), "", fetch.Options{Root: os.Geteuid() == 0}); err != nil {
		t.Fatal(err)
	}
	req := CreateRequest{Policy: policy.Spec{Root: policy.ImagePrefix + "hutch.test/diff:1"}}
	src := mustCreate(t, m, "a", req)
	got, _ := diffOf(t, m, "a", src.ID, "")
	wantChanges(t, "a fresh sandbox over an image", got)

	mustRun(t, m, "a", src.ID, "echo edited > /etc/motd; rm -r /opq; mkdir /opq; echo fresh > /opq/only; echo made > "+src.Workspace+"/f")
	ws := strings.TrimPrefix(src.Workspace, "/")
	got, patch := diffOf(t, m, "a", src.ID, "")
	wantChanges(t, "changes against the image", got,
		"modified etc/motd", "deleted opq/new", "added opq/only", "added "+ws+"/f")
	if !strings.Contains(patch, "-from the image\n+edited\n") {
		t.Errorf("the patch of /etc/motd:\n%s", patch)
	}

	sn, err := m.Snapshot(testCtx(t), "a", src.ID)
	if err != nil {
		t.Fatal(err)
	}
	fork := mustCreate(t, m, "a", CreateRequest{Snapshot: sn.ID})
	mustRun(t, m, "a", fork.ID, "rm /etc/motd; echo again > /opq/only")
	got, _ = diffOf(t, m, "a", fork.ID, sn.ID)
	wantChanges(t, "a fork against its snapshot", got, "deleted etc/motd", "modified opq/only")
	got, _ = diffOf(t, m, "a", fork.ID, "")
	wantChanges(t, "a fork against the image", got,
		"deleted etc/motd", "deleted opq/new", "added opq/only", "added "+ws+"/f")
	got, _ = diffOf(t, m, "a", src.ID, fork.ID)
	wantChanges(t, "the source against the fork", got, "added etc/motd", "modified opq/only")

	host := mustCreate(t, m, "a", CreateRequest{})
	if _, err := m.Diff(testCtx(t), "a", src.ID, host.ID); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "bases differ") {
		t.Errorf("diff against a sandbox over the host's root: %v", err)
	}
}
