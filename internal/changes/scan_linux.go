package changes

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Kind is what happened to a path.
type Kind string

// The kinds of changes.
const (
	Added       Kind = "added"
	Modified    Kind = "modified" // content and/or mode
	Deleted     Kind = "deleted"
	Renamed     Kind = "renamed" // a deleted file's content under a new name
	TypeChanged Kind = "type changed"
	Refused     Kind = "refused" // a device node, fifo or socket: never applied
)

// Change is one changed path.
type Change struct {
	Kind Kind
	Path string // relative to the workspace, slash-separated
	// From is a rename's old path and FromOld its workspace entry.
	From    string
	FromOld Entry
	Old     Entry // the workspace's entry at Path (Absent when added)
	New     Entry // the upper directory's entry at Path (Absent when deleted)
	// HardLink names another path of the set that is the same file (one
	// inode in the upper directory).
	HardLink string
	// Edited is set when the workspace copy changed while a run went on.
	Edited bool
}

// paths returns the paths c touches in the workspace.
func (c Change) paths() []string {
	if c.From != "" {
		return []string{c.From, c.Path}
	}
	return []string{c.Path}
}

// maxDepth bounds how deep the walk of an upper directory goes.
const maxDepth = 512

// Changes computes the set's changes: its upper directory against the
// workspace as it is now, sorted by path.
func (s *Set) Changes() ([]Change, error) {
	upper, err := openDir(unix.AT_FDCWD, s.Upper())
	if err != nil {
		return nil, fmt.Errorf("change set %s: %w", s.meta.ID, err)
	}
	defer upper.Close()
	lower, err := openDir(unix.AT_FDCWD, s.meta.Workspace)
	if err != nil {
		return nil, fmt.Errorf("change set %s: workspace: %w", s.meta.ID, err)
	}
	defer lower.Close()
	sc := &scanner{links: map[[2]uint64]string{}}
	if err := sc.dir("", upper, lower, 0); err != nil {
		return nil, fmt.Errorf("change set %s: %w", s.meta.ID, err)
	}
	sc.renames()
	slices.SortFunc(sc.out, func(a, b Change) int { return strings.Compare(a.Path, b.Path) })
	for i := range sc.out {
		for _, p := range sc.out[i].paths() {
			if slices.Contains(s.meta.Edited, p) {
				sc.out[i].Edited = true
			}
		}
	}
	return sc.out, nil
}

type scanner struct {
	out   []Change
	links map[[2]uint64]string // the upper's (dev, inode) of files with links: the first path
}

// dir compares upper directory u (at rel) with lower, the workspace's
// directory at rel or nil where the workspace has none.
func (sc *scanner) dir(rel string, u, lower *os.File, depth int) error {
	if depth > maxDepth {
		return fmt.Errorf("%s: deeper than %d directories", rel, maxDepth)
	}
	names, err := u.Readdirnames(-1)
	if err != nil {
		return fmt.Errorf("upper %s: %w", rel, err)
	}
	slices.Sort(names)
	ufd := int(u.Fd())
	lfd := -1
	if lower != nil {
		lfd = int(lower.Fd())
	}
	for _, name := range names {
		p := path.Join(rel, name)
		var ust unix.Stat_t
		if err := unix.Fstatat(ufd, name, &ust, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("upper %s: %w", p, err)
		}
		ue := entryOf(&ust)
		le, err := lstatAt(lfd, name)
		if err != nil {
			return fmt.Errorf("workspace %s: %w", p, err)
		}
		if whiteout(ufd, name, &ust) {
			if le.Type != Absent {
				if err := sc.deleted(p, lfd, name, le, depth); err != nil {
					return err
				}
			}
			continue
		}
		switch ue.Type {
		case Dir:
			if err := sc.subdir(p, ufd, lfd, name, ue, le, depth); err != nil {
				return err
			}
		case File, Symlink:
			if err := sc.leaf(p, ufd, lfd, name, &ust, ue, le, depth); err != nil {
				return err
			}
		default:
			if err := fill(lfd, name, &le); err != nil {
				return fmt.Errorf("workspace %s: %w", p, err)
			}
			sc.out = append(sc.out, Change{Kind: Refused, Path: p, Old: le, New: ue})
		}
	}
	if lower == nil || !opaque(ufd) {
		return nil
	}
	// An opaque directory hides everything of the workspace's below it
	// that the upper directory does not have.
	lnames, err := lower.Readdirnames(-1)
	if err != nil {
		return fmt.Errorf("workspace %s: %w", rel, err)
	}
	slices.Sort(lnames)
	for _, name := range lnames {
		if _, found := slices.BinarySearch(names, name); found {
			continue
		}
		le, err := lstatAt(lfd, name)
		if err != nil {
			return fmt.Errorf("workspace %s: %w", path.Join(rel, name), err)
		}
		if le.Type != Absent {
			if err := sc.deleted(path.Join(rel, name), lfd, name, le, depth); err != nil {
				return err
			}
		}
	}
	return nil
}

