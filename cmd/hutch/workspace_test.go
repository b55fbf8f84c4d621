package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestPlaceholdersOutOfGit: the empty stand-ins that hold missing
// protected paths while a sandbox runs do not show in git inside it: a
// clean repository stays clean (`git status`), and `git add -A` commits
// only what the command made. The host's info/exclude is unchanged, and
// after the run the repository holds the commit and nothing else.
func TestPlaceholdersOutOfGit(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatalf("git is needed: %v", err)
	}
	ws := hostDir(t)
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@example.test"}, args...)...)
		cmd.Dir = ws
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	git("init", "-q")
	git("commit", "-q", "--allow-empty", "-m", "first")
	exclude := filepath.Join(ws, ".git", "info", "exclude")
	before, err := os.ReadFile(exclude)
	if err != nil {
		t.Fatal(err)
	}
	r := sandboxed(t, invocation{dir: ws, args: sh(`echo "STATUS[$(git status --porcelain)]"
echo made > made.txt
git add -A && git -c user.name=t -c user.email=t@example.test commit -q -m second
echo "FILES[$(git show --name-only --format= HEAD | tr '\n' ' ')]"`)})
	wantOK(t, r)
	if !strings.Contains(r.stdout, "STATUS[]") {
		t.Errorf("git status in the sandbox is not clean:\n%s", r)
	}
	if !strings.Contains(r.stdout, "FILES[made.txt ]") {
		t.Errorf("the commit holds more than what the command made:\n%s", r)
	}
	if after, _ := os.ReadFile(exclude); string(after) != string(before) {
		t.Errorf("the host's info/exclude changed:\n%s", after)
	}
	if st := git("status", "--porcelain"); st != "" {
		t.Errorf("after the run the host's repository is not clean:\n%s", st)
	}
	if log := git("log", "--format=%s"); log != "second\nfirst\n" {
		t.Errorf("log = %q", log)
	}
}
