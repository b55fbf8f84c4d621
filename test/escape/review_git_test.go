//go:build linux

package escape

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// gitAs prepares git on the host as the workspace's owner would run it:
// as uid, with home as HOME and nothing else of the test's environment.
func gitAs(uid int, home, dir string, args ...string) *exec.Cmd {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = []string{"HOME=" + home, "PATH=/usr/local/bin:/usr/bin:/bin", "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.test", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.test"}
	if uid != 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid), Groups: []uint32{}}}
	}
	return cmd
}

// hostGit runs git as gitAs says and returns its combined output; a
// failing git is not an error (a repository hutch set aside makes git
// fail, which is the point).
func hostGit(uid int, home, dir string, args ...string) string {
	out, _ := gitAs(uid, home, dir, args...).CombinedOutput()
	return string(out)
}

// mustGit is hostGit for the test's own set-up, which must work.
func mustGit(t *testing.T, uid int, home, dir string, args ...string) {
	t.Helper()
	if out, err := gitAs(uid, home, dir, args...).CombinedOutput(); err != nil {
		t.Fatalf("git %s in %s: %v\n%s", strings.Join(args, " "), dir, err, out)
	}
}

// TestItem22_GitEverywhere: git takes configuration and commands from
// more than .git/config and .git/hooks, and from more than the
// workspace's top repository. In a workspace with a linked worktree, a
// submodule (a gitlink to .git/modules), a nested repository,
// core.hooksPath and an include.path, the sandbox can write none of
// commondir, config.worktree, info, a submodule's or worktree's control
// files, a gitlink, a nested repository's config or hooks, the hooks
// directory or the included file — existing or not. Repositories it makes
// (git init, a directory renamed to .git, a gitlink or a symbolic link to
// a git directory it made, a submodule directory, a bare repository)
// whose configuration runs commands are set aside when it ends; a clean
// one it makes is kept, and git keeps working inside (a commit). Then the
// host's own git, run as the workspace's owner in every one of those
// places, runs nothing the sandbox chose (core.fsmonitor would touch a
// mark file) — and does run the same payload in a repository the host
// configured itself (the control, so the check can fail).
func TestItem22_GitEverywhere(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatalf("git is needed: %v", err)
	}
	forEachMode(t, func(t *testing.T, sb *harness) {
		uid, ws, home := sb.mode.uid, sb.ws, sb.home
		marks := hostDir(t, uid, "marks")
		g := func(dir string, args ...string) { mustGit(t, uid, home, filepath.Join(ws, dir), args...) }
		writeFile(t, filepath.Join(ws, "README"), "hello\n", 0o644, uid)
		g(".", "init", "-q", "-b", "main")
		g(".", "add", "README")
		g(".", "commit", "-q", "-m", "first")
		g(".", "worktree", "add", "-q", "-b", "wtb", "wt")
		mkdirs(t, ws, uid, ".git/modules")
		g(".", "init", "-q", "--separate-git-dir=.git/modules/sub", "sub")
		mkdirs(t, ws, uid, "libs")
		g("libs", "init", "-q", "nested")
		g(".", "config", "core.hooksPath", ".githooks")
		g(".", "config", "include.path", "../shared.gitconfig")
		protectedFiles := []string{
			".git/config", ".git/modules/sub/config", ".git/worktrees/wt/commondir",
			".git/worktrees/wt/gitdir", "sub/.git", "wt/.git", "libs/nested/.git/config",
		}
		before := map[string]string{}
		for _, f := range protectedFiles {
			b, err := os.ReadFile(filepath.Join(ws, f))
			if err != nil {
				t.Fatal(err)
			}
			before[f] = string(b)
		}

		script := fmt.Sprintf(`M=%s
fsm() { printf '[core]\n\tfsmonitor = touch %%s/%%s; :\n' "$M" "$1"; }
try() { if eval "$2" 2>/dev/null; then echo "WROTE $1"; fi; }
mkdir -p evilcommon/hooks && fsm commondir > evilcommon/config
git init -q --bare evilgit && fsm gitlink > evilgit/config
try commondir 'echo ../evilcommon > .git/commondir'
try config.worktree 'fsm cw > .git/config.worktree'
try info 'echo "* filter=x" > .git/info/attributes'
try module-config 'fsm module >> .git/modules/sub/config'
try module-hook 'printf "#!/bin/sh\ntouch $M/module-hook\n" > .git/modules/sub/hooks/post-checkout'
try module-commondir 'echo ../../../evilcommon > .git/modules/sub/commondir'
try worktree-commondir 'echo ../../../evilcommon > .git/worktrees/wt/commondir'
try worktree-config 'fsm wt > .git/worktrees/wt/config.worktree'
try worktree-gitdir 'echo /tmp/x > .git/worktrees/wt/gitdir'
try gitlink 'echo "gitdir: ../evilgit" > sub/.git'
try gitlink-swap 'rm -f wt/.git && echo "gitdir: ../evilgit" > wt/.git'
try nested-config 'fsm nested >> libs/nested/.git/config'
try nested-hook 'printf "#!/bin/sh\ntouch $M/nested-hook\n" > libs/nested/.git/hooks/post-checkout'
try nested-move 'mv libs/nested/.git libs/nested/.git.old'
try hookspath 'mkdir -p .githooks && printf "#!/bin/sh\ntouch $M/hookspath\n" > .githooks/pre-commit'
try include 'fsm include > shared.gitconfig'
git init -q new1 && git -C new1 config core.fsmonitor "touch $M/new1; :" && echo MADE new1
git init -q --bare staging2 && fsm new2 > staging2/config && mkdir new2 && mv staging2 new2/.git && echo MADE new2
git init -q --bare evil3 && fsm new3 > evil3/config && mkdir new3 && echo "gitdir: ../evil3" > new3/.git && echo MADE new3
git init -q --bare evil4 && fsm new4 > evil4/config && mkdir new4 && ln -s ../evil4 new4/.git && echo MADE new4
git init -q --bare .git/modules/new5 && fsm new5 > .git/modules/new5/config && mkdir new5 && echo "gitdir: ../.git/modules/new5" > new5/.git && echo MADE new5
git init -q --bare bare6 && fsm bare6 > bare6/config && echo MADE bare6
git init -q new7 && printf "#!/bin/sh\ntouch $M/new7\n" > new7/.git/hooks/post-checkout && chmod +x new7/.git/hooks/post-checkout && echo MADE new7
git init -q clean && echo MADE clean
echo control > control.txt && git add control.txt && git -c user.name=a -c user.email=a@example.test commit -q -m control && echo COMMITTED
`, marks)
		r := sb.run(opts{}, script)
		for _, w := range []string{"commondir", "config.worktree", "info", "module-config", "module-hook", "module-commondir",
			"worktree-commondir", "worktree-config", "worktree-gitdir", "gitlink", "gitlink-swap", "nested-config",
			"nested-hook", "nested-move", "hookspath", "include"} {
			if strings.Contains(r.stdout, "WROTE "+w+"\n") {
				t.Errorf("the sandbox wrote git's %s\n%s", w, r)
			}
		}
		for _, m := range []string{"new1", "new2", "new3", "new4", "new5", "bare6", "new7", "clean"} {
			if !strings.Contains(r.stdout, "MADE "+m+"\n") {
				t.Errorf("control: the sandbox could not make %s\n%s", m, r)
			}
		}
		if !strings.Contains(r.stdout, "COMMITTED") {
			t.Errorf("control: git could not commit inside the sandbox\n%s", r)
		}
		for f, b := range before {
			if a, err := os.ReadFile(filepath.Join(ws, f)); err != nil || string(a) != b {
				t.Errorf("host changed: %s was %q, is %q (%v)", f, b, a, err)
			}
		}
		// Placeholders are gone; what the sandbox made that runs commands is
		// set aside and reported; the clean repository is kept.
		for _, p := range []string{".git/commondir", ".git/config.worktree", ".githooks", "shared.gitconfig"} {
			if exists(filepath.Join(ws, p)) {
				t.Errorf("%s is left in the workspace", p)
			}
		}
		for _, p := range []string{"new1/.git", "new2/.git", "bare6", "new7/.git", ".git/modules/new5"} {
			if exists(filepath.Join(ws, p)) || !exists(filepath.Join(ws, p+".hutch-set-aside")) {
				t.Errorf("%s was not set aside\n%s", p, r)
			}
			if !strings.Contains(r.stderr, "set aside "+filepath.Join(ws, p)+" ") {
				t.Errorf("set-aside of %s not reported\n%s", p, r)
			}
		}
		if !exists(filepath.Join(ws, "clean/.git")) {
			t.Errorf("a clean repository the sandbox made was set aside\n%s", r)
		}

		// The host's git, everywhere, runs nothing the sandbox chose.
		for _, dir := range []string{".", "wt", "sub", "libs/nested", "new1", "new2", "new3", "new4", "new5", "bare6", "new7", "clean", "evilgit", "evilcommon"} {
			out := hostGit(uid, home, filepath.Join(ws, dir), "status")
			hostGit(uid, home, filepath.Join(ws, dir), "checkout", "-q", "-b", "probe")
			hostGit(uid, home, filepath.Join(ws, dir), "-c", "user.name=t", "-c", "user.email=t@example.test", "commit", "-q", "--allow-empty", "-m", "probe")
			if ents, _ := os.ReadDir(marks); len(ents) > 0 {
				var names []string
				for _, e := range ents {
					names = append(names, e.Name())
				}
				t.Fatalf("the host's git in %s ran what the sandbox planted: %v\n%s\n%s", dir, names, out, r)
			}
		}
		// evilgit and evilcommon are bare and plain directories the sandbox
		// made; evilgit's config runs commands, so it too was set aside.
		if exists(filepath.Join(ws, "evilgit")) {
			t.Errorf("the bare repository evilgit the sandbox made was not set aside\n%s", r)
		}

		// The control: the same payload, configured by the host itself.
		g("clean", "config", "core.fsmonitor", fmt.Sprintf("touch %s/control; :", marks))
		hostGit(uid, home, filepath.Join(ws, "clean"), "status")
		if !exists(filepath.Join(marks, "control")) {
			t.Errorf("control: core.fsmonitor did not run in a repository the host configured; the check above proves nothing")
		}
	})
}
