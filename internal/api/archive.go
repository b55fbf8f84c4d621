package api

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"path"
	"strings"

	"github.com/hutch-sandbox/hutch/internal/agent"
	"github.com/hutch-sandbox/hutch/internal/daemon"
	"github.com/hutch-sandbox/hutch/internal/hostperm"
)

// maxArchiveEntries bounds the entries of an archive, both ways.
const maxArchiveEntries = 1_000_000

// ArchiveResult is the answer of an archive upload.
type ArchiveResult struct {
	// Entries is the number of entries extracted.
	Entries int `json:"entries"`
	// Bytes is the number of bytes of file content written.
	Bytes int64 `json:"bytes"`
}

func (h *handler) download(w http.ResponseWriter, r *http.Request) error {
	p, ac, err := h.fileTarget(r)
	if err != nil {
		return err
	}
	fi, err := ac.Stat(r.Context(), p)
	if err != nil {
		return err
	}
	if !fi.IsDir {
		return errorf(daemon.ErrInvalid, "path %q is not a directory; read a file with GET .../files", p)
	}
	lw := &lazyWriter{w: w, contentType: "application/x-tar"}
	tw := tar.NewWriter(lw)
	a := &archiver{ctx: r.Context(), ac: ac, root: p, tw: tw}
	err = a.dir("")
	if err == nil {
		err = tw.Close()
	}
	return h.endStream(r, lw, err)
}

// archiver writes a directory of the sandbox as a tar stream.
type archiver struct {
	ctx     context.Context
	ac      *agent.Client
	root    string
	tw      *tar.Writer
	entries int
}

// dir archives the directory rel (relative to the root) and what it holds.
func (a *archiver) dir(rel string) error {
	full := joinPath(a.root, rel)
	entries, err := a.ac.List(a.ctx, full)
	if err != nil {
		if rel != "" && errors.Is(err, fs.ErrNotExist) {
			return nil // it went away meanwhile
		}
		return err
	}
	for _, e := range entries {
		name := path.Join(rel, e.Name)
		if len(a.root)+1+len(name) > maxPath {
			return errorf(daemon.ErrInvalid, "%s: the path is longer than %d bytes", joinPath(a.root, name), maxPath)
		}
		if a.entries++; a.entries > maxArchiveEntries {
			return errorf(errTooLarge, "%s: more than %d entries", a.root, maxArchiveEntries)
		}
		hdr := &tar.Header{Name: name, Mode: int64(unixMode(e.Mode)), ModTime: e.ModTime}
		switch {
		case e.IsDir:
			hdr.Typeflag, hdr.Name = tar.TypeDir, name+"/"
			if err := a.tw.WriteHeader(hdr); err != nil {
				return err
			}
			if err := a.dir(name); err != nil {
				return err
			}
		case e.Mode&fs.ModeSymlink != 0:
			hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, e.Link
			if err := a.tw.WriteHeader(hdr); err != nil {
				return err
			}
		case e.Mode.IsRegular():
			hdr.Typeflag, hdr.Size = tar.TypeReg, e.Size
			if err := a.file(hdr, joinPath(a.root, name)); err != nil {
				return err
			}
		}
		// Devices, pipes and sockets are left out.
	}
	return nil
}

