package api

import (
	"errors"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"time"

	"github.com/hutch-sandbox/hutch/internal/agent"
	"github.com/hutch-sandbox/hutch/internal/daemon"
	"github.com/hutch-sandbox/hutch/internal/hostperm"
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

// endStream ends a response streamed through lw. A failure becomes an
// error response while no byte of the body went out, and aborts it
// otherwise.
func (h *handler) endStream(r *http.Request, lw *lazyWriter, err error) error {
	if err != nil {
		if lw.started {
			h.abort(r, err)
		}
		return err
	}
	lw.start()
	return nil
}

// pathQuery returns the request's query, refusing parameters not in
// allowed, and its validated parameter "path".
func pathQuery(r *http.Request, allowed ...string) (url.Values, string, error) {
	q, err := query(r, allowed...)
	if err != nil {
		return nil, "", err
	}
	p, err := pathParam(q)
	if err != nil {
		return nil, "", err
	}
	return q, p, nil
}

// fileTarget returns the validated "path" of a request that takes no other
// query parameter, and the agent of its sandbox.
func (h *handler) fileTarget(r *http.Request) (string, *agent.Client, error) {
	_, p, err := pathQuery(r, "path")
	if err != nil {
		return "", nil, err
	}
	ac, err := h.agentFor(r)
	if err != nil {
		return "", nil, err
	}
	return p, ac, nil
}

// checkUpload refuses an upload whose declared length exceeds the limit.
func (h *handler) checkUpload(r *http.Request) error {
	if r.ContentLength > h.cfg.MaxUpload {
		return errorf(errTooLarge, "body: %d bytes, more than the limit of %d", r.ContentLength, h.cfg.MaxUpload)
	}
	return nil
}

// uploadBody is the request's body, bounded by the upload limit.
func (h *handler) uploadBody(w http.ResponseWriter, r *http.Request) *source {
	return &source{r: http.MaxBytesReader(w, r.Body, h.cfg.MaxUpload)}
}

func (h *handler) readFile(w http.ResponseWriter, r *http.Request) error {
	p, ac, err := h.fileTarget(r)
	if err != nil {
		return err
	}
	lw := &lazyWriter{w: w, contentType: "application/octet-stream"}
	_, err = ac.ReadFile(r.Context(), p, lw)
	return h.endStream(r, lw, err)
}

func (h *handler) writeFile(w http.ResponseWriter, r *http.Request) error {
	q, p, err := pathQuery(r, "path", "mode")
	auditEntry(r).Paths = []string{p}
	if err != nil {
		return err
	}
	var mode os.FileMode
	if s, err := single(q, "mode"); err != nil {
		return err
	} else if s != "" {
		u, err := strconv.ParseUint(s, 8, 32)
		if err != nil || u > 0o7777 {
			return errorf(daemon.ErrInvalid, "mode %q: want octal permission bits such as 0644", s)
		}
		mode = hostperm.FileMode(uint32(u))
	}
	if err := h.checkUpload(r); err != nil {
		return err
	}
	ac, err := h.agentFor(r)
	if err != nil {
		return err
	}
	body := h.uploadBody(w, r)
	n, err := ac.WriteFile(r.Context(), p, body, mode)
	if err != nil {
		return body.blame(err)
	}
	writeJSON(w, http.StatusOK, WriteResult{Path: p, Size: n})
	return nil
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

func (h *handler) stat(w http.ResponseWriter, r *http.Request) error {
	p, ac, err := h.fileTarget(r)
	if err != nil {
		return err
	}
	fi, err := ac.Stat(r.Context(), p)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, fileInfo(fi))
	return nil
}

func (h *handler) listDir(w http.ResponseWriter, r *http.Request) error {
	p, ac, err := h.fileTarget(r)
	if err != nil {
		return err
	}
	fis, err := ac.List(r.Context(), p)
	if err != nil {
		return err
	}
	out := make([]FileInfo, 0, len(fis))
	for _, fi := range fis {
		out = append(out, fileInfo(fi))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (h *handler) mkdir(w http.ResponseWriter, r *http.Request) error {
	var b MkdirBody
	if err := decodeBody(w, r, &b, false); err != nil {
		return err
	}
	if err := checkPath("path", b.Path); err != nil {
		return err
	}
	ac, err := h.agentFor(r)
	if err != nil {
		return err
	}
	auditEntry(r).Paths = []string{b.Path}
	if err := ac.Mkdir(r.Context(), b.Path, b.Parents); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (h *handler) remove(w http.ResponseWriter, r *http.Request) error {
	q, p, err := pathQuery(r, "path", "recursive")
	auditEntry(r).Paths = []string{p}
	if err != nil {
		return err
	}
	recursive := false
	if s, err := single(q, "recursive"); err != nil {
		return err
	} else if s != "" {
		if recursive, err = strconv.ParseBool(s); err != nil {
			return errorf(daemon.ErrInvalid, "recursive %q: want true or false", s)
		}
	}
	ac, err := h.agentFor(r)
	if err != nil {
		return err
	}
	if err := ac.Remove(r.Context(), p, recursive); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (h *handler) rename(w http.ResponseWriter, r *http.Request) error {
	var b RenameBody
	if err := decodeBody(w, r, &b, false); err != nil {
		return err
	}
	if err := checkPath("from", b.From); err != nil {
		return err
	}
	auditEntry(r).Paths = []string{b.From, b.To}
	if err := checkPath("to", b.To); err != nil {
		return err
	}
	ac, err := h.agentFor(r)
	if err != nil {
		return err
	}
	if err := ac.Rename(r.Context(), b.From, b.To); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
