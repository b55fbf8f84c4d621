package api

import (
	"errors"
	"net/http"

	"github.com/hutch-sandbox/hutch/internal/changes"
	"github.com/hutch-sandbox/hutch/internal/daemon"
)

// ApplyBody is the body of POST /v1/changes/{cid}/apply.
type ApplyBody struct {
	// Paths keep the changes at or below them (all when none).
	Paths []string `json:"paths,omitempty"`
	// Allow names paths (or what is below them) applied although they
	// need a person's word: protected names, symbolic links out of the
	// workspace, setuid or setgid bits. Only the operator (the unix
	// socket) may give it; a tenant's is a 400.
	Allow []string `json:"allow,omitempty"`
	// SkipRefused applies the rest when some paths need that word.
	SkipRefused bool `json:"skip_refused,omitempty"`
}

// ApplyResponse answers POST /v1/changes/{cid}/apply.
type ApplyResponse struct {
	// Applied are the paths written or removed.
	Applied []string `json:"applied"`
	// Skipped are the paths left out (SkipRefused), with why.
	Skipped []PathProblem `json:"skipped"`
}

// PathProblem is a path an apply did not write, and why.
type PathProblem struct {
	Path string `json:"path"`
	Why  string `json:"problem"`
	// Refused says it needs a person's word (ApplyBody.Allow); else the
	// workspace is no longer as the sandbox saw it.
	Refused bool `json:"refused,omitempty"`
}

// ConflictResponse answers an apply that applied nothing: code
// "conflict", and each path with why.
type ConflictResponse struct {
	Code     string        `json:"code"`
	Message  string        `json:"message"`
	Problems []PathProblem `json:"problems"`
}

// problems are ps as PathProblems, refused or not.
func problems(ps []changes.Problem, refused bool) []PathProblem {
	out := []PathProblem{}
	for _, p := range ps {
		out = append(out, PathProblem{Path: p.Path, Why: p.Why, Refused: refused})
	}
	return out
}

// reviewer is the manager's change sets, or an error (501) for one
// without.
func (h *handler) reviewer() (daemon.Reviewer, error) {
	s, ok := h.m.(daemon.Reviewer)
	if !ok {
		return nil, errorf(daemon.ErrUnsupported, "this daemon keeps no change sets")
	}
	return s, nil
}

// listChangeSets answers GET /v1/changes with the tenant's change sets,
// newest first.
func (h *handler) listChangeSets(w http.ResponseWriter, r *http.Request) error {
	s, err := h.reviewer()
	if err != nil {
		return err
	}
	list, err := s.ChangeSets(r.Context(), tenantOf(r))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"changes": list})
	return nil
}

// getChangeSet answers GET /v1/changes/{cid}.
func (h *handler) getChangeSet(w http.ResponseWriter, r *http.Request) error {
	s, err := h.reviewer()
	if err != nil {
		return err
	}
	info, err := s.GetChangeSet(r.Context(), tenantOf(r), r.PathValue("cid"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, info)
	return nil
}

// changeSetDiff answers GET /v1/changes/{cid}/diff: the set against its
// workspace as it is now, in the formats of a sandbox's diff.
func (h *handler) changeSetDiff(w http.ResponseWriter, r *http.Request) error {
	format, err := diffFormat(r)
	if err != nil {
		return err
	}
	s, err := h.reviewer()
	if err != nil {
		return err
	}
	set, list, err := s.ChangeSetDiff(r.Context(), tenantOf(r), r.PathValue("cid"))
	if err != nil {
		return err
	}
	return writeChanges(w, r, "workspace", set.Sides, list, format)
}

// applyChangeSet answers POST /v1/changes/{cid}/apply: what was written;
// 409 with each conflict when nothing was.
func (h *handler) applyChangeSet(w http.ResponseWriter, r *http.Request) error {
	var b ApplyBody
	if err := decodeBody(w, r, &b, true); err != nil {
		return err
	}
	s, err := h.reviewer()
	if err != nil {
		return err
	}
	auditEntry(r).Subject = r.PathValue("cid")
	res, err := s.ApplyChangeSet(r.Context(), tenantOf(r), r.PathValue("cid"), b.Paths, changes.ApplyOptions{Allow: b.Allow, SkipRefused: b.SkipRefused},
		OriginOf(r.Context()) == OriginLocal)
	var aerr *changes.ApplyError
	if errors.As(err, &aerr) {
		writeJSON(w, http.StatusConflict, ConflictResponse{Code: CodeConflict, Message: err.Error(),
			Problems: append(problems(aerr.Conflicts, false), problems(aerr.Refused, true)...)})
		return nil
	}
	if err != nil {
		return err
	}
	out := ApplyResponse{Applied: append([]string{}, res.Applied...), Skipped: problems(res.Skipped, true)}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// discardChangeSet answers DELETE /v1/changes/{cid}.
func (h *handler) discardChangeSet(w http.ResponseWriter, r *http.Request) error {
	s, err := h.reviewer()
	if err != nil {
		return err
	}
	auditEntry(r).Subject = r.PathValue("cid")
	if err := s.DiscardChangeSet(r.Context(), tenantOf(r), r.PathValue("cid")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