// file archives a regular file. Its header goes out with its first byte,
// so a file that went away before it could be read is left out; one that
// changed its size while it was read ends the archive with an error.
func (a *archiver) file(hdr *tar.Header, full string) error {
	ew := &entryWriter{tw: a.tw, hdr: hdr}
	n, err := a.ac.ReadFile(a.ctx, full, ew)
	if err != nil {
		if !ew.started && errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	if n != hdr.Size {
		return fmt.Errorf("%s: its size changed from %d to %d bytes while it was archived", full, hdr.Size, n)
	}
	return ew.start()
}

// entryWriter writes an entry's header before its first byte.
type entryWriter struct {
	tw      *tar.Writer
	hdr     *tar.Header
	started bool
}

func (e *entryWriter) start() error {
	if e.started {
		return nil
	}
	e.started = true
	return e.tw.WriteHeader(e.hdr)
}

// Write writes b into the entry, after its header.
func (e *entryWriter) Write(b []byte) (int, error) {
	if err := e.start(); err != nil {
		return 0, err
	}
	return e.tw.Write(b)
}

func (h *handler) upload(w http.ResponseWriter, r *http.Request) error {
	_, p, err := pathQuery(r, "path")
	auditEntry(r).Paths = []string{p}
	if err != nil {
		return err
	}
	if err := h.checkUpload(r); err != nil {
		return err
	}
	ac, err := h.agentFor(r)
	if err != nil {
		return err
	}
	body := h.uploadBody(w, r)
	x := &extractor{ctx: r.Context(), ac: ac, root: p, made: map[string]bool{"": true}, links: map[string]bool{}}
	if err := x.run(body); err != nil {
		return body.blame(err)
	}
	writeJSON(w, http.StatusOK, ArchiveResult{Entries: x.entries, Bytes: x.bytes})
	return nil
}

// extractor writes a tar stream into a directory of the sandbox, through
// its agent.
type extractor struct {
	ctx     context.Context
	ac      *agent.Client
	root    string
	made    map[string]bool // directories known to exist, relative to root
	links   map[string]bool // symlinks the archive made, relative to root
	entries int
	bytes   int64
}

func (x *extractor) run(r io.Reader) error {
	if err := x.ac.Mkdir(x.ctx, x.root, true); err != nil {
		return err
	}
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return errorf(daemon.ErrInvalid, "archive: %v", err)
		}
		if hdr.Typeflag == tar.TypeXGlobalHeader {
			continue
		}
		if x.entries++; x.entries > maxArchiveEntries {
			return errorf(errTooLarge, "archive: more than %d entries", maxArchiveEntries)
		}
		if err := x.entry(hdr, tr); err != nil {
			return err
		}
	}
}

// entry extracts one entry.
func (x *extractor) entry(hdr *tar.Header, content io.Reader) error {
	name, err := entryName(hdr.Name)
	if err != nil {
		return err
	}
	if name == "" {
		if hdr.Typeflag == tar.TypeDir {
			return nil // the root itself
		}
		return errorf(daemon.ErrInvalid, "archive: entry %q: not a directory, but names the target directory", hdr.Name)
	}
	if l := x.through(name); l != "" {
		return errorf(daemon.ErrInvalid, "archive: entry %q: passes through the symlink %q the archive made", hdr.Name, l)
	}
	if err := x.mkdirs(parentOf(name)); err != nil {
		return err
	}
	full := joinPath(x.root, name)
	switch hdr.Typeflag {
	case tar.TypeDir:
		if err := x.ac.Mkdir(x.ctx, full, true); err != nil {
			return err
		}
		x.made[name] = true
	case tar.TypeReg:
		n, err := x.ac.WriteFile(x.ctx, full, content, hostperm.FileMode(uint32(hdr.Mode)&0o777))
		x.bytes += n
		if err != nil {
			return err
		}
		delete(x.links, name)
	case tar.TypeSymlink:
		if err := checkLinkTarget(hdr.Name, name, hdr.Linkname); err != nil {
			return err
		}
		if err := x.link(true, hdr.Linkname, full); err != nil {
			return err
		}
		x.links[name] = true
	case tar.TypeLink:
		target, err := entryName(hdr.Linkname)
		if err != nil || target == "" {
			return errorf(daemon.ErrInvalid, "archive: entry %q: hard link to %q, outside the directory", hdr.Name, hdr.Linkname)
		}
		if l := x.through(target); l != "" {
			return errorf(daemon.ErrInvalid, "archive: entry %q: hard link through the symlink %q the archive made", hdr.Name, l)
		}
		if err := x.link(false, joinPath(x.root, target), full); err != nil {
			return err
		}
		delete(x.links, name)
	default:
		return errorf(daemon.ErrInvalid, "archive: entry %q: type %q is not supported (only files, directories and links)", hdr.Name, string(hdr.Typeflag))
	}
	return nil
}

// through returns the symlink made by the archive that name passes
// through, or "".
func (x *extractor) through(name string) string {
	for p := parentOf(name); p != ""; p = parentOf(p) {
		if x.links[p] {
			return p
		}
	}
	return ""
}

// mkdirs makes the directory rel and its parents, once.
func (x *extractor) mkdirs(rel string) error {
	if x.made[rel] {
		return nil
	}
	if err := x.ac.Mkdir(x.ctx, joinPath(x.root, rel), true); err != nil {
		return err
	}
	for p := rel; p != "" && !x.made[p]; p = parentOf(p) {
		x.made[p] = true
	}
	return nil
}