// subdir handles a directory of the upper directory.
func (sc *scanner) subdir(p string, ufd, lfd int, name string, ue, le Entry, depth int) error {
	u, err := openDir(ufd, name)
	if err != nil {
		return fmt.Errorf("upper %s: %w", p, err)
	}
	defer u.Close()
	var lower *os.File
	switch le.Type {
	case Dir:
		if lower, err = openDir(lfd, name); err != nil {
			return fmt.Errorf("workspace %s: %w", p, err)
		}
		defer lower.Close()
		if le.Mode != ue.Mode {
			sc.out = append(sc.out, Change{Kind: Modified, Path: p, Old: le, New: ue})
		}
	case Absent:
		sc.out = append(sc.out, Change{Kind: Added, Path: p, New: ue})
	default:
		if err := fill(lfd, name, &le); err != nil {
			return fmt.Errorf("workspace %s: %w", p, err)
		}
		sc.out = append(sc.out, Change{Kind: TypeChanged, Path: p, Old: le, New: ue})
	}
	return sc.dir(p, u, lower, depth+1)
}

// leaf handles a file or symbolic link of the upper directory.
func (sc *scanner) leaf(p string, ufd, lfd int, name string, ust *unix.Stat_t, ue, le Entry, depth int) error {
	if err := fill(ufd, name, &ue); err != nil {
		return fmt.Errorf("upper %s: %w", p, err)
	}
	c := Change{Path: p, Old: le, New: ue}
	if ue.Type == File && ust.Nlink > 1 {
		key := [2]uint64{ue.dev, ue.ino}
		if first, ok := sc.links[key]; ok {
			c.HardLink = first
		} else {
			sc.links[key] = p
		}
	}
	switch le.Type {
	case Absent:
		c.Kind = Added
	case ue.Type:
		if ue.Type == Symlink || le.Size == ue.Size {
			if err := fill(lfd, name, &c.Old); err != nil {
				return fmt.Errorf("workspace %s: %w", p, err)
			}
		}
		if c.Old.Mode == ue.Mode && c.Old.SHA256 == ue.SHA256 && c.Old.Link == ue.Link && c.Old.Size == ue.Size {
			return nil // copied up, not changed
		}
		if ue.Type == File && c.Old.SHA256 == "" {
			if err := fill(lfd, name, &c.Old); err != nil {
				return fmt.Errorf("workspace %s: %w", p, err)
			}
		}
		c.Kind = Modified
	case Dir:
		// The file hides the workspace's directory and all below it.
		if err := sc.deletedBelow(p, lfd, name, depth); err != nil {
			return err
		}
		c.Kind = TypeChanged
	default:
		if err := fill(lfd, name, &c.Old); err != nil {
			return fmt.Errorf("workspace %s: %w", p, err)
		}
		c.Kind = TypeChanged
	}
	sc.out = append(sc.out, c)
	return nil
}

// deleted records the deletion of the workspace's p (name in lfd), and of
// all below it when it is a directory.
func (sc *scanner) deleted(p string, lfd int, name string, le Entry, depth int) error {
	if le.Type == Dir {
		if err := sc.deletedBelow(p, lfd, name, depth); err != nil {
			return err
		}
	} else if err := fill(lfd, name, &le); err != nil {
		return fmt.Errorf("workspace %s: %w", p, err)
	}
	sc.out = append(sc.out, Change{Kind: Deleted, Path: p, Old: le})
	return nil
}

