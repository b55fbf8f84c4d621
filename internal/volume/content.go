package volume

import (
	"crypto/rand"
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

// Bounds of the content operations.
const (
	// MaxPath is the longest path a request may name.
	MaxPath = 4096
	// MaxDepth is the deepest listing.
	MaxDepth = 32
	// MaxListEntries is the most entries a listing returns.
	MaxListEntries = 10000
	// maxRemoveDepth is the deepest tree Remove removes.
	maxRemoveDepth = 256
)

// ErrFull is a write the volume has no room for.
var ErrFull = errors.New("volume full")

// Entry is a file of a volume as E2B's content API describes it
// (VolumeEntryStat).
type Entry struct {
	Name string `json:"name"`
	// Type is file, directory, symlink or unknown.
	Type string `json:"type"`
	// Path is its path in the volume, from "/".
	Path string `json:"path"`
	Size int64  `json:"size"`
	// Mode is its permission bits (with setuid, setgid and sticky).
	Mode   uint32    `json:"mode"`
	UID    uint32    `json:"uid"`
	GID    uint32    `json:"gid"`
	Atime  time.Time `json:"atime"`
	Mtime  time.Time `json:"mtime"`
	Ctime  time.Time `json:"ctime"`
	Target string    `json:"target,omitempty"` // a symlink's
}

// Attrs are the owner and mode a write, a mkdir or a change gives; nil
// fields are left (or the defaults: root's, 0644 for files, 0755 for
// directories).
type Attrs struct {
	UID, GID, Mode *uint32
}

// Check refuses ids no file may have and modes with bits other than the
// permissions and the sticky bit (no setuid or setgid).
func (a Attrs) Check() error {
	for _, f := range []struct {
		name string
		v    *uint32
	}{{"uid", a.UID}, {"gid", a.GID}} {
		if f.v != nil && *f.v == ^uint32(0) {
			return errorf(ErrInvalid, "%s %d is not an id", f.name, *f.v)
		}
	}
	if a.Mode != nil && *a.Mode&^0o1777 != 0 {
		return errorf(ErrInvalid, "mode %#o: only permission bits and the sticky bit (at most 01777; no setuid or setgid)", *a.Mode)
	}
	return nil
}

// Root is a volume's data directory, open for E2B's content API. Every
// path is resolved beneath it (openat2 RESOLVE_BENEATH and
// RESOLVE_NO_MAGICLINKS): a symlink that leads out, an absolute one or
// one through /proc, is refused, as is "..." past the root. The last
// element of Stat, Remove and Change is never followed.
type Root struct {
	fd int
}

// OpenRoot opens the data directory dir (Store.Dir).
func OpenRoot(dir string) (*Root, error) {
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("volume %s: %w", dir, err)
	}
	return &Root{fd: fd}, nil
}

// Close closes the root.
func (r *Root) Close() error { return unix.Close(r.fd) }

// Clean checks and cleans a path of the content API: "/" and what is
// under it (a relative path is from "/" too; ".." stops at "/").
func Clean(p string) (string, error) {
	switch {
	case p == "":
		return "", errorf(ErrInvalid, "empty path")
	case len(p) > MaxPath:
		return "", errorf(ErrInvalid, "path of %d bytes, at most %d", len(p), MaxPath)
	case strings.ContainsRune(p, 0):
		return "", errorf(ErrInvalid, "path %q has a NUL byte", p)
	}
	return path.Clean("/" + p), nil
}

// rel is the path relative to the root for openat2, "." for the root.
func rel(clean string) string {
	if clean == "/" {
		return "."
	}
	return clean[1:]
}

// errOf maps a system call's error on p to the store's categories.
func errOf(p string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.ENOENT):
		return errorf(ErrNotFound, "path %s not found", p)
	case errors.Is(err, unix.EEXIST), errors.Is(err, unix.ENOTEMPTY):
		return errorf(ErrExists, "path %s exists", p)
	case errors.Is(err, unix.EXDEV):
		return errorf(ErrInvalid, "path %s leads out of the volume", p)
	case errors.Is(err, unix.ELOOP):
		return errorf(ErrInvalid, "path %s: a symlink loop, or a symlink where none is followed", p)
	case errors.Is(err, unix.ENOTDIR):
		return errorf(ErrInvalid, "path %s: not a directory on the way", p)
	case errors.Is(err, unix.EISDIR):
		return errorf(ErrInvalid, "path %s is a directory", p)
	case errors.Is(err, unix.ENAMETOOLONG):
		return errorf(ErrInvalid, "path %s: a name is too long", p)
	case errors.Is(err, unix.ENOSPC), errors.Is(err, unix.EDQUOT), errors.Is(err, unix.EFBIG):
		return errorf(ErrFull, "%s: no room left in the volume", p)
	case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM), errors.Is(err, unix.ENXIO), errors.Is(err, unix.EOPNOTSUPP):
		return errorf(ErrInvalid, "path %s: not permitted on this file", p)
	}
	return fmt.Errorf("path %s: %w", p, err)
}

