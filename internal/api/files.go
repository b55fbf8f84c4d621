package api

import (
	"errors"
	"io"
	"io/fs"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/hutch-sandbox/hutch/internal/agent"
	"github.com/hutch-sandbox/hutch/internal/daemon"
)

// FileInfo describes a file in the sandbox, as lstat sees it.
type FileInfo struct {
	// Name is the last element of its path ("/" for the root).
	Name string `json:"name"`
	// Type is "file", "dir", "symlink" or "other".
	Type string `json:"type"`
	// Size is its size in bytes.
	Size int64 `json:"size"`
	// Mode is its permission bits with setuid (04000), setgid (02000) and
	// sticky (01000), as chmod takes them.
	Mode uint32 `json:"mode"`
	// ModTime is its modification time.
	ModTime time.Time `json:"mod_time"`
	// Link is a symlink's target.
	Link string `json:"link,omitempty"`
}

// WriteResult is the answer of a file upload.
type WriteResult struct {
	// Path is the file written.
	Path string `json:"path"`
	// Size is the number of bytes written.
	Size int64 `json:"size"`
}

// MkdirBody is the body of POST .../files/mkdir.
type MkdirBody struct {
	// Path is the directory to make.
	Path string `json:"path"`
	// Parents also makes missing parents, and accepts an existing
	// directory.
	Parents bool `json:"parents,omitempty"`
}

// RenameBody is the body of POST .../files/rename.
type RenameBody struct {
	// From is the path renamed.
	From string `json:"from"`
	// To is its new path; a file there is replaced.
	To string `json:"to"`
}

func fileInfo(fi agent.FileInfo) FileInfo {
	out := FileInfo{Name: fi.Name, Size: fi.Size, Mode: unixMode(fi.Mode), ModTime: fi.ModTime, Link: fi.Link}
	switch {
	case fi.Mode.IsRegular():
		out.Type = "file"
	case fi.Mode.IsDir():
		out.Type = "dir"
	case fi.Mode&fs.ModeSymlink != 0:
		out.Type = "symlink"
	default:
		out.Type = "other"
	}
	return out
}

// unixMode returns m's permission bits as chmod takes them.
func unixMode(m os.FileMode) uint32 {
	u := uint32(m.Perm())
	if m&os.ModeSetuid != 0 {
		u |= 0o4000
	}
	if m&os.ModeSetgid != 0 {
		u |= 0o2000
	}
	if m&os.ModeSticky != 0 {
		u |= 0o1000
	}
	return u
}

// fileMode is unixMode's inverse.
func fileMode(u uint32) os.FileMode {
	m := os.FileMode(u & 0o777)
	if u&0o4000 != 0 {
		m |= os.ModeSetuid
	}
	if u&0o2000 != 0 {
		m |= os.ModeSetgid
	}
	if u&0o1000 != 0 {
		m |= os.ModeSticky
	}
	return m
}

// agentFor is the agent of the request's sandbox.
func (h *handler) agentFor(r *http.Request) (*agent.Client, error) {
	return h.m.Agent(r.Context(), tenantOf(r), r.PathValue("id"))
}

// lazyWriter sends the response's header with the first byte of its body.
type lazyWriter struct {
	w           http.ResponseWriter
	contentType string
	started     bool
}

func (l *lazyWriter) start() {
	if !l.started {
		l.started = true
		l.w.Header().Set("Content-Type", l.contentType)
		l.w.Header().Set("X-Content-Type-Options", "nosniff")
		l.w.WriteHeader(http.StatusOK)
	}
}

// Write sends the header, once, and b.
func (l *lazyWriter) Write(b []byte) (int, error) {
	l.start()
	return l.w.Write(b)
}

// abort ends a response whose body has started: the client sees the
// transfer break off, never a short body that looks whole.
func (h *handler) abort(r *http.Request, err error) {
	h.log.Warn("response aborted", "method", r.Method, "path", r.URL.Path, "err", err)
	panic(http.ErrAbortHandler)
}

func (h *handler) readFile(w http.ResponseWriter, r *http.Request) {
	q, err := query(r, "path")
	if err != nil {
		h.fail(w, r, err)
		return
	}
	p, err := pathParam(q)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	ac, err := h.agentFor(r)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	lw := &lazyWriter{w: w, contentType: "application/octet-stream"}
	if _, err := ac.ReadFile(r.Context(), p, lw); err != nil {
		if lw.started {
			h.abort(r, err)
		}
		h.fail(w, r, err)
		return
	}
	lw.start()
}