// deletedBelow records the deletion of everything in the workspace's
// directory p (name in lfd).
func (sc *scanner) deletedBelow(p string, lfd int, name string, depth int) error {
	if depth > maxDepth {
		return fmt.Errorf("%s: deeper than %d directories", p, maxDepth)
	}
	d, err := openDir(lfd, name)
	if err != nil {
		return fmt.Errorf("workspace %s: %w", p, err)
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return fmt.Errorf("workspace %s: %w", p, err)
	}
	slices.Sort(names)
	for _, n := range names {
		le, err := lstatAt(int(d.Fd()), n)
		if err != nil {
			return fmt.Errorf("workspace %s: %w", path.Join(p, n), err)
		}
		if le.Type == Absent {
			continue
		}
		if err := sc.deleted(path.Join(p, n), int(d.Fd()), n, le, depth+1); err != nil {
			return err
		}
	}
	return nil
}

// renames turns each deleted file whose content an added file has into
// one rename, preferring a file of the same name.
func (sc *scanner) renames() {
	gone := map[string][]int{} // SHA-256 → indexes of deleted files
	for i, c := range sc.out {
		if c.Kind == Deleted && c.Old.Type == File && c.Old.Size > 0 {
			gone[c.Old.SHA256] = append(gone[c.Old.SHA256], i)
		}
	}
	if len(gone) == 0 {
		return
	}
	drop := map[int]bool{}
	for i, c := range sc.out {
		if c.Kind != Added || c.New.Type != File || c.HardLink != "" {
			continue
		}
		cands := gone[c.New.SHA256]
		if len(cands) == 0 {
			continue
		}
		pick := 0
		for k, j := range cands {
			if path.Base(sc.out[j].Path) == path.Base(c.Path) {
				pick = k
				break
			}
		}
		j := cands[pick]
		gone[c.New.SHA256] = slices.Delete(cands, pick, pick+1)
		sc.out[i].Kind, sc.out[i].From, sc.out[i].FromOld = Renamed, sc.out[j].Path, sc.out[j].Old
		drop[j] = true
	}
	out := sc.out[:0]
	for i, c := range sc.out {
		if !drop[i] {
			out = append(out, c)
		}
	}
	sc.out = out
}

// dirFlags open a directory without following a symbolic link.
const dirFlags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC

// openDir opens directory name in dirfd without following a symbolic link.
func openDir(dirfd int, name string) (*os.File, error) {
	fd, err := unix.Openat(dirfd, name, dirFlags, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: name, Err: err}
	}
	return os.NewFile(uintptr(fd), name), nil
}

// openFile opens regular file name in dirfd for reading without following
// a symbolic link, and without blocking should it have become a fifo.
func openFile(dirfd int, name string) (*os.File, error) {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: name, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, &os.PathError{Op: "open", Path: name, Err: errors.New("not a regular file")}
	}
	return os.NewFile(uintptr(fd), name), nil
}

// lstatAt returns the entry of name in dirfd, Absent when dirfd is -1 or
// it does not exist.
func lstatAt(dirfd int, name string) (Entry, error) {
	if dirfd < 0 {
		return Entry{}, nil
	}
	var st unix.Stat_t
	err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	if err == unix.ENOENT || err == unix.ENOTDIR {
		return Entry{}, nil
	}
	if err != nil {
		return Entry{}, err
	}
	return entryOf(&st), nil
}

// entryOf returns the entry of a stat, without its content's hash or its
// link's target.
func entryOf(st *unix.Stat_t) Entry {
	e := Entry{Mode: st.Mode & 0o7777, ino: st.Ino, dev: uint64(st.Dev), nlink: uint64(st.Nlink),
		ctime: time.Unix(st.Ctim.Sec, st.Ctim.Nsec)}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		e.Type, e.Size = File, st.Size
	case unix.S_IFDIR:
		e.Type = Dir
	case unix.S_IFLNK:
		e.Type, e.Size = Symlink, st.Size
	case unix.S_IFIFO:
		e.Type = Fifo
	case unix.S_IFSOCK:
		e.Type = Socket
	default:
		e.Type = Device
	}
	return e
}

