//go:build linux

package escape

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// TestItem30_SnapshotsAcrossTenants (escape item 30, the class "answers
// that reveal other tenants' activity", for snapshots, forks and diffs):
// every call of another tenant that names alice's sandbox or snapshot —
// snapshot, fork, diff (of it, or of his own against hers), get, export,
// delete, create from it, through hutch's API and E2B's — answers exactly
// what the same call answers for an id that does not exist, and changes
// nothing of alice's.
func TestItem30_SnapshotsAcrossTenants(t *testing.T) {
	forEachServedTier(t, func(t *testing.T, tier []string) {
		d := startServed(t, "", true, tier...)
		alice, bob := d.token(t, "alice"), d.token(t, "bob")
		sb := d.create(t, alice, `{}`)
		if _, _, code, ok := d.runIn(t, alice, sb, "echo alice > /workspace/f"); !ok || code != 0 {
			t.Fatalf("alice's sandbox: exit %d", code)
		}
		status, out := d.do(t, alice, "POST", "/v1/sandboxes/"+sb+"/snapshots", "")
		if status != http.StatusCreated {
			t.Fatalf("alice's snapshot: %d %s", status, out)
		}
		var sn struct {
			ID     string
			Memory bool
		}
		_ = json.Unmarshal([]byte(out), &sn)
		snap := sn.ID
		if sn.Memory != underGVisor(tier) {
			t.Errorf("alice's snapshot keeps memory: %v, want %v (gVisor's tier can)", sn.Memory, underGVisor(tier))
		}
		own := d.create(t, bob, `{}`)

		const noSB, noSnap = "sb-aaaaaaaaaaaa", "snap-aaaaaaaaaaaa"
		calls := []struct{ method, path, body string }{
			{"POST", "/v1/sandboxes/SB/snapshots", ""},
			{"POST", "/v1/sandboxes/SB/fork", `{"count":1}`},
			{"GET", "/v1/sandboxes/SB/diff", ""},
			{"GET", "/v1/sandboxes/" + own + "/diff?against=SB", ""},
			{"POST", "/sandboxes/SB/snapshots", `{"name":"x"}`},
			{"POST", "/sandboxes/SB/fork", `{"count":1}`},
		}
		calls = append(calls, []struct{ method, path, body string }{
			{"GET", "/v1/snapshots/SNAP", ""},
			{"GET", "/v1/snapshots/SNAP/image", ""},
			{"DELETE", "/v1/snapshots/SNAP", ""},
			{"POST", "/v1/sandboxes", `{"snapshot":"SNAP"}`},
			{"GET", "/v1/sandboxes/" + own + "/diff?against=SNAP", ""},
			{"DELETE", "/templates/SNAP", ""},
			{"POST", "/sandboxes", `{"templateID":"SNAP"}`},
		}...)
		fill := func(s, id, sid string) string {
			return strings.NewReplacer("SB", id, "SNAP", sid).Replace(s)
		}
		for _, c := range calls {
			st, got := d.do(t, bob, c.method, fill(c.path, sb, snap), fill(c.body, sb, snap))
			stU, unknown := d.do(t, bob, c.method, fill(c.path, noSB, noSnap), fill(c.body, noSB, noSnap))
			norm := strings.NewReplacer(sb, "ID", noSB, "ID", snap, "SID", noSnap, "SID")
			if st != stU || norm.Replace(got) != norm.Replace(unknown) || st/100 == 2 {
				t.Errorf("bob's %s %s: %d %s\nfor an unknown id: %d %s", c.method, c.path, st, got, stU, unknown)
			}
		}
		// Nothing of alice's changed: her sandbox runs with its file, her
		// snapshot is hers, and bob lists none.
		if o, _, code, ok := d.runIn(t, alice, sb, "cat /workspace/f"); !ok || code != 0 || o != "alice\n" {
			t.Errorf("alice's sandbox after bob's calls: %q exit %d", o, code)
		}
		if st, o := d.do(t, alice, "GET", "/v1/snapshots/"+snap, ""); st != http.StatusOK {
			t.Errorf("alice's snapshot after bob's calls: %d %s", st, o)
		}
		for _, p := range []string{"/v1/snapshots", "/snapshots"} {
			if _, o := d.do(t, bob, "GET", p, ""); strings.Contains(o, snap) || strings.Contains(o, sb) {
				t.Errorf("bob's GET %s shows alice's: %s", p, o)
			}
		}
	})
}