// open resolves relative path rp beneath the root.
func (r *Root) open(rp string, flags uint64) (int, error) {
	how := unix.OpenHow{
		Flags:   flags | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS,
	}
	for range 16 {
		fd, err := unix.Openat2(r.fd, rp, &how)
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			continue // a rename raced the resolution
		}
		return fd, err
	}
	return -1, unix.EAGAIN
}

// parent opens the directory of clean path p (not the root) and returns
// it with p's last element.
func (r *Root) parent(p string) (int, string, error) {
	dir, name := path.Split(p)
	fd, err := r.open(rel(path.Clean(dir)), unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return -1, "", errOf(p, err)
	}
	return fd, name, nil
}

// entryOf describes a file from its status.
func entryOf(p string, st *unix.Stat_t) Entry {
	e := Entry{
		Name: path.Base(p), Path: p, Size: st.Size,
		Mode: st.Mode & 0o7777, UID: st.Uid, GID: st.Gid,
		Atime: time.Unix(st.Atim.Unix()).UTC(),
		Mtime: time.Unix(st.Mtim.Unix()).UTC(),
		Ctime: time.Unix(st.Ctim.Unix()).UTC(),
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		e.Type = "file"
	case unix.S_IFDIR:
		e.Type = "directory"
	case unix.S_IFLNK:
		e.Type = "symlink"
	default:
		e.Type = "unknown"
	}
	if p == "/" {
		e.Name = "/"
	}
	return e
}

// statAt describes name in directory dirfd, not following it; p is its
// path in the volume.
func statAt(dirfd int, name, p string) (Entry, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW|unix.AT_EMPTY_PATH); err != nil {
		return Entry{}, errOf(p, err)
	}
	e := entryOf(p, &st)
	if e.Type == "symlink" {
		buf := make([]byte, MaxPath)
		n, err := unix.Readlinkat(dirfd, name, buf)
		if err == nil {
			e.Target = string(buf[:n])
		}
	}
	return e, nil
}

// Stat describes path p, not following it if it is a symlink.
func (r *Root) Stat(p string) (Entry, error) {
	p, err := Clean(p)
	if err != nil {
		return Entry{}, err
	}
	if p == "/" {
		return statAt(r.fd, "", p)
	}
	pfd, name, err := r.parent(p)
	if err != nil {
		return Entry{}, err
	}
	defer unix.Close(pfd)
	return statAt(pfd, name, p)
}

// Open opens the regular file p for reading (symlinks followed inside the
// volume) and describes it.
func (r *Root) Open(p string) (*os.File, Entry, error) {
	p, err := Clean(p)
	if err != nil {
		return nil, Entry{}, err
	}
	// Non-blocking: a FIFO a sandbox left is refused, not waited on.
	fd, err := r.open(rel(p), unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY)
	if err != nil {
		return nil, Entry{}, errOf(p, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, Entry{}, errOf(p, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, Entry{}, errorf(ErrInvalid, "path %s is not a regular file", p)
	}
	return os.NewFile(uintptr(fd), p), entryOf(p, &st), nil
}

// setAttrs gives the file open (O_PATH or not) in fd the owner and mode
// of a; mode is never set on a symlink (Linux has no such thing).
func setAttrs(fd int, p string, a Attrs) error {
	if a.UID != nil || a.GID != nil {
		uid, gid := -1, -1
		if a.UID != nil {
			uid = int(*a.UID)
		}
		if a.GID != nil {
			gid = int(*a.GID)
		}
		if err := unix.Fchownat(fd, "", uid, gid, unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return errOf(p, err)
		}
	}
	if a.Mode != nil {
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return errOf(p, err)
		}
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			return errorf(ErrInvalid, "path %s is a symlink, whose mode cannot change", p)
		}
		// Through the daemon's own descriptor of this very file: no
		// path of the volume is resolved again.
		if err := unix.Fchmodat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(fd), *a.Mode, 0); err != nil {
			return errOf(p, err)
		}
	}
	return nil
}

