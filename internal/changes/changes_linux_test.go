package changes

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/approve"
	"github.com/hutch-sandbox/hutch/internal/hostperm"
	"github.com/hutch-sandbox/hutch/internal/testutil"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testutil.RemoveBuilds()
	os.Exit(code)
}

// scenarioFiles is the workspace of scenario.
var scenarioFiles = map[string]string{
	"a.txt": "one\ntwo\nthree\n", "b.txt": "bee\n", "d/x": "x\n", "d/y": "y\n", "mv.txt": "move me\n",
	"keep/k": "k\n", "bin": "\x00\x01", "tf": "file\n", "td/in": "in\n", "touched": "same\n",
	"deep/1/2/3/4/5/f": "deep\n", "empty/": "",
}

// scenario is a command that makes every kind of change; it copies the
// workspace as it sees it to $EXPECT at the end.
const scenario = `
echo four >> a.txt
rm b.txt
mkdir -p new/deep && echo new > new/deep/file
mv mv.txt moved.txt
rm -rf d && mkdir d && echo z > d/z
chmod 755 keep/k
mv keep kept
ln -s a.txt link
ln -s ../../../etc/passwd out
ln moved.txt hard
printf '\001\000\002\377' > bin
rm tf && mkdir tf && echo inner > tf/f
rm -rf td && echo now-a-file > td
rm ln && echo file > ln
touch touched
echo deeper >> deep/1/2/3/4/5/f
printf 'no newline' > nonl
`

// scenarioSet runs scenario (with a fifo when fifo is set) over a fresh
// workspace and returns the set and the sandbox's view of the workspace.
func scenarioSet(t *testing.T, fifo bool) (*Set, string) {
	ws := workspace(t, scenarioFiles)
	if err := os.Symlink("a.txt", filepath.Join(ws, "ln")); err != nil {
		t.Fatal(err)
	}
	expect := t.TempDir()
	script := scenario
	if fifo {
		script += "mkfifo fifo\n"
	}
	return review(t, ws, script+`cp -a . "`+expect+`"`), expect
}

func TestChangesKinds(t *testing.T) {
	s, _ := scenarioSet(t, true)
	ch, err := s.Changes()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"a.txt": "modified", "b.txt": "deleted", "new": "added", "new/deep": "added", "new/deep/file": "added",
		"hard": "renamed from mv.txt", "moved.txt": "added", "d/x": "deleted", "d/y": "deleted", "d/z": "added",
		"kept": "added", "kept/k": "renamed from keep/k", "keep": "deleted", "link": "added", "out": "added",
		"bin": "modified", "tf": "type changed", "tf/f": "added", "td": "type changed", "td/in": "deleted",
		"ln": "type changed", "deep/1/2/3/4/5/f": "modified", "fifo": "refused", "nonl": "added",
	}
	if got := kinds(ch); !reflect.DeepEqual(got, want) {
		t.Errorf("changes:\n got %v\nwant %v", got, want)
	}
	for _, c := range ch {
		switch c.Path {
		case "moved.txt":
			if c.HardLink != "hard" {
				t.Errorf("moved.txt: hard link %q, want hard", c.HardLink)
			}
		case "kept/k":
			if c.FromOld.Mode != 0o644 || c.New.Mode != 0o755 {
				t.Errorf("kept/k: mode %o → %o, want 644 → 755", c.FromOld.Mode, c.New.Mode)
			}
		case "out":
			if c.New.Type != Symlink || c.New.Link != "../../../etc/passwd" {
				t.Errorf("out: %+v", c.New)
			}
		}
	}
	var diff bytes.Buffer
	if err := s.WriteDiff(&diff, ch, ShowOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{
		"diff --git a/a.txt b/a.txt\nindex 4cb29ea..f384549 100644\n--- a/a.txt\n+++ b/a.txt\n@@ -1,3 +1,4 @@\n one\n two\n three\n+four\n",
		"old mode 100644\nnew mode 100755\nsimilarity index 100%\nrename from keep/k\nrename to kept/k\n",
		"Binary files a/bin and b/bin differ (2 B → 4 B)",
		"new file mode 120000\n", "+../../../etc/passwd\n\\ No newline at end of file\n",
		"hard link to hard\n", "refused fifo fifo: never applied\n", "deleted directory keep\n", "new directory new/deep\n",
	} {
		if !strings.Contains(diff.String(), line) {
			t.Errorf("diff lacks %q:\n%s", line, diff.String())
		}
	}
	if strings.Contains(diff.String(), "touched") {
		t.Errorf("a file touched (copied up, not changed) is in the diff:\n%s", diff.String())
	}
	var stat bytes.Buffer
	if err := s.WriteStat(&stat, ch, false); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stat.String(), " keep/k => kept/k ") || !strings.Contains(stat.String(), "Bin 2 -> 4 bytes") ||
		!strings.Contains(stat.String(), " 20 files changed, 11 insertions(+), 6 deletions(-)\n") {
		t.Errorf("stat:\n%s", stat.String())
	}
	sum := Summary(s.ID(), ch)
	if !strings.Contains(sum, "change set "+s.ID()+": 7 added, 3 modified, 4 deleted, 2 renamed, 3 type changed, 1 refused") {
		t.Errorf("summary: %s", sum)
	}
	if m := s.Meta(); m.Runs != 1 || len(m.Base) == 0 || m.Base["a.txt"].SHA256 == "" || m.Counts[Added] != 7 {
		t.Errorf("meta after End: runs %d, base %v, counts %v", m.Runs, m.Base, m.Counts)
	}
}