// TestItem24_DiffShowsOnlyTheView (escape items 24 and 25 through the
// daemon's diff): a served sandbox over the host's root that writes into
// the directories the daemon hides (/root), next to host files only root
// may read, and plants links to them, gets a diff — against its base and
// against another sandbox, in every format — that names only what it
// wrote: neither the host's files there, nor their contents, nor the
// daemon's own state.
func TestItem24_DiffShowsOnlyTheView(t *testing.T) {
	forEachServedTier(t, func(t *testing.T, tier []string) {
		rootFile, err := os.CreateTemp("/root", "hutch-escape-diff-")
		if err != nil {
			t.Fatal(err)
		}
		rootFile.WriteString("root secret\n")
		rootFile.Close()
		t.Cleanup(func() { os.Remove(rootFile.Name()) })
		closed := filepath.Join("/etc", "hutch-escape-diff-closed")
		writeFile(t, closed, "closed secret\n", 0o600, 0)
		t.Cleanup(func() { os.Remove(closed) })
		// Started after: its scan of closed paths knows the file.
		d := startServed(t, "", true, tier...)
		alice := d.token(t, "alice")
		a, b := d.create(t, alice, `{}`), d.create(t, alice, `{}`)
		// The links' texts double their slashes: what the sandbox wrote
		// is not what the test looks for.
		script := `echo mine > /root/mine; cat /root/* /etc/hutch-escape-diff-closed 2>/dev/null; ln -s /` + strings.ReplaceAll(rootFile.Name(), "/", "//") + ` /workspace/to-root;
ln -s /` + strings.ReplaceAll(closed, "/", "//") + ` /workspace/to-closed; ln -s /etc /workspace/etc; mkdir -p /var/lib/hutch-x && echo x > /var/lib/hutch-x/f; true`
		o, _, code, ok := d.runIn(t, alice, a, script)
		if !ok || code != 0 || strings.Contains(o, "secret") {
			t.Fatalf("the sandbox: exit %d, read %q", code, o)
		}
		for _, q := range []string{"", "?format=json", "?format=stat", "?format=names", "?format=export", "?against=" + b, "?against=" + b + "&format=json"} {
			status, out := d.do(t, alice, "GET", "/v1/sandboxes/"+a+"/diff"+q, "")
			if status != http.StatusOK {
				t.Errorf("diff%s: %d %s", q, status, out)
				continue
			}
			for _, leak := range []string{"secret", "root/" + filepath.Base(rootFile.Name()), "etc/hutch-escape-diff-closed", ".bashrc", ".profile", "hutch.sock"} {
				if strings.Contains(out, leak) {
					t.Errorf("diff%s shows %q:\n%s", q, leak, out)
				}
			}
			if !strings.Contains(out, "root/mine") || !strings.Contains(out, "var/lib/hutch-x/f") {
				t.Errorf("diff%s lacks what the sandbox wrote:\n%s", q, out)
			}
		}
	})
}

