package api

import (
	"context"
	"net/http"
	"time"

	"github.com/hutch-sandbox/hutch/internal/audit"
)

type auditKey struct{}

// audited wraps f so that every call of it is recorded in the audit log
// as action, once f returned: with the error code if it failed, and with
// what the handler added with auditEntry.
func (h *handler) audited(action string, f handlerFunc) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		e := &audit.Entry{Time: time.Now(), Tenant: tenantOf(r), Action: action, Sandbox: r.PathValue("id")}
		err := f(w, r.WithContext(context.WithValue(r.Context(), auditKey{}, e)))
		if err != nil && e.Error == "" {
			_, e.Error = classify(err)
		}
		if err == nil && r.Header.Get("Upgrade") == "" {
			// The answer goes out first: the client need not wait for
			// the log's sync. (An upgraded exec stream was taken over
			// and has ended.)
			_ = http.NewResponseController(w).Flush()
		}
		if aerr := h.cfg.Audit.Append(*e); aerr != nil {
			h.log.Error("audit log", "action", action, "sandbox", e.Sandbox, "err", aerr)
		}
		return err
	}
}

// auditEntry is the audit entry of the request, for its handler to fill
// in; a throwaway one when the request is not audited.
func auditEntry(r *http.Request) *audit.Entry {
	if e, ok := r.Context().Value(auditKey{}).(*audit.Entry); ok {
		return e
	}
	return &audit.Entry{}
}

// auditExec records how an exec's command ran in the request's audit
// entry.
func auditExec(r *http.Request, args []string, start time.Time, code *int, in, out int64) {
	e := auditEntry(r)
	e.Command = args
	e.ExitCode = code
	e.DurationMS = time.Since(start).Milliseconds()
	e.BytesIn, e.BytesOut = in, out
}
