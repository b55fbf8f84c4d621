package sandbox

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/gitmeta"
	"github.com/hutch-sandbox/hutch/internal/policy"
)

// maxReasons bounds what one report says about one repository.
const maxReasons = 6

// aftercare is what hutch checks in the writable areas once the sandbox
// has ended, before it exits: the repositories the sandbox made, and the
// protected names of policy.SetAside that it created.
type aftercare struct {
	git     *gitScan
	created []protected // SetAside names that did not exist when the sandbox started
	whys    map[string]string
	// placeholders are hutch's own stand-ins in the writable areas, not
	// looked into.
	placeholders map[string]placeholderKind
}

// run sets aside what the sandbox made that would run commands outside it,
// and reports each. Nothing of the sandbox runs any more.
func (a *aftercare) run() []SetAside {
	var out []SetAside
	var roots []string
	if a.git != nil {
		roots = a.git.roots
	}
	names := newDirNames(roots...)
	for _, p := range a.created {
		if !names.mayExist(p.Path) || !existsNoFollow(p.Path) {
			continue
		}
		why := "the sandbox created it; " + a.whys[p.Path] + " would run what it says"
		out = append(out, setAside(p.Path, why))
	}
	if a.git != nil {
		a.git.skip = a.placeholders
		for _, c := range a.git.newGit() {
			reasons := a.git.inspect(c)
			if len(reasons) == 0 {
				continue
			}
			out = append(out, setAside(c, "a git repository the sandbox made: "+strings.Join(reasons, "; ")))
		}
	}
	return out
}

// setAside renames path to path+policy.SetAsideSuffix (or, when that is
// taken, with a number after it), reaching it without following any
// symbolic link (S5).
func setAside(path, why string) SetAside {
	sa := SetAside{Path: path, Why: why}
	dirfd, err := unix.Openat2(unix.AT_FDCWD, filepath.Dir(path), &unix.OpenHow{
		Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_SYMLINKS,
	})
	if err != nil {
		sa.Err = err.Error()
		return sa
	}
	defer unix.Close(dirfd)
	base := filepath.Base(path)
	for i := 1; i <= 100; i++ {
		to := base + policy.SetAsideSuffix
		if i > 1 {
			to += fmt.Sprintf("-%d", i)
		}
		err = unix.Renameat2(dirfd, base, dirfd, to, unix.RENAME_NOREPLACE)
		if err == nil {
			sa.To = filepath.Join(filepath.Dir(path), to)
			return sa
		}
		if err != unix.EEXIST {
			break
		}
	}
	sa.Err = err.Error()
	return sa
}

// existsNoFollow reports whether path exists, reached without following a
// symbolic link on the way (the last component may be one).
func existsNoFollow(path string) bool {
	dirfd, err := unix.Openat2(unix.AT_FDCWD, filepath.Dir(path), &unix.OpenHow{
		Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_SYMLINKS,
	})
	if err != nil {
		return false
	}
	defer unix.Close(dirfd)
	var st unix.Stat_t
	return unix.Fstatat(dirfd, filepath.Base(path), &st, unix.AT_SYMLINK_NOFOLLOW) == nil
}

// changed reports whether p is no longer what id recorded; false when it
// is gone.
func changed(p string, id fileID) bool {
	var st unix.Stat_t
	if unix.Lstat(p, &st) != nil {
		return false
	}
	return idOf(&st) != id
}

// sameFile reports whether a and b are the same inode of the same kind.
func sameFile(a, b fileID) bool { return a.dev == b.dev && a.ino == b.ino && a.mode == b.mode }

// openDirNoFollow opens the directory p, following no symbolic link.
func openDirNoFollow(p string) (int, error) {
	return unix.Openat2(unix.AT_FDCWD, p, &unix.OpenHow{
		Flags: unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_SYMLINKS,
	})
}

// newGit lists the .git entries and git directories that were not there
// when the sandbox started (or were replaced): it reads again only the
// directories whose identity changed — a new entry changes its directory
// — and walks the directories that are new.
func (g *gitScan) newGit() []string {
	var found []string
	buf := make([]byte, 32<<10)
	for _, p := range slices.Sorted(maps.Keys(g.dirs)) {
		if !changed(p, g.dirs[p]) {
			continue
		}
		fd, err := openDirNoFollow(p)
		if err != nil {
			continue
		}
		var subdirs []string
		var looks gitLooks
		readDir(fd, buf, func(name string, typ byte) {
			path := filepath.Join(p, name)
			if _, ours := g.skip[path]; ours {
				return
			}
			if typ == unix.DT_UNKNOWN {
				var st unix.Stat_t
				if unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
					typ = dtype(st.Mode)
				}
			}
			looks.see(name, typ)
			if name == gitmeta.GitDir {
				var st unix.Stat_t
				if unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
					// A known .git is pinned: the same inode is the same
					// entry, whatever git did inside it.
					if old, ok := g.entries[path]; !ok || !sameFile(old, idOf(&st)) {
						found = append(found, path)
					}
				}
				return
			}
			if _, known := g.dirs[path]; !known && typ == unix.DT_DIR {
				subdirs = append(subdirs, name)
			}
		})
		if looks.gitDir() && !g.gitDirs[p] {
			found = append(found, p) // made into a bare repository
			unix.Close(fd)
			continue
		}
		for _, name := range subdirs {
			cfd, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				continue
			}
			g.walk(cfd, filepath.Join(p, name), 0, buf, &found)
			unix.Close(cfd)
		}
		unix.Close(fd)
	}
	// Git directories under the known ones: a new submodule or worktree.
	for _, d := range slices.Sorted(maps.Keys(g.watch)) {
		if !changed(d, g.watch[d]) {
			continue
		}
		dirs := []string{d}
		if g.gitDirs[d] {
			dirs = []string{filepath.Join(d, "modules"), filepath.Join(d, "worktrees")}
		}
		for _, dir := range dirs {
			if _, watched := g.watch[dir]; watched && dir != d {
				continue // checked on its own
			}
			found = append(found, g.newGitDirs(dir, 0)...)
		}
	}
	slices.Sort(found)
	return slices.Compact(found)
}

