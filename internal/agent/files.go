package agent

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// The agent's file operations. The agent runs in the sandbox's mount
// namespace, so the kernel resolves every path, symlinks included, in the
// sandbox's own view: nothing here can reach a host file (S5).

// tempPrefix starts the names of the temporary files of writes, which
// watches do not report.
const tempPrefix = ".hutch-write-"

// readFile streams the content of the regular file at p.
func (s *server) readFile(r *areq, p string) {
	if e := checkPath("read", p); e != nil {
		s.replyErr(r.id, e)
		return
	}
	// O_NONBLOCK: opening a FIFO must not hang; it is refused below.
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		s.replyErr(r.id, err)
		return
	}
	defer f.Close()
	fi, err := f.Stat()
	switch {
	case err != nil:
		s.replyErr(r.id, err)
		return
	case fi.IsDir():
		s.replyErr(r.id, errorf(CodeIsDir, "read %s: is a directory", p))
		return
	case !fi.Mode().IsRegular():
		s.replyErr(r.id, errorf(CodeInvalid, "read %s: not a regular file", p))
		return
	}
	n, err := s.pump(r, streamOut, f, false)
	if err != nil {
		s.replyErr(r.id, fmt.Errorf("read %s: %w", p, err))
		return
	}
	s.reply(r.id, response{Size: n}, nil)
}

// splitPath splits an absolute path into its directory and last element
// without cleaning it, so that ".." after a symlink keeps the kernel's
// meaning.
func splitPath(p string) (dir, base string) {
	i := strings.LastIndexByte(p, '/')
	dir, base = p[:i], p[i+1:]
	if dir == "" {
		dir = "/"
	}
	return dir, base
}

// writeFile writes the content of stream 0 to the file at p. The content
// goes first to a temporary file in the same directory (which watches do
// not report), so that a write that fails on the way (the client gone, a
// full disk) leaves the file at p as it was. Then the temporary file is
// synced and renamed over p, or with m.InPlace copied into the file at p
// (made if missing, its inode kept), so that a watch of p sees it written.
// Either way a symlink at p is replaced, not followed. Mode 0 keeps the
// mode of the file it replaces, or makes 0644. With m.XattrPrefix, the
// extended attributes of that prefix become m.Xattrs.
func (s *server) writeFile(r *areq, m *request) {
	defer r.in.drop()
	// The answer goes once the temporary file is gone: a client that got
	// it finds the directory as the write left it.
	size, err := s.writeFileTo(r, m)
	switch {
	case errors.Is(err, errNoAnswer):
	case err != nil:
		s.replyErr(r.id, err)
	default:
		s.reply(r.id, response{Size: size}, nil)
	}
}

// errNoAnswer is writeFileTo's error when the connection failed: there is
// no one to answer.
var errNoAnswer = errors.New("no answer")

// writeFileTo is writeFile's work: the size written, or the error to
// answer.
func (s *server) writeFileTo(r *areq, m *request) (int64, error) {
	p := string(m.Path)
	if e := checkPath("write", p); e != nil {
		return 0, e
	}
	if e := checkXattrs(p, m); e != nil {
		return 0, e
	}
	dir, base := splitPath(p)
	if base == "" || base == "." || base == ".." {
		return 0, errorf(CodeInvalid, "write %s: not a file name", p)
	}
	const permBits = fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky
	perm := fs.FileMode(m.Mode) & permBits
	old, err := os.Lstat(p)
	switch {
	case err == nil && old.IsDir():
		return 0, errorf(CodeIsDir, "write %s: is a directory", p)
	case err == nil && m.Mode == 0 && old.Mode().IsRegular():
		perm = old.Mode() & permBits
	case m.Mode == 0:
		perm = 0o644
	}
	f, err := os.CreateTemp(dir, tempPrefix+"*")
	if err != nil {
		return 0, pathError("write", p, err)
	}
	tmp := f.Name()
	renamed := false
	defer func() {
		f.Close()
		if !renamed {
			os.Remove(tmp)
		}
	}()
	var total int64
	for {
		b, eof, err := r.in.pop(r.ctx, nil)
		if err != nil {
			return 0, fmt.Errorf("write %s: %w", p, err)
		}
		if eof {
			break
		}
		if _, err := f.Write(b); err != nil {
			return 0, pathError("write", p, err)
		}
		total += int64(len(b))
		if err := s.send(creditFrame(streamIn, r.id, len(b))); err != nil {
			return 0, errNoAnswer
		}
	}
	if m.InPlace && (old == nil || old.Mode().IsRegular()) {
		if err := copyInPlace(f, p, perm, m); err != nil {
			return 0, err
		}
		return total, nil
	}
	if err := f.Chmod(perm); err != nil {
		return 0, pathError("chmod", p, err)
	}
	if m.XattrPrefix != "" {
		if err := setXattrs(int(f.Fd()), p, string(m.XattrPrefix), m.Xattrs); err != nil {
			return 0, err
		}
	}
	if err := f.Sync(); err != nil {
		return 0, pathError("sync", p, err)
	}
	if err := f.Close(); err != nil {
		return 0, pathError("write", p, err)
	}
	if err := os.Rename(tmp, p); err != nil {
		return 0, pathError("rename", p, err)
	}
	renamed = true
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync() // make the rename durable; not every filesystem can
		d.Close()
	}
	return total, nil
}

