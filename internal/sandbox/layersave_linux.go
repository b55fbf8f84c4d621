package sandbox

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// layerSave is what a root layer keeps for saving (RootLayer.Keep) and
// restores from (RootLayer.From).
type layerSave struct {
	keep, from string
	// shift moves the owners of from's files to the sandbox's ids (a
	// snapshot's layer, RootLayer.FromSnapshot).
	shift bool
}

// apply attaches the layer's tmpfs (descriptor tmpfs) at s.keep, if set,
// and fills its upper directory from s.from, if set; it reports whether
// it did.
func (s layerSave) apply(tmpfs int) (restored bool, err error) {
	if s.keep != "" {
		m, err := unix.OpenTree(tmpfs, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH)
		if err != nil {
			return false, fmt.Errorf("root layer: keep: %w", err)
		}
		// Unbindable: a recursive bind of the host's root made meanwhile
		// (another sandbox's view) takes no copy of it, which would
		// keep its directory busy once it is unmounted here.
		err = unix.MountSetattr(m, "", unix.AT_EMPTY_PATH, &unix.MountAttr{Propagation: unix.MS_UNBINDABLE})
		if err == nil {
			err = unix.MoveMount(m, "", unix.AT_FDCWD, s.keep, unix.MOVE_MOUNT_F_EMPTY_PATH)
		}
		unix.Close(m)
		if err != nil {
			return false, fmt.Errorf("root layer: keep at %s: %w", s.keep, err)
		}
	}
	if s.from == "" {
		return false, nil
	}
	upper := fmt.Sprintf("/proc/self/fd/%d/upper", tmpfs)
	if err := copyTree(s.from, upper, true, s.shift); err != nil {
		return false, fmt.Errorf("root layer: restore from %s: %w", s.from, err)
	}
	return true, nil
}

// inUpper reports whether the upper directory on the tmpfs at layer has
// an entry at p (absolute, in the view): a file, a directory or a
// whiteout, which decides what the view shows there.
func inUpper(layer int, p string) bool {
	rel, err := layerRel(p)
	if err != nil {
		return false
	}
	var st unix.Stat_t
	return unix.Fstatat(layer, "upper/"+rel, &st, unix.AT_SYMLINK_NOFOLLOW) == nil
}

// SaveLayer copies what a sandbox wrote into its root layer — the upper
// directory of the layer's tmpfs, attached at keep (RootLayer.Keep) — to
// dst, which must not exist, keeping every entry's type, mode, owner,
// times and extended attributes (the overlay's whiteouts and opaque
// directories with them) and hard links: RootLayer.From makes the same
// layer of it. The sandbox must have stopped. Nothing it made is followed:
// a symbolic link is copied as a link. Sockets are left out (nothing can
// connect to a copy), and so is any device but a whiteout.
func SaveLayer(keep, dst string) error {
	if err := copyTree(filepath.Join(keep, "upper"), dst, false, false); err != nil {
		return fmt.Errorf("save root layer: %w", err)
	}
	return nil
}

// copyTree copies the directory src to dst (which must not exist, unless
// into, when dst is an empty directory that takes src's attributes); with
// shift, owners N become the sandbox's RootMappedID+N.
func copyTree(src, dst string, into, shift bool) error {
	c := treeCopy{links: make(map[[2]uint64]string), shift: shift}
	var st unix.Stat_t
	if err := unix.Lstat(src, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return fmt.Errorf("%s: not a directory", src)
	}
	if !into {
		if err := unix.Mkdir(dst, 0o700); err != nil {
			return err
		}
	}
	return c.dir(src, dst, &st)
}

// treeCopy is one copyTree: the hard links seen, by device and inode.
type treeCopy struct {
	links map[[2]uint64]string
	shift bool
}

