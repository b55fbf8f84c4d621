package sandbox

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
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
//   - a missing path gets a placeholder (an empty file or directory) created
//     on the host before the sandbox starts, mounted read-only the same way,
//     and removed again when the sandbox ends if it is still empty — so the
//     sandbox cannot create the path either;
//   - a pinned path (.git) stays writable but is made a mount point, so it
//     cannot be renamed away and replaced by one with hooks of its own.

// dirNames are the protected names whose placeholder is a directory: an
// empty directory named .git sends git on to the parent directories, where a
// file of that name would break git in the workspace.
var dirNames = map[string]bool{".git": true}

// pinNames are protected names that stay writable when they exist as a
// directory but may not be replaced.
var pinNames = map[string]bool{".git": true}

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

// protectedPaths is every deny-write path that lies inside a writable root,
// with the root it lies in and its name relative to it.
func protectedPaths(s policy.Spec) []protected {
	roots := writableRoots(s)
	var out []protected
	if !s.Filesystem.NoDefaultDenies {
		for _, r := range roots {
			for _, n := range policy.DefaultDenyWrite() {
				out = append(out, protected{Path: filepath.Join(r, n), Name: n, Root: r})
			}
		}
	}
	for _, p := range s.Filesystem.DenyWrite {
		for _, r := range roots {
			if under(p, []string{r}) {
				out = append(out, protected{Path: p, Name: filepath.Base(p), Root: r})
				break
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

type protected struct {
	Path string
	Name string
	Root string
}

// protectionPlan lists the paths to bind read-only and the directories to
// pin, parents before children. Placeholders are always read-only.
func protectionPlan(s policy.Spec, made []placeholder) (ro []string, pin []string) {
	isPlaceholder := map[string]bool{}
	for _, p := range made {
		isPlaceholder[p.Path] = true
	}
	for _, p := range protectedPaths(s) {
		var st unix.Stat_t
		if unix.Lstat(p.Path, &st) != nil {
			continue
		}
		if pinNames[p.Name] && st.Mode&unix.S_IFMT == unix.S_IFDIR && !isPlaceholder[p.Path] {
			pin = append(pin, p.Path)
			continue
		}
		ro = append(ro, p.Path)
	}
	return dedupe(ro), dedupe(pin)
}

// placeholder is a path hutch created on the host for the sandbox's
// lifetime: a directory, or a hard link to an unnamed empty file (one per
// writable root). Links are an order of magnitude cheaper than new inodes on
// common filesystems, and the shared inode identifies them when they are
// removed.
type placeholder struct {
	Path     string
	Dir      bool
	Dev, Ino uint64
}

// preparePlaceholders creates a placeholder for every missing protected path
// whose parent directory exists, owned like that parent, so that it can be
// mounted read-only. Paths already covered by a protected ancestor are
// skipped; nothing is reached through a symlink.
func preparePlaceholders(s policy.Spec, asRoot bool) ([]placeholder, error) {
	var made []placeholder
	var covered []string
	sources := map[string]*emptyFile{}
	defer func() {
		for _, f := range sources {
			unix.Close(f.fd)
		}
	}()
	for _, p := range protectedPaths(s) {
		if under(p.Path, covered) {
			continue
		}
		var st unix.Stat_t
		if err := unix.Lstat(p.Path, &st); err == nil {
			if !pinNames[p.Name] || st.Mode&unix.S_IFMT != unix.S_IFDIR {
				covered = append(covered, p.Path)
			}
			continue
		} else if !errors.Is(err, unix.ENOENT) {
			return made, fmt.Errorf("protected path %q: %w", p.Path, err)
		}
		dirfd, err := unix.Openat2(unix.AT_FDCWD, filepath.Dir(p.Path), &unix.OpenHow{
			Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_SYMLINKS,
		})
		if err != nil {
			continue // parent missing (or reached through a symlink): nothing to create
		}
		ph, err := makePlaceholder(dirfd, p, sources, asRoot)
		unix.Close(dirfd)
		if err != nil {
			return made, fmt.Errorf("create placeholder for protected path %q: %w", p.Path, err)
		}
		made = append(made, ph)
		covered = append(covered, p.Path)
	}
	return made, nil
}

// emptyFile is the unnamed empty inode the file placeholders of one writable
// root link to.
type emptyFile struct {
	fd       int
	dev, ino uint64
}

func makePlaceholder(dirfd int, p protected, sources map[string]*emptyFile, asRoot bool) (placeholder, error) {
	base := filepath.Base(p.Path)
	var owner unix.Stat_t
	if asRoot {
		if err := unix.Fstat(dirfd, &owner); err != nil {
			return placeholder{}, err
		}
	}
	if dirNames[p.Name] {
		if err := unix.Mkdirat(dirfd, base, 0o755); err != nil {
			return placeholder{}, err
		}
		if asRoot {
			_ = unix.Fchownat(dirfd, base, int(owner.Uid), int(owner.Gid), unix.AT_SYMLINK_NOFOLLOW)
		}
		return placeholder{Path: p.Path, Dir: true}, nil
	}
	src := sources[p.Root]
	if src == nil {
		fd, err := unix.Open(p.Root, unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, 0o444)
		if err != nil {
			return placeholder{}, fmt.Errorf("empty file in %q: %w", p.Root, err)
		}
		var st unix.Stat_t
		_ = unix.Fstat(fd, &st)
		if asRoot {
			var rootSt unix.Stat_t
			if unix.Stat(p.Root, &rootSt) == nil {
				_ = unix.Fchown(fd, int(rootSt.Uid), int(rootSt.Gid))
			}
		}
		src = &emptyFile{fd: fd, dev: st.Dev, ino: st.Ino}
		sources[p.Root] = src
	}
	err := unix.Linkat(unix.AT_FDCWD, fmt.Sprintf("/proc/self/fd/%d", src.fd), dirfd, base, unix.AT_SYMLINK_FOLLOW)
	if err != nil {
		return placeholder{}, err
	}
	return placeholder{Path: p.Path, Dev: src.dev, Ino: src.ino}, nil
}

// removePlaceholders removes the placeholders again, each only if it is
// still what hutch made — an empty directory, or a link to hutch's empty
// inode — reached without following any symlink (S5).
func removePlaceholders(ps []placeholder, log *slog.Logger) {
	for i := len(ps) - 1; i >= 0; i-- {
		p := ps[i]
		dirfd, err := unix.Openat2(unix.AT_FDCWD, filepath.Dir(p.Path), &unix.OpenHow{
			Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_SYMLINKS,
		})
		if err != nil {
			log.Debug("placeholder parent gone", "path", p.Path, "err", err)
			continue
		}
		base := filepath.Base(p.Path)
		var st unix.Stat_t
		if err := unix.Fstatat(dirfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil {
			switch {
			case p.Dir && st.Mode&unix.S_IFMT == unix.S_IFDIR:
				err = unix.Unlinkat(dirfd, base, unix.AT_REMOVEDIR) // fails unless empty
			case !p.Dir && st.Dev == p.Dev && st.Ino == p.Ino && st.Size == 0:
				err = unix.Unlinkat(dirfd, base, 0)
			default:
				err = fmt.Errorf("changed while the sandbox ran")
			}
			if err != nil {
				log.Debug("placeholder kept", "path", p.Path, "err", err)
			}
		}
		unix.Close(dirfd)
	}
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
