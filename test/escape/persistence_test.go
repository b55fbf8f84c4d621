//go:build linux

package escape

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// tryWrites returns a shell script that tries to create or append to each
// path (relative to the working directory, parents created first) and prints
// "WROTE path" for every write that succeeded, then writes the control file.
func tryWrites(paths []string, control string) string {
	var b strings.Builder
	for _, p := range paths {
		if dir := filepath.Dir(p); dir != "." {
			fmt.Fprintf(&b, "mkdir -p '%s' 2>/dev/null\n", dir)
		}
		fmt.Fprintf(&b, "if echo 'echo pwned' >> '%s'; then echo 'WROTE %s'; fi\n", p, p)
	}
	fmt.Fprintf(&b, "echo control > '%s' && echo 'WROTE %s'\n", control, control)
	return b.String()
}

// noWrites fails the test for every attempted path the sandbox wrote, and
// unless the control write succeeded.
func noWrites(t *testing.T, r result, paths []string, control string) {
	t.Helper()
	for _, p := range paths {
		if strings.Contains(r.stdout, "WROTE "+p+"\n") {
			t.Errorf("the sandbox wrote protected path %s", p)
		}
	}
	if !strings.Contains(r.stdout, "WROTE "+control+"\n") {
		t.Errorf("control failed: could not write %s\n%s", control, r)
	}
}

var shellRCs = []string{
	".bashrc", ".bash_profile", ".bash_login", ".bash_logout", ".profile",
	".zshrc", ".zprofile", ".zshenv", ".zlogin", ".zlogout",
}

// TestItem04_ShellRCWorkspace: shell startup files in the workspace cannot
// be created, appended to, truncated, removed, renamed or replaced by a
// link, whether or not they exist; the rest of the workspace is writable.
// Afterwards the workspace holds exactly what it held plus the control
// file: no placeholders are left behind (S5: hutch creates and removes them
// on the host without following anything the sandbox made).
func TestItem04_ShellRCWorkspace(t *testing.T) {
	forEachMode(t, func(t *testing.T, sb *harness) {
		writeFile(t, filepath.Join(sb.ws, ".bashrc"), "# original\n", 0o644, sb.mode.uid)
		before := snapshot(t, sb.ws)
		script := tryWrites(shellRCs, "notes.txt") + `
(: > .bashrc) 2>/dev/null && echo "WROTE truncate"
rm -f .bashrc 2>/dev/null; [ -e .bashrc ] || echo "WROTE rm"
mv .bashrc moved 2>/dev/null && echo "WROTE mv"
ln -sf /etc/passwd .profile 2>/dev/null && echo "WROTE ln"
mv notes.txt .zshrc 2>/dev/null && echo "WROTE rename-over"
echo "RC $(cat .bashrc)"
`
		r := sb.run(opts{}, script)
		noWrites(t, r, shellRCs, "notes.txt")
		for _, w := range []string{"truncate", "rm", "mv", "ln", "rename-over"} {
			if strings.Contains(r.stdout, "WROTE "+w) {
				t.Errorf("%s of a shell startup file succeeded\n%s", w, r)
			}
		}
		if !strings.Contains(r.stdout, "RC # original") {
			t.Errorf("the existing .bashrc was not readable as before\n%s", r)
		}
		sameTree(t, sb.ws, before, "notes.txt")
	})
}

// TestItem04_ShellRCHome: with the home directory itself writable
// (--allow-write ~), its shell startup files and fish config stay
// protected, existing or not, and nothing is left behind (S5). By default
// the home directory is the host's read-only under a layer of the
// sandbox's own: nothing written there reaches the host.
func TestItem04_ShellRCHome(t *testing.T) {
	forEachMode(t, func(t *testing.T, sb *harness) {
		writeFile(t, filepath.Join(sb.home, ".profile"), "# original\n", 0o644, sb.mode.uid)
		paths := append(append([]string{}, shellRCs...), ".config/fish/config.fish", ".config/fish/conf.d/x.fish")
		before := snapshot(t, sb.home)

		r := sb.run(opts{flags: []string{"--workspace", sb.ws}}, "cd \"$HOME\" || exit 99\n"+tryWrites([]string{".bashrc"}, sb.ws+"/control"))
		if !strings.Contains(r.stdout, "WROTE "+sb.ws+"/control") {
			t.Errorf("control failed\n%s", r)
		}
		sameTree(t, sb.home, before) // by default what the sandbox writes in the home stays in its own layer

		r = sb.run(opts{flags: []string{"--workspace", sb.ws, "--allow-write", sb.home}}, "cd \"$HOME\" || exit 99\n"+tryWrites(paths, "notes.txt"))
		noWrites(t, r, paths, "notes.txt")
		sameTree(t, sb.home, before, "notes.txt")
	})
}

