package envd

import (
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/hutch-sandbox/hutch/internal/agent"
)

const (
	// maxUpload bounds the body of one upload.
	maxUpload = 4 << 30
	// maxUploadFiles bounds the files of one multipart upload.
	maxUploadFiles = 1000
)

// writeHTTPError answers a /files or /health request with the JSON error
// envd documents: {"code": status, "message": ...}.
func writeHTTPError(w http.ResponseWriter, status int, msg string) {
	b, _ := json.Marshal(struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}{status, msg})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

func writeFilesError(w http.ResponseWriter, err error) {
	e := asError(err)
	writeHTTPError(w, httpStatus(e.Code), e.Message)
}

// uploaded is an entry of the answer to an upload.
type uploaded struct {
	Path     string            `json:"path"`
	Name     string            `json:"name"`
	Type     string            `json:"type"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

const (
	// metaPrefix starts the names of the extended attributes that hold
	// a file's metadata, as in envd: metadata "k" is user.e2b.k.
	metaPrefix = "user.e2b."
	// metaHeader starts the names of the headers that carry the metadata
	// of an upload.
	metaHeader = "X-Metadata-"
	// maxMetaKeys bounds the metadata of one upload, and maxMetaBytes
	// its size (keys and values), as envd's; a key is at most 255 bytes
	// with metaPrefix (an extended attribute's name).
	maxMetaKeys  = 64
	maxMetaBytes = 4096
	maxMetaKey   = 255 - len(metaPrefix)
)

// uploadMetadata returns the metadata of an upload: its X-Metadata-KEY
// headers, keys in lower case (HTTP names are not case-sensitive), nil if
// none. Keys must be HTTP tokens, values printable ASCII, each given once.
func uploadMetadata(hdr http.Header) (map[string]string, error) {
	var meta map[string]string
	n := 0
	for name, values := range hdr {
		if len(name) < len(metaHeader) || !strings.EqualFold(name[:len(metaHeader)], metaHeader) {
			continue
		}
		key := strings.ToLower(name[len(metaHeader):])
		switch {
		case key == "":
			return nil, errorf(codeInvalidArgument, "invalid metadata: empty key")
		case len(key) > maxMetaKey:
			return nil, errorf(codeInvalidArgument, "invalid metadata: key %.40q… of %d bytes exceeds %d", key, len(key), maxMetaKey)
		case strings.ContainsFunc(key, func(r rune) bool { return !isToken(r) }):
			return nil, errorf(codeInvalidArgument, "invalid metadata: key %.80q is not an HTTP token", key)
		case len(values) != 1:
			return nil, errorf(codeInvalidArgument, "invalid metadata: key %.80q given %d times", key, len(values))
		case strings.ContainsFunc(values[0], func(r rune) bool { return r < 0x20 || r > 0x7e }):
			return nil, errorf(codeInvalidArgument, "invalid metadata: the value of %.80q is not printable ASCII", key)
		}
		if meta == nil {
			meta = make(map[string]string)
		}
		if _, dup := meta[key]; dup {
			return nil, errorf(codeInvalidArgument, "invalid metadata: key %.80q given twice", key)
		}
		meta[key] = values[0]
		if n += len(key) + len(values[0]); n > maxMetaBytes {
			return nil, errorf(codeInvalidArgument, "invalid metadata: more than %d bytes of keys and values", maxMetaBytes)
		}
		if len(meta) > maxMetaKeys {
			return nil, errorf(codeInvalidArgument, "invalid metadata: more than %d keys", maxMetaKeys)
		}
	}
	return meta, nil
}

// isToken reports whether r may be in an HTTP token (RFC 9110).
func isToken(r rune) bool {
	return r < 0x7f && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("!#$%&'*+-.^_`|~", r))
}

func (h *handler) files(w http.ResponseWriter, r *http.Request) {
	b, sb, err := h.boxOf(r)
	if err != nil {
		writeFilesError(w, err)
		return
	}
	q := r.URL.Query()
	name := q.Get("username")
	if name == "" && !sb.Signed {
		// The SDKs name the user of /files in the query; take that of
		// the Authorization header otherwise.
		u, err := h.requestUser(r.Context(), b, r.Header)
		if err != nil {
			writeFilesError(w, err)
			return
		}
		name = u.name
	}
	u, err := h.lookupUser(r.Context(), b, name)
	if err != nil {
		writeFilesError(w, err)
		return
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		h.download(w, r, b, u, q.Get("path"))
	case http.MethodPost:
		h.upload(w, r, b, u, q.Get("path"), sb.Signed)
	default:
		w.Header().Set("Allow", "GET, HEAD, POST")
		writeHTTPError(w, http.StatusMethodNotAllowed, fmt.Sprintf("method %s not allowed on /files", r.Method))
	}
}

