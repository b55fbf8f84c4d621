package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/testutil"
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

// TestHomeModes: the invoking user's home in the sandbox, as root and as
// an ordinary user. By default (ro) the real home reads as it is — its
// configuration and toolchains — with its credentials masked, and what the
// sandbox writes there works but is gone when it ends; the host's home is
// unchanged. --home tmp gives an empty home; --home persist a home of its
// own that keeps what one run wrote for the next, apart from the real one.
func TestHomeModes(t *testing.T) {
	for _, uid := range []int{0, testutil.UnprivilegedUID} {
		t.Run(map[int]string{0: "root", testutil.UnprivilegedUID: "user"}[uid], func(t *testing.T) {
			home, ws := hostDir(t), hostDir(t)
			writeFile(t, filepath.Join(home, ".config", "tool", "conf"), "setting\n", 0o644)
			writeFile(t, filepath.Join(home, ".aws", "credentials"), "SECRET\n", 0o600)
			writeFile(t, filepath.Join(home, "go", "bin", "tool"), "#!/bin/sh\necho toolchain\n", 0o755)
			chownTree(t, uid, home, ws)
			if uid == 0 {
				if err := os.Chmod(home, 0o700); err != nil { // as /root is
					t.Fatal(err)
				}
			}
			env := []string{"PATH=" + stdPath, "HOME=" + home, "LANG=C.UTF-8"}
			run := func(mode, script string) result {
				t.Helper()
				args := []string{"run"}
				if mode != "" {
					args = append(args, "--home", mode)
				}
				r := hutch(t, invocation{dir: ws, env: env, uid: uid, args: append(args, "--", "sh", "-c", script)})
				wantOK(t, r)
				return r
			}
			testutil.RequireRoot(t)
			before := treeOf(t, home)

			r := run("", `cat ~/.config/tool/conf; ~/go/bin/tool; cat ~/.aws/credentials 2>&1; echo changed >> ~/.config/tool/conf && cat ~/.config/tool/conf; mkdir -p ~/.cache/b && echo c > ~/.cache/b/x && echo WROTE`)
			for _, want := range []string{"setting\n", "toolchain\n", "changed\n", "WROTE"} {
				if !strings.Contains(r.stdout, want) {
					t.Errorf("ro: %q missing\n%s", want, r)
				}
			}
			if strings.Contains(r.stdout, "SECRET") {
				t.Errorf("ro: the sandbox read a credential in the home\n%s", r)
			}
			if after := treeOf(t, home); after != before {
				t.Errorf("ro: the host's home changed:\n%s\nwas\n%s", after, before)
			}

			r = run("tmp", `ls -A ~; echo x > ~/f && echo WROTE`)
			if strings.TrimSpace(strings.TrimSuffix(r.stdout, "WROTE\n")) != "" || !strings.Contains(r.stdout, "WROTE") {
				t.Errorf("tmp: the home is not an empty one of its own\n%s", r)
			}

			r = run("persist", `cat ~/kept 2>/dev/null; echo first > ~/kept; ls -A ~`)
			if strings.Contains(r.stdout, "setting") || strings.Contains(r.stdout, ".config") {
				t.Errorf("persist: the sandbox saw the real home\n%s", r)
			}
			r = run("persist", `cat ~/kept`)
			if r.stdout != "first\n" {
				t.Errorf("persist: what one run wrote is not there for the next: %q", r.stdout)
			}
			if _, err := os.Stat(filepath.Join(home, "kept")); err == nil {
				t.Error("persist: the sandbox wrote into the real home")
			}
		})
	}
}

// treeOf describes every entry below dir but hutch's persisted homes:
// path, mode and content.
func treeOf(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if strings.HasPrefix(rel, ".local") {
			return nil
		}
		b.WriteString(rel + " " + fi.Mode().String())
		if fi.Mode().IsRegular() {
			c, _ := os.ReadFile(p)
			b.WriteString(" " + string(c))
		}
		b.WriteString("\n")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}
