package layer

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// Limits bound what unpacking one layer may cost.
type Limits struct {
	// Bytes bounds the layer's uncompressed size: the tar stream as read
	// (headers and contents), which a decompression bomb reaches first.
	Bytes int64
	// Entries bounds the number of tar entries.
	Entries int
}

// DefaultLimits are generous for real images and stop abuse early.
var DefaultLimits = Limits{Bytes: 16 << 30, Entries: 2_000_000}

// Options say how the layer is made.
type Options struct {
	Limits Limits
	// OpaqueXattr is the extended attribute that marks a directory opaque
	// for the overlayfs mount that will stack the layer:
	// "trusted.overlay.opaque", or "user.overlay.opaque" for a mount with
	// userxattr (an ordinary user's).
	OpaqueXattr string
	// Owner, when set, gives each entry the owner the layer names (root:
	// the image's ids, shifted as the caller maps them); otherwise entries
	// belong to whoever unpacks.
	Owner func(uid, gid int) (int, int)
}

// Report is what unpacking changed or left out of the layer.
type Report struct {
	Entries  int
	Bytes    int64    // uncompressed bytes read
	Stripped []string // entries whose set-id bits or file capability were removed
	Skipped  []string // device nodes and other entries never made, with why
}

// maxName bounds an entry's name; a component is bounded by the kernel
// (NAME_MAX).
const maxName = 4096

// EntryError is a refused entry.
type EntryError struct {
	Entry string
	Err   error
}

func (e *EntryError) Error() string { return fmt.Sprintf("entry %q: %v", e.Entry, e.Err) }
func (e *EntryError) Unwrap() error { return e.Err }

// Errors a layer can be refused with.
var (
	ErrTooLarge   = errors.New("the layer is larger than its limit")
	ErrTooMany    = errors.New("the layer has more entries than its limit")
	ErrEscape     = errors.New("names a path outside the layer")
	ErrLinkParent = errors.New("a parent directory is a symbolic link (made by an earlier entry)")
	ErrBadName    = errors.New("the name is not valid UTF-8, or too long")
	ErrLinkTarget = errors.New("a hard link's target is outside the layer or not in it")
)

// Unpack reads the uncompressed tar stream r and makes its entries below
// dir, an existing empty directory.
func Unpack(r io.Reader, dir string, opt Options) (Report, error) {
	var rep Report
	lim := opt.Limits
	if lim.Bytes <= 0 {
		lim.Bytes = DefaultLimits.Bytes
	}
	if lim.Entries <= 0 {
		lim.Entries = DefaultLimits.Entries
	}
	root, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return rep, fmt.Errorf("layer directory: %w", err)
	}
	defer unix.Close(root)
	u := &unpacker{root: root, opt: opt, dirModes: map[string]uint32{}, dirTimes: map[string]unix.Timespec{}}
	cr := &countingReader{r: r, max: lim.Bytes}
	tr := tar.NewReader(cr)
	for {
		hdr, err := tr.Next()
		rep.Bytes = cr.n
		if err == io.EOF {
			break
		}
		if err != nil {
			if errors.Is(err, ErrTooLarge) {
				return rep, ErrTooLarge
			}
			return rep, fmt.Errorf("read the layer: %w", err)
		}
		rep.Entries++
		if rep.Entries > lim.Entries {
			return rep, ErrTooMany
		}
		if err := u.entry(hdr, tr, &rep); err != nil {
			if errors.Is(err, ErrTooLarge) {
				return rep, ErrTooLarge
			}
			return rep, &EntryError{Entry: printable(hdr.Name), Err: err}
		}
		rep.Bytes = cr.n
	}
	// Directories get their modes last, deepest first: a read-only one
	// had to take its entries; and their times, which their entries'
	// creation changed.
	dirs := make([]string, 0, len(u.dirModes))
	for d := range u.dirModes {
		dirs = append(dirs, d)
	}
	sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
	for _, d := range dirs {
		fd, err := unix.Openat2(u.root, "."+"/"+d, &beneathDir)
		if err == unix.ENOTDIR || err == unix.ENOENT || err == unix.ELOOP {
			continue // a later entry replaced the directory
		}
		if err == nil {
			err = unix.Fchmod(fd, u.dirModes[d])
			if ts, ok := u.dirTimes[d]; ok && err == nil {
				err = unix.UtimesNanoAt(fd, "", []unix.Timespec{ts, ts}, unix.AT_EMPTY_PATH)
			}
			unix.Close(fd)
		}
		if err != nil {
			return rep, &EntryError{Entry: printable(d), Err: err}
		}
	}
	return rep, nil
}

