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

// dirNames are the protected names whose placeholder is a directory.
var dirNames = map[string]bool{
	".git": true, ".git/hooks": true, ".vscode": true, ".idea": true, ".claude": true,
	".codex": true, ".cursor": true, ".config/fish": true, ".config/autostart": true,
	".config/systemd/user": true,
}

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
// with whether it is one of the defaults relative to that root (and so which
// name it has).
func protectedPaths(s policy.Spec) []protected {
	roots := writableRoots(s)
	var out []protected
	if !s.Filesystem.NoDefaultDenies {
		for _, r := range roots {
			for _, n := range policy.DefaultDenyWrite() {
				out = append(out, protected{Path: filepath.Join(r, n), Name: n})
			}
		}
	}
	for _, p := range s.Filesystem.DenyWrite {
		if under(p, roots) {
			out = append(out, protected{Path: p, Name: filepath.Base(p)})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

type protected struct {
	Path string
	Name string
}

// writablePlan lists the writable binds, the read-only binds and the pinned
// directories, parents before children. Placeholders are always read-only.
func writablePlan(s policy.Spec, made []placeholder) (w []bindSrc, ro []string, pin []string) {
	isPlaceholder := map[string]bool{}
	for _, p := range made {
		isPlaceholder[p.Path] = true
	}
	for _, r := range writableRoots(s) {
		w = append(w, bindSrc{Path: r, FD: -1})
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
	return w, dedupe(ro), dedupe(pin)
}

// placeholder is a path hutch created on the host for the sandbox's lifetime.
type placeholder struct {
	Path string
	Dir  bool
}

// preparePlaceholders creates an empty file or directory for every missing
// protected path whose parent directory exists, owned like that parent, so
// that it can be mounted read-only. Paths already covered by a protected
// ancestor are skipped.
func preparePlaceholders(s policy.Spec, asRoot bool, uid, gid int) ([]placeholder, error) {
	var made []placeholder
	var covered []string
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
		parent := filepath.Dir(p.Path)
		dirfd, err := unix.Openat2(unix.AT_FDCWD, parent, &unix.OpenHow{
			Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_SYMLINKS,
		})
		if err != nil {
			continue // parent missing (or reached through a symlink): nothing to create
		}
		var pst unix.Stat_t
		_ = unix.Fstat(dirfd, &pst)
		base := filepath.Base(p.Path)
		isDir := dirNames[p.Name]
		if isDir {
			err = unix.Mkdirat(dirfd, base, 0o755)
		} else {
			var fd int
			fd, err = unix.Openat(dirfd, base, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
			if err == nil {
				unix.Close(fd)
			}
		}
		if err != nil {
			unix.Close(dirfd)
			return made, fmt.Errorf("create placeholder for protected path %q: %w", p.Path, err)
		}
		made = append(made, placeholder{Path: p.Path, Dir: isDir})
		covered = append(covered, p.Path)
		if asRoot {
			_ = unix.Fchownat(dirfd, base, int(pst.Uid), int(pst.Gid), unix.AT_SYMLINK_NOFOLLOW)
		}
		unix.Close(dirfd)
	}
	return made, nil
}

// removePlaceholders removes the placeholders again, each only if it is
// still what hutch made: an empty regular file or an empty directory, reached
// without following any symlink (S5).
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
			case !p.Dir && st.Mode&unix.S_IFMT == unix.S_IFREG && st.Size == 0:
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
