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

// placeholderKind is what stands for a missing protected path.
type placeholderKind uint8

const (
	placeholderFile placeholderKind = iota // an empty read-only file
	placeholderDir                         // an empty read-only directory
	// placeholderSelf is a file holding ".": a git directory's commondir
	// that names the directory itself, which git reads as if there were
	// none (an empty commondir would stop git).
	placeholderSelf
)

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
	Root string // the writable root it lies in
	// Kind is what stands for the path while the sandbox runs when it
	// does not exist: a directory for a missing parent too.
	Kind placeholderKind
	// Pin: an existing directory stays writable but may not be renamed,
	// removed or replaced (a .git directory).
	Pin bool
}

// protection is what protectedPaths decided.
type protection struct {
	prot []protected // read-only (placeholders for the missing ones)
	// created lists the SetAside names that do not exist: the sandbox may
	// create them, and hutch sets them aside when it ends (whys says what
	// runs each).
	created []protected
	whys    map[string]string
	git     *gitScan
}

// protectedPaths is every deny-write path that lies inside a writable root:
// the default names below every writable root (and below home, when home
// lies in one), every git directory found there with what its
// configuration names, and the policy's own deny_write paths.
func protectedPaths(s policy.Spec, roots []string, home string) protection {
	rootOf := func(p string) string {
		for _, r := range roots {
			if under(p, []string{r}) {
				return r
			}
		}
		return ""
	}
	out := protection{whys: map[string]string{}}
	names := newDirNames(roots...)
	if !s.Filesystem.NoDefaultDenies {
		bases := roots
		if home != "" && rootOf(home) != "" {
			bases = dedupe(append(slices.Clone(roots), home))
		}
		for _, b := range bases {
			// Without a repository, .git and what lies in one are not held:
			// the sandbox may make a repository (git init), which is
			// inspected, and set aside if it would run commands, when the
			// sandbox ends.
			repo := names.mayExist(filepath.Join(b, policy.GitDirName)) && existsNoFollow(filepath.Join(b, policy.GitDirName))
			for _, n := range policy.DefaultDenyWrite() {
				if n.HomeOnly && b != home {
					continue
				}
				if !repo && (n.Name == policy.GitDirName || strings.HasPrefix(n.Name, policy.GitDirName+"/")) {
					continue
				}
				p := protected{Path: filepath.Join(b, n.Name), Root: rootOf(b)}
				if n.Name == policy.GitDirName {
					p.Kind, p.Pin = placeholderDir, true
				}
				if n.How == policy.SetAside {
					var st unix.Stat_t
					if !names.mayExist(p.Path) || unix.Lstat(p.Path, &st) != nil {
						out.created = append(out.created, p)
						out.whys[p.Path] = n.Why
						continue
					}
				}
				out.prot = append(out.prot, p)
			}
		}
		out.git = scanGit(roots, home)
		out.prot = append(out.prot, out.git.prot...)
	}
	for _, p := range s.Filesystem.DenyWrite {
		if r := rootOf(p); r != "" {
			out.prot = append(out.prot, protected{Path: p, Root: r})
		}
	}
	// One entry a path: the git scan knows more of a git directory's
	// names (hooks is a directory) than the default list does.
	sort.SliceStable(out.prot, func(i, j int) bool { return out.prot[i].Path < out.prot[j].Path })
	merged := out.prot[:0]
	for _, p := range out.prot {
		if n := len(merged); n > 0 && merged[n-1].Path == p.Path {
			merged[n-1].Kind = max(merged[n-1].Kind, p.Kind)
			merged[n-1].Pin = merged[n-1].Pin || p.Pin
			continue
		}
		merged = append(merged, p)
	}
	out.prot = merged
	// A name the git scan protects (a configured hooks directory) is held
	// by a placeholder, not left to be set aside.
	out.created = slices.DeleteFunc(out.created, func(c protected) bool {
		_, found := slices.BinarySearchFunc(out.prot, c.Path, func(p protected, path string) int { return strings.Compare(p.Path, path) })
		return found
	})
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
func protectionPlan(prot []protected, placeholders map[string]placeholderKind) (ro []string, pin []string) {
	for p := range placeholders {
		ro = append(ro, p) // some stand for a missing parent of a protected path
	}
	for _, p := range prot {
		// Pin the directories on the way from the root.
		for _, a := range AncestorsBelow(p.Root, p.Path) {
			var st unix.Stat_t
			if unix.Lstat(a, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR && !isIn(placeholders, a) {
				pin = append(pin, a)
			}
		}
		var st unix.Stat_t
		if unix.Lstat(p.Path, &st) != nil {
			continue
		}
		if p.Pin && st.Mode&unix.S_IFMT == unix.S_IFDIR && !isIn(placeholders, p.Path) {
			pin = append(pin, p.Path)
			continue
		}
		ro = append(ro, p.Path)
	}
	sort.Strings(ro)
	sort.Strings(pin)
	return dedupe(ro), dedupe(pin)
}

func isIn(m map[string]placeholderKind, k string) bool { _, ok := m[k]; return ok }

// AncestorsBelow lists the directories strictly between root and p, from
// the top.
func AncestorsBelow(root, p string) []string {
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
	for _, a := range append(AncestorsBelow(root, p), p) {
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