func (h *handler) download(w http.ResponseWriter, r *http.Request, b *box, u user, p string) {
	p, err := resolvePath(u, p)
	if err != nil {
		writeFilesError(w, err)
		return
	}
	ctx := r.Context()
	fi, err := b.agent.Stat(ctx, p)
	// A symlink is read through: the agent opens what it points to.
	if err == nil && fi.Mode&fs.ModeSymlink != 0 {
		fi.IsDir = false
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		writeHTTPError(w, http.StatusNotFound, fmt.Sprintf("path %s does not exist", p))
		return
	case err != nil:
		writeFilesError(w, fmt.Errorf("read %s: %w", p, err))
		return
	case fi.IsDir:
		writeHTTPError(w, http.StatusBadRequest, fmt.Sprintf("path %s is a directory", p))
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", mime.FormatMediaType("inline", map[string]string{"filename": path.Base(p)}))
	if r.Method == http.MethodHead {
		return
	}
	var out io.Writer = w
	if acceptsGzip(r) {
		w.Header().Set("Content-Encoding", "gzip")
		w.Header().Add("Vary", "Accept-Encoding")
		zw := gzip.NewWriter(w)
		defer zw.Close()
		out = zw
	}
	sw := &startWriter{w: out}
	if _, err := b.agent.ReadFile(ctx, p, sw); err != nil {
		if !sw.started {
			w.Header().Del("Content-Encoding")
			w.Header().Del("Content-Disposition")
			writeFilesError(w, fmt.Errorf("read %s: %w", p, err))
			return
		}
		// The status is out: cut the response short.
		h.log.Warn("envd download failed", "sandbox", b.id, "path", p, "err", err)
		panic(http.ErrAbortHandler)
	}
}

// startWriter records whether anything was written.
type startWriter struct {
	w       io.Writer
	started bool
}

func (s *startWriter) Write(b []byte) (int, error) {
	s.started = true
	return s.w.Write(b)
}

func acceptsGzip(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		enc, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		if strings.EqualFold(strings.TrimSpace(enc), "gzip") && !strings.Contains(strings.ReplaceAll(params, " ", ""), "q=0") {
			return true
		}
	}
	return false
}

func (h *handler) upload(w http.ResponseWriter, r *http.Request, b *box, u user, qpath string, signed bool) {
	r.Body = http.MaxBytesReader(w, r.Body, maxUpload)
	meta, err := uploadMetadata(r.Header)
	if err != nil {
		writeFilesError(w, err)
		return
	}
	var out []uploaded
	// Every file written, or that failed to be, is recorded in the audit
	// log once the answer went out; an upload that failed before any
	// file, as one write_file that failed.
	var events []Event
	defer func() {
		if b.audit == nil {
			return
		}
		if len(events) == 0 && err != nil {
			ev := Event{Time: time.Now(), Action: "write_file", Error: uploadCode(err)}
			if qpath != "" {
				ev.Paths = []string{qpath}
			}
			events = append(events, ev)
		}
		_ = http.NewResponseController(w).Flush()
		for _, ev := range events {
			b.record(ev)
		}
	}()
	write := func(p string, body io.Reader) error {
		abs, err := resolvePath(u, p)
		if err != nil {
			return err
		}
		if abs == "/" {
			return errorf(codeInvalidArgument, "write %s: not a file path", p)
		}
		ev := Event{Time: time.Now(), Action: "write_file", Paths: []string{abs}}
		err = h.writeFile(r, b, u, abs, body, meta)
		if err != nil {
			ev.Error = uploadCode(err)
		}
		events = append(events, ev)
		if err != nil {
			return err
		}
		// The metadata as stored: what the file's extended
		// attributes hold now.
		var stored map[string]string
		if fi, err := b.agent.StatXattrs(r.Context(), abs, metaPrefix); err == nil {
			stored = fi.Xattrs
		}
		out = append(out, uploaded{Path: abs, Name: path.Base(abs), Type: "file", Metadata: stored})
		return nil
	}
	switch mt := mediaType(r); mt {
	case "multipart/form-data":
		err = h.uploadMultipart(r, qpath, signed, write)
	case "application/octet-stream", "":
		if qpath == "" {
			err = errorf(codeInvalidArgument, "upload: no path")
			break
		}
		var body io.Reader = r.Body
		switch enc := strings.ToLower(r.Header.Get("Content-Encoding")); enc {
		case "", "identity":
		case "gzip":
			zr, zerr := gzip.NewReader(r.Body)
			if zerr != nil {
				err = errorf(codeInvalidArgument, "upload: gzip body: %v", zerr)
				break
			}
			defer zr.Close()
			body = zr
		default:
			err = errorf(codeInvalidArgument, "upload: content encoding %.40q is not supported", enc)
		}
		if err == nil {
			err = write(qpath, body)
		}
	default:
		err = errorf(codeInvalidArgument, "upload: content type %.60q: use multipart/form-data or application/octet-stream", mt)
	}
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			err = errorf(codeInvalidArgument, "upload exceeds the limit of %d bytes", maxUpload)
		}
		writeFilesError(w, err)
		return
	}
	if out == nil {
		writeHTTPError(w, http.StatusBadRequest, "upload: no file")
		return
	}
	enc, _ := json.Marshal(out)
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(enc)
}

