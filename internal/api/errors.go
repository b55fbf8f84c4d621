package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"

	"github.com/hutch-sandbox/hutch/internal/agent"
	"github.com/hutch-sandbox/hutch/internal/approve"
	"github.com/hutch-sandbox/hutch/internal/daemon"
	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/store"
)

// Codes of the API's errors, the "code" of every error body.
const (
	CodeInvalid          = "invalid"
	CodeUnauthorized     = "unauthorized"
	CodePermissionDenied = "permission_denied"
	CodeNotFound         = "not_found"
	CodeMethodNotAllowed = "method_not_allowed"
	CodeConflict         = "conflict"
	CodeTooLarge         = "too_large"
	CodeQuota            = "quota"
	CodeInternal         = "internal"
	CodeUnavailable      = "unavailable"
	CodeNotImplemented   = "not_implemented"
	// CodeNoInterpreter: the sandbox has no code interpreter (its image
	// has no Jupyter kernels).
	CodeNoInterpreter = "no_interpreter"
)

// Categories of the errors this package makes itself; the others are
// daemon's (ErrInvalid, ErrNotFound, ...), which it uses too.
var (
	errUnauthorized = errors.New("unauthorized")
	// ErrPermission is the category of a refusal (403,
	// permission_denied), for the front ends that answer as the API does
	// (WriteError).
	ErrPermission = errors.New("permission denied")
	errTooLarge   = errors.New("too large")
	errMethod     = errors.New("method not allowed")
)

// ErrorBody is the body of every error response.
type ErrorBody struct {
	// Code is one of the Code constants.
	Code string `json:"code"`
	// Message says what went wrong.
	Message string `json:"message"`
}

// apiError is an error of a category with its own message.
type apiError struct {
	kind error
	msg  string
}

// Error returns the message.
func (e *apiError) Error() string { return e.msg }

// Unwrap returns the category.
func (e *apiError) Unwrap() error { return e.kind }

// errorf returns an error of category kind.
func errorf(kind error, format string, args ...any) error {
	return &apiError{kind: kind, msg: fmt.Sprintf(format, args...)}
}

// Errorf returns an error of category kind (ErrPermission, or one of
// daemon's), for the front ends that answer as the API does (WriteError).
func Errorf(kind error, format string, args ...any) error {
	return errorf(kind, format, args...)
}

// ErrorCode is the code the API answers err with (CodeInternal for an
// error of no category).
func ErrorCode(err error) string {
	_, code := classify(err)
	return code
}

// classify maps an error to its status and code. It is the only place
// that does.
func classify(err error) (int, string) {
	var maxBytes *http.MaxBytesError
	var ae *agent.Error
	switch {
	case errors.Is(err, errUnauthorized):
		return http.StatusUnauthorized, CodeUnauthorized
	case errors.Is(err, ErrPermission):
		return http.StatusForbidden, CodePermissionDenied
	case errors.Is(err, approve.ErrDenied):
		return http.StatusForbidden, CodeNotApproved
	case errors.Is(err, errTooLarge), errors.As(err, &maxBytes):
		return http.StatusRequestEntityTooLarge, CodeTooLarge
	case errors.Is(err, errMethod):
		return http.StatusMethodNotAllowed, CodeMethodNotAllowed
	case errors.Is(err, daemon.ErrInvalid), errors.Is(err, policy.ErrInvalid):
		return http.StatusBadRequest, CodeInvalid
	case errors.Is(err, daemon.ErrNotFound), errors.Is(err, store.ErrNotFound), errors.Is(err, os.ErrProcessDone):
		return http.StatusNotFound, CodeNotFound
	case errors.Is(err, daemon.ErrConflict), errors.Is(err, store.ErrConflict):
		return http.StatusConflict, CodeConflict
	case errors.Is(err, daemon.ErrQuota):
		return http.StatusTooManyRequests, CodeQuota
	case errors.Is(err, daemon.ErrNoInterpreter):
		return http.StatusConflict, CodeNoInterpreter
	case errors.Is(err, daemon.ErrUnsupported):
		return http.StatusNotImplemented, CodeNotImplemented
	case errors.Is(err, daemon.ErrUnavailable):
		return http.StatusServiceUnavailable, CodeUnavailable
	case errors.As(err, &ae):
		switch ae.Code {
		case agent.CodeNotFound:
			return http.StatusNotFound, CodeNotFound
		case agent.CodeExists:
			return http.StatusConflict, CodeConflict
		case agent.CodePermissionDenied:
			return http.StatusForbidden, CodePermissionDenied
		case agent.CodeInvalid, agent.CodeNotDir, agent.CodeIsDir:
			return http.StatusBadRequest, CodeInvalid
		case agent.CodeTooLarge:
			return http.StatusRequestEntityTooLarge, CodeTooLarge
		}
		return http.StatusInternalServerError, CodeInternal
	case errors.Is(err, agent.ErrClosed):
		// The sandbox's agent is gone: the sandbox ended meanwhile.
		return http.StatusConflict, CodeConflict
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return http.StatusServiceUnavailable, CodeUnavailable
	}
	return http.StatusInternalServerError, CodeInternal
}

// errorBody is the body and status of err.
func errorBody(err error) (int, ErrorBody) {
	status, code := classify(err)
	return status, ErrorBody{Code: code, Message: err.Error()}
}

// internalMessage is the message of a 500 answer to a tenant: what went
// wrong inside the daemon (host paths, store errors) goes to the daemon's
// log, not to a client that is not the machine's operator.
const internalMessage = "internal error (the daemon's log has the details)"

// fail answers with err.
func (h *handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	WriteError(w, r, h.log, err)
}

// WriteError answers r with err as the API answers its errors, for the
// front ends on the same listeners (/mcp): the status and code of its
// category, an ErrorBody, WWW-Authenticate on a 401. What went wrong
// inside the daemon (a 500) goes to log, and to the operator only.
func WriteError(w http.ResponseWriter, r *http.Request, log *slog.Logger, err error) {
	status, body := errorBody(err)
	if status >= 500 {
		log.Error("request failed", "method", r.Method, "path", r.URL.Path, "status", status, "err", err)
		if status == http.StatusInternalServerError && OriginOf(r.Context()) != OriginLocal {
			body.Message = internalMessage
		}
	} else {
		log.Debug("request refused", "method", r.Method, "path", r.URL.Path, "status", status, "err", err)
	}
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="hutch"`)
	}
	writeJSON(w, status, body)
}

// writeJSON answers with v as JSON.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b, _ = json.Marshal(ErrorBody{Code: CodeInternal, Message: "encode response: " + err.Error()})
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
