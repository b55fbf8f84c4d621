package sandbox

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/layer"
)

// opaqueXattr marks a directory of a layer opaque for the overlay that
// stacks it (a root's, without userxattr).
const opaqueXattr = "trusted.overlay.opaque"

// SnapshotLayer copies what a running sandbox wrote into its root layer —
// the upper directory of the layer's tmpfs, attached at keep
// (RootLayer.Keep) — to dst, which must not exist, as a layer to stack
// read-only under other sandboxes (RootLayer.Over, or Lowers): every
// entry's type, mode, times, extended attributes and hard links are kept,
// its owner moved back from the sandbox's ids (RootMappedID+N) to N, as an
// image's layer has them; whiteouts and opaque directories stay what they
// are, the overlay's other attributes (origin, impure …) are left out,
// and so are sockets and devices. The sandbox must be frozen (or stopped)
// while it runs, so that nothing changes under the copy; nothing it made
// is followed. Past limit bytes of file contents (0: none) the copy stops
// with ErrLayerTooLarge. dst is the caller's to remove on error.
//
// The digest is a SHA-256 of the tree in a canonical form: each entry in
// lexical path order with its type, mode, owner, modification time,
// extended attributes (sorted) and its contents' SHA-256, link target or
// the path it is a hard link of. It is computed in the same pass as the
// copy: no tar is written to be hashed.
func SnapshotLayer(keep, dst string, limit int64) (Snapshot, error) {
	src := filepath.Join(keep, "upper")
	var st unix.Stat_t
	if err := unix.Lstat(src, &st); err != nil {
		return Snapshot{}, fmt.Errorf("snapshot: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return Snapshot{}, fmt.Errorf("snapshot: %s: not a directory", src)
	}
	if err := unix.Mkdir(dst, 0o700); err != nil {
		return Snapshot{}, fmt.Errorf("snapshot: %w", err)
	}
	c := &snapCopy{links: map[[2]uint64]string{}, sum: sha256.New(), limit: limit}
	if err := c.dir(src, dst, ".", &st); err != nil {
		return Snapshot{}, fmt.Errorf("snapshot: %w", err)
	}
	return Snapshot{Digest: "sha256:" + hex.EncodeToString(c.sum.Sum(nil)), Size: c.size}, nil
}

// snapCopy is one SnapshotLayer.
type snapCopy struct {
	links map[[2]uint64]string // first path (relative) of each linked inode
	sum   hash.Hash
	size  int64
	limit int64
}

// field writes a length-prefixed field to the digest.
func (c *snapCopy) field(b []byte) {
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(b)))
	c.sum.Write(n[:])
	c.sum.Write(b)
}

// record writes rel's entry (of attributes st, with extra, its contents'
// digest, target or first link) to the digest.
func (c *snapCopy) record(rel string, st *unix.Stat_t, uid, gid int, xattrs [][2]string, extra string) {
	c.field([]byte(rel))
	c.field(fmt.Appendf(nil, "%o %d %d %d.%09d", st.Mode, uid, gid, st.Mtim.Sec, st.Mtim.Nsec))
	for _, x := range xattrs {
		c.field([]byte(x[0]))
		c.field([]byte(x[1]))
	}
	c.field([]byte(extra))
}