func TestApplyWholeSet(t *testing.T) {
	s, expect := scenarioSet(t, true)
	ch, err := s.Changes()
	if err != nil {
		t.Fatal(err)
	}
	// The link out of the workspace and the fifo need the user's word.
	_, err = s.Apply(ch, ApplyOptions{})
	var ae *ApplyError
	if !errors.As(err, &ae) || len(ae.Refused) != 2 || ae.Refused[0].Path != "fifo" || ae.Refused[1].Path != "out" {
		t.Fatalf("apply without --allow: %v", err)
	}
	if _, err := os.Stat(filepath.Join(s.Workspace(), "new")); !os.IsNotExist(err) {
		t.Fatalf("a refused apply wrote new/: %v", err)
	}
	res, err := s.Apply(ch, ApplyOptions{Allow: []string{"out"}, SkipRefused: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Skipped) != 1 || res.Skipped[0].Path != "fifo" {
		t.Errorf("skipped %v, want the fifo", res.Skipped)
	}
	if got, want := tree(t, s.Workspace()), tree(t, expect, "fifo"); !reflect.DeepEqual(got, want) {
		t.Errorf("workspace after apply:\n got %v\nwant %v", got, want)
	}
	a, _ := os.Stat(filepath.Join(s.Workspace(), "hard"))
	b, _ := os.Stat(filepath.Join(s.Workspace(), "moved.txt"))
	if !os.SameFile(a, b) {
		t.Error("hard and moved.txt are no longer one file")
	}
	// Applied again: everything is already as the set has it.
	if _, err := s.Apply(ch, ApplyOptions{Allow: []string{"out"}, SkipRefused: true}); err != nil {
		t.Errorf("second apply: %v", err)
	}
}

func TestApplyConflicts(t *testing.T) {
	ws := workspace(t, map[string]string{"a": "a\n", "b": "b\n", "c": "c\n", "keep": "keep\n"})
	// The user edits c while the sandbox runs (the host's copy, below the
	// overlay).
	s := review(t, ws, `echo sandbox >> a; echo sandbox >> c; echo user >> "$WS/c"; echo new > n; rm b`)
	ch, err := s.Changes()
	if err != nil {
		t.Fatal(err)
	}
	if m := s.Meta(); len(m.Edited) != 1 || m.Edited[0] != "c" {
		t.Fatalf("edited during the run: %v, want [c]", m.Edited)
	}
	// After the run, the user edits a and creates n.
	os.WriteFile(filepath.Join(ws, "a"), []byte("user\n"), 0o644)
	os.WriteFile(filepath.Join(ws, "n"), []byte("mine\n"), 0o644)
	before := tree(t, ws)
	_, err = s.Apply(ch, ApplyOptions{})
	var ae *ApplyError
	if !errors.As(err, &ae) {
		t.Fatalf("apply: %v, want conflicts", err)
	}
	var paths []string
	for _, p := range ae.Conflicts {
		paths = append(paths, p.Path)
	}
	if strings.Join(paths, " ") != "a c n" || !strings.Contains(err.Error(), "edited in the workspace while the sandbox ran") {
		t.Errorf("conflicts %v: %v", paths, err)
	}
	if after := tree(t, ws); !reflect.DeepEqual(before, after) {
		t.Errorf("a conflicting apply changed the workspace:\n%v\n%v", before, after)
	}
	// The path without conflict applies alone.
	if _, err := s.Apply(ch, ApplyOptions{Paths: []string{"b"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(ws, "b")); !os.IsNotExist(err) {
		t.Errorf("b not deleted: %v", err)
	}
}

func TestApplyProtected(t *testing.T) {
	ws := workspace(t, map[string]string{".git/HEAD": "ref: refs/heads/main\n", "src/main.go": "package main\n"})
	s := review(t, ws, `
mkdir -p .git/hooks && echo evil > .git/hooks/pre-commit
mkdir -p .vscode && echo '{}' > .vscode/tasks.json
echo tool > src/tool && chmod 4755 src/tool
mkdir -p lib/.git && echo x > lib/.git/config
echo ok >> src/main.go
`)
	ch, err := s.Changes()
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Apply(ch, ApplyOptions{})
	var ae *ApplyError
	if !errors.As(err, &ae) {
		t.Fatalf("apply: %v", err)
	}
	got := map[string]string{}
	for _, p := range ae.Refused {
		got[p.Path] = p.Why
	}
	for _, p := range []string{".git/hooks", ".git/hooks/pre-commit", ".vscode", ".vscode/tasks.json", "src/tool", "lib/.git", "lib/.git/config"} {
		if got[p] == "" {
			t.Errorf("%s not refused (refused: %v)", p, got)
		}
	}
	if !strings.Contains(err.Error(), "--skip-refused") || !strings.Contains(got["src/tool"], "setuid") {
		t.Errorf("refusal: %v", err)
	}
	// --allow names .vscode; the rest is skipped.
	res, err := s.Apply(ch, ApplyOptions{Allow: []string{".vscode"}, SkipRefused: true})
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, ".vscode/tasks.json")); string(b) != "{}\n" {
		t.Errorf(".vscode/tasks.json allowed but not applied: %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "src/main.go")); string(b) != "package main\nok\n" {
		t.Errorf("src/main.go: %q", b)
	}
	for _, p := range []string{".git/hooks", "src/tool", "lib/.git"} {
		if _, err := os.Lstat(filepath.Join(ws, p)); !os.IsNotExist(err) {
			t.Errorf("%s applied without --allow: %v", p, err)
		}
	}
	if len(res.Skipped) != 5 {
		t.Errorf("skipped %v", res.Skipped)
	}
	if !s.Meta().Applied.IsZero() {
		t.Error("a partial apply marked the set applied")
	}
}

// git runs git in dir and returns its output.
func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return string(out)
}

func TestApplyBranch(t *testing.T) {
	_, err := exec.LookPath("git")
	testutil.Need(t, err == nil, "needs git")
	t.Setenv("GIT_AUTHOR_NAME", "t")
	t.Setenv("GIT_AUTHOR_EMAIL", "t@example.com")
	t.Setenv("GIT_COMMITTER_NAME", "t")
	t.Setenv("GIT_COMMITTER_EMAIL", "t@example.com")
	repo := workspace(t, map[string]string{"a.txt": "a\n", "b.txt": "b\n", "mv.txt": "move\n", "sub/keep": "keep\n"})
	git(t, repo, "init", "-q", "-b", "main")
	git(t, repo, "add", ".")
	git(t, repo, "commit", "-qm", "base")
	// The user has work of their own, staged and not.
	os.WriteFile(filepath.Join(repo, "b.txt"), []byte("b staged\n"), 0o644)
	git(t, repo, "add", "b.txt")
	os.WriteFile(filepath.Join(repo, "sub/keep"), []byte("unstaged\n"), 0o644)
	status := git(t, repo, "status", "--porcelain")
	index, _ := os.ReadFile(filepath.Join(repo, ".git/index"))

	// The workspace is a directory of the repository.
	s := review(t, filepath.Join(repo, "sub"), `echo more >> keep; echo new > new.txt; ln -s keep link; chmod 755 new.txt`)
	ch, err := s.Changes()
	if err != nil {
		t.Fatal(err)
	}
	// File rules hold for a branch too: a deny rule makes none.
	deny := []approve.FileRule{{Action: approve.Deny, Globs: []string{"link"}}}
	var ae *ApplyError
	if _, _, err := s.ApplyBranch(ch, "review/one", ApplyOptions{Files: deny}); !errors.As(err, &ae) || len(ae.Denied) != 1 {
		t.Fatalf("a branch under a deny rule: %v", err)
	}
	commit, _, err := s.ApplyBranch(ch, "review/one", ApplyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := git(t, repo, "diff", "--name-status", "main", "review/one"); got != "M\tsub/keep\nA\tsub/link\nA\tsub/new.txt\n" {
		t.Errorf("git diff main review/one:\n%s", got)
	}
	if got := git(t, repo, "show", "review/one:sub/keep"); got != "unstaged\nmore\n" {
		t.Errorf("sub/keep on the branch: %q", got)
	}
	if got := git(t, repo, "ls-tree", "review/one", "sub/link", "sub/new.txt"); !strings.Contains(got, "120000 blob") || !strings.Contains(got, "100755 blob") {
		t.Errorf("modes on the branch:\n%s", got)
	}
	if got := git(t, repo, "log", "--format=%H %P %s", "-1", "review/one"); !strings.HasPrefix(got, commit+" "+strings.TrimSpace(git(t, repo, "rev-parse", "main"))+" hutch change set "+s.ID()) {
		t.Errorf("git log: %s", got)
	}
	if got := git(t, repo, "status", "--porcelain"); got != status {
		t.Errorf("status changed:\n%s\nwas\n%s", got, status)
	}
	if after, _ := os.ReadFile(filepath.Join(repo, ".git/index")); !bytes.Equal(after, index) {
		t.Error("the index changed")
	}
	if _, _, err := s.ApplyBranch(ch, "review/one", ApplyOptions{}); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Errorf("a second branch of the same name: %v", err)
	}
	if _, _, err := s.ApplyBranch(ch, "bad..name", ApplyOptions{}); err == nil {
		t.Error("bad..name accepted")
	}
	plain := review(t, workspace(t, map[string]string{"f": "f\n"}), "echo g > f")
	pch, _ := plain.Changes()
	if _, _, err := plain.ApplyBranch(pch, "x", ApplyOptions{}); err == nil || !strings.Contains(err.Error(), "not in a git repository") {
		t.Errorf("branch outside a repository: %v", err)
	}
}

func TestExportGitApply(t *testing.T) {
	_, err := exec.LookPath("git")
	testutil.Need(t, err == nil, "needs git")
	s, expect := scenarioSet(t, false)
	// A copy of the workspace as it was, to apply the patch to.
	cp := filepath.Join(t.TempDir(), "ws")
	if out, err := exec.Command("cp", "-a", s.Workspace(), cp).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v\n%s", err, out)
	}
	ch, err := s.Changes()
	if err != nil {
		t.Fatal(err)
	}
	var patch bytes.Buffer
	notes, err := s.Export(&patch, ch)
	if err != nil {
		t.Fatal(err)
	}
	if len(notes) != 0 {
		t.Errorf("notes: %v", notes)
	}
	if !strings.Contains(patch.String(), "GIT binary patch\nliteral 4\n") {
		t.Errorf("no binary patch for bin:\n%s", patch.String())
	}
	pf := filepath.Join(t.TempDir(), "p.patch")
	os.WriteFile(pf, patch.Bytes(), 0o644)
	git(t, cp, "apply", "--check", pf)
	git(t, cp, "apply", pf)
	if got, want := tree(t, cp), tree(t, expect); !reflect.DeepEqual(got, want) {
		t.Errorf("after git apply:\n got %v\nwant %v\npatch:\n%s", got, want, patch.String())
	}
}

