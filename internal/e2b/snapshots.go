package e2b

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/hutch-sandbox/hutch/internal/daemon"
)

// E2B's snapshots and forks, over the daemon's (daemon.Snapshotter): a
// snapshot is a template to E2B's SDK (Sandbox.create(snapshotId), or the
// name it was given), listed by GET /snapshots and deleted by DELETE
// /templates/{id}; a fork answers one sandbox or one error per copy.
// Under gVisor a snapshot keeps the sandbox's memory and processes with
// its files, and a fork's copies go on where it was; in the namespace
// tier its files only (a fork's copies start their processes afresh).
// Snapshot answers say which (memory), as E2B's do not.

// snapshotJSON is E2B's snapshot: its id and names.
type snapshotJSON struct {
	SnapshotID string   `json:"snapshotID"`
	Names      []string `json:"names"`
	// Memory says whether the sandbox's memory was kept (hutch's).
	Memory bool `json:"memory"`
}

func snapshotOf(s daemon.SnapshotInfo) snapshotJSON {
	out := snapshotJSON{SnapshotID: s.ID, Names: []string{}, Memory: s.Memory}
	if s.Name != "" {
		out.Names = append(out.Names, s.Name)
	}
	return out
}

// snapshotter is the daemon's snapshots, or the error of a daemon
// without them.
func (h *Handler) snapshotter() (daemon.Snapshotter, error) {
	s, ok := h.m.(daemon.Snapshotter)
	if !ok {
		return nil, errorf(errNoRoute, "snapshots: not supported by this server")
	}
	return s, nil
}

// snapshotTemplate is the id of tenant's snapshot that template names (its
// id, or the name it was given), "" when template names none.
func (h *Handler) snapshotTemplate(ctx context.Context, tenant, template string) (string, error) {
	if template == "" || template == Template || h.templates[template] != "" {
		return "", nil
	}
	s, ok := h.m.(daemon.Snapshotter)
	if !ok {
		return "", nil
	}
	info, err := s.GetSnapshot(ctx, tenant, template)
	// A daemon that keeps no snapshots (hutch serve --kubernetes) has
	// none of that name either.
	if errors.Is(err, daemon.ErrNotFound) || errors.Is(err, daemon.ErrUnsupported) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	return info.ID, nil
}

// snapshot is POST /sandboxes/{id}/snapshots {name}: the sandbox's files
// as a snapshot (the sandbox frozen for the copy only).
func (h *Handler) snapshot(w http.ResponseWriter, r *http.Request, tenant string) error {
	s, err := h.snapshotter()
	if err != nil {
		return err
	}
	var b struct {
		Name string `json:"name"`
	}
	if err := decode(w, r, &b, true); err != nil {
		return err
	}
	auditEntry(r).Sandbox = r.PathValue("id")
	info, err := s.SnapshotNamed(r.Context(), tenant, r.PathValue("id"), b.Name)
	if err != nil {
		return err
	}
	auditEntry(r).Subject = info.ID
	writeJSON(w, http.StatusCreated, snapshotOf(info))
	return nil
}

