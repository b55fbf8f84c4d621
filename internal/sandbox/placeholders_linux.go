package sandbox

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Placeholders stand in for missing protected paths while a sandbox runs
// (see plan_linux.go). Several sandboxes may share a workspace: each holds a
// shared flock on every writable root for its lifetime, recognises the
// others' placeholders by an extended attribute and adopts them, and only
// the last one out — the one that gets the lock exclusively — removes them.
// Removing a placeholder another sandbox has mounted would silently detach
// that sandbox's protection.

// placeholderXattr marks a placeholder's inode.
const placeholderXattr = "user.hutch.placeholder"

// placeholder is a path on the host that stands for a missing protected
// path: a directory, or a hard link to an unnamed inode (one per writable
// root and content: a link costs an order of magnitude less than a new
// inode on common filesystems).
type placeholder struct {
	Path     string
	Root     string
	Kind     placeholderKind
	Dev, Ino uint64 // of the inode, for filesystems without user xattrs
}

// content is what a file placeholder of kind k holds.
func (k placeholderKind) content() string {
	if k == placeholderSelf {
		return "."
	}
	return ""
}

// placeholders is the placeholder set of one sandbox and its locks.
type placeholders struct {
	made  []placeholder
	locks map[string]int // writable root → descriptor holding the flock
}

// lockRoots takes a shared lock on every writable root; it waits while the
// last sandbox of a root removes its placeholders.
func (ps *placeholders) lockRoots(roots []string) error {
	ps.locks = map[string]int{}
	for _, r := range roots {
		fd, err := unix.Open(r, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("lock writable %q: %w", r, err)
		}
		ps.locks[r] = fd
		if err := flock(fd, unix.LOCK_SH); err != nil {
			return fmt.Errorf("lock writable %q: %w", r, err)
		}
	}
	return nil
}

func flock(fd, how int) error {
	for {
		err := unix.Flock(fd, how)
		if err != unix.EINTR {
			return err
		}
	}
}

// prepare creates (or adopts) a placeholder for every missing protected
// path, at its first missing component below the writable root, owned like
// the directory it is made in. Paths covered by a protected ancestor are
// skipped; nothing is reached through a symlink.
func (ps *placeholders) prepare(prot []protected, roots []string, asRoot bool) error {
	if err := ps.lockRoots(roots); err != nil {
		return err
	}
	var covered []string
	sources := map[sourceKey]*emptyFile{}
	defer func() {
		for _, f := range sources {
			unix.Close(f.fd)
		}
	}()
	for _, p := range prot {
		if under(p.Path, covered) {
			continue
		}
		var st unix.Stat_t
		if err := unix.Lstat(p.Path, &st); err == nil {
			if ph, ok := adopt(p.Path, p.Root, &st); ok {
				ps.made = append(ps.made, ph)
			}
			if !p.Pin || st.Mode&unix.S_IFMT != unix.S_IFDIR || isMarked(p.Path) {
				covered = append(covered, p.Path)
			}
			continue
		} else if !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.ENOTDIR) {
			return fmt.Errorf("protected path %q: %w", p.Path, err)
		}
		target := firstMissing(p.Root, p.Path)
		if target == "" {
			continue // a file where a directory should be: nothing can be created below it
		}
		dirfd, err := unix.Openat2(unix.AT_FDCWD, filepath.Dir(target), &unix.OpenHow{
			Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_SYMLINKS,
		})
		if err != nil {
			continue // reached through a symlink: the sandbox cannot create below it either
		}
		kind := p.Kind
		if target != p.Path {
			kind = placeholderDir // a missing parent
		}
		ph, err := makePlaceholder(dirfd, target, p.Root, kind, sources, asRoot)
		unix.Close(dirfd)
		if errors.Is(err, unix.EEXIST) {
			// Another sandbox of the same workspace was quicker.
			if unix.Lstat(target, &st) == nil {
				if ph, ok := adopt(target, p.Root, &st); ok {
					ps.made = append(ps.made, ph)
				}
			}
			covered = append(covered, target)
			continue
		}
		if err != nil {
			return fmt.Errorf("create placeholder for protected path %q: %w", p.Path, err)
		}
		ps.made = append(ps.made, ph)
		covered = append(covered, target)
	}
	return nil
}

// adopt returns the placeholder another sandbox made at path, if it is one.
func adopt(path, root string, st *unix.Stat_t) (placeholder, bool) {
	if !isMarked(path) {
		return placeholder{}, false
	}
	kind := placeholderFile
	switch {
	case st.Mode&unix.S_IFMT == unix.S_IFDIR:
		kind = placeholderDir
	case st.Size == int64(len(placeholderSelf.content())):
		kind = placeholderSelf
	}
	return placeholder{Path: path, Root: root, Kind: kind, Dev: st.Dev, Ino: st.Ino}, true
}

func isMarked(path string) bool {
	_, err := unix.Lgetxattr(path, placeholderXattr, nil)
	return err == nil
}