// newGitDirs lists the git directories below dir (a modules or worktrees
// directory) that are not known.
func (g *gitScan) newGitDirs(dir string, depth int) []string {
	if depth > 8 {
		return nil
	}
	fd, err := openDirNoFollow(dir)
	if err != nil {
		return nil
	}
	var names []string
	readDir(fd, make([]byte, 8<<10), func(name string, typ byte) {
		if typ == unix.DT_DIR || typ == unix.DT_UNKNOWN {
			names = append(names, name)
		}
	})
	unix.Close(fd)
	var out []string
	for _, n := range names {
		p := filepath.Join(dir, n)
		switch {
		case g.gitDirs[p]:
		case isGitDir(p):
			out = append(out, p)
		case filepath.Base(dir) != "worktrees":
			out = append(out, g.newGitDirs(p, depth+1)...) // a submodule named with a slash
		}
	}
	return out
}

// inspect says why the .git entry or git directory p, which the sandbox
// made, would run something on the host: nothing when it would not.
func (g *gitScan) inspect(p string) []string {
	var st unix.Stat_t
	if unix.Lstat(p, &st) != nil {
		return nil
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFLNK:
		return []string{"it is a symbolic link"}
	case unix.S_IFREG:
		data, err := readNoFollow(p, 64<<10)
		if err != nil {
			return []string{"its gitlink cannot be read: " + err.Error()}
		}
		target, err := gitmeta.ParseGitFile(data)
		if err != nil {
			return []string{err.Error()}
		}
		dir := resolveFrom(filepath.Dir(p), target)
		switch {
		case g.gitDirs[dir]:
			return nil // a protected git directory
		case g.rootOf(dir) == "":
			// The sandbox could not write there, but someone else may
			// have: a gitlink the sandbox made may not lend the user's
			// trust to a directory it chose.
			return []string{"its gitlink points outside the writable areas, to " + dir}
		}
		return g.inspectGitDir(dir, 0)
	case unix.S_IFDIR:
		return g.inspectGitDir(p, 0)
	}
	return nil
}

// inspectGitDir says what in the git directory d runs commands or points
// elsewhere.
func (g *gitScan) inspectGitDir(d string, depth int) []string {
	var out []string
	add := func(format string, args ...any) {
		if len(out) < maxReasons {
			out = append(out, fmt.Sprintf(format, args...))
		}
	}
	if depth > 8 {
		add("submodules nested too deep")
		return out
	}
	for _, n := range []string{"config", "config.worktree"} {
		f := filepath.Join(d, n)
		var st unix.Stat_t
		if unix.Lstat(f, &st) != nil {
			continue
		}
		data, err := readNoFollow(f, gitmeta.MaxConfigSize)
		if err != nil {
			add("%s: %v", rel(d, f), err)
			continue
		}
		vars, err := gitmeta.Parse(data)
		if err != nil {
			add("%s: %v", rel(d, f), err)
			continue
		}
		for _, v := range vars {
			if !gitmeta.SafeInNewRepository(v) {
				add("%s sets %s", rel(d, f), v.Key())
			}
		}
	}
	if data, err := readNoFollow(filepath.Join(d, "commondir"), 4096); err == nil {
		common := resolveFrom(d, strings.TrimSpace(string(data)))
		if !g.gitDirs[common] && common != d {
			add("commondir points to %s", common)
		}
	} else if existsNoFollow(filepath.Join(d, "commondir")) {
		add("commondir is not a regular file")
	}
	hooks := filepath.Join(d, "hooks")
	var st unix.Stat_t
	if unix.Lstat(hooks, &st) == nil {
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			add("hooks is not a directory")
		} else if ents, err := os.ReadDir(hooks); err == nil {
			for _, e := range ents {
				if !strings.HasSuffix(e.Name(), ".sample") {
					add("hook %s", e.Name())
				}
			}
		}
	}
	for _, m := range g.newGitDirs(filepath.Join(d, "modules"), 0) {
		for _, r := range g.inspectGitDir(m, depth+1) {
			add("submodule %s: %s", rel(d, m), r)
		}
	}
	for _, w := range g.newGitDirs(filepath.Join(d, "worktrees"), 0) {
		for _, r := range g.inspectGitDir(w, depth+1) {
			if !strings.HasPrefix(r, "commondir points to") {
				add("worktree %s: %s", rel(d, w), r)
			}
		}
	}
	return out
}

// rel names p relative to base where it lies below it.
func rel(base, p string) string {
	if r, err := filepath.Rel(base, p); err == nil && !strings.HasPrefix(r, "..") {
		return r
	}
	return p
}
