package sandbox

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/policy"
)

// How protected (deny-write) paths inside writable areas are enforced:
//
//   - an existing file or directory is bind-mounted read-only over itself; a
//     mount point cannot be renamed, removed or replaced (EBUSY), so the
//     protection also holds against swapping the path;
//   - a missing path gets a placeholder created on the host before the
//     sandbox starts — at the first missing component, so a missing parent
//     (.ssh for .ssh/authorized_keys) is covered too — mounted read-only the
//     same way, and removed again when the sandbox ends if it is still
//     hutch's — so the sandbox cannot create the path either;
//   - every existing directory between a writable root and a protected path
//     (.config for .config/fish, .git for .git/hooks) is pinned: bound
//     read-write over itself, so it cannot be renamed away and replaced by
//     one without the protection. .git itself is protected that way only:
//     the sandbox may commit, but not create, move or swap a .git.

// dirNames are the protected names whose placeholder is a directory: an
// empty directory named .git sends git on to the parent directories, where a
// file of that name would break git in the workspace.
var dirNames = map[string]bool{".git": true}

// pinNames are protected names that stay writable when they exist as a
// directory but may not be replaced.
var pinNames = map[string]bool{".git": true}

// homeOnlyNames are default protected names that run code or grant access
// only in a home directory; elsewhere they are ordinary files.
var homeOnlyNames = map[string]bool{
	".config/fish": true, ".config/autostart": true, ".config/systemd/user": true,
	".gitconfig": true, ".ssh/authorized_keys": true, ".pypirc": true,
}

// writableRoots lists the workspace and the extra writable paths that exist.
func writableRoots(s policy.Spec) []string {
	roots := []string{s.Filesystem.Workspace}
	for _, p := range s.Filesystem.AllowWrite {
		if _, err := os.Stat(p); err == nil {
			roots = append(roots, p)
		}
	}
	sort.Strings(roots)
	return dedupe(roots)
}

// protected is one deny-write path inside a writable root.
type protected struct {
	Path string // absolute
	Name string // relative to Base
	Base string // the writable root, or the home directory inside one
	Root string // the writable root it lies in
}

// protectedPaths is every deny-write path that lies inside a writable root:
// the default names below every writable root (and below home, when home
// lies in one), the config and hooks of every git submodule and worktree
// found there, and the policy's own deny_write paths.
func protectedPaths(s policy.Spec, roots []string, home string) []protected {
	rootOf := func(p string) string {
		for _, r := range roots {
			if under(p, []string{r}) {
				return r
			}
		}
		return ""
	}
	var out []protected
	if !s.Filesystem.NoDefaultDenies {
		bases := roots
		if home != "" && rootOf(home) != "" {
			bases = dedupe(append(slices.Clone(roots), home))
		}
		for _, b := range bases {
			for _, n := range policy.DefaultDenyWrite() {
				if homeOnlyNames[n] && b != home {
					continue
				}
				out = append(out, protected{Path: filepath.Join(b, n), Name: n, Base: b, Root: rootOf(b)})
			}
			for _, n := range gitMetadata(b) {
				out = append(out, protected{Path: filepath.Join(b, n), Name: n, Base: b, Root: rootOf(b)})
			}
		}
	}
	for _, p := range s.Filesystem.DenyWrite {
		if r := rootOf(p); r != "" {
			rel, _ := filepath.Rel(r, p)
			out = append(out, protected{Path: p, Name: rel, Base: r, Root: r})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

// maxGitModules bounds the walk of .git/modules (S7: the workspace may be
// the sandbox's own making).
const maxGitModules = 256

// gitMetadata lists, relative to base, the config and hooks of every
// submodule under .git/modules (nested ones too) and the per-worktree config
// under .git/worktrees: they run code on the user's next git command inside
// that submodule or worktree just like .git/config and .git/hooks.
func gitMetadata(base string) []string {
	var out []string
	if ents, err := os.ReadDir(filepath.Join(base, ".git/worktrees")); err == nil {
		for _, e := range ents {
			if e.IsDir() {
				out = append(out, filepath.Join(".git/worktrees", e.Name(), "config.worktree"))
			}
		}
	}
	queue := []string{".git/modules"}
	for len(queue) > 0 && len(out) < maxGitModules {
		dir := queue[0]
		queue = queue[1:]
		ents, err := os.ReadDir(filepath.Join(base, dir))
		if err != nil {
			continue
		}
		for _, e := range ents {
			if !e.IsDir() {
				continue
			}
			m := filepath.Join(dir, e.Name())
			if isGitDir(filepath.Join(base, m)) {
				out = append(out, filepath.Join(m, "config"), filepath.Join(m, "hooks"))
				queue = append(queue, filepath.Join(m, "modules"))
			} else {
				queue = append(queue, m) // a submodule named with a slash
			}
		}
	}
	return out
}

// isGitDir reports whether dir looks like a git directory (a submodule's
// under .git/modules): it has a HEAD, a config or an objects directory.
func isGitDir(dir string) bool {
	for _, n := range []string{"HEAD", "config", "objects"} {
		if _, err := os.Lstat(filepath.Join(dir, n)); err == nil {
			return true
		}
	}
	return false
}

// protectionPlan lists, once the placeholders exist, the paths to bind
// read-only and the directories to pin, parents before children.
// Placeholders are always read-only.
func protectionPlan(prot []protected, placeholders map[string]bool) (ro []string, pin []string) {
	for p := range placeholders {
		ro = append(ro, p) // some stand for a missing parent of a protected path
	}
	for _, p := range prot {
		// Pin the directories on the way from the root.
		for _, a := range ancestorsBelow(p.Root, p.Path) {
			var st unix.Stat_t
			if unix.Lstat(a, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR && !isIn(placeholders, a) {
				pin = append(pin, a)
			}
		}
		var st unix.Stat_t
		if unix.Lstat(p.Path, &st) != nil {
			continue
		}
		if pinNames[p.Name] && st.Mode&unix.S_IFMT == unix.S_IFDIR && !isIn(placeholders, p.Path) {
			pin = append(pin, p.Path)
			continue
		}
		ro = append(ro, p.Path)
	}
	sort.Strings(ro)
	sort.Strings(pin)
	return dedupe(ro), dedupe(pin)
}

func isIn(m map[string]bool, k string) bool { _, ok := m[k]; return ok }

// ancestorsBelow lists the directories strictly between root and p, from
// the top.
func ancestorsBelow(root, p string) []string {
	var out []string
	for d := filepath.Dir(p); d != root && under(d, []string{root}); d = filepath.Dir(d) {
		out = append(out, d)
	}
	slices.Reverse(out)
	return out
}

// under reports whether p is one of roots or inside one of them.
func under(p string, roots []string) bool {
	for _, r := range roots {
		if p == r || strings.HasPrefix(p, strings.TrimSuffix(r, "/")+"/") {
			return true
		}
	}
	return false
}

func dedupe(s []string) []string {
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

// firstMissing returns the first component of p below root that does not
// exist, or "" when a component exists but is not a directory.
func firstMissing(root, p string) string {
	for _, a := range append(ancestorsBelow(root, p), p) {
		var st unix.Stat_t
		err := unix.Lstat(a, &st)
		if errors.Is(err, unix.ENOENT) {
			return a
		}
		if err != nil || (a != p && st.Mode&unix.S_IFMT != unix.S_IFDIR) {
			return ""
		}
	}
	return ""
}