// Write writes body to the file p: to a new file in p's directory, renamed
// to p when complete. An existing file is replaced only with force (a
// directory never): otherwise ErrExists. The file is root's, mode 0644,
// unless a says otherwise.
func (r *Root) Write(p string, body io.Reader, force bool, a Attrs) (Entry, error) {
	p, err := Clean(p)
	if err != nil {
		return Entry{}, err
	}
	if err := a.Check(); err != nil {
		return Entry{}, err
	}
	if p == "/" {
		return Entry{}, errorf(ErrInvalid, "path / is the volume's root directory")
	}
	pfd, name, err := r.parent(p)
	if err != nil {
		return Entry{}, err
	}
	defer unix.Close(pfd)
	if old, err := statAt(pfd, name, p); err == nil {
		if old.Type == "directory" {
			return Entry{}, errorf(ErrExists, "path %s is a directory", p)
		}
		if !force {
			return Entry{}, errorf(ErrExists, "path %s exists (write with force to replace it)", p)
		}
	} else if !errors.Is(err, ErrNotFound) {
		return Entry{}, err
	}
	var rnd [8]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return Entry{}, err
	}
	tmp := ".hutch-upload-" + hex.EncodeToString(rnd[:])
	fd, err := unix.Openat(pfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return Entry{}, errOf(p, err)
	}
	f := os.NewFile(uintptr(fd), tmp)
	done := false
	defer func() {
		if !done {
			f.Close()
			_ = unix.Unlinkat(pfd, tmp, 0)
		}
	}()
	if _, err := io.Copy(f, body); err != nil {
		var errno unix.Errno
		if errors.As(err, &errno) {
			return Entry{}, errOf(p, err)
		}
		return Entry{}, errorf(ErrInvalid, "%s: reading the upload: %v", p, err)
	}
	if a.UID == nil {
		a.UID = new(uint32)
	}
	if a.GID == nil {
		a.GID = new(uint32)
	}
	if a.Mode == nil {
		m := uint32(0o644)
		a.Mode = &m
	}
	if err := setAttrs(fd, p, a); err != nil {
		return Entry{}, err
	}
	if err := f.Close(); err != nil {
		return Entry{}, errOf(p, err)
	}
	flags := uint(unix.RENAME_NOREPLACE)
	if force {
		flags = 0
	}
	if err := unix.Renameat2(pfd, tmp, pfd, name, flags); err != nil {
		if errors.Is(err, unix.EEXIST) {
			_ = unix.Unlinkat(pfd, tmp, 0)
			done = true
			return Entry{}, errorf(ErrExists, "path %s exists (write with force to replace it)", p)
		}
		return Entry{}, errOf(p, err)
	}
	done = true
	return statAt(pfd, name, p)
}