// TestItem21_ReviewWorkspaceApply (escape items 21, 22 and 30 through a
// review workspace of hutch serve): a tenant's sandbox that writes a
// setuid copy of a shell, a git hook and a link out into the host
// directory the operator bound gets none of them onto the host: the
// sandbox's writes stay in the change set, the tenant's apply refuses
// them (409, nothing written), its word (allow) is refused (400), and
// skip_refused applies only the rest. Another tenant sees nothing of it.
func TestItem21_ReviewWorkspaceApply(t *testing.T) {
	forEachServedTier(t, func(t *testing.T, tier []string) {
		host := hostDir(t, 0, "review")
		writeFile(t, filepath.Join(host, "main.go"), "package main\n", 0o644, 0)
		if err := os.MkdirAll(filepath.Join(host, ".git", "hooks"), 0o755); err != nil {
			t.Fatal(err)
		}
		d := startServed(t, "", true, append(tier, "--review-workspace", "app="+host+"@alice")...)
		alice, bob := d.token(t, "alice"), d.token(t, "bob")
		if st, out := d.do(t, bob, "POST", "/v1/sandboxes", `{"review_workspace":"app"}`); st != http.StatusBadRequest || strings.Contains(out, host) {
			t.Errorf("bob binds alice's review workspace: %d %s", st, out)
		}
		st, out := d.do(t, alice, "POST", "/v1/sandboxes", `{"review_workspace":"app"}`)
		if st != http.StatusCreated {
			t.Fatalf("alice's create: %d %s", st, out)
		}
		var sb struct {
			ID        string `json:"id"`
			ChangeSet string `json:"change_set"`
		}
		_ = json.Unmarshal([]byte(out), &sb)
		o, e, _, ok := d.runIn(t, alice, sb.ID, `cp /bin/sh ./sh && chmod 4755 ./sh; echo 'touch /tmp/pwned' > .git/hooks/post-checkout 2>&1; ln -s /etc/passwd out; echo ok > plain.txt; ls -l sh`)
		if !ok {
			t.Fatalf("the sandbox: %s %s", o, e)
		}
		for _, name := range []string{"sh", "out", "plain.txt", ".git/hooks/post-checkout"} {
			if _, err := os.Lstat(filepath.Join(host, name)); err == nil {
				t.Errorf("the sandbox wrote %s into the host directory", name)
			}
		}
		if st, out := d.do(t, alice, "DELETE", "/v1/sandboxes/"+sb.ID, ""); st != http.StatusNoContent {
			t.Fatalf("destroy: %d %s", st, out)
		}
		cid := sb.ChangeSet
		if st, out := d.do(t, bob, "GET", "/v1/changes/"+cid+"/diff", ""); st != http.StatusNotFound {
			t.Errorf("bob reads alice's change set: %d %s", st, out)
		}
		if st, out := d.do(t, alice, "POST", "/v1/changes/"+cid+"/apply", `{}`); st != http.StatusConflict {
			t.Errorf("apply of a set with a setuid file and a link out: %d %s", st, out)
		}
		if st, out := d.do(t, alice, "POST", "/v1/changes/"+cid+"/apply", `{"allow":["."]}`); st != http.StatusBadRequest {
			t.Errorf("a tenant's apply with allow: %d %s", st, out)
		}
		if _, err := os.Lstat(filepath.Join(host, "plain.txt")); err == nil {
			t.Error("a refused apply wrote plain.txt")
		}
		if st, out := d.do(t, alice, "POST", "/v1/changes/"+cid+"/apply", `{"skip_refused":true}`); st != http.StatusOK {
			t.Errorf("apply with skip_refused: %d %s", st, out)
		}
		if b, err := os.ReadFile(filepath.Join(host, "plain.txt")); string(b) != "ok\n" {
			t.Errorf("plain.txt after the apply: %q %v", b, err)
		}
		for _, name := range []string{"sh", "out", ".git/hooks/post-checkout"} {
			if _, err := os.Lstat(filepath.Join(host, name)); err == nil {
				t.Errorf("the apply wrote %s into the host directory", name)
			}
		}
		if !testutil.Eventually(time.Minute, func() bool { return audited(t, d, "", "apply_changes") }) {
			t.Error("no apply_changes record in the audit log")
		}
	})
}