func TestLargeWorkspace(t *testing.T) {
	testutil.RequireRoot(t)
	ws := t.TempDir()
	for d := range 100 {
		dir := filepath.Join(ws, fmt.Sprintf("pkg%03d", d))
		os.Mkdir(dir, 0o755)
		for f := range 200 {
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%03d.txt", f)), []byte(fmt.Sprintf("file %d %d\n", d, f)), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	// 200 changes: 100 edits, 50 new files, 50 deletions.
	s := review(t, ws, `
for d in $(seq -w 0 99); do echo edit >> pkg0$d/f000.txt; done
for d in $(seq -w 0 49); do echo new > pkg0$d/new.txt; rm pkg0$d/f199.txt; done
`)
	ch, err := s.Changes()
	if err != nil {
		t.Fatal(err)
	}
	if n := Count(ch); len(ch) != 200 || n[Modified] != 100 || n[Added] != 50 || n[Deleted] != 50 {
		t.Fatalf("%d changes, %v; want 200: 100 modified, 50 added, 50 deleted", len(ch), n)
	}
}

func TestStoreOpenAndDiscard(t *testing.T) {
	s := review(t, workspace(t, map[string]string{"f": "f\n"}), "echo g > f; mkdir -p x/y; chmod 0 x/y")
	st := NewStore(filepath.Dir(s.Dir()))
	other, err := st.Create(s.Workspace())
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{s.ID(), s.ID()[:4], strings.ToUpper(s.ID()[:6])} {
		if got, err := st.Open(id); err != nil || got.ID() != s.ID() {
			t.Errorf("Open(%q): %v", id, err)
		}
	}
	if _, err := st.Open("../x"); err == nil || !strings.Contains(err.Error(), "not an ID") {
		t.Errorf("Open(../x): %v", err)
	}
	if _, err := st.Open("f0f0f0f0f0f0"); err == nil || !strings.Contains(err.Error(), "unknown ID") {
		t.Errorf("Open(unknown): %v", err)
	}
	if s.ID()[0] == other.ID()[0] {
		if _, err := st.Open(s.ID()[:1]); err == nil || !strings.Contains(err.Error(), "ambiguous") {
			t.Errorf("Open(ambiguous): %v", err)
		}
	}
	if sets, err := st.List(); err != nil || len(sets) != 2 || sets[0].ID() != other.ID() {
		t.Errorf("List: %v, %v", sets, err)
	}
	// A field hutch does not know survives a rewrite.
	meta := filepath.Join(s.Dir(), "meta.json")
	b, _ := os.ReadFile(meta)
	os.WriteFile(meta, bytes.Replace(b, []byte("{"), []byte(`{"future": [1, 2],`), 1), 0o600)
	s2, err := st.Open(s.ID())
	if err != nil {
		t.Fatal(err)
	}
	if err := s2.Begin(); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(meta); !bytes.Contains(b, []byte(`"future": [`)) || !bytes.Contains(b, []byte(`"runs": 2`)) {
		t.Errorf("meta.json after a rewrite:\n%s", b)
	}
	// The work directory overlayfs left (mode 0) and a mode-0 directory of
	// the sandbox's go too.
	if err := st.Discard(s.ID()[:5]); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(s.Dir()); !os.IsNotExist(err) {
		t.Errorf("set's directory after discard: %v", err)
	}
}

// TestApplyNeverWidens: apply gives nothing of the set write permission
// for others (package hostperm's rule for what comes from a sandbox),
// whatever mode the set holds, new file, changed file or directory; a
// file of the workspace that was writable by others already keeps it.
func TestApplyNeverWidens(t *testing.T) {
	ws := workspace(t, map[string]string{"mine": "m\n", "open": "o\n"})
	if err := os.Chmod(filepath.Join(ws, "open"), 0o666); err != nil {
		t.Fatal(err)
	}
	s := review(t, ws, "echo n > new && chmod 666 new && echo x >> mine && chmod 666 mine && mkdir d && chmod 777 d && echo y >> open")
	ch, err := s.Changes()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Apply(ch, ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]fs.FileMode{"new": 0o664 &^ hostperm.Withheld(hostperm.Umask()), "mine": 0o664 &^ hostperm.Withheld(hostperm.Umask()),
		"d": 0o775 &^ hostperm.Withheld(hostperm.Umask()), "open": 0o666} {
		fi, err := os.Stat(filepath.Join(ws, p))
		if err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s after apply: %v, %v; want %v", p, fi.Mode().Perm(), err, want)
		}
	}
}
