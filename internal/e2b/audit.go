package e2b

import (
	"context"
	"net/http"
	"time"

	"github.com/hutch-sandbox/hutch/internal/api"
	"github.com/hutch-sandbox/hutch/internal/audit"
	"github.com/hutch-sandbox/hutch/internal/envd"
)

// Option configures a Handler.
type Option func(*Handler)

// WithAudit makes the handler record, in l, every call of E2B's API that
// changes something (create, kill, set timeout, refresh, pause, resume,
// connect) and, through the sandboxes Resolve returns, every envd call
// that does (commands, their input and signals, file writes, watchers),
// with the same actions as hutch's own API. A nil l records nothing.
func WithAudit(l *audit.Log) Option {
	return func(h *Handler) { h.audit = l }
}

type auditKey struct{}

// audited wraps f so that every call of it is recorded in the audit log as
// action (or the action the handler set instead) once the answer went out:
// with the error code if it failed, and what the handler added with
// auditEntry.
func (h *Handler) audited(action string, f handlerFunc) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, tenant string) error {
		e := &audit.Entry{Time: time.Now(), Tenant: tenant, Action: action, Sandbox: r.PathValue("id")}
		err := f(w, r.WithContext(context.WithValue(r.Context(), auditKey{}, e)), tenant)
		if err != nil {
			// Answered before the entry is written, as a success is.
			h.fail(w, r, err)
			e.Error = auditCode(classify(err))
		}
		_ = http.NewResponseController(w).Flush()
		h.appendAudit(*e)
		return nil
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

// appendAudit appends e to the audit log.
func (h *Handler) appendAudit(e audit.Entry) {
	if err := h.audit.Append(e); err != nil {
		h.log.Error("audit log", "action", e.Action, "sandbox", e.Sandbox, "err", err)
	}
}

// auditCode is the error code of hutch's API for an answer's status, as
// its audit log records it.
func auditCode(status int) string {
	switch status {
	case http.StatusBadRequest:
		return api.CodeInvalid
	case http.StatusUnauthorized:
		return api.CodeUnauthorized
	case http.StatusNotFound:
		return api.CodeNotFound
	case http.StatusConflict:
		return api.CodeConflict
	case http.StatusRequestEntityTooLarge, http.StatusInsufficientStorage:
		return api.CodeTooLarge
	case http.StatusTooManyRequests:
		return api.CodeQuota
	case http.StatusServiceUnavailable:
		return api.CodeUnavailable
	}
	return api.CodeInternal
}

// envdCodes maps envd's Connect codes onto the error codes of hutch's API.
var envdCodes = map[string]string{
	"invalid_argument":    api.CodeInvalid,
	"unimplemented":       api.CodeInvalid,
	"not_found":           api.CodeNotFound,
	"already_exists":      api.CodeConflict,
	"failed_precondition": api.CodeConflict,
	"permission_denied":   api.CodePermissionDenied,
	"resource_exhausted":  api.CodeTooLarge,
	"unauthenticated":     api.CodeUnauthorized,
	"unavailable":         api.CodeUnavailable,
	"deadline_exceeded":   api.CodeUnavailable,
	"canceled":            api.CodeUnavailable,
}

// envdAuditor returns the audit hook of tenant's sandbox id for envd; nil
// when the handler has no audit log.
func (h *Handler) envdAuditor(tenant, id string) func(envd.Event) {
	if h.audit == nil {
		return nil
	}
	return func(ev envd.Event) {
		e := audit.Entry{
			Time: ev.Time, Tenant: tenant, Action: ev.Action, Sandbox: id,
			Command: ev.Command, ExitCode: ev.ExitCode, DurationMS: ev.Duration.Milliseconds(),
			BytesIn: ev.BytesIn, BytesOut: ev.BytesOut, Paths: ev.Paths,
		}
		if ev.Error != "" {
			e.Error = envdCodes[ev.Error]
			if e.Error == "" {
				e.Error = api.CodeInternal
			}
		}
		h.appendAudit(e)
	}
}

// Envd is s as envd serves it: its calls audited in the handler's audit
// log, if any.
func (s Sandbox) Envd() envd.Sandbox {
	// No Touch: the manager recorded the request's activity when Resolve
	// asked it for the sandbox's agent.
	return envd.Sandbox{ID: s.ID, Agent: s.Agent, Audit: s.audit, Signed: s.signed, User: s.user, Workdir: s.workdir}
}