type unpacker struct {
	root     int
	opt      Options
	dirModes map[string]uint32        // directories made or named, and their final modes
	dirTimes map[string]unix.Timespec // directories named, and their times
}

// clean returns the entry's name as a path relative to the layer's root
// ("" for the root itself).
func clean(name string) (string, error) {
	if len(name) > maxName || !utf8.ValidString(name) || strings.ContainsRune(name, 0) {
		return "", ErrBadName
	}
	n := strings.TrimPrefix(name, "./")
	if strings.HasPrefix(n, "/") {
		return "", ErrEscape
	}
	for _, c := range strings.Split(n, "/") {
		if c == ".." {
			return "", ErrEscape
		}
		if len(c) > 255 {
			return "", ErrBadName
		}
	}
	n = path.Clean("/" + n)[1:]
	return n, nil
}

// beneath is how every parent is opened: below the root, through no
// symbolic link, on no other mount.
var beneath = unix.OpenHow{
	Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
	Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_XDEV | unix.RESOLVE_NO_MAGICLINKS,
}

// beneathDir opens a directory below the root to change it.
var beneathDir = unix.OpenHow{
	Flags:   unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC,
	Resolve: beneath.Resolve,
}

// parent opens the directory name lies in, making missing directories
// on the way (0755, as image tools do).
func (u *unpacker) parent(name string) (int, error) {
	dir := path.Dir(name)
	if dir == "." {
		return unix.Dup(u.root)
	}
	fd, err := unix.Openat2(u.root, dir, &beneath)
	if err == nil {
		return fd, nil
	}
	if err != unix.ENOENT {
		return -1, parentErr(err)
	}
	cur := ""
	for _, c := range strings.Split(dir, "/") {
		next := path.Join(cur, c)
		pfd, err := u.open(cur)
		if err != nil {
			return -1, err
		}
		err = unix.Mkdirat(pfd, c, 0o700)
		unix.Close(pfd)
		if err == nil {
			u.dirModes[next] = 0o755
		} else if err != unix.EEXIST {
			return -1, err
		}
		cur = next
	}
	fd, err = unix.Openat2(u.root, dir, &beneath)
	if err != nil {
		return -1, parentErr(err)
	}
	return fd, nil
}

// open opens directory rel ("" for the root) below the root.
func (u *unpacker) open(rel string) (int, error) {
	if rel == "" {
		return unix.Dup(u.root)
	}
	fd, err := unix.Openat2(u.root, rel, &beneath)
	if err != nil {
		return -1, parentErr(err)
	}
	return fd, nil
}

func parentErr(err error) error {
	switch err {
	case unix.ELOOP:
		return ErrLinkParent
	case unix.EXDEV:
		return ErrEscape
	case unix.ENOTDIR:
		return fmt.Errorf("a parent is not a directory: %w", err)
	}
	return err
}