// gitFixture makes a workspace's .git directory with hooks, config and
// objects, as git init would.
func gitFixture(t *testing.T, ws string, uid int) {
	t.Helper()
	mkdirs(t, ws, uid, ".git/hooks", ".git/objects/ab", ".git/refs/heads", ".git/info")
	writeFile(t, filepath.Join(ws, ".git/HEAD"), "ref: refs/heads/main\n", 0o644, uid)
	writeFile(t, filepath.Join(ws, ".git/config"), "[core]\n\trepositoryformatversion = 0\n\tbare = false\n", 0o644, uid)
	writeFile(t, filepath.Join(ws, ".git/hooks/pre-commit.sample"), "#!/bin/sh\nexit 0\n", 0o755, uid)
	writeFile(t, filepath.Join(ws, ".git/info/exclude"), "# exclude\n", 0o644, uid)
}

// TestItem05_Git: in a workspace with a repository, hooks, .git/config and
// .gitmodules cannot be written, and .git and .git/hooks cannot be
// removed, renamed or replaced, while git's objects stay writable (the
// control). In a workspace without a repository none can be created, not
// even .git as a file. Afterwards the host has exactly what it had plus
// the control object (S5).
func TestItem05_Git(t *testing.T) {
	forEachMode(t, func(t *testing.T, sb *harness) {
		t.Run("repo", func(t *testing.T) {
			gitFixture(t, sb.ws, sb.mode.uid)
			before := snapshot(t, sb.ws)
			paths := []string{
				".git/hooks/pre-commit", ".git/hooks/post-checkout", ".git/hooks/pre-commit.sample",
				".git/config", ".gitmodules",
			}
			script := tryWrites(paths, ".git/objects/ab/control") + `
printf '[core]\n\thooksPath = /tmp/h\n\tfsmonitor = touch /tmp/x\n\tsshCommand = sh\n[credential]\n\thelper = !sh\n[filter "x"]\n\tclean = sh\n' > .git/config 2>/dev/null && echo "WROTE config-overwrite"
rm -rf .git/hooks 2>/dev/null; [ -d .git/hooks ] || echo "WROTE rm-hooks"
mv .git/hooks .git/hooks.old 2>/dev/null && echo "WROTE mv-hooks"
mv .git .git.old 2>/dev/null && echo "WROTE mv-git"
rmdir .git 2>/dev/null && echo "WROTE rmdir-git"
mkdir -p elsewhere/hooks && mv -T elsewhere .git 2>/dev/null && echo "WROTE replace-git"
rm -rf elsewhere
ln -s /tmp .git/hooks2 2>/dev/null
`
			r := sb.run(opts{}, script)
			noWrites(t, r, paths, ".git/objects/ab/control")
			for _, w := range []string{"config-overwrite", "rm-hooks", "mv-hooks", "mv-git", "rmdir-git", "replace-git"} {
				if strings.Contains(r.stdout, "WROTE "+w) {
					t.Errorf("%s succeeded\n%s", w, r)
				}
			}
			sameTree(t, sb.ws, before, ".git/objects/ab/control", ".git/hooks2")
		})
		t.Run("norepo", func(t *testing.T) {
			// Without a repository the sandbox may make one (git init),
			// but one whose hooks or config would run commands — by any
			// way of making a .git: a directory, a directory moved into
			// place, a gitlink to a directory elsewhere, a symbolic link —
			// is set aside when the sandbox ends; .gitmodules stays
			// protected; a clean repository is kept (the control).
			// Setting aside is the host's, once the sandbox has ended,
			// the same for every tier: under the microvm tier, whose
			// every run boots a guest under emulation, the .git made is
			// a directory only.
			for name, make := range map[string]string{
				"dir":     tryWrites([]string{".git/hooks/pre-commit", ".git/config"}, "control"),
				"moved":   "mkdir -p d/hooks && echo '#!/bin/sh' > d/hooks/post-checkout && mv -T d .git && echo control > control\n",
				"gitlink": "echo 'gitdir: /var/tmp' > .git && echo control > control\n",
				"symlink": "ln -s /var/tmp .git && echo control > control\n",
			} {
				if sb.microvm() && name != "dir" {
					continue
				}
				ws := testutil.OwnedDir(t, sb.mode.uid)
				before := snapshot(t, ws)
				r := sb.run(opts{dir: ws}, make+tryWrites([]string{".gitmodules"}, "control"))
				noWrites(t, r, []string{".gitmodules"}, "control")
				if exists(filepath.Join(ws, ".git")) || !exists(filepath.Join(ws, ".git.hutch-set-aside")) {
					t.Errorf("%s: the .git the sandbox made was not set aside\n%s", name, r)
				}
				if !strings.Contains(r.stderr, "set aside "+filepath.Join(ws, ".git")+" ") {
					t.Errorf("%s: setting .git aside was not reported\n%s", name, r)
				}
				ignore := []string{"control"}
				for p := range snapshot(t, ws) {
					if strings.HasPrefix(p, ".git.hutch-set-aside") {
						ignore = append(ignore, p)
					}
				}
				sameTree(t, ws, before, ignore...)
			}
			ws := testutil.OwnedDir(t, sb.mode.uid)
			r := sb.run(opts{dir: ws}, "git init -q . && echo made")
			if !strings.Contains(r.stdout, "made") || !exists(filepath.Join(ws, ".git/HEAD")) || exists(filepath.Join(ws, ".git.hutch-set-aside")) {
				t.Errorf("control: a clean repository the sandbox made was not kept\n%s", r)
			}
		})
		t.Run("gitfile", func(t *testing.T) {
			// A worktree or submodule checkout: .git is a file naming
			// the real git directory.
			ws := testutil.OwnedDir(t, sb.mode.uid)
			writeFile(t, filepath.Join(ws, ".git"), "gitdir: ../main/.git/worktrees/w\n", 0o644, sb.mode.uid)
			before := snapshot(t, ws)
			script := `
echo "gitdir: /tmp/evil" > .git 2>/dev/null && echo "WROTE gitfile"
rm -f .git 2>/dev/null; [ -e .git ] || echo "WROTE rm"
mkdir -p d/hooks && mv -T d .git 2>/dev/null && echo "WROTE replace"
rm -rf d
echo control > control && echo "WROTE control"
`
			r := sb.run(opts{dir: ws}, script)
			noWrites(t, r, []string{"gitfile", "rm", "replace"}, "control")
			sameTree(t, ws, before, "control")
		})
	})
}

