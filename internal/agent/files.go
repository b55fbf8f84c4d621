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

// writeFile replaces the file at p atomically with the content of stream 0:
// a temporary file in the same directory, written, synced and renamed over
// p. A symlink at p is replaced, not followed. Mode 0 keeps the mode of the
// file it replaces, or makes 0644.
func (s *server) writeFile(r *areq, p string, mode uint32) {
	defer r.in.drop()
	if e := checkPath("write", p); e != nil {
		s.replyErr(r.id, e)
		return
	}
	dir, base := splitPath(p)
	if base == "" || base == "." || base == ".." {
		s.replyErr(r.id, errorf(CodeInvalid, "write %s: not a file name", p))
		return
	}
	perm := fs.FileMode(mode) & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)
	old, err := os.Lstat(p)
	switch {
	case err == nil && old.IsDir():
		s.replyErr(r.id, errorf(CodeIsDir, "write %s: is a directory", p))
		return
	case err == nil && mode == 0 && old.Mode().IsRegular():
		perm = old.Mode() & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)
	case mode == 0:
		perm = 0o644
	}
	f, err := os.CreateTemp(dir, tempPrefix+"*")
	if err != nil {
		s.replyErr(r.id, pathError("write", p, err))
		return
	}
	tmp := f.Name()
	done := false
	defer func() {
		if !done {
			f.Close()
			os.Remove(tmp)
		}
	}()
	var total int64
	for {
		b, eof, err := r.in.pop(r.ctx, nil)
		if err != nil {
			s.replyErr(r.id, fmt.Errorf("write %s: %w", p, err))
			return
		}
		if eof {
			break
		}
		if _, err := f.Write(b); err != nil {
			s.replyErr(r.id, pathError("write", p, err))
			return
		}
		total += int64(len(b))
		if err := s.send(creditFrame(streamIn, r.id, len(b))); err != nil {
			return
		}
	}
	if err := f.Chmod(perm); err != nil {
		s.replyErr(r.id, pathError("chmod", p, err))
		return
	}
	if err := f.Sync(); err != nil {
		s.replyErr(r.id, pathError("sync", p, err))
		return
	}
	if err := f.Close(); err != nil {
		s.replyErr(r.id, pathError("write", p, err))
		return
	}
	if err := os.Rename(tmp, p); err != nil {
		s.replyErr(r.id, pathError("rename", p, err))
		return
	}
	done = true
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync() // make the rename durable; not every filesystem can
		d.Close()
	}
	s.reply(r.id, response{Size: total}, nil)
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

// infoOf describes fi, found at p.
func infoOf(p string, fi fs.FileInfo) *wireInfo {
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
	return w
}

// stat describes p itself, not what a symlink at p points to.
func stat(p string) (*wireInfo, error) {
	if e := checkPath("stat", p); e != nil {
		return nil, e
	}
	fi, err := os.Lstat(p)
	if err != nil {
		return nil, err
	}
	return infoOf(p, fi), nil
}

// list sends the entries of directory p in entries frames, unsorted, then
// its response.
func (s *server) list(r *areq, p string) {
	if e := checkPath("list", p); e != nil {
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
			if err := b.add(infoOf(filepath.Join(p, e.Name()), fi)); err != nil {
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