// fill adds to e, the entry of name in dirfd, its content's SHA-256 (a
// file) or its target (a symbolic link).
func fill(dirfd int, name string, e *Entry) error {
	switch e.Type {
	case File:
		f, err := openFile(dirfd, name)
		if err != nil {
			return err
		}
		defer f.Close()
		h := sha256.New()
		n, err := io.Copy(h, f)
		if err != nil {
			return err
		}
		e.SHA256, e.Size = hex.EncodeToString(h.Sum(nil)), n
	case Symlink:
		buf := make([]byte, unix.PathMax)
		n, err := unix.Readlinkat(dirfd, name, buf)
		if err != nil {
			return err
		}
		e.Link = string(buf[:n])
	}
	return nil
}

// whiteout reports whether name in the upper directory dirfd is an
// overlayfs whiteout: a character device 0:0, or an empty file marked
// with the whiteout xattr.
func whiteout(dirfd int, name string, st *unix.Stat_t) bool {
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFCHR:
		return st.Rdev == 0
	case unix.S_IFREG:
		if st.Size != 0 {
			return false
		}
		p := procPath(dirfd, name)
		for _, attr := range []string{"user.overlay.whiteout", "trusted.overlay.whiteout"} {
			if _, err := unix.Lgetxattr(p, attr, nil); err == nil {
				return true
			}
		}
	}
	return false
}

// opaque reports whether upper directory fd is opaque: it hides the
// workspace's directory. "y" is the value; "x", which marks a directory
// holding whiteouts made as xattrs rather than an opaque one, is accepted
// and read for what it says.
func opaque(fd int) bool {
	buf := make([]byte, 8)
	for _, attr := range []string{"user.overlay.opaque", "trusted.overlay.opaque"} {
		if n, err := unix.Fgetxattr(fd, attr, buf); err == nil && n == 1 && buf[0] == 'y' {
			return true
		}
	}
	return false
}

// procPath names name in directory dirfd through /proc, for the calls
// that take a path: the directory is the one open, and name, the last
// component, is not followed by the l- calls.
func procPath(dirfd int, name string) string {
	return "/proc/self/fd/" + strconv.Itoa(dirfd) + "/" + name
}

// openBeneath opens regular file rel below directory root, following no
// symbolic link on the way.
func openBeneath(root, rel string) (*os.File, error) {
	d, err := openDirBeneath(root, path.Dir(rel))
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return openFile(int(d.Fd()), path.Base(rel))
}

// openDirBeneath opens directory rel below root ("." for root itself),
// following no symbolic link on the way.
func openDirBeneath(root, rel string) (*os.File, error) {
	d, err := openDir(unix.AT_FDCWD, root)
	if err != nil || rel == "." || rel == "" {
		return d, err
	}
	for _, comp := range strings.Split(rel, "/") {
		next, err := openDir(int(d.Fd()), comp)
		d.Close()
		if err != nil {
			return nil, &os.PathError{Op: "open", Path: rel, Err: err.(*os.PathError).Err}
		}
		d = next
	}
	return d, nil
}

// errNotDir is the error of a path whose directory is a file.
var errNotDir = unix.ENOTDIR

// unlinkAt removes file name in directory d.
func unlinkAt(d *os.File, name string) {
	unix.Unlinkat(int(d.Fd()), name, 0)
}

// chmodDir makes directory p, if the user owns it, readable, writable and
// searchable by its owner, without following a link.
func chmodDir(p string) {
	fd, err := unix.Open(p, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	unix.Chmod(procPath(fd, "."), 0o700)
}

// owner names p with its owner's uid, for what could not be removed.
func owner(p string) string {
	var st unix.Stat_t
	if unix.Lstat(p, &st) != nil {
		return p
	}
	return fmt.Sprintf("%s (uid %d)", p, st.Uid)
}