// dir copies the entries of directory src (of attributes st) into dst,
// then gives dst src's attributes.
func (c *treeCopy) dir(src, dst string, st *unix.Stat_t) error {
	f, err := os.OpenFile(src, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	names, err := f.Readdirnames(-1)
	f.Close()
	if err != nil {
		return err
	}
	for _, name := range names {
		if err := c.entry(filepath.Join(src, name), filepath.Join(dst, name)); err != nil {
			return err
		}
	}
	return c.attributes(src, dst, st)
}

// entry copies one entry, src, to dst.
func (c *treeCopy) entry(src, dst string) error {
	var st unix.Stat_t
	if err := unix.Lstat(src, &st); err != nil {
		return err
	}
	typ := st.Mode & unix.S_IFMT
	if typ != unix.S_IFDIR && st.Nlink > 1 {
		key := [2]uint64{st.Dev, st.Ino}
		if first, ok := c.links[key]; ok {
			return unix.Linkat(unix.AT_FDCWD, first, unix.AT_FDCWD, dst, 0)
		}
		c.links[key] = dst
	}
	switch typ {
	case unix.S_IFDIR:
		if err := unix.Mkdir(dst, 0o700); err != nil {
			return err
		}
		return c.dir(src, dst, &st)
	case unix.S_IFREG:
		if err := copyFile(src, dst); err != nil {
			return err
		}
	default:
		made, _, err := copySpecial(src, dst, &st)
		if !made || err != nil {
			return err
		}
	}
	return c.attributes(src, dst, &st)
}

// copySpecial makes at dst the layer entry src (of attributes st) that is
// neither a directory nor a regular file: a symbolic link (its target
// returned), a fifo, or a whiteout (a character device 0:0). Nothing else
// is made — no device of the host's, no socket: made is false then.
func copySpecial(src, dst string, st *unix.Stat_t) (made bool, target string, err error) {
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFLNK:
		if target, err = os.Readlink(src); err != nil {
			return false, "", err
		}
		return true, target, unix.Symlink(target, dst)
	case unix.S_IFIFO:
		return true, "", unix.Mknod(dst, unix.S_IFIFO|0o600, 0)
	case unix.S_IFCHR:
		if st.Rdev != 0 {
			return false, "", nil // not a whiteout
		}
		return true, "", unix.Mknod(dst, unix.S_IFCHR|0o600, 0)
	}
	return false, "", nil // sockets, block devices
}

// copyFile copies the content of the regular file src to dst, a new file.
func copyFile(src, dst string) error {
	in, err := os.OpenFile(src, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// attributes gives dst (not followed) the owner (shifted with c.shift),
// mode, extended attributes and times of src, whose attributes are st.
func (c *treeCopy) attributes(src, dst string, st *unix.Stat_t) error {
	uid, gid := int(st.Uid), int(st.Gid)
	if c.shift {
		uid, gid = layerID(st.Uid), layerID(st.Gid)
	}
	if err := unix.Lchown(dst, uid, gid); err != nil {
		return err
	}
	link := st.Mode&unix.S_IFMT == unix.S_IFLNK
	if !link {
		// After the owner: chown clears the set-id bits.
		if err := unix.Fchmodat(unix.AT_FDCWD, dst, st.Mode&0o7777, 0); err != nil {
			return err
		}
	}
	if err := copyXattrs(src, dst, link); err != nil {
		return err
	}
	ts := []unix.Timespec{st.Atim, st.Mtim}
	return unix.UtimesNanoAt(unix.AT_FDCWD, dst, ts, unix.AT_SYMLINK_NOFOLLOW)
}

// copyXattrs copies the extended attributes of src to dst (neither
// followed); a link's that the filesystem refuses are left out.
func copyXattrs(src, dst string, link bool) error {
	size, err := unix.Llistxattr(src, nil)
	if err != nil || size == 0 {
		if errors.Is(err, unix.ENOTSUP) {
			return nil
		}
		return err
	}
	buf := make([]byte, size)
	if size, err = unix.Llistxattr(src, buf); err != nil {
		return err
	}
	for _, name := range strings.Split(strings.TrimRight(string(buf[:size]), "\x00"), "\x00") {
		if name == "" {
			continue
		}
		n, err := unix.Lgetxattr(src, name, nil)
		if err != nil {
			return fmt.Errorf("%s: %s: %w", src, name, err)
		}
		val := make([]byte, n)
		if n, err = unix.Lgetxattr(src, name, val); err != nil {
			return fmt.Errorf("%s: %s: %w", src, name, err)
		}
		if err := unix.Lsetxattr(dst, name, val[:n], 0); err != nil {
			if link && (errors.Is(err, unix.EPERM) || errors.Is(err, unix.ENOTSUP)) {
				continue
			}
			return fmt.Errorf("%s: %s: %w", dst, name, err)
		}
	}
	return nil
}