// copyInPlace copies the content of the temporary file f into the regular
// file at p, made with perm if missing, and sets its mode to perm and its
// extended attributes as m asks. The last element of p is not followed: a
// symlink put there meanwhile fails the write (ELOOP) rather than writing
// where it points. A file this made is removed again if the copy fails;
// one that existed keeps what was copied (its inode is written, so a
// failure there, such as a full disk, cannot be undone).
func copyInPlace(f *os.File, p string, perm fs.FileMode, m *request) error {
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return pathError("write", p, err)
	}
	const flags = os.O_WRONLY | syscall.O_NOFOLLOW | syscall.O_NONBLOCK
	made := true
	dst, err := os.OpenFile(p, flags|os.O_CREATE|os.O_EXCL, perm)
	if errors.Is(err, fs.ErrExist) {
		made = false
		dst, err = os.OpenFile(p, flags, 0)
	}
	if err != nil {
		return pathError("write", p, err)
	}
	ok := false
	defer func() {
		dst.Close()
		if !ok && made {
			os.Remove(p)
		}
	}()
	fi, err := dst.Stat()
	if err != nil {
		return pathError("write", p, err)
	}
	if !fi.Mode().IsRegular() {
		return errorf(CodeInvalid, "write %s: not a regular file", p)
	}
	if err := dst.Truncate(0); err != nil {
		return pathError("write", p, err)
	}
	if _, err := io.Copy(dst, f); err != nil {
		return pathError("write", p, err)
	}
	if fi.Mode()&(fs.ModePerm|fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky) != perm || made {
		if err := dst.Chmod(perm); err != nil {
			return pathError("chmod", p, err)
		}
	}
	if m.XattrPrefix != "" {
		if err := setXattrs(int(dst.Fd()), p, string(m.XattrPrefix), m.Xattrs); err != nil {
			return err
		}
	}
	if err := dst.Sync(); err != nil {
		return pathError("sync", p, err)
	}
	ok = true
	return nil
}

// checkPrefix checks the prefix of the extended attributes a request
// reads or sets: "" (none) or one of the user namespace, which the
// sandbox's own users may set too.
func checkPrefix(what, p, prefix string) *Error {
	if prefix != "" && (!strings.HasPrefix(prefix, "user.") || len(prefix) > 64 || strings.IndexByte(prefix, 0) >= 0) {
		return errorf(CodeInvalid, "%s %s: extended attribute prefix %.80q is not of the user namespace", what, p, prefix)
	}
	return nil
}

// checkXattrs checks the extended attributes a write request sets: a
// prefix in the user namespace, and within the bounds of a file info.
func checkXattrs(p string, m *request) *Error {
	if m.XattrPrefix == "" {
		if len(m.Xattrs) > 0 {
			return errorf(CodeInvalid, "write %s: extended attributes without a prefix", p)
		}
		return nil
	}
	if e := checkPrefix("write", p, string(m.XattrPrefix)); e != nil {
		return e
	}
	if len(m.Xattrs) > maxXattrs {
		return errorf(CodeTooLarge, "write %s: more than %d extended attributes", p, maxXattrs)
	}
	n := 0
	for k, v := range m.Xattrs {
		if k == "" || strings.IndexByte(k, 0) >= 0 || len(m.XattrPrefix)+len(k) > maxName {
			return errorf(CodeInvalid, "write %s: extended attribute name %.80q", p, k)
		}
		n += len(k) + len(v)
	}
	if n > maxXattrBytes {
		return errorf(CodeTooLarge, "write %s: extended attributes of more than %d bytes", p, maxXattrBytes)
	}
	return nil
}

// pathError reports err (of a system call on a helper path, such as the
// temporary file) as an error of op on p.
func pathError(op, p string, err error) *Error {
	var pe *fs.PathError
	var le *os.LinkError
	inner := err
	if errors.As(err, &pe) {
		inner = pe.Err
	} else if errors.As(err, &le) {
		inner = le.Err
	}
	return &Error{Code: codeOf(inner), Message: fmt.Sprintf("%s %s: %v", op, p, inner)}
}

