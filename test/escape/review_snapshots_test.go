//go:build linux

package escape

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
		snap := ""
		status, out := d.do(t, alice, "POST", "/v1/sandboxes/"+sb+"/snapshots", "")
		switch {
		case status == http.StatusCreated:
			var sn struct{ ID string }
			_ = json.Unmarshal([]byte(out), &sn)
			snap = sn.ID
		case underGVisor(tier) && status == http.StatusNotImplemented:
		default:
			t.Fatalf("alice's snapshot: %d %s", status, out)
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
		if snap != "" {
			calls = append(calls, []struct{ method, path, body string }{
				{"GET", "/v1/snapshots/SNAP", ""},
				{"GET", "/v1/snapshots/SNAP/image", ""},
				{"DELETE", "/v1/snapshots/SNAP", ""},
				{"POST", "/v1/sandboxes", `{"snapshot":"SNAP"}`},
				{"GET", "/v1/sandboxes/" + own + "/diff?against=SNAP", ""},
				{"DELETE", "/templates/SNAP", ""},
				{"POST", "/sandboxes", `{"templateID":"SNAP"}`},
			}...)
		}
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
		if snap != "" {
			if st, o := d.do(t, alice, "GET", "/v1/snapshots/"+snap, ""); st != http.StatusOK {
				t.Errorf("alice's snapshot after bob's calls: %d %s", st, o)
			}
			for _, p := range []string{"/v1/snapshots", "/snapshots"} {
				if _, o := d.do(t, bob, "GET", p, ""); strings.Contains(o, snap) || strings.Contains(o, sb) {
					t.Errorf("bob's GET %s shows alice's: %s", p, o)
				}
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
		status, _ := d.do(t, alice, "GET", "/v1/sandboxes/"+a+"/diff", "")
		if underGVisor(tier) {
			if status != http.StatusNotImplemented {
				t.Errorf("a diff under gVisor: %d, want 501", status)
			}
			return
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