// Mkdir makes the directory p, root's and 0755 unless a says otherwise.
// Without force its parent must exist and p must not; with force its
// missing parents are made too (with a's owner and mode) and an existing
// directory is no error.
func (r *Root) Mkdir(p string, force bool, a Attrs) (Entry, error) {
	p, err := Clean(p)
	if err != nil {
		return Entry{}, err
	}
	if err := a.Check(); err != nil {
		return Entry{}, err
	}
	if a.Mode == nil {
		m := uint32(0o755)
		a.Mode = &m
	}
	if p == "/" {
		if !force {
			return Entry{}, errorf(ErrExists, "path / exists")
		}
		return r.Stat(p)
	}
	steps := []string{p}
	if force {
		steps = steps[:0]
		for q := p; q != "/"; q = path.Dir(q) {
			steps = append(steps, q)
		}
		slices.Reverse(steps)
	}
	for _, q := range steps {
		pfd, name, err := r.parent(q)
		if err != nil {
			return Entry{}, err
		}
		err = unix.Mkdirat(pfd, name, 0o700)
		if errors.Is(err, unix.EEXIST) && force {
			// There already: a directory (or a symlink to one inside
			// the volume) is fine.
			fd, oerr := r.open(rel(q), unix.O_PATH|unix.O_DIRECTORY)
			unix.Close(pfd)
			if oerr != nil {
				return Entry{}, errOf(q, oerr)
			}
			unix.Close(fd)
			continue
		}
		if err != nil {
			unix.Close(pfd)
			return Entry{}, errOf(q, err)
		}
		fd, err := unix.Openat(pfd, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		unix.Close(pfd)
		if err != nil {
			return Entry{}, errOf(q, err)
		}
		err = setAttrs(fd, q, a)
		unix.Close(fd)
		if err != nil {
			return Entry{}, err
		}
	}
	return r.Stat(p)
}

// List describes what directory p holds (symlinks to directories inside
// the volume followed for p itself, never below), depth levels deep (1:
// its entries only), each directory's entries sorted by name and followed
// by what they hold; at most MaxListEntries.
func (r *Root) List(p string, depth int) ([]Entry, error) {
	p, err := Clean(p)
	if err != nil {
		return nil, err
	}
	if depth == 0 {
		depth = 1
	}
	if depth < 0 || depth > MaxDepth {
		return nil, errorf(ErrInvalid, "depth %d: want 1 to %d", depth, MaxDepth)
	}
	fd, err := r.open(rel(p), unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return nil, errOf(p, err)
	}
	out := []Entry{}
	if err := listAt(fd, p, depth, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// listAt appends what directory fd (p) holds, sorted by name, and closes
// fd.
func listAt(fd int, p string, depth int, out *[]Entry) error {
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	var names []string
	for {
		batch, err := f.Readdirnames(256)
		names = append(names, batch...)
		if len(*out)+len(names) > MaxListEntries {
			return errorf(ErrInvalid, "path %s: more than %d entries; list a subdirectory or with less depth", p, MaxListEntries)
		}
		if errors.Is(err, io.EOF) || (err == nil && len(batch) == 0) {
			break
		}
		if err != nil {
			return errOf(p, err)
		}
	}
	slices.Sort(names)
	for _, n := range names {
		cp := path.Join(p, n)
		e, err := statAt(fd, n, cp)
		if errors.Is(err, ErrNotFound) {
			continue // gone meanwhile
		}
		if err != nil {
			return err
		}
		*out = append(*out, e)
		if e.Type == "directory" && depth > 1 {
			cfd, err := unix.Openat(fd, n, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				continue // replaced meanwhile
			}
			if err := listAt(cfd, cp, depth-1, out); err != nil {
				return err
			}
		}
	}
	return nil
}

// Remove removes p, a directory with everything in it; a symlink is
// removed, never followed. The root is refused.
func (r *Root) Remove(p string) error {
	p, err := Clean(p)
	if err != nil {
		return err
	}
	if p == "/" {
		return errorf(ErrInvalid, "path / is the volume's root directory (destroy the volume instead)")
	}
	pfd, name, err := r.parent(p)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	return removeAt(pfd, name, p, 0)
}

// removeAt removes name in directory dirfd (p) and what it holds.
func removeAt(dirfd int, name, p string, level int) error {
	e, err := statAt(dirfd, name, p)
	if err != nil {
		return err
	}
	if e.Type != "directory" {
		return errOf(p, unix.Unlinkat(dirfd, name, 0))
	}
	if level >= maxRemoveDepth {
		return errorf(ErrInvalid, "path %s: deeper than %d levels", p, maxRemoveDepth)
	}
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return errOf(p, err)
	}
	f := os.NewFile(uintptr(fd), p)
	for {
		names, err := f.Readdirnames(256)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			f.Close()
			return errOf(p, err)
		}
		for _, n := range names {
			if err := removeAt(fd, n, path.Join(p, n), level+1); err != nil && !errors.Is(err, ErrNotFound) {
				f.Close()
				return err
			}
		}
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			f.Close()
			return errOf(p, err)
		}
	}
	f.Close()
	return errOf(p, unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR))
}

// Change gives p the owner and mode of a, not following p if it is a
// symlink (whose mode is refused).
func (r *Root) Change(p string, a Attrs) (Entry, error) {
	p, err := Clean(p)
	if err != nil {
		return Entry{}, err
	}
	if err := a.Check(); err != nil {
		return Entry{}, err
	}
	var fd int
	if p == "/" {
		fd, err = unix.Openat(r.fd, ".", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	} else {
		pfd, name, perr := r.parent(p)
		if perr != nil {
			return Entry{}, perr
		}
		fd, err = unix.Openat(pfd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		unix.Close(pfd)
	}
	if err != nil {
		return Entry{}, errOf(p, err)
	}
	defer unix.Close(fd)
	if err := setAttrs(fd, p, a); err != nil {
		return Entry{}, err
	}
	return statAt(fd, "", p)
}