// infoOf describes fi, found at p, with its extended attributes whose
// names start with prefix (none for "").
func infoOf(p string, fi fs.FileInfo, prefix string) *wireInfo {
	w := &wireInfo{
		Name:    wstr(fi.Name()),
		Size:    fi.Size(),
		Mode:    uint32(fi.Mode()),
		ModTime: fi.ModTime().UnixNano(),
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		w.UID, w.GID = st.Uid, st.Gid
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		if l, err := os.Readlink(p); err == nil {
			w.Link = wstr(l)
		}
	}
	if prefix != "" {
		w.Xattrs = readXattrs(p, prefix)
	}
	return w
}

// stat describes p itself, not what a symlink at p points to, with its
// extended attributes of prefix.
func stat(p, prefix string) (*wireInfo, error) {
	if e := checkPath("stat", p); e != nil {
		return nil, e
	}
	if e := checkPrefix("stat", p, prefix); e != nil {
		return nil, e
	}
	fi, err := os.Lstat(p)
	if err != nil {
		return nil, err
	}
	return infoOf(p, fi, prefix), nil
}

// list sends the entries of directory p in entries frames, unsorted, then
// its response; with their extended attributes of prefix.
func (s *server) list(r *areq, p, prefix string) {
	if e := checkPath("list", p); e != nil {
		s.replyErr(r.id, e)
		return
	}
	if e := checkPrefix("list", p, prefix); e != nil {
		s.replyErr(r.id, e)
		return
	}
	d, err := os.Open(p)
	if err != nil {
		s.replyErr(r.id, err)
		return
	}
	defer d.Close()
	if fi, err := d.Stat(); err != nil {
		s.replyErr(r.id, err)
		return
	} else if !fi.IsDir() {
		s.replyErr(r.id, errorf(CodeNotDir, "list %s: not a directory", p))
		return
	}
	b := newBatcher(s, r.id)
	for {
		if r.ctx.Err() != nil {
			return
		}
		ents, rerr := d.ReadDir(256)
		for _, e := range ents {
			fi, err := e.Info()
			if err != nil {
				continue // removed meanwhile
			}
			if err := b.add(infoOf(filepath.Join(p, e.Name()), fi, prefix)); err != nil {
				s.replyErr(r.id, within("list "+p, err))
				return
			}
		}
		if rerr != nil {
			if rerr == io.EOF {
				break
			}
			s.replyErr(r.id, rerr)
			return
		}
	}
	s.reply(r.id, response{}, b.flush())
}

func mkdir(p string, parents bool) error {
	if e := checkPath("mkdir", p); e != nil {
		return e
	}
	if parents {
		return os.MkdirAll(p, 0o755)
	}
	return os.Mkdir(p, 0o755)
}

func remove(p string, recursive bool) error {
	if e := checkPath("remove", p); e != nil {
		return e
	}
	if strings.Trim(p, "/") == "" {
		return errorf(CodeInvalid, "remove %s: refusing to remove the root", p)
	}
	if _, err := os.Lstat(p); err != nil {
		return err
	}
	if recursive {
		return os.RemoveAll(p)
	}
	return os.Remove(p)
}

func rename(from, to string) error {
	if e := checkPath("rename", from); e != nil {
		return e
	}
	if e := checkPath("rename", to); e != nil {
		return e
	}
	return os.Rename(from, to)
}

// chown sets the owner and group of p itself.
func chown(p string, uid, gid *uint32) error {
	if e := checkPath("chown", p); e != nil {
		return e
	}
	if uid == nil || gid == nil {
		return errorf(CodeInvalid, "chown %s: no uid or gid", p)
	}
	return os.Lchown(p, int(*uid), int(*gid))
}

// exportLayer streams the sandbox's root layer as ServeOptions.ExportLayer
// writes it.
func (s *server) exportLayer(r *areq) {
	if s.opts.ExportLayer == nil {
		s.replyErr(r.id, errorf(CodeInvalid, "export the root layer: this sandbox's agent cannot (its tier keeps its layer on the host)"))
		return
	}
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := s.opts.ExportLayer(pw)
		pw.CloseWithError(err)
		done <- err
	}()
	n, err := s.pump(r, streamOut, pr, false)
	pr.CloseWithError(errors.New("export ended")) // a writer still at work stops
	if werr := <-done; err == nil {
		err = werr
	}
	if err != nil {
		s.replyErr(r.id, fmt.Errorf("export the root layer: %w", err))
		return
	}
	s.reply(r.id, response{Size: n}, nil)
}
