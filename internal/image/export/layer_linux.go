package export

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// WriteLayer writes the layer directory dir, in overlayfs's form, to w as
// an OCI layer's tar (uncompressed). See the package's documentation for
// the conversion and the order, which make the same tree the same bytes.
func WriteLayer(w io.Writer, dir string) error {
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return fmt.Errorf("layer %s: %w", dir, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return fmt.Errorf("layer %s: not a directory", dir)
	}
	lw := &layerWriter{tw: tar.NewWriter(w), links: map[[2]uint64]string{}, buf: make([]byte, 256<<10)}
	if err := lw.dir(dir, ""); err != nil {
		return fmt.Errorf("layer %s: %w", dir, err)
	}
	return lw.tw.Close()
}

// layerWriter is one WriteLayer.
type layerWriter struct {
	tw    *tar.Writer
	links map[[2]uint64]string // the first name of each inode with links
	buf   []byte
}

// dir writes the entries of directory abs, whose name in the layer is rel
// ("" for the top, else ending in "/"), in byte order of their names.
func (lw *layerWriter) dir(abs, rel string) error {
	f, err := os.OpenFile(abs, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	names, err := f.Readdirnames(-1)
	f.Close()
	if err != nil {
		return err
	}
	slices.Sort(names)
	for _, name := range names {
		if err := lw.entry(filepath.Join(abs, name), rel, name); err != nil {
			return err
		}
	}
	return nil
}

// entry writes the entry name of the directory abs's parent, whose name in
// the layer is rel.
func (lw *layerWriter) entry(abs, rel, name string) error {
	var st unix.Stat_t
	if err := unix.Lstat(abs, &st); err != nil {
		return err
	}
	typ := st.Mode & unix.S_IFMT
	if typ == unix.S_IFCHR && st.Rdev == 0 {
		// A whiteout: NAME deleted from the layers below.
		return lw.tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: rel + whiteoutPrefix + name,
			ModTime: mtime(&st)})
	}
	if strings.HasPrefix(name, whiteoutPrefix) {
		return fmt.Errorf("%s%s: %w", rel, name, ErrWhiteoutName)
	}
	hdr := &tar.Header{Name: rel + name, Mode: int64(st.Mode & 0o7777), Uid: int(st.Uid), Gid: int(st.Gid), ModTime: mtime(&st)}
	xattrs, opaque, err := layerXattrs(abs)
	if err != nil {
		return err
	}
	if len(xattrs) > 0 {
		hdr.PAXRecords = map[string]string{}
		for k, v := range xattrs {
			hdr.PAXRecords["SCHILY.xattr."+k] = v
		}
	}
	if typ != unix.S_IFDIR && st.Nlink > 1 {
		key := [2]uint64{st.Dev, st.Ino}
		if first, ok := lw.links[key]; ok {
			hdr.Typeflag, hdr.Linkname, hdr.PAXRecords = tar.TypeLink, first, nil
			return lw.tw.WriteHeader(hdr)
		}
		lw.links[key] = hdr.Name
	}
	switch typ {
	case unix.S_IFDIR:
		hdr.Typeflag, hdr.Name = tar.TypeDir, hdr.Name+"/"
		if err := lw.tw.WriteHeader(hdr); err != nil {
			return err
		}
		if opaque {
			// Everything below it in the layers below is hidden.
			if err := lw.tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: hdr.Name + opaqueName, ModTime: hdr.ModTime}); err != nil {
				return err
			}
		}
		return lw.dir(abs, hdr.Name)
	case unix.S_IFREG:
		hdr.Typeflag, hdr.Size = tar.TypeReg, st.Size
		return lw.file(abs, hdr)
	case unix.S_IFLNK:
		target, err := os.Readlink(abs)
		if err != nil {
			return err
		}
		hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, target
		return lw.tw.WriteHeader(hdr)
	case unix.S_IFIFO:
		hdr.Typeflag = tar.TypeFifo
		return lw.tw.WriteHeader(hdr)
	}
	// Device nodes and sockets: no layer carries them.
	delete(lw.links, [2]uint64{st.Dev, st.Ino})
	return nil
}

// file writes the regular file abs, whose header is hdr (its size as
// Lstat found it), and exactly its size.
func (lw *layerWriter) file(abs string, hdr *tar.Header) error {
	f, err := os.OpenFile(abs, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := lw.tw.WriteHeader(hdr); err != nil {
		return err
	}
	n, err := io.CopyBuffer(lw.tw, io.LimitReader(f, hdr.Size), lw.buf)
	if err == nil && n != hdr.Size {
		err = fmt.Errorf("%s: %d bytes, not the %d it had: %w", hdr.Name, n, hdr.Size, ErrChanged)
	}
	return err
}

// mtime is st's modification time, to the second, as layers keep it.
func mtime(st *unix.Stat_t) time.Time {
	return time.Unix(st.Mtim.Sec, 0)
}

// layerXattrs are the extended attributes of abs (not followed) that an
// OCI layer carries: all but overlayfs's own; opaque reports whether
// overlayfs's mark an opaque directory.
func layerXattrs(abs string) (map[string]string, bool, error) {
	size, err := unix.Llistxattr(abs, nil)
	if err != nil || size == 0 {
		if errors.Is(err, unix.ENOTSUP) {
			return nil, false, nil
		}
		return nil, false, err
	}
	buf := make([]byte, size)
	if size, err = unix.Llistxattr(abs, buf); err != nil {
		return nil, false, err
	}
	var out map[string]string
	opaque := false
	for _, name := range strings.Split(strings.TrimRight(string(buf[:size]), "\x00"), "\x00") {
		if name == "" {
			continue
		}
		val, err := getxattr(abs, name)
		if err != nil {
			return nil, false, err
		}
		if strings.HasPrefix(name, "trusted.overlay.") || strings.HasPrefix(name, "user.overlay.") {
			opaque = opaque || strings.HasSuffix(name, ".overlay.opaque") && val == "y"
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		out[name] = val
	}
	return out, opaque, nil
}

// getxattr is the value of abs's (not followed) extended attribute name.
func getxattr(abs, name string) (string, error) {
	for {
		n, err := unix.Lgetxattr(abs, name, nil)
		if err != nil {
			return "", fmt.Errorf("%s: %w", name, err)
		}
		val := make([]byte, n)
		m, err := unix.Lgetxattr(abs, name, val)
		if err == unix.ERANGE {
			continue // it grew meanwhile
		}
		if err != nil {
			return "", fmt.Errorf("%s: %w", name, err)
		}
		return string(val[:m]), nil
	}
}
