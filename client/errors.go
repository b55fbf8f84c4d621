package client

import (
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"strings"
)

// Codes of the daemon's errors.
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
	// CodeNotApproved: the sandbox's approvals refused the command (a
	// deny rule, a person's answer, or its question expired).
	CodeNotApproved = "not_approved"
	// CodeNoInterpreter: the sandbox has no code interpreter (RunCode):
	// its image has no Jupyter kernels.
	CodeNoInterpreter = "no_interpreter"
)

// Error is an error the daemon reported.
type Error struct {
	// Status is the HTTP status (0 for an error reported in a stream: an
	// exec's, a pull's).
	Status int
	// Code is one of the Code constants.
	Code string
	// Message says what went wrong.
	Message string

	// body is the answer's body, for the calls that read more of it.
	body []byte
}

// Error returns the message, the status and the code.
func (e *Error) Error() string {
	if e.Status == 0 {
		return fmt.Sprintf("%s (%s)", e.Message, e.Code)
	}
	return fmt.Sprintf("%s (%d %s)", e.Message, e.Status, e.Code)
}

// Is reports whether e matches target: an *Error whose non-zero Code and
// Status are e's (so errors.Is(err, ErrNotFound) tests the code only), or
// fs.ErrNotExist, fs.ErrPermission and fs.ErrExist by code.
func (e *Error) Is(target error) bool {
	switch target {
	case fs.ErrNotExist:
		return e.Code == CodeNotFound
	case fs.ErrPermission:
		return e.Code == CodePermissionDenied
	case fs.ErrExist:
		return e.Code == CodeConflict
	}
	t, ok := target.(*Error)
	return ok && (t.Code == "" || t.Code == e.Code) && (t.Status == 0 || t.Status == e.Status)
}

// Sentinels to match an *Error with errors.Is, by code.
var (
	ErrInvalid      = &Error{Code: CodeInvalid, Message: "invalid request"}
	ErrUnauthorized = &Error{Code: CodeUnauthorized, Message: "unauthorized"}
	ErrPermission   = &Error{Code: CodePermissionDenied, Message: "permission denied"}
	ErrNotFound     = &Error{Code: CodeNotFound, Message: "not found"}
	ErrConflict     = &Error{Code: CodeConflict, Message: "conflict"}
	ErrTooLarge     = &Error{Code: CodeTooLarge, Message: "too large"}
	ErrQuota        = &Error{Code: CodeQuota, Message: "quota exceeded"}
	ErrUnavailable  = &Error{Code: CodeUnavailable, Message: "unavailable"}
	ErrNotApproved  = &Error{Code: CodeNotApproved, Message: "not approved"}
	// ErrNoInterpreter matches RunCode's refusal of a sandbox without a
	// code interpreter.
	ErrNoInterpreter = &Error{Code: CodeNoInterpreter, Message: "no code interpreter"}
)

// readError turns an error response into an *Error.
func readError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	e := &Error{Status: resp.StatusCode, body: b}
	var body struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	if json.Unmarshal(b, &body) == nil && body.Code != "" {
		e.Code, e.Message = body.Code, body.Message
		return e
	}
	// Not the daemon's own answer (a proxy in between, say).
	e.Code = codeOfStatus(resp.StatusCode)
	e.Message = strings.TrimSpace(string(b))
	if e.Message == "" {
		e.Message = http.StatusText(resp.StatusCode)
	}
	return e
}

// codeOfStatus guesses the code of a status.
func codeOfStatus(status int) string {
	switch status {
	case http.StatusBadRequest:
		return CodeInvalid
	case http.StatusUnauthorized:
		return CodeUnauthorized
	case http.StatusForbidden:
		return CodePermissionDenied
	case http.StatusNotFound:
		return CodeNotFound
	case http.StatusMethodNotAllowed:
		return CodeMethodNotAllowed
	case http.StatusConflict:
		return CodeConflict
	case http.StatusRequestEntityTooLarge:
		return CodeTooLarge
	case http.StatusTooManyRequests:
		return CodeQuota
	case http.StatusServiceUnavailable:
		return CodeUnavailable
	}
	return CodeInternal
}