// dir copies directory src (rel in the layer, of attributes st) to dst,
// made already, its entries in lexical order.
func (c *snapCopy) dir(src, dst, rel string, st *unix.Stat_t) error {
	f, err := os.OpenFile(src, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	names, err := f.Readdirnames(-1)
	f.Close()
	if err != nil {
		return err
	}
	slices.Sort(names)
	if err := c.finish(src, dst, rel, st, ""); err != nil {
		return err
	}
	for _, name := range names {
		if err := c.entry(filepath.Join(src, name), filepath.Join(dst, name), filepath.Join(rel, name)); err != nil {
			return err
		}
	}
	// The directory's times again: its entries' creation changed them.
	return unix.UtimesNanoAt(unix.AT_FDCWD, dst, []unix.Timespec{st.Atim, st.Mtim}, unix.AT_SYMLINK_NOFOLLOW)
}

// entry copies one entry, src (rel in the layer), to dst.
func (c *snapCopy) entry(src, dst, rel string) error {
	var st unix.Stat_t
	if err := unix.Lstat(src, &st); err != nil {
		return err
	}
	typ := st.Mode & unix.S_IFMT
	if typ != unix.S_IFDIR && st.Nlink > 1 {
		key := [2]uint64{st.Dev, st.Ino}
		if first, ok := c.links[key]; ok {
			c.field([]byte(rel))
			c.field([]byte("link " + first))
			return unix.Link(filepath.Join(filepath.Dir(dst), relUp(rel), first), dst)
		}
		c.links[key] = rel
	}
	switch typ {
	case unix.S_IFDIR:
		if err := unix.Mkdir(dst, 0o700); err != nil {
			return err
		}
		return c.dir(src, dst, rel, &st)
	case unix.S_IFREG:
		sum, err := c.file(src, dst)
		if err != nil {
			return err
		}
		return c.finish(src, dst, rel, &st, sum)
	}
	made, target, err := copySpecial(src, dst, &st)
	if !made || err != nil {
		return err
	}
	return c.finish(src, dst, rel, &st, target)
}

// relUp is the path from rel's directory back up to the layer's top.
func relUp(rel string) string {
	n := strings.Count(rel, "/")
	if n == 0 {
		return "."
	}
	return strings.Repeat("../", n)
}

// file copies the regular file src to dst, a new file, and returns its
// contents' digest.
func (c *snapCopy) file(src, dst string) (string, error) {
	in, err := os.OpenFile(src, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return "", err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	var r io.Reader = in
	if c.limit > 0 {
		r = io.LimitReader(in, c.limit-c.size+1)
	}
	n, err := io.Copy(io.MultiWriter(out, h), r)
	c.size += n
	if err == nil && c.limit > 0 && c.size > c.limit {
		err = fmt.Errorf("more than %d bytes: %w", c.limit, ErrLayerTooLarge)
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return hex.EncodeToString(h.Sum(nil)), err
}

// finish gives dst the mode, owner (moved back from the sandbox's ids),
// extended attributes and times of src (rel, of attributes st), and
// records it in the digest with extra.
func (c *snapCopy) finish(src, dst, rel string, st *unix.Stat_t, extra string) error {
	uid, gid := unshift(st.Uid), unshift(st.Gid)
	if err := unix.Lchown(dst, uid, gid); err != nil {
		return err
	}
	link := st.Mode&unix.S_IFMT == unix.S_IFLNK
	if !link {
		if err := unix.Fchmodat(unix.AT_FDCWD, dst, st.Mode&0o7777, 0); err != nil {
			return err
		}
	}
	xattrs, err := layerXattrs(src)
	if err != nil {
		return err
	}
	for _, x := range xattrs {
		if err := unix.Lsetxattr(dst, x[0], []byte(x[1]), 0); err != nil && !link {
			return fmt.Errorf("%s: %s: %w", rel, x[0], err)
		}
	}
	c.record(rel, st, uid, gid, xattrs, extra)
	return unix.UtimesNanoAt(unix.AT_FDCWD, dst, []unix.Timespec{st.Atim, st.Mtim}, unix.AT_SYMLINK_NOFOLLOW)
}

// unshift is the id of a layer's file for id, a sandbox's id on the host
// (RootMappedID+N → N; anything else, which no sandbox makes, nobody).
func unshift(id uint32) int {
	if id >= RootMappedID && id < RootMappedID+layerIDs {
		return int(id) - RootMappedID
	}
	return 65534
}

// layerXattrs are the extended attributes of src (not followed) that a
// layer keeps, sorted by name: all but the overlay's own, of which only
// the opaque mark stays.
func layerXattrs(src string) ([][2]string, error) {
	size, err := unix.Llistxattr(src, nil)
	if err != nil || size == 0 {
		if errors.Is(err, unix.ENOTSUP) {
			return nil, nil
		}
		return nil, err
	}
	buf := make([]byte, size)
	if size, err = unix.Llistxattr(src, buf); err != nil {
		return nil, err
	}
	var out [][2]string
	for _, name := range strings.Split(strings.TrimRight(string(buf[:size]), "\x00"), "\x00") {
		if name == "" || (strings.HasPrefix(name, "trusted.overlay.") && name != opaqueXattr) {
			continue
		}
		n, err := unix.Lgetxattr(src, name, nil)
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", src, name, err)
		}
		val := make([]byte, n)
		if n, err = unix.Lgetxattr(src, name, val); err != nil {
			return nil, fmt.Errorf("%s: %s: %w", src, name, err)
		}
		out = append(out, [2]string{name, string(val[:n])})
	}
	slices.SortFunc(out, func(a, b [2]string) int { return strings.Compare(a[0], b[0]) })
	return out, nil
}

// SnapshotExported is SnapshotLayer for a sandbox whose root layer is not
// on the host (a microVM's guest keeps it in its own memory): r is the
// layer as an OCI layer's tar, which the sandbox's agent wrote
// (agent.Client.ExportLayer), its owners the sandbox's own ids. It is
// hostile input: it is unpacked (package layer: nothing outside tmp, no
// device but whiteouts, set-id bits and file capabilities stripped, at
// most limit bytes of contents and layer.DefaultLimits' entries) into
// tmp, a directory that must not exist and that the caller removes, and
// copied from there to dst as SnapshotLayer copies, with the same digest
// the same tree would have under another tier.
func SnapshotExported(r io.Reader, tmp, dst string, limit int64) (Snapshot, error) {
	if err := unix.Mkdir(tmp, 0o700); err != nil {
		return Snapshot{}, fmt.Errorf("snapshot: %w", err)
	}
	upper := filepath.Join(tmp, "upper")
	if err := unix.Mkdir(upper, 0o755); err != nil {
		return Snapshot{}, fmt.Errorf("snapshot: %w", err)
	}
	lim := layer.DefaultLimits
	if limit > 0 {
		// The tar's headers count too: a bound of its own for them.
		lim.Bytes = min(lim.Bytes, limit+1<<30)
	}
	// Owned as SnapshotLayer finds a sandbox's files on the host.
	shift := func(id int) int {
		if id < 0 || id >= layerIDs {
			id = 65534
		}
		return RootMappedID + id
	}
	_, err := layer.Unpack(r, upper, layer.Options{Limits: lim, OpaqueXattr: opaqueXattr,
		Owner: func(uid, gid int) (int, int) { return shift(uid), shift(gid) }})
	if errors.Is(err, layer.ErrTooLarge) {
		return Snapshot{}, fmt.Errorf("snapshot: %w (%w)", err, ErrLayerTooLarge)
	}
	if err != nil {
		return Snapshot{}, fmt.Errorf("snapshot: the sandbox's layer: %w", err)
	}
	// The layer's top, which no tar entry names: the sandbox's root's,
	// of no time, so that the same tree has the same digest.
	if err := unix.Lchown(upper, RootMappedID, RootMappedID); err != nil {
		return Snapshot{}, fmt.Errorf("snapshot: %w", err)
	}
	zero := []unix.Timespec{{}, {}}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, upper, zero, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return Snapshot{}, fmt.Errorf("snapshot: %w", err)
	}
	return SnapshotLayer(tmp, dst, limit)
}