// TestItem05_SubmoduleGitDir: a repository with submodules keeps each
// submodule's git directory under .git/modules/NAME, with its own config
// and hooks; git runs them when the user works inside the submodule. They
// must be as protected as .git/config and .git/hooks (S5).
func TestItem05_SubmoduleGitDir(t *testing.T) {
	forEachMode(t, func(t *testing.T, sb *harness) {
		gitFixture(t, sb.ws, sb.mode.uid)
		mkdirs(t, sb.ws, sb.mode.uid, ".git/modules/lib/hooks", ".git/modules/lib/objects", "lib")
		writeFile(t, filepath.Join(sb.ws, ".git/modules/lib/config"), "[core]\n\tworktree = ../../../lib\n", 0o644, sb.mode.uid)
		writeFile(t, filepath.Join(sb.ws, "lib/.git"), "gitdir: ../.git/modules/lib\n", 0o644, sb.mode.uid)
		before := snapshot(t, sb.ws)
		paths := []string{".git/modules/lib/config", ".git/modules/lib/hooks/post-checkout"}
		r := sb.run(opts{}, tryWrites(paths, ".git/modules/lib/objects/control"))
		noWrites(t, r, paths, ".git/modules/lib/objects/control")
		sameTree(t, sb.ws, before, ".git/modules/lib/objects/control")
	})
}

// toolConfigs are the editor, agent and tool files of ESCAPES item 6 that
// run code or add tools when the user next opens the workspace.
var toolConfigs = []string{
	".vscode/settings.json", ".vscode/tasks.json", ".idea/workspace.xml", ".mcp.json",
	".claude/settings.json", ".codex/config.toml", ".cursor/mcp.json", ".envrc", ".ripgreprc",
}

// TestItem06_ToolConfigWorkspace: tool configuration that runs code later
// cannot be written in the workspace, existing (.vscode/settings.json) or
// not; afterwards no trace is left, not even an empty placeholder (S5).
func TestItem06_ToolConfigWorkspace(t *testing.T) {
	forEachMode(t, func(t *testing.T, sb *harness) {
		mkdirs(t, sb.ws, sb.mode.uid, ".vscode")
		writeFile(t, filepath.Join(sb.ws, ".vscode/settings.json"), "{}\n", 0o644, sb.mode.uid)
		before := snapshot(t, sb.ws)
		script := tryWrites(toolConfigs, "control") + `
rm -rf .vscode 2>/dev/null; [ -d .vscode ] || echo "WROTE rm-vscode"
mv .claude c 2>/dev/null && echo "WROTE mv-claude"
`
		r := sb.run(opts{}, script)
		noWrites(t, r, append(toolConfigs, "rm-vscode", "mv-claude"), "control")
		sameTree(t, sb.ws, before, "control")
	})
}

// TestItem06_AutostartHome: with the home directory writable, session
// autostart entries and systemd user units cannot be created, neither
// where ~/.config exists (placeholders protect the names) nor where
// ~/.config/systemd does not exist yet. Cron is out of reach: crontab is
// setuid and the sandbox's filesystems are nosuid (S1, S5).
func TestItem06_AutostartHome(t *testing.T) {
	forEachMode(t, func(t *testing.T, sb *harness) {
		mkdirs(t, sb.home, sb.mode.uid, ".config")
		before := snapshot(t, sb.home)
		paths := []string{
			".config/autostart/evil.desktop", ".config/systemd/user/evil.service",
			".config/systemd/user/default.target.wants/evil.service", ".gitconfig", ".ssh/authorized_keys",
		}
		script := "cd \"$HOME\" || exit 99\n" + tryWrites(paths, "control") + `
if command -v crontab >/dev/null; then echo '* * * * * touch /tmp/pwned' | crontab - 2>/dev/null && echo "WROTE crontab"; fi
`
		r := sb.run(opts{flags: []string{"--allow-write", sb.home}}, script)
		noWrites(t, r, append(paths, "crontab"), "control")
		sameTree(t, sb.home, before, "control")
		if _, err := os.Stat("/usr/bin/crontab"); err != nil {
			t.Logf("crontab is not installed here; the cron part did not run")
		}
	})
}
