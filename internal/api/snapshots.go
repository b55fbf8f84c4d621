package api

import (
	"net/http"
	"strconv"

	"github.com/hutch-sandbox/hutch/internal/daemon"
	"github.com/hutch-sandbox/hutch/internal/image/export"
)

// ForkBody is the body of POST /v1/sandboxes/{id}/fork.
type ForkBody struct {
	// Count is how many sandboxes to make (1 when 0, at most
	// daemon.MaxForks).
	Count int `json:"count,omitempty"`
	// Timeout is each fork's lifetime ("5m"; the daemon's default when
	// empty).
	Timeout string `json:"timeout,omitempty"`
}

// ForkResponse answers POST /v1/sandboxes/{id}/fork: one result per
// fork, a sandbox or an error.
type ForkResponse struct {
	Forks []daemon.ForkResult `json:"forks"`
}

// snapshotter is the manager's snapshots, or an error (501) for one
// without.
func (h *handler) snapshotter() (daemon.Snapshotter, error) {
	s, ok := h.m.(daemon.Snapshotter)
	if !ok {
		return nil, errorf(daemon.ErrUnsupported, "this daemon keeps no snapshots")
	}
	return s, nil
}

// snapshot answers POST /v1/sandboxes/{id}/snapshots with the new snapshot.
func (h *handler) snapshot(w http.ResponseWriter, r *http.Request) error {
	if err := decodeBody(w, r, &struct{}{}, true); err != nil {
		return err
	}
	s, err := h.snapshotter()
	if err != nil {
		return err
	}
	auditEntry(r).Sandbox = r.PathValue("id")
	sn, err := s.Snapshot(r.Context(), tenantOf(r), r.PathValue("id"))
	if err != nil {
		return err
	}
	auditEntry(r).Subject = sn.ID
	w.Header().Set("Location", "/v1/snapshots/"+sn.ID)
	writeJSON(w, http.StatusCreated, sn)
	return nil
}

// listSnapshots answers GET /v1/snapshots with the tenant's snapshots.
func (h *handler) listSnapshots(w http.ResponseWriter, r *http.Request) error {
	s, err := h.snapshotter()
	if err != nil {
		return err
	}
	list, err := s.Snapshots(r.Context(), tenantOf(r))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"snapshots": list})
	return nil
}

// getSnapshot answers GET /v1/snapshots/{sid}.
func (h *handler) getSnapshot(w http.ResponseWriter, r *http.Request) error {
	s, err := h.snapshotter()
	if err != nil {
		return err
	}
	sn, err := s.GetSnapshot(r.Context(), tenantOf(r), r.PathValue("sid"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, sn)
	return nil
}

// deleteSnapshot answers DELETE /v1/snapshots/{sid} with 204.
func (h *handler) deleteSnapshot(w http.ResponseWriter, r *http.Request) error {
	s, err := h.snapshotter()
	if err != nil {
		return err
	}
	if err := s.DeleteSnapshot(r.Context(), tenantOf(r), r.PathValue("sid")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// fork answers POST /v1/sandboxes/{id}/fork with a result per fork.
func (h *handler) fork(w http.ResponseWriter, r *http.Request) error {
	var b ForkBody
	if err := decodeBody(w, r, &b, true); err != nil {
		return err
	}
	if b.Count == 0 {
		b.Count = 1
	}
	timeout, err := parseTimeout("timeout", b.Timeout)
	if err != nil {
		return err
	}
	s, err := h.snapshotter()
	if err != nil {
		return err
	}
	auditEntry(r).Sandbox = r.PathValue("id")
	res, err := s.Fork(r.Context(), tenantOf(r), r.PathValue("id"), b.Count, timeout)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, ForkResponse{Forks: res})
	return nil
}

// snapshotImage answers GET /v1/snapshots/{sid}/image with the snapshot
// as an OCI image: an OCI image layout in a tar (format=oci, the default)
// or a docker save tarball (format=docker), named name if given. Its
// length is known before it starts; a stream that breaks off is cut
// short of it.
func (h *handler) snapshotImage(w http.ResponseWriter, r *http.Request) error {
	q, err := query(r, "format", "name")
	if err != nil {
		return err
	}
	fs, err := single(q, "format")
	if err != nil {
		return err
	}
	format, err := export.ParseFormat(fs)
	if err != nil {
		return errorf(daemon.ErrInvalid, "query: %v", err)
	}
	name, err := single(q, "name")
	if err != nil {
		return err
	}
	s, ok := h.m.(daemon.SnapshotExporter)
	if !ok {
		return errorf(daemon.ErrUnsupported, "this daemon exports no snapshots")
	}
	im, err := s.SnapshotImage(r.Context(), tenantOf(r), r.PathValue("sid"), name)
	if err != nil {
		return err
	}
	defer im.Close()
	size, err := im.Size(format)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
	w.Header().Set("Docker-Content-Digest", im.Digest())
	lw := &lazyWriter{w: w, contentType: "application/x-tar"}
	_, err = im.WriteTo(lw, format)
	return h.endStream(r, lw, err)
}