func (h *handler) writeFile(w http.ResponseWriter, r *http.Request) {
	q, err := query(r, "path", "mode")
	if err != nil {
		h.fail(w, r, err)
		return
	}
	p, err := pathParam(q)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	var mode os.FileMode
	if s, err := single(q, "mode"); err != nil {
		h.fail(w, r, err)
		return
	} else if s != "" {
		u, err := strconv.ParseUint(s, 8, 32)
		if err != nil || u > 0o7777 {
			h.fail(w, r, errorf(daemon.ErrInvalid, "mode %q: want octal permission bits such as 0644", s))
			return
		}
		mode = fileMode(uint32(u))
	}
	if r.ContentLength > h.cfg.MaxUpload {
		h.fail(w, r, errorf(errTooLarge, "body: %d bytes, more than the limit of %d", r.ContentLength, h.cfg.MaxUpload))
		return
	}
	ac, err := h.agentFor(r)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	body := &source{r: http.MaxBytesReader(w, r.Body, h.cfg.MaxUpload)}
	n, err := ac.WriteFile(r.Context(), p, body, mode)
	if err != nil {
		h.fail(w, r, body.blame(err))
		return
	}
	writeJSON(w, http.StatusOK, WriteResult{Path: p, Size: n})
}

// source is a request body that remembers its own failure, so that an
// error of the body is told from one of the sandbox.
type source struct {
	r   io.Reader
	err error
}

// Read reads the body, keeping its error.
func (s *source) Read(b []byte) (int, error) {
	n, err := s.r.Read(b)
	if err != nil && err != io.EOF {
		s.err = err
	}
	return n, err
}

// blame returns the body's own error in place of err, when it failed.
func (s *source) blame(err error) error {
	var mb *http.MaxBytesError
	switch {
	case s.err == nil:
		return err
	case errors.As(s.err, &mb):
		return errorf(errTooLarge, "body: more than the limit of %d bytes", mb.Limit)
	}
	return errorf(daemon.ErrInvalid, "body: %v", s.err)
}

func (h *handler) stat(w http.ResponseWriter, r *http.Request) {
	q, err := query(r, "path")
	if err != nil {
		h.fail(w, r, err)
		return
	}
	p, err := pathParam(q)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	ac, err := h.agentFor(r)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	fi, err := ac.Stat(r.Context(), p)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, fileInfo(fi))
}

func (h *handler) listDir(w http.ResponseWriter, r *http.Request) {
	q, err := query(r, "path")
	if err != nil {
		h.fail(w, r, err)
		return
	}
	p, err := pathParam(q)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	ac, err := h.agentFor(r)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	fis, err := ac.List(r.Context(), p)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	out := make([]FileInfo, 0, len(fis))
	for _, fi := range fis {
		out = append(out, fileInfo(fi))
	}
	writeJSON(w, http.StatusOK, out)
}

func (h *handler) mkdir(w http.ResponseWriter, r *http.Request) {
	if _, err := query(r); err != nil {
		h.fail(w, r, err)
		return
	}
	var b MkdirBody
	if err := decodeJSON(w, r, &b, false); err != nil {
		h.fail(w, r, err)
		return
	}
	if err := checkPath("path", b.Path); err != nil {
		h.fail(w, r, err)
		return
	}
	ac, err := h.agentFor(r)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	if err := ac.Mkdir(r.Context(), b.Path, b.Parents); err != nil {
		h.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (h *handler) remove(w http.ResponseWriter, r *http.Request) {
	q, err := query(r, "path", "recursive")
	if err != nil {
		h.fail(w, r, err)
		return
	}
	p, err := pathParam(q)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	recursive := false
	if s, err := single(q, "recursive"); err != nil {
		h.fail(w, r, err)
		return
	} else if s != "" {
		if recursive, err = strconv.ParseBool(s); err != nil {
			h.fail(w, r, errorf(daemon.ErrInvalid, "recursive %q: want true or false", s))
			return
		}
	}
	ac, err := h.agentFor(r)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	if err := ac.Remove(r.Context(), p, recursive); err != nil {
		h.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (h *handler) rename(w http.ResponseWriter, r *http.Request) {
	if _, err := query(r); err != nil {
		h.fail(w, r, err)
		return
	}
	var b RenameBody
	if err := decodeJSON(w, r, &b, false); err != nil {
		h.fail(w, r, err)
		return
	}
	if err := checkPath("from", b.From); err != nil {
		h.fail(w, r, err)
		return
	}
	if err := checkPath("to", b.To); err != nil {
		h.fail(w, r, err)
		return
	}
	ac, err := h.agentFor(r)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	if err := ac.Rename(r.Context(), b.From, b.To); err != nil {
		h.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
