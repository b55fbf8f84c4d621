package api

import (
	"context"
	"net/http"

	"github.com/hutch-sandbox/hutch/internal/daemon"
)

// pause answers POST /v1/sandboxes/{id}/pause with the paused sandbox.
func (h *handler) pause(w http.ResponseWriter, r *http.Request) error {
	return h.setPaused(w, r, h.m.Pause)
}

// resume answers POST /v1/sandboxes/{id}/resume with the resumed sandbox.
func (h *handler) resume(w http.ResponseWriter, r *http.Request) error {
	return h.setPaused(w, r, h.m.Resume)
}

// setPaused calls f, Manager.Pause or Resume, for the request's sandbox.
// The body is empty or an empty JSON object.
func (h *handler) setPaused(w http.ResponseWriter, r *http.Request, f func(ctx context.Context, tenant, id string) (daemon.Info, error)) error {
	if err := decodeBody(w, r, &struct{}{}, true); err != nil {
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
