package e2b

import (
	"encoding/json"
	"fmt"
	"net/http"
	"path"
	"strconv"
	"strings"

	"github.com/hutch-sandbox/hutch/internal/daemon"
	"github.com/hutch-sandbox/hutch/internal/volume"
)

// maxVolumeMounts is the most volumes one create may mount.
const maxVolumeMounts = 16

// WithVolumes gives the handler the daemon's volumes (hutch serve's
// DIR/volumes): E2B's volume API (/volumes), its content API
// (/volumecontent, authenticated by each volume's token) and creates'
// volumeMounts. Without it they answer 501 (volumeMounts 400).
func WithVolumes(s *volume.Store) Option {
	return func(h *Handler) { h.vols = s }
}

// volumeJSON is E2B's Volume, and VolumeAndToken with Token.
type volumeJSON struct {
	VolumeID string `json:"volumeID"`
	Name     string `json:"name"`
	Token    string `json:"token,omitempty"`
}

// volumeMountJSON is E2B's SandboxVolumeMount.
type volumeMountJSON struct {
	Name string `json:"name"`
	Path string `json:"path"`
}

func (h *Handler) volumeStore() (*volume.Store, error) {
	if h.vols == nil {
		return nil, errorf(errNoRoute, "E2B's volumes are not supported by this handler (no volume store)")
	}
	return h.vols, nil
}

// createVolume is POST /volumes {name}: 201 with the volume and its
// token; a name the tenant has is 409.
func (h *Handler) createVolume(w http.ResponseWriter, r *http.Request, tenant string) error {
	st, err := h.volumeStore()
	if err != nil {
		return err
	}
	var body struct {
		Name string `json:"name"`
	}
	if err := decode(w, r, &body, false); err != nil {
		return err
	}
	auditEntry(r).Subject = body.Name
	v, err := st.Create(tenant, body.Name)
	if err != nil {
		return err
	}
	auditEntry(r).Subject = v.ID
	writeJSON(w, http.StatusCreated, volumeJSON{VolumeID: v.ID, Name: v.Name, Token: st.Token(v.ID)})
	return nil
}

