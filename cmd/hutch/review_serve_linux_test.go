package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReviewWorkspaceCLI: hutch serve --review-workspace, hutch create
// --review-workspace and hutch changes ls/show/apply/discard --remote: the
// sandbox works on the host directory, which does not change until the
// set is applied once the sandbox ended.
func TestReviewWorkspaceCLI(t *testing.T) {
	host := t.TempDir()
	if err := os.WriteFile(filepath.Join(host, "main.go"), []byte("package main\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d := startDaemonWith(t, nil, "--review-workspace", "app="+host)
	r := d.admin(t, "create", "--review-workspace", "app")
	wantOK(t, r)
	id := lastLine(r.stdout)
	wantOK(t, d.admin(t, "exec", id, "--", "sh", "-c", "cat main.go && echo '// edited' >> main.go && echo new > README"))
	if b, _ := os.ReadFile(filepath.Join(host, "main.go")); string(b) != "package main\n" {
		t.Errorf("the host's main.go changed while the sandbox ran: %q", b)
	}
	r = d.admin(t, "changes", "ls", "--remote", "-q")
	wantOK(t, r)
	cid := lastLine(r.stdout)
	if len(cid) != 12 {
		t.Fatalf("hutch changes ls --remote -q: %s", r)
	}
	if r := d.admin(t, "changes", "ls", "--remote"); !strings.Contains(r.stdout, cid+"  "+id) || !strings.Contains(r.stdout, "running") {
		t.Errorf("hutch changes ls --remote: %s", r)
	}
	if r := d.admin(t, "changes", "show", "--remote", cid); !strings.Contains(r.stdout, "+// edited\n") || !strings.Contains(r.stdout, "diff --git a/README b/README\nnew file mode 100644\n") {
		t.Errorf("hutch changes show --remote: %s", r)
	}
	if r := d.admin(t, "changes", "apply", "--remote", cid); r.code != 1 || !strings.Contains(r.stderr, "still runs") {
		t.Errorf("apply while the sandbox runs: %s", r)
	}
	wantOK(t, d.admin(t, "rm", id))
	r = d.admin(t, "changes", "apply", "--remote", cid)
	wantOK(t, r)
	if b, _ := os.ReadFile(filepath.Join(host, "main.go")); string(b) != "package main\n// edited\n" {
		t.Errorf("the host's main.go after the apply: %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(host, "README")); string(b) != "new\n" {
		t.Errorf("the host's README after the apply: %q", b)
	}
	wantOK(t, d.admin(t, "changes", "discard", "--remote", cid))
	if r := d.admin(t, "changes", "ls", "--remote", "-q"); strings.TrimSpace(r.stdout) != "" {
		t.Errorf("a discarded set is listed: %s", r)
	}
	if r := d.admin(t, "create", "--review-workspace", "other"); r.code == 0 || !strings.Contains(r.stderr, `review_workspace "other"`) {
		t.Errorf("an unknown review workspace: %s", r)
	}
}