// listSnapshots is GET /snapshots?sandboxID=&name=&limit=&nextToken=: the
// tenant's snapshots, newest first, in pages (X-Next-Token).
func (h *Handler) listSnapshots(w http.ResponseWriter, r *http.Request, tenant string) error {
	s, err := h.snapshotter()
	if err != nil {
		return err
	}
	q := r.URL.Query()
	limit, after, err := pageQuery(q, "snap-", "sandboxID", "name")
	if err != nil {
		return err
	}
	all, err := s.Snapshots(r.Context(), tenant)
	if err != nil {
		return err
	}
	slices.SortStableFunc(all, func(a, b daemon.SnapshotInfo) int {
		if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(b.ID, a.ID)
	})
	out := []snapshotJSON{}
	skipping := after != ""
	for _, sn := range all {
		if skipping {
			skipping = sn.ID != after
			continue
		}
		if (q.Has("sandboxID") && sn.Source != q.Get("sandboxID")) || (q.Has("name") && sn.Name != q.Get("name")) {
			continue
		}
		if len(out) == limit {
			setNextToken(w, out[len(out)-1].SnapshotID)
			break
		}
		out = append(out, snapshotOf(sn))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// deleteTemplate is DELETE /templates/{id}: the SDK's Template.delete and
// deleteSnapshot. A template of the tenant's (by id or name), else a
// snapshot of the tenant's (by id or name) is deleted; the daemon's own
// templates are its operator's, not the tenant's to delete.
func (h *Handler) deleteTemplate(w http.ResponseWriter, r *http.Request, tenant string) error {
	id := r.PathValue("id")
	if id == Template || h.templates[id] != "" {
		return errorf(errNoRoute, "template %s is this server's (hutch serve --template), not one a tenant deletes; DELETE /templates deletes the tenant's templates and snapshots", id)
	}
	if h.deleteOwnTemplate(tenant, id) {
		auditTemplate(r, id)
		auditEntry(r).Action = "template_delete"
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
	s, err := h.snapshotter()
	if err != nil {
		return err
	}
	if err := s.DeleteSnapshot(r.Context(), tenant, id); err != nil {
		return err
	}
	auditEntry(r).Subject = id
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// forkError is E2B's error of one copy of a fork.
type forkError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// forkJSON is one copy of a fork: a sandbox, or why it could not be made.
type forkJSON struct {
	Sandbox *sandboxJSON `json:"sandbox,omitempty"`
	Error   *forkError   `json:"error,omitempty"`
}

// fork is POST /sandboxes/{id}/fork {count, timeout}: count copies of the
// sandbox's files (not of its processes), each an E2B sandbox like the
// source (its template and network), answered one by one.
func (h *Handler) fork(w http.ResponseWriter, r *http.Request, tenant string) error {
	s, err := h.snapshotter()
	if err != nil {
		return err
	}
	var b struct {
		Count   *int   `json:"count"`
		Timeout *int64 `json:"timeout"`
	}
	if err := decode(w, r, &b, true); err != nil {
		return err
	}
	count := 1
	if b.Count != nil {
		count = *b.Count
	}
	timeout, err := seconds("timeout", b.Timeout)
	if err != nil {
		return err
	}
	id := r.PathValue("id")
	auditEntry(r).Sandbox = id
	results, err := s.Fork(r.Context(), tenant, id, count, timeout)
	if err != nil {
		return err
	}
	h.load(r.Context(), id)
	src := h.recordOf(id)
	out := make([]forkJSON, len(results))
	var made []string
	for i, res := range results {
		if res.Sandbox == nil {
			err := res.Err
			if err == nil {
				err = errors.New(res.Error)
			}
			status := classify(err)
			msg := res.Error
			if status == http.StatusInternalServerError {
				h.log.Error("e2b fork: a copy failed", "sandbox", id, "err", err)
				msg = internalMessage
			}
			out[i].Error = &forkError{Code: status, Message: msg}
			continue
		}
		sb, err := h.started(r.Context(), tenant, res.Sandbox.ID, &record{network: src.network, internet: src.internet, template: src.template}, true)
		if err != nil {
			out[i].Error = &forkError{Code: classify(err), Message: fmt.Sprintf("sandbox %s: %v", res.Sandbox.ID, err)}
			continue
		}
		out[i].Sandbox = &sb
		made = append(made, sb.SandboxID)
	}
	auditEntry(r).Subject = strings.Join(made, ",")
	writeJSON(w, http.StatusOK, out)
	return nil
}

// recordOf is a copy of what the handler keeps of sandbox id (empty for
// one made through hutch's own API).
func (h *Handler) recordOf(id string) record {
	h.mu.Lock()
	defer h.mu.Unlock()
	if rec := h.records[id]; rec != nil {
		return *rec
	}
	return record{}
}

// pageQuery reads the query of a list in pages: limit (1 to 100, 100 by
// default) and nextToken (the last id of the page before, base64, an id
// starting with idPrefix), refusing any parameter but those and others.
func pageQuery(q url.Values, idPrefix string, others ...string) (limit int, after string, err error) {
	known := append([]string{"limit", "nextToken"}, others...)
	for k := range q {
		if !slices.Contains(known, k) {
			return 0, "", errorf(daemon.ErrInvalid, "query: unknown parameter %q (%s)", k, strings.Join(append(others, "limit", "nextToken"), ", "))
		}
	}
	limit = 100
	if v := q.Get("limit"); v != "" {
		if limit, err = strconv.Atoi(v); err != nil || limit < 1 || limit > 100 {
			return 0, "", errorf(daemon.ErrInvalid, "query: limit %q: want 1 to 100", v)
		}
	}
	if v := q.Get("nextToken"); v != "" {
		b, err := base64.RawURLEncoding.DecodeString(v)
		if err != nil || !strings.HasPrefix(string(b), idPrefix) {
			return 0, "", errorf(daemon.ErrInvalid, "query: nextToken %q is not one this server gave", v)
		}
		after = string(b)
	}
	return limit, after, nil
}

// setNextToken tells the client where the next page starts: after id.
func setNextToken(w http.ResponseWriter, id string) {
	w.Header().Set("X-Next-Token", base64.RawURLEncoding.EncodeToString([]byte(id)))
}
