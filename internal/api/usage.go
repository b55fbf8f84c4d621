package api

import (
	"bytes"
	"encoding/json"
	"net/http"
	"time"

	"github.com/hutch-sandbox/hutch/internal/daemon"
	"github.com/hutch-sandbox/hutch/internal/policy"
)

// UsageResponse answers GET /v1/sandboxes/{id}/metrics.
type UsageResponse struct {
	// Samples are what the sandbox used, sampled every few seconds over
	// the last hour, oldest first.
	Samples []daemon.Usage `json:"samples"`
}

// NetworkResponse answers PUT /v1/sandboxes/{id}/network.
type NetworkResponse struct {
	// Network is the sandbox's network section now, normalized.
	Network policy.Network `json:"network"`
}

// usage answers GET /v1/sandboxes/{id}/metrics with the sandbox's
// samples, from since to until (RFC 3339 times; either may be left out).
func (h *handler) usage(w http.ResponseWriter, r *http.Request) error {
	q, err := query(r, "since", "until")
	if err != nil {
		return err
	}
	var bounds [2]time.Time
	for i, name := range []string{"since", "until"} {
		s, err := single(q, name)
		if err != nil {
			return err
		}
		if s == "" {
			continue
		}
		if bounds[i], err = time.Parse(time.RFC3339, s); err != nil {
			return errorf(daemon.ErrInvalid, "%s: want a time such as 2006-01-02T15:04:05Z, got %q", name, s)
		}
	}
	mon, ok := h.m.(daemon.Monitor)
	if !ok {
		return errorf(daemon.ErrUnsupported, "this daemon samples no sandbox metrics")
	}
	us, err := mon.Usage(r.Context(), tenantOf(r), r.PathValue("id"), bounds[0], bounds[1])
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, UsageResponse{Samples: us})
	return nil
}

// updateNetwork answers PUT /v1/sandboxes/{id}/network, whose body is a
// policy's network section (the policy-file schema), with the sandbox's
// network section once replaced by it.
func (h *handler) updateNetwork(w http.ResponseWriter, r *http.Request) error {
	if _, err := query(r); err != nil {
		return err
	}
	var raw json.RawMessage
	if err := decodeJSON(w, r, &raw, false); err != nil {
		return err
	}
	if raw = bytes.TrimSpace(raw); raw[0] != '{' {
		return errorf(daemon.ErrInvalid, "body: want a JSON object, a policy's network section")
	}
	spec, err := policy.Parse("network", bytes.Join([][]byte{[]byte(`{"network":`), raw, []byte(`}`)}, nil))
	if err != nil {
		return errorf(daemon.ErrInvalid, "%v", err)
	}
	local := OriginOf(r.Context()) == OriginLocal
	if !local {
		if err := checkRemotePolicy(policy.Spec{Network: spec.Network}); err != nil {
			return err
		}
	}
	nw, ok := h.m.(daemon.Networker)
	if !ok {
		return errorf(daemon.ErrUnsupported, "this daemon cannot change a sandbox's network")
	}
	auditEntry(r).Sandbox = r.PathValue("id")
	got, err := nw.UpdateNetwork(r.Context(), tenantOf(r), r.PathValue("id"), spec.Network, local)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, NetworkResponse{Network: got})
	return nil
}