// uploadCode is the Connect code of an upload's error.
func uploadCode(err error) string {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return codeResourceExhausted
	}
	return asError(err).Code
}

// formFileName undoes the escapes HTML's multipart form encoding (and
// httpx, the Python SDK's client) applies to a file name: '"', CR and LF
// as %22, %0D and %0A. Nothing else is decoded, so a name with a literal
// "%" stays as it is.
var formFileName = strings.NewReplacer("%22", `"`, "%0D", "\r", "%0A", "\n", "%0d", "\r", "%0a", "\n")

// uploadMultipart writes the "file" parts of a multipart body: the first
// to qpath if set, any other to its file name (a path). A signed URL with
// a path writes that one file only: its signature is for that path.
func (h *handler) uploadMultipart(r *http.Request, qpath string, signed bool, write func(string, io.Reader) error) error {
	mr, err := r.MultipartReader()
	if err != nil {
		return errorf(codeInvalidArgument, "upload: %v", err)
	}
	n := 0
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				return err
			}
			return errorf(codeInvalidArgument, "upload: multipart body: %v", err)
		}
		if part.FormName() != "file" {
			part.Close()
			continue
		}
		if n++; n > maxUploadFiles {
			return errorf(codeInvalidArgument, "upload: more than %d files", maxUploadFiles)
		}
		if signed && qpath != "" && n > 1 {
			return errorf(codeInvalidArgument, "upload: a signed URL for %.200s writes that one file; this upload has more", qpath)
		}
		// The file name is a path: FileName would keep its last element.
		_, params, _ := mime.ParseMediaType(part.Header.Get("Content-Disposition"))
		p := formFileName.Replace(params["filename"])
		if qpath != "" && n == 1 {
			p = qpath
		}
		if p == "" {
			return errorf(codeInvalidArgument, "upload: file %d has no path", n)
		}
		err = write(p, part)
		part.Close()
		if err != nil {
			return err
		}
	}
}

// writeFile writes the file at p for u: its missing parents made, the
// file owned by u, its metadata (user.e2b.* extended attributes) replaced
// by meta. As envd's, it writes into the file in place, so that a watch
// sees it written (see agent.WriteOptions.InPlace: the content is staged,
// so a failed upload leaves the file as it was).
func (h *handler) writeFile(r *http.Request, b *box, u user, p string, body io.Reader, meta map[string]string) error {
	ctx := r.Context()
	if err := h.makeDirs(ctx, b, u, path.Dir(p)); err != nil {
		return err
	}
	if _, err := b.agent.WriteFileWith(ctx, p, body, agent.WriteOptions{InPlace: true, XattrPrefix: metaPrefix, Xattrs: meta}); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return err
		}
		return fmt.Errorf("write %s: %w", p, err)
	}
	return h.own(ctx, b, u, p)
}

// mediaType returns the media type of the request's Content-Type, "" when
// it has none or a malformed one.
func mediaType(r *http.Request) string {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil {
		return ""
	}
	return strings.ToLower(mt)
}
