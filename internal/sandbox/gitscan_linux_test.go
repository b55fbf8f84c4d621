package sandbox

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/policy"
)

// tree creates files (content after "=") and directories (a trailing "/")
// and symbolic links ("->") below dir.
func tree(t *testing.T, dir string, entries ...string) {
	t.Helper()
	for _, e := range entries {
		if name, target, ok := strings.Cut(e, " -> "); ok {
			p := filepath.Join(dir, name)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(target, p); err != nil {
				t.Fatal(err)
			}
			continue
		}
		name, content, isFile := strings.Cut(e, "=")
		p := filepath.Join(dir, name)
		if !isFile {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// gitDirEntries are the files git init leaves in a git directory, with
// config holding cfg.
func gitDirEntries(dir, cfg string) []string {
	return []string{dir + "/HEAD=ref: refs/heads/main\n", dir + "/objects/", dir + "/refs/heads/", dir + "/config=" + cfg}
}

func TestScanGitProtects(t *testing.T) {
	ws := t.TempDir()
	home := t.TempDir()
	top := "[core]\n\thooksPath = .githooks\n[include]\n\tpath = ../shared.cfg\n[core]\n\tfsmonitor = ./tools/fsmon\n"
	tree(t, ws, gitDirEntries(".git", top)...)
	tree(t, ws, gitDirEntries(".git/modules/sub", "[core]\n\tworktree = ../../../sub\n")...)
	tree(t, ws, gitDirEntries("a/b/.git", "")...)
	tree(t, ws, gitDirEntries("bare", "[core]\n\tbare = true\n")...)
	tree(t, ws, ".git/hooks/", "sub/.git=gitdir: ../.git/modules/sub\n",
		".git/worktrees/w/commondir=../..\n", ".git/worktrees/w/gitdir="+ws+"/w/.git\n", "w/.git=gitdir: "+ws+"/.git/worktrees/w\n",
		"ln/.git -> ../a/b/.git", "deep/er/still/x/", "tools/")
	tree(t, home, ".gitconfig=[core]\n\thooksPath = ~/hooks\n[include]\n\tpath = "+ws+"/global.inc\n")

	g := scanGit([]string{ws}, home)
	got := map[string]protected{}
	for _, p := range g.prot {
		rel, _ := filepath.Rel(ws, p.Path)
		got[rel] = p
	}
	want := map[string]placeholderKind{
		".git": placeholderFile, ".git/config": placeholderFile, ".git/config.worktree": placeholderFile,
		".git/commondir": placeholderSelf, ".git/hooks": placeholderDir, ".git/info": placeholderDir,
		".git/modules/sub/config": placeholderFile, ".git/modules/sub/hooks": placeholderDir,
		".git/modules/sub/commondir": placeholderSelf, ".git/worktrees/w/commondir": placeholderSelf,
		".git/worktrees/w/gitdir": placeholderFile, ".git/worktrees/w/config.worktree": placeholderFile,
		"a/b/.git/config": placeholderFile, "a/b/.git/hooks": placeholderDir,
		"bare/config": placeholderFile, "bare/hooks": placeholderDir,
		"sub/.git": placeholderFile, "w/.git": placeholderFile,
		".githooks": placeholderDir, "shared.cfg": placeholderFile, "tools/fsmon": placeholderFile,
		"global.inc": placeholderFile,
	}
	for rel, kind := range want {
		p, ok := got[rel]
		if !ok {
			t.Errorf("%s is not protected", rel)
			continue
		}
		if p.Kind != kind {
			t.Errorf("%s: placeholder kind %d, want %d", rel, p.Kind, kind)
		}
		if p.Root != ws {
			t.Errorf("%s: root %q", rel, p.Root)
		}
	}
	for _, pin := range []string{".git", "a/b/.git"} {
		if !got[pin].Pin {
			t.Errorf("%s is not pinned", pin)
		}
	}
	if _, ok := got["bare/objects"]; ok {
		t.Error("a bare repository's objects are protected")
	}
	if !g.gitDirs[filepath.Join(ws, "a/b/.git")] || !g.gitDirs[filepath.Join(ws, ".git/modules/sub")] || !g.gitDirs[filepath.Join(ws, "bare")] {
		t.Errorf("git directories not all known: %v", g.gitDirs)
	}
	if _, walked := g.dirs[filepath.Join(ws, "bare/objects")]; walked {
		t.Error("the scan walked into a bare repository")
	}
	if _, walked := g.dirs[filepath.Join(ws, "deep/er/still/x")]; !walked {
		t.Error("the scan missed a deep directory")
	}
}

func TestNewGitSetAside(t *testing.T) {
	ws := t.TempDir()
	tree(t, ws, gitDirEntries(".git", "[core]\n\tbare = false\n")...)
	tree(t, ws, "src/pkg/", "docs/")
	g := scanGit([]string{ws}, "")
	if got := g.newGit(); len(got) != 0 {
		t.Fatalf("nothing changed, newGit = %q", got)
	}

	cloned := "[core]\n\trepositoryformatversion = 0\n[remote \"origin\"]\n\turl = https://example.test/x.git\n\tfetch = +refs/heads/*:refs/remotes/origin/*\n"
	tree(t, ws, gitDirEntries("src/pkg/clone/.git", cloned)...)
	tree(t, ws, "src/pkg/clone/.git/hooks/pre-commit.sample=#!/bin/sh\n")
	tree(t, ws, gitDirEntries("docs/evil/.git", "[core]\n\tfsmonitor = touch /tmp/x\n")...)
	tree(t, ws, gitDirEntries("new/deep/dir/.git", "")...)
	tree(t, ws, "new/deep/dir/.git/hooks/post-checkout=#!/bin/sh\n")
	tree(t, ws, gitDirEntries("evilgit", "[alias]\n\tst = !sh\n")...)
	tree(t, ws, "linked/.git=gitdir: ../evilgit\n", "sym/.git -> ../evilgit")
	tree(t, ws, gitDirEntries(".git/modules/m", "[credential]\n\thelper = !sh\n")...)
	tree(t, ws, gitDirEntries("docs/common/.git", "")...)
	tree(t, ws, "docs/common/.git/commondir=/elsewhere\n")

	got := g.newGit()
	rel := func(ps []string) []string {
		var out []string
		for _, p := range ps {
			r, _ := filepath.Rel(ws, p)
			out = append(out, r)
		}
		slices.Sort(out)
		return out
	}
	wantNew := []string{".git/modules/m", "docs/common/.git", "docs/evil/.git", "evilgit", "linked/.git", "new/deep/dir/.git", "src/pkg/clone/.git", "sym/.git"}
	if !slices.Equal(rel(got), wantNew) {
		t.Errorf("newGit = %q, want %q", rel(got), wantNew)
	}
	unsafe := map[string]string{
		".git/modules/m":    "config sets credential.helper",
		"docs/common/.git":  "commondir points to /elsewhere",
		"docs/evil/.git":    "config sets core.fsmonitor",
		"evilgit":           "config sets alias.st",
		"linked/.git":       "config sets alias.st",
		"new/deep/dir/.git": "hook post-checkout",
		"sym/.git":          "symbolic link",
	}
	for _, c := range got {
		r, _ := filepath.Rel(ws, c)
		reasons := strings.Join(g.inspect(c), "; ")
		if want, ok := unsafe[r]; ok != (reasons != "") || !strings.Contains(reasons, want) {
			t.Errorf("inspect(%s) = %q, want %q", r, reasons, want)
		}
	}

	sa := setAside(filepath.Join(ws, "docs/evil/.git"), "test")
	if sa.To != filepath.Join(ws, "docs/evil/.git"+policy.SetAsideSuffix) || sa.Err != "" {
		t.Errorf("setAside = %+v", sa)
	}
	tree(t, ws, "docs/evil/.git/")
	if sa2 := setAside(filepath.Join(ws, "docs/evil/.git"), "test"); !strings.HasSuffix(sa2.To, policy.SetAsideSuffix+"-2") {
		t.Errorf("second setAside = %+v, want a numbered name", sa2)
	}
	// Through a symbolic link the parent is not reached (S5).
	tree(t, ws, "out/", "via -> out")
	tree(t, ws, "out/x=1")
	if sa3 := setAside(filepath.Join(ws, "via/x"), "test"); sa3.Err == "" || !exists(filepath.Join(ws, "out/x")) {
		t.Errorf("setAside through a symbolic link = %+v", sa3)
	}
}

func exists(p string) bool { _, err := os.Lstat(p); return err == nil }

func TestDirNames(t *testing.T) {
	dir := t.TempDir()
	tree(t, dir, ".aws/credentials=x", ".config/gh/hosts.yml=x", "file=x")
	d := newDirNames()
	for p, want := range map[string]bool{
		"/":                        true,
		dir:                        true,
		dir + "/.aws":              true,
		dir + "/.aws/credentials":  true,
		dir + "/.aws/config":       false,
		dir + "/.ssh":              false,
		dir + "/.ssh/id_rsa":       false,
		dir + "/.config/gh":        true,
		dir + "/.config/gcloud/x":  false,
		dir + "/file/below":        false, // a file is not a directory
		"/proc/self/status":        true,
		"/nonexistent-hutch-dir/x": false,
	} {
		if got := d.mayExist(p); got != want {
			t.Errorf("mayExist(%s) = %v, want %v", p, got, want)
		}
	}
	got := presentOrOwn([]string{dir + "/.aws", dir + "/.ssh", "/proc/nothing-here-hutch"}, []string{"/proc"})
	if !slices.Equal(got, []string{dir + "/.aws", "/proc/nothing-here-hutch"}) {
		t.Errorf("presentOrOwn = %q", got)
	}
}