// link makes a symlink (or hard link) at full to target with the
// sandbox's own ln, as the agent has no such operation. Whatever is at
// full and is not a directory is replaced.
func (x *extractor) link(symbolic bool, target, full string) error {
	if fi, err := x.ac.Stat(x.ctx, full); err == nil {
		if fi.IsDir {
			return errorf(daemon.ErrConflict, "archive: %s: a directory is in the way of a link", full)
		}
		if err := x.ac.Remove(x.ctx, full, false); err != nil {
			return err
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	args := []string{"ln", "--", target, full}
	if symbolic {
		args = []string{"ln", "-s", "--", target, full}
	}
	return runTool(x.ctx, x.ac, args...)
}

// runTool runs a command in the sandbox to completion; a failure carries
// what it wrote to stderr. It runs as the agent's own root, which does the
// archive's other file operations, not as the image's user that commands
// run as by default.
func runTool(ctx context.Context, ac *agent.Client, args ...string) error {
	p, err := ac.Exec(ctx, agent.ExecRequest{Args: args, User: &agent.Credential{}, Own: true})
	if err != nil {
		return err
	}
	var stderr bytes.Buffer
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, p.Stdout)
		close(done)
	}()
	_, _ = io.Copy(&stderr, io.LimitReader(p.Stderr, 4096))
	_, _ = io.Copy(io.Discard, p.Stderr)
	<-done
	st, err := waitProcess(ctx, p)
	if err != nil {
		return err
	}
	if st.Code != 0 {
		return fmt.Errorf("%s in the sandbox: exit %d: %s", args[0], st.Code, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// entryName checks an archive entry's name and returns it cleaned and
// relative to the target directory ("" for the directory itself).
func entryName(name string) (string, error) {
	switch {
	case name == "":
		return "", errorf(daemon.ErrInvalid, "archive: an entry without a name")
	case strings.HasPrefix(name, "/"):
		return "", errorf(daemon.ErrInvalid, "archive: entry %q: absolute names are refused", name)
	case strings.IndexByte(name, 0) >= 0:
		return "", errorf(daemon.ErrInvalid, "archive: entry %q: the name contains NUL", name)
	case len(name) > maxPath:
		return "", errorf(daemon.ErrInvalid, "archive: entry %.64q…: the name is longer than %d bytes", name, maxPath)
	}
	var elems []string
	for e := range strings.SplitSeq(name, "/") {
		switch e {
		case "..":
			return "", errorf(daemon.ErrInvalid, "archive: entry %q: names with \"..\" are refused", name)
		case "", ".":
		default:
			elems = append(elems, e)
		}
	}
	return strings.Join(elems, "/"), nil
}

// checkLinkTarget refuses a symlink at name (cleaned; raw as in the
// archive) whose target leaves the target directory: an absolute target,
// or one that climbs above it. ".." may only lead the target, so that the
// climb is decided by the link's own place and not by links it passes
// through.
func checkLinkTarget(raw, name, target string) error {
	if target == "" || strings.HasPrefix(target, "/") || strings.IndexByte(target, 0) >= 0 {
		return errorf(daemon.ErrInvalid, "archive: entry %q: symlink to %q, outside the directory", raw, target)
	}
	depth := strings.Count(name, "/") // of the link's directory
	down := false
	for e := range strings.SplitSeq(target, "/") {
		switch e {
		case "", ".":
		case "..":
			if down {
				return errorf(daemon.ErrInvalid, "archive: entry %q: symlink to %q: \"..\" may only lead a link's target", raw, target)
			}
			if depth--; depth < 0 {
				return errorf(daemon.ErrInvalid, "archive: entry %q: symlink to %q, outside the directory", raw, target)
			}
		default:
			down = true
		}
	}
	return nil
}

// parentOf is the parent of a relative name, "" at the top.
func parentOf(name string) string {
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		return name[:i]
	}
	return ""
}

// joinPath joins an absolute directory and a relative name.
func joinPath(dir, rel string) string {
	switch {
	case rel == "":
		return dir
	case strings.HasSuffix(dir, "/"):
		return dir + rel
	}
	return dir + "/" + rel
}
