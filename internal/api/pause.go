package api

import (
	"context"
	"net/http"

	"github.com/hutch-sandbox/hutch/internal/daemon"
)

// pauseBody is the body of POST /v1/sandboxes/{id}/pause.
type pauseBody struct {
	// Memory false pauses the sandbox without its memory
	// (daemon.PauseOptions.FilesOnly); absent or true keeps it.
	Memory *bool `json:"memory"`
}

// pause answers POST /v1/sandboxes/{id}/pause with the paused sandbox.
func (h *handler) pause(w http.ResponseWriter, r *http.Request) error {
	var b pauseBody
	return h.setPaused(w, r, &b, func(ctx context.Context, tenant, id string) (daemon.Info, error) {
		return h.m.PauseWith(ctx, tenant, id, daemon.PauseOptions{FilesOnly: b.Memory != nil && !*b.Memory})
	})
}

// resume answers POST /v1/sandboxes/{id}/resume with the resumed sandbox.
func (h *handler) resume(w http.ResponseWriter, r *http.Request) error {
	return h.setPaused(w, r, &struct{}{}, h.m.Resume)
}

// setPaused decodes the body (empty, or a JSON object) into body and calls
// f, which pauses or resumes, for the request's sandbox.
func (h *handler) setPaused(w http.ResponseWriter, r *http.Request, body any, f func(ctx context.Context, tenant, id string) (daemon.Info, error)) error {
	if err := decodeBody(w, r, body, true); err != nil {
		return err
	}
	info, err := f(r.Context(), tenantOf(r), r.PathValue("id"))
	if err != nil {
		return err
	}
	h.log.Debug("sandbox "+info.State, "id", info.ID, "tenant", info.Tenant)
	writeJSON(w, http.StatusOK, info)
	return nil
}