// emptyFile is the unnamed inode the file placeholders of one writable
// root and content link to.
type emptyFile struct {
	fd       int
	dev, ino uint64
}

// sourceKey names the inode of emptyFile: a writable root and a kind.
type sourceKey struct {
	root string
	kind placeholderKind
}

func makePlaceholder(dirfd int, path, root string, kind placeholderKind, sources map[sourceKey]*emptyFile, asRoot bool) (placeholder, error) {
	base := filepath.Base(path)
	if kind == placeholderDir {
		if err := unix.Mkdirat(dirfd, base, 0o755); err != nil {
			return placeholder{}, err
		}
		fd, err := unix.Openat(dirfd, base, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return placeholder{}, err
		}
		defer unix.Close(fd)
		_ = unix.Fsetxattr(fd, placeholderXattr, []byte("1"), 0)
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return placeholder{}, err
		}
		if asRoot {
			var owner unix.Stat_t
			if unix.Fstat(dirfd, &owner) == nil {
				_ = unix.Fchown(fd, int(owner.Uid), int(owner.Gid))
			}
		}
		return placeholder{Path: path, Root: root, Kind: kind, Dev: st.Dev, Ino: st.Ino}, nil
	}
	src := sources[sourceKey{root, kind}]
	if src == nil {
		fd, err := unix.Open(root, unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, 0o444)
		if err != nil {
			return placeholder{}, fmt.Errorf("empty file in %q: %w", root, err)
		}
		if c := kind.content(); c != "" {
			if _, err := unix.Write(fd, []byte(c)); err != nil {
				unix.Close(fd)
				return placeholder{}, fmt.Errorf("placeholder file in %q: %w", root, err)
			}
		}
		_ = unix.Fsetxattr(fd, placeholderXattr, []byte("1"), 0)
		var st unix.Stat_t
		_ = unix.Fstat(fd, &st)
		if asRoot {
			var rootSt unix.Stat_t
			if unix.Stat(root, &rootSt) == nil {
				_ = unix.Fchown(fd, int(rootSt.Uid), int(rootSt.Gid))
			}
		}
		src = &emptyFile{fd: fd, dev: st.Dev, ino: st.Ino}
		sources[sourceKey{root, kind}] = src
	}
	err := unix.Linkat(unix.AT_FDCWD, fmt.Sprintf("/proc/self/fd/%d", src.fd), dirfd, filepath.Base(path), unix.AT_SYMLINK_FOLLOW)
	if err != nil {
		return placeholder{}, err
	}
	return placeholder{Path: path, Root: root, Kind: kind, Dev: src.dev, Ino: src.ino}, nil
}

// kinds maps each placeholder's path to its kind.
func (ps *placeholders) kinds() map[string]placeholderKind {
	out := make(map[string]placeholderKind, len(ps.made))
	for _, p := range ps.made {
		out[p.Path] = p.Kind
	}
	return out
}

// remove removes the placeholders of every root this sandbox is the last
// one in, each only if it is still a placeholder — an empty directory, or
// an empty file, with hutch's inode or mark — reached without following any
// symlink (S5). Then it releases the locks.
func (ps *placeholders) remove(log *slog.Logger) {
	last := map[string]bool{}
	for r, fd := range ps.locks {
		last[r] = flock(fd, unix.LOCK_EX|unix.LOCK_NB) == nil
	}
	for i := len(ps.made) - 1; i >= 0; i-- {
		if p := ps.made[i]; last[p.Root] {
			removePlaceholder(p, log)
		}
	}
	for _, fd := range ps.locks {
		unix.Close(fd)
	}
	ps.locks = nil
}

func removePlaceholder(p placeholder, log *slog.Logger) {
	dirfd, err := unix.Openat2(unix.AT_FDCWD, filepath.Dir(p.Path), &unix.OpenHow{
		Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_SYMLINKS,
	})
	if err != nil {
		log.Debug("placeholder parent gone", "path", p.Path, "err", err)
		return
	}
	defer unix.Close(dirfd)
	base := filepath.Base(p.Path)
	var st unix.Stat_t
	if unix.Fstatat(dirfd, base, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
		return
	}
	ours := st.Dev == p.Dev && st.Ino == p.Ino || isMarked(p.Path)
	switch {
	case ours && p.Kind == placeholderDir && st.Mode&unix.S_IFMT == unix.S_IFDIR:
		err = unix.Unlinkat(dirfd, base, unix.AT_REMOVEDIR) // fails unless empty
	case ours && p.Kind != placeholderDir && st.Mode&unix.S_IFMT == unix.S_IFREG && st.Size == int64(len(p.Kind.content())):
		err = unix.Unlinkat(dirfd, base, 0)
	default:
		err = errors.New("changed while the sandbox ran")
	}
	if err != nil {
		log.Debug("placeholder kept", "path", p.Path, "err", err)
	}
}