// entry makes one tar entry.
func (u *unpacker) entry(hdr *tar.Header, body io.Reader, rep *Report) error {
	name, err := clean(hdr.Name)
	if err != nil {
		return err
	}
	base := path.Base(name)
	// Whiteouts.
	if name != "" && strings.HasPrefix(base, ".wh.") {
		p, err := u.parent(name)
		if err != nil {
			return err
		}
		defer unix.Close(p)
		if base == ".wh..wh..opq" {
			if u.opt.OpaqueXattr == "" {
				return nil
			}
			return withDir(p, func(d int) error { return unix.Fsetxattr(d, u.opt.OpaqueXattr, []byte("y"), 0) })
		}
		target := strings.TrimPrefix(base, ".wh.")
		if target == "" || target == "." || target == ".." {
			return ErrEscape
		}
		if err := removeAt(p, target); err != nil {
			return err
		}
		if err := unix.Mknodat(p, target, unix.S_IFCHR, 0); err != nil {
			return err
		}
		return u.finish(p, target, hdr, false)
	}
	if name == "" {
		if hdr.Typeflag == tar.TypeDir {
			u.dirModes[""] = uint32(hdr.Mode) & 0o1777
		}
		return nil
	}
	p, err := u.parent(name)
	if err != nil {
		return err
	}
	defer unix.Close(p)
	mode := uint32(hdr.Mode) & 0o7777
	if mode&(unix.S_ISUID|unix.S_ISGID) != 0 && hdr.Typeflag != tar.TypeDir {
		rep.Stripped = append(rep.Stripped, printable(name)+": set-id bits")
		mode &^= unix.S_ISUID | unix.S_ISGID
	}
	for k := range hdr.PAXRecords {
		if k == "SCHILY.xattr.security.capability" {
			rep.Stripped = append(rep.Stripped, printable(name)+": file capability")
		}
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		var st unix.Stat_t
		if err := unix.Fstatat(p, base, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil && st.Mode&unix.S_IFMT != unix.S_IFDIR {
			if err := removeAt(p, base); err != nil {
				return err
			}
		}
		if err := unix.Mkdirat(p, base, 0o700); err != nil && err != unix.EEXIST {
			return err
		}
		u.dirModes[name] = mode &^ (unix.S_ISUID | unix.S_ISGID)
		if !hdr.ModTime.IsZero() {
			u.dirTimes[name] = unix.NsecToTimespec(hdr.ModTime.UnixNano())
		}
		return u.finish(p, base, hdr, false)
	case tar.TypeReg:
		if hdr.Size < 0 {
			return ErrTooLarge
		}
		if err := removeAt(p, base); err != nil {
			return err
		}
		fd, err := unix.Openat(p, base, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return err
		}
		f := fdWriter(fd)
		n, err := io.CopyN(f, body, hdr.Size)
		if err == nil && n != hdr.Size {
			err = io.ErrUnexpectedEOF
		}
		if err == nil {
			err = unix.Fchmod(fd, mode&0o1777)
		}
		unix.Close(fd)
		if err != nil {
			return err
		}
		return u.finish(p, base, hdr, false)
	case tar.TypeSymlink:
		if err := removeAt(p, base); err != nil {
			return err
		}
		if len(hdr.Linkname) > maxName || strings.ContainsRune(hdr.Linkname, 0) {
			return ErrBadName
		}
		// A symbolic link may point anywhere: it is never followed here,
		// and in the sandbox it resolves in the sandbox's own view.
		if err := unix.Symlinkat(hdr.Linkname, p, base); err != nil {
			return err
		}
		return u.finish(p, base, hdr, true)
	case tar.TypeLink:
		target, err := clean(hdr.Linkname)
		if err != nil || target == "" {
			return ErrLinkTarget
		}
		tp, err := u.open(path.Dir(target))
		if err != nil {
			return ErrLinkTarget
		}
		defer unix.Close(tp)
		var st unix.Stat_t
		if err := unix.Fstatat(tp, path.Base(target), &st, unix.AT_SYMLINK_NOFOLLOW); err != nil ||
			st.Mode&unix.S_IFMT == unix.S_IFDIR || st.Mode&unix.S_IFMT == unix.S_IFCHR {
			return ErrLinkTarget
		}
		if err := removeAt(p, base); err != nil {
			return err
		}
		return unix.Linkat(tp, path.Base(target), p, base, 0)
	case tar.TypeFifo:
		if err := removeAt(p, base); err != nil {
			return err
		}
		if err := unix.Mknodat(p, base, unix.S_IFIFO|(mode&0o777), 0); err != nil {
			return err
		}
		return u.finish(p, base, hdr, false)
	case tar.TypeChar, tar.TypeBlock:
		rep.Skipped = append(rep.Skipped, printable(name)+": a device node (never made)")
		return nil
	case tar.TypeXGlobalHeader, tar.TypeGNULongName, tar.TypeGNULongLink:
		return nil
	default:
		rep.Skipped = append(rep.Skipped, fmt.Sprintf("%s: entry type %q", printable(name), hdr.Typeflag))
		return nil
	}
}

// finish gives the entry base in directory p its owner and times.
func (u *unpacker) finish(p int, base string, hdr *tar.Header, link bool) error {
	if u.opt.Owner != nil {
		uid, gid := u.opt.Owner(hdr.Uid, hdr.Gid)
		if err := unix.Fchownat(p, base, uid, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return err
		}
	}
	if !hdr.ModTime.IsZero() {
		ts := []unix.Timespec{unix.NsecToTimespec(hdr.ModTime.UnixNano()), unix.NsecToTimespec(hdr.ModTime.UnixNano())}
		if err := unix.UtimesNanoAt(p, base, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil && !link {
			return err
		}
	}
	return nil
}

// withDir calls f with a descriptor of the directory p (an O_PATH one)
// that takes fchmod and fsetxattr: reopened through itself, with no name
// to race on.
func withDir(p int, f func(int) error) error {
	d, err := unix.Openat(p, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(d)
	return f(d)
}

// removeAt removes name from directory p if it is there (a directory with
// everything in it): a later entry of the same name replaces it.
func removeAt(p int, name string) error {
	var st unix.Stat_t
	if err := unix.Fstatat(p, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if err == unix.ENOENT {
			return nil
		}
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return unix.Unlinkat(p, name, 0)
	}
	d, err := unix.Openat(p, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	// A directory taken apart is made writable first: it may be one the
	// layer made read-only.
	_ = unix.Fchmod(d, 0o700)
	names, err := readNames(d)
	if err == nil {
		for _, n := range names {
			if err = removeAt(d, n); err != nil {
				break
			}
		}
	}
	unix.Close(d)
	if err != nil {
		return err
	}
	return unix.Unlinkat(p, name, unix.AT_REMOVEDIR)
}

// readNames lists directory d.
func readNames(d int) ([]string, error) {
	var names []string
	buf := make([]byte, 8192)
	for {
		n, err := unix.Getdents(d, buf)
		if err != nil {
			return nil, err
		}
		if n <= 0 {
			return names, nil
		}
		_, _, names = unix.ParseDirent(buf[:n], -1, names)
	}
}

// printable returns name safe for an error message.
func printable(name string) string {
	if len(name) > 256 {
		name = name[:256] + "…"
	}
	return strings.ToValidUTF8(name, "?")
}

// fdWriter writes to a descriptor.
type fdWriter int

func (f fdWriter) Write(b []byte) (int, error) {
	n := 0
	for n < len(b) {
		m, err := unix.Write(int(f), b[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return n, err
		}
		n += m
	}
	return n, nil
}

// countingReader counts what is read and fails past max.
type countingReader struct {
	r   io.Reader
	n   int64
	max int64
}

func (c *countingReader) Read(b []byte) (int, error) {
	if c.n >= c.max {
		return 0, ErrTooLarge
	}
	if int64(len(b)) > c.max-c.n+1 {
		b = b[:c.max-c.n+1]
	}
	n, err := c.r.Read(b)
	c.n += int64(n)
	if c.n > c.max {
		return n, ErrTooLarge
	}
	return n, err
}
