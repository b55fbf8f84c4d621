package client

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"time"
)

// FileInfo describes a file in a sandbox, as lstat sees it (a symlink is
// described itself).
type FileInfo struct {
	// Name is the last element of its path ("/" for the root).
	Name string
	// Size is its size in bytes.
	Size int64
	// Mode holds its type and permission bits.
	Mode os.FileMode
	// ModTime is its modification time.
	ModTime time.Time
	// IsDir reports whether it is a directory.
	IsDir bool
	// Link is a symlink's target, "" for anything else.
	Link string
}

// wireInfo is a FileInfo as the daemon sends it.
type wireInfo struct {
	Name    string    `json:"name"`
	Type    string    `json:"type"`
	Size    int64     `json:"size"`
	Mode    uint32    `json:"mode"`
	ModTime time.Time `json:"mod_time"`
	Link    string    `json:"link"`
}

func (w wireInfo) info() FileInfo {
	m := os.FileMode(w.Mode & 0o777)
	if w.Mode&0o4000 != 0 {
		m |= os.ModeSetuid
	}
	if w.Mode&0o2000 != 0 {
		m |= os.ModeSetgid
	}
	if w.Mode&0o1000 != 0 {
		m |= os.ModeSticky
	}
	switch w.Type {
	case "dir":
		m |= fs.ModeDir
	case "symlink":
		m |= fs.ModeSymlink
	case "other":
		m |= fs.ModeIrregular
	}
	return FileInfo{Name: w.Name, Size: w.Size, Mode: m, ModTime: w.ModTime, IsDir: w.Type == "dir", Link: w.Link}
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

func pathQuery(path string) url.Values { return url.Values{"path": {path}} }

// ReadFile copies the content of the regular file at path in the sandbox
// (absolute) to w and returns the number of bytes copied. A transfer the
// daemon broke off (the file changed, the sandbox ended) is an error.
func (c *Client) ReadFile(ctx context.Context, id, path string, w io.Writer) (int64, error) {
	return c.copyTo(ctx, sandboxPath(id, "files"), pathQuery(path), w, "read "+path)
}

// WriteFile replaces the file at path in the sandbox with the content of
// r, atomically (no reader sees a part of it); the parent directory must
// exist. mode's permission bits are set exactly; mode 0 keeps those of the
// file it replaces, or makes 0644. It returns the number of bytes written.
func (c *Client) WriteFile(ctx context.Context, id, path string, r io.Reader, mode os.FileMode) (int64, error) {
	q := pathQuery(path)
	if mode != 0 {
		q.Set("mode", fmt.Sprintf("%04o", unixMode(mode)))
	}
	req, err := c.newRequest(ctx, http.MethodPut, sandboxPath(id, "files"), q, r)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := c.send(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var out struct {
		Size int64 `json:"size"`
	}
	if err := decodeBody(resp, &out); err != nil {
		return 0, err
	}
	return out.Size, nil
}

// Stat describes the file at path in the sandbox.
func (c *Client) Stat(ctx context.Context, id, path string) (*FileInfo, error) {
	var w wireInfo
	if err := c.call(ctx, http.MethodGet, sandboxPath(id, "files", "stat"), pathQuery(path), nil, &w); err != nil {
		return nil, err
	}
	fi := w.info()
	return &fi, nil
}

// ListFiles describes the entries of the directory at path in the
// sandbox, sorted by name.
func (c *Client) ListFiles(ctx context.Context, id, path string) ([]FileInfo, error) {
	var ws []wireInfo
	if err := c.call(ctx, http.MethodGet, sandboxPath(id, "files", "list"), pathQuery(path), nil, &ws); err != nil {
		return nil, err
	}
	out := make([]FileInfo, len(ws))
	for i, w := range ws {
		out[i] = w.info()
	}
	return out, nil
}

// Mkdir makes the directory at path in the sandbox; with parents, also
// its missing parents, and an existing directory is no error.
func (c *Client) Mkdir(ctx context.Context, id, path string, parents bool) error {
	in := struct {
		Path    string `json:"path"`
		Parents bool   `json:"parents,omitempty"`
	}{path, parents}
	return c.call(ctx, http.MethodPost, sandboxPath(id, "files", "mkdir"), nil, in, nil)
}

// Remove removes the file or empty directory at path in the sandbox; with
// recursive, a directory and everything in it.
func (c *Client) Remove(ctx context.Context, id, path string, recursive bool) error {
	q := pathQuery(path)
	if recursive {
		q.Set("recursive", strconv.FormatBool(recursive))
	}
	return c.call(ctx, http.MethodDelete, sandboxPath(id, "files"), q, nil, nil)
}

// Rename renames from to to in the sandbox, replacing a file at to.
func (c *Client) Rename(ctx context.Context, id, from, to string) error {
	in := struct {
		From string `json:"from"`
		To   string `json:"to"`
	}{from, to}
	return c.call(ctx, http.MethodPost, sandboxPath(id, "files", "rename"), nil, in, nil)
}

// Download writes the directory dir of the sandbox to w as a tar stream:
// every entry below dir, named relative to it; symlinks are archived as
// symlinks, never followed. A transfer the daemon broke off is an error.
func (c *Client) Download(ctx context.Context, id, dir string, w io.Writer) error {
	_, err := c.copyTo(ctx, sandboxPath(id, "archive"), pathQuery(dir), w, "download "+dir)
	return err
}

// Upload extracts the tar stream r into the directory dir of the sandbox
// (made if missing). The daemon refuses (ErrInvalid) entries with absolute
// names or ".." elements, entries through a symlink the archive made and
// links that point outside dir; entries before a refused one stay written.
// It returns the number of entries extracted.
func (c *Client) Upload(ctx context.Context, id, dir string, r io.Reader) (int, error) {
	req, err := c.newRequest(ctx, http.MethodPut, sandboxPath(id, "archive"), pathQuery(dir), r)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/x-tar")
	resp, err := c.send(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var out struct {
		Entries int `json:"entries"`
	}
	if err := decodeBody(resp, &out); err != nil {
		return 0, err
	}
	return out.Entries, nil
}

// decodeBody decodes a JSON answer.
func decodeBody(resp *http.Response, out any) error {
	if err := jsonDecode(io.LimitReader(resp.Body, maxJSONResponse), out); err != nil {
		return fmt.Errorf("hutch client: %s %s: decode the answer: %w", resp.Request.Method, resp.Request.URL.Path, err)
	}
	return nil
}
