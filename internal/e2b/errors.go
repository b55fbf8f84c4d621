package e2b

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/hutch-sandbox/hutch/internal/agent"
	"github.com/hutch-sandbox/hutch/internal/daemon"
	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/store"
	"github.com/hutch-sandbox/hutch/internal/volume"
)

// Categories of the errors this package makes; the others are daemon's
// (ErrInvalid, ErrNotFound, ...), which it uses too.
var (
	// ErrUnauthenticated is the category of a request without a valid API
	// key or envd access token.
	ErrUnauthenticated = errors.New("unauthenticated")
	// errUnsupported is an option or route of E2B's API that hutch does
	// not offer.
	errUnsupported = errors.New("not supported")
	// errNoRoute is an E2B path hutch does not serve.
	errNoRoute = errors.New("not implemented")
)

// Error is the body of every error response, as E2B's API answers.
type Error struct {
	// Code is the HTTP status.
	Code int `json:"code"`
	// Message says what went wrong.
	Message string `json:"message"`
}

// kindError is an error of a category with its own message.
type kindError struct {
	kind error
	msg  string
}

// Error returns the message.
func (e *kindError) Error() string { return e.msg }

// Unwrap returns the category.
func (e *kindError) Unwrap() error { return e.kind }

// errorf returns an error of category kind.
func errorf(kind error, format string, args ...any) error {
	return &kindError{kind: kind, msg: fmt.Sprintf(format, args...)}
}

// classify maps an error to its status. It is the only place that does.
func classify(err error) int {
	var maxBytes *http.MaxBytesError
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.Is(err, ErrUnauthenticated):
		return http.StatusUnauthorized
	case errors.Is(err, errUnsupported), errors.Is(err, daemon.ErrInvalid), errors.Is(err, policy.ErrInvalid), errors.Is(err, volume.ErrInvalid),
		errors.As(err, &syntax), errors.As(err, &typ):
		return http.StatusBadRequest
	case errors.As(err, &maxBytes):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, errNoRoute), errors.Is(err, daemon.ErrUnsupported):
		return http.StatusNotImplemented
	case errors.Is(err, daemon.ErrNotFound), errors.Is(err, store.ErrNotFound), errors.Is(err, volume.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, daemon.ErrConflict), errors.Is(err, store.ErrConflict), errors.Is(err, agent.ErrClosed), errors.Is(err, ErrNoAutoResume),
		errors.Is(err, volume.ErrExists), errors.Is(err, volume.ErrBusy):
		return http.StatusConflict
	case errors.Is(err, daemon.ErrQuota), errors.Is(err, volume.ErrQuota):
		return http.StatusTooManyRequests
	case errors.Is(err, volume.ErrFull):
		return http.StatusInsufficientStorage
	case errors.Is(err, daemon.ErrUnavailable), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// internalMessage is the message of every 500 answer: what went wrong
// inside the daemon (paths, store errors, a command's output) goes to the
// daemon's log, not to the client.
const internalMessage = "internal error (the daemon's log has the details)"

// fail answers with err.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	status := classify(err)
	msg := err.Error()
	if status >= 500 && status != http.StatusNotImplemented && status != http.StatusInsufficientStorage {
		h.log.Error("e2b request failed", "method", r.Method, "path", r.URL.Path, "status", status, "err", err)
	} else {
		h.log.Debug("e2b request refused", "method", r.Method, "path", r.URL.Path, "status", status, "err", err)
	}
	if status == http.StatusInternalServerError {
		msg = internalMessage
	}
	if strings.HasPrefix(r.URL.Path, "/volumecontent/") {
		// The content API's Error has a string code.
		writeJSON(w, status, contentError{Code: strconv.Itoa(status), Message: msg})
		return
	}
	writeJSON(w, status, Error{Code: status, Message: msg})
}

// contentError is the body of an error of E2B's volume content API.
type contentError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// writeJSON answers with v as JSON.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b, _ = json.Marshal(Error{Code: status, Message: "encode response: " + err.Error()})
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
