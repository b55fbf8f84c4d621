package api

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/hutch-sandbox/hutch/internal/agent"
	"github.com/hutch-sandbox/hutch/internal/daemon"
)

// events streams a sandbox's events as NDJSON, one daemon.Event a line,
// each flushed as it comes, until the sandbox ended (after its "ended"
// event) or the client went away.
func (h *handler) events(w http.ResponseWriter, r *http.Request) error {
	q, err := query(r, "since")
	if err != nil {
		return err
	}
	var since int64
	if s := q.Get("since"); s != "" {
		since, err = strconv.ParseInt(s, 10, 64)
		if err != nil || since < 0 {
			return errorf(daemon.ErrInvalid, "since: want a sequence number (0 or more), got %q", s)
		}
	}
	ch, err := h.m.Events(r.Context(), tenantOf(r), r.PathValue("id"), since)
	if err != nil {
		return err
	}
	rc := startNDJSON(w)
	enc := json.NewEncoder(w)
	for e := range ch {
		if err := enc.Encode(e); err != nil {
			break // the client went away; the request's context ends too
		}
		if err := rc.Flush(); err != nil {
			break
		}
	}
	// Drain what the channel still holds until it closes (the request's
	// context ended, or the sandbox did).
	for range ch {
	}
	return nil
}

// emitExec records, in the sandbox's event log, that the request started
// process p.
func (h *handler) emitExec(r *http.Request, p *agent.Process, args []string) {
	h.m.Emit(tenantOf(r), r.PathValue("id"), daemon.EventExec, map[string]any{"pid": p.PID, "args": args})
}

// emitExit records that process p ended with status, or that waiting for
// it failed (err).
func (h *handler) emitExit(r *http.Request, p *agent.Process, status agent.ExitStatus, err error) {
	data := map[string]any{"pid": p.PID}
	if err != nil {
		_, code := classify(err)
		data["error"] = code
	} else {
		data["code"] = status.Code
		if status.Signal != 0 {
			data["signal"] = status.Signal
		}
		if status.TimedOut {
			data["timed_out"] = true
		}
	}
	h.m.Emit(tenantOf(r), r.PathValue("id"), daemon.EventExit, data)
}

// startNDJSON starts a 200 answer of newline-delimited JSON, its header
// sent at once, and returns what flushes each line.
func startNDJSON(w http.ResponseWriter) *http.ResponseController {
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	_ = rc.Flush()
	return rc
}