// listVolumes is GET /volumes: the tenant's volumes, newest first.
func (h *Handler) listVolumes(w http.ResponseWriter, r *http.Request, tenant string) error {
	st, err := h.volumeStore()
	if err != nil {
		return err
	}
	out := []volumeJSON{}
	for _, v := range st.List(tenant) {
		out = append(out, volumeJSON{VolumeID: v.ID, Name: v.Name})
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// getVolume is GET /volumes/{volumeID} (its id or name): the volume and
// its token.
func (h *Handler) getVolume(w http.ResponseWriter, r *http.Request, tenant string) error {
	st, err := h.volumeStore()
	if err != nil {
		return err
	}
	v, err := st.Get(tenant, r.PathValue("volumeID"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, volumeJSON{VolumeID: v.ID, Name: v.Name, Token: st.Token(v.ID)})
	return nil
}

// deleteVolume is DELETE /volumes/{volumeID} (its id or name): 204, the
// volume and its files gone; 409 while a sandbox of the tenant's (running
// or paused) uses it.
func (h *Handler) deleteVolume(w http.ResponseWriter, r *http.Request, tenant string) error {
	st, err := h.volumeStore()
	if err != nil {
		return err
	}
	auditEntry(r).Subject = r.PathValue("volumeID")
	err = st.Delete(tenant, r.PathValue("volumeID"), func(v volume.Volume, dir string) (bool, error) {
		auditEntry(r).Subject = v.ID
		infos, err := h.m.List(r.Context(), tenant, nil, "")
		if err != nil {
			return false, err
		}
		for _, info := range infos {
			for _, mv := range info.Volumes {
				if mv.Dir == dir {
					return true, nil
				}
			}
		}
		return false, nil
	})
	if err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// volumeMounts checks a create's volumeMounts: each volume's name and an
// absolute, clean path other than "/", no path twice. The volumes are
// looked up by holdVolumes.
func volumeMounts(raw json.RawMessage) ([]daemon.Volume, error) {
	if !present(raw) {
		return nil, nil
	}
	var mounts []volumeMountJSON
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&mounts); err != nil {
		return nil, errorf(daemon.ErrInvalid, "volumeMounts: want [{\"name\": ..., \"path\": ...}]: %s", strings.TrimPrefix(err.Error(), "json: "))
	}
	if len(mounts) > maxVolumeMounts {
		return nil, errorf(daemon.ErrInvalid, "volumeMounts: %d volumes, at most %d", len(mounts), maxVolumeMounts)
	}
	var out []daemon.Volume
	seen := map[string]bool{}
	for i, m := range mounts {
		if err := volume.CheckName(m.Name); err != nil {
			return nil, errorf(daemon.ErrInvalid, "volumeMounts[%d]: %v", i, err)
		}
		switch {
		case !path.IsAbs(m.Path) || path.Clean(m.Path) != m.Path || m.Path == "/" || len(m.Path) > volume.MaxPath || strings.ContainsRune(m.Path, 0):
			return nil, errorf(daemon.ErrInvalid, "volumeMounts[%d]: path %.200q: want an absolute, clean path other than /", i, m.Path)
		case seen[m.Path]:
			return nil, errorf(daemon.ErrInvalid, "volumeMounts[%d]: path %q: two volumes at one path", i, m.Path)
		}
		seen[m.Path] = true
		out = append(out, daemon.Volume{Name: m.Name, At: m.Path})
	}
	return out, nil
}

// holdVolumes looks up tenant's volumes that vols name, fills in their
// directories, and keeps them from being deleted until release (after the
// daemon's create, whose record then says the sandbox uses them).
func (h *Handler) holdVolumes(tenant string, vols []daemon.Volume) (release func(), err error) {
	var releases []func()
	release = func() {
		for _, f := range releases {
			f()
		}
	}
	if len(vols) == 0 {
		return release, nil
	}
	if h.vols == nil {
		return nil, errorf(errUnsupported, "volumeMounts: this daemon keeps no volumes")
	}
	for i := range vols {
		_, dir, rel, err := h.vols.Hold(tenant, vols[i].Name)
		if err != nil {
			release()
			return nil, fmt.Errorf("volumeMounts[%d]: %w", i, err)
		}
		releases = append(releases, rel)
		vols[i].Dir = dir
	}
	return release, nil
}

// mountsOf is E2B's volumeMounts of a sandbox's volumes.
func mountsOf(vols []daemon.Volume) []volumeMountJSON {
	out := []volumeMountJSON{}
	for _, v := range vols {
		out = append(out, volumeMountJSON{Name: v.Name, Path: v.At})
	}
	return out
}

// The content API (/volumecontent/{volumeID}/...): its bearer token is
// the volume's own (Store.Token), the request acts as the volume's tenant,
// and every path is resolved beneath the volume (volume.Root).

// volumeAuth authenticates a request of the content API by the volume's
// token in Authorization: Bearer, and returns the volume's tenant. A
// wrong token and an unknown volume are the same 401.
func (h *Handler) volumeAuth(r *http.Request) (string, error) {
	st, err := h.volumeStore()
	if err != nil {
		return "", err
	}
	scheme, tok, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	tok = strings.TrimSpace(tok)
	if !strings.EqualFold(scheme, "Bearer") || tok == "" {
		return "", errorf(ErrUnauthenticated, "missing Authorization: Bearer with the volume's token (Volume.create and Volume.getInfo return it)")
	}
	v, ok := st.CheckToken(r.PathValue("volumeID"), tok)
	if !ok {
		return "", errorf(ErrUnauthenticated, "volume %.140q: invalid volume token", r.PathValue("volumeID"))
	}
	return v.Tenant, nil
}

// withRoot runs fn on the root of the request's volume, which volumeAuth
// let in.
func (h *Handler) withRoot(r *http.Request, fn func(root *volume.Root, p string) error) error {
	st, err := h.volumeStore()
	if err != nil {
		return err
	}
	id := r.PathValue("volumeID")
	auditEntry(r).Subject = id
	q := r.URL.Query()
	if !q.Has("path") {
		return errorf(daemon.ErrInvalid, "missing query parameter path")
	}
	dir, err := st.Dir(id)
	if err != nil {
		return err
	}
	root, err := volume.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	return fn(root, q.Get("path"))
}

// attrsOf reads uid, gid and mode of a query.
func attrsOf(r *http.Request) (volume.Attrs, error) {
	var a volume.Attrs
	q := r.URL.Query()
	for _, f := range []struct {
		name string
		dst  **uint32
	}{{"uid", &a.UID}, {"gid", &a.GID}, {"mode", &a.Mode}} {
		if !q.Has(f.name) {
			continue
		}
		n, err := strconv.ParseUint(q.Get(f.name), 10, 32)
		if err != nil {
			return a, errorf(daemon.ErrInvalid, "%s %.40q: want an unsigned 32-bit integer", f.name, q.Get(f.name))
		}
		v := uint32(n)
		*f.dst = &v
	}
	return a, nil
}

// forceOf reads the query's force (default false).
func forceOf(r *http.Request) (bool, error) {
	s := r.URL.Query().Get("force")
	if s == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(s)
	if err != nil {
		return false, errorf(daemon.ErrInvalid, "force %.40q: want true or false", s)
	}
	return b, nil
}

// statPath is GET /volumecontent/{volumeID}/path?path=: the entry, a
// symlink described, not followed.
func (h *Handler) statPath(w http.ResponseWriter, r *http.Request, _ string) error {
	return h.withRoot(r, func(root *volume.Root, p string) error {
		e, err := root.Stat(p)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, e)
		return nil
	})
}

// changePath is PATCH /volumecontent/{volumeID}/path?path= {uid, gid,
// mode}: the entry's owner and mode, a symlink not followed.
func (h *Handler) changePath(w http.ResponseWriter, r *http.Request, _ string) error {
	var body struct {
		UID  *uint32 `json:"uid"`
		GID  *uint32 `json:"gid"`
		Mode *uint32 `json:"mode"`
	}
	if err := decode(w, r, &body, true); err != nil {
		return err
	}
	return h.withRoot(r, func(root *volume.Root, p string) error {
		e, err := root.Change(p, volume.Attrs{UID: body.UID, GID: body.GID, Mode: body.Mode})
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, e)
		return nil
	})
}

// removePath is DELETE /volumecontent/{volumeID}/path?path=: 204, the
// entry (a directory with what it holds) gone.
func (h *Handler) removePath(w http.ResponseWriter, r *http.Request, _ string) error {
	return h.withRoot(r, func(root *volume.Root, p string) error {
		if err := root.Remove(p); err != nil {
			return err
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	})
}

// listDir is GET /volumecontent/{volumeID}/dir?path=&depth=: the
// directory's entries, depth levels deep (default 1).
func (h *Handler) listDir(w http.ResponseWriter, r *http.Request, _ string) error {
	depth := 1
	if s := r.URL.Query().Get("depth"); s != "" {
		n, err := strconv.ParseUint(s, 10, 32)
		if err != nil || n > volume.MaxDepth {
			return errorf(daemon.ErrInvalid, "depth %.40q: want 1 to %d", s, volume.MaxDepth)
		}
		depth = int(n)
	}
	return h.withRoot(r, func(root *volume.Root, p string) error {
		l, err := root.List(p, depth)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, l)
		return nil
	})
}

// makeDir is POST /volumecontent/{volumeID}/dir?path=&uid=&gid=&mode=&force=:
// 201 with the new directory; force makes its parents too.
func (h *Handler) makeDir(w http.ResponseWriter, r *http.Request, _ string) error {
	a, err := attrsOf(r)
	if err != nil {
		return err
	}
	force, err := forceOf(r)
	if err != nil {
		return err
	}
	return h.withRoot(r, func(root *volume.Root, p string) error {
		e, err := root.Mkdir(p, force, a)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusCreated, e)
		return nil
	})
}

// readFile is GET /volumecontent/{volumeID}/file?path=: the file's bytes.
func (h *Handler) readFile(w http.ResponseWriter, r *http.Request, _ string) error {
	return h.withRoot(r, func(root *volume.Root, p string) error {
		f, e, err := root.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		http.ServeContent(w, r, "", e.Mtime, f)
		return nil
	})
}

// writeFile is PUT /volumecontent/{volumeID}/file?path=&uid=&gid=&mode=&force=:
// the body streamed to a new file renamed to path, 201 with it; an
// existing file is replaced only with force (409 otherwise). The volume's
// size bounds the body (507 when full).
func (h *Handler) writeFile(w http.ResponseWriter, r *http.Request, _ string) error {
	a, err := attrsOf(r)
	if err != nil {
		return err
	}
	force, err := forceOf(r)
	if err != nil {
		return err
	}
	return h.withRoot(r, func(root *volume.Root, p string) error {
		e, err := root.Write(p, r.Body, force, a)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusCreated, e)
		return nil
	})
}
