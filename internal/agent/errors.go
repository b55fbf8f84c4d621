package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"syscall"
)

// Codes of an Error.
const (
	// CodeNotFound: the file, directory, command or process does not exist.
	CodeNotFound = "not_found"
	// CodeExists: the file exists, or the directory is not empty.
	CodeExists = "exists"
	// CodePermissionDenied: the sandbox may not do that (permissions, a
	// read-only mount, a command that is not executable).
	CodePermissionDenied = "permission_denied"
	// CodeInvalid: a malformed request, such as a path that is not absolute.
	CodeInvalid = "invalid"
	// CodeNotDir: a path component that must be a directory is not one.
	CodeNotDir = "not_dir"
	// CodeIsDir: the path is a directory where a file was expected.
	CodeIsDir = "is_dir"
	// CodeTooLarge: a result or a request exceeds a limit, or the disk is
	// full.
	CodeTooLarge = "too_large"
	// CodeInternal: anything else.
	CodeInternal = "internal"
)

// Error is an error the agent reported for one request. errors.Is matches
// it against fs.ErrNotExist, fs.ErrExist, fs.ErrPermission, fs.ErrInvalid,
// syscall.ENOTDIR and syscall.EISDIR by its code, and against an *Error with
// the same code (and the same message, if the target has one).
type Error struct {
	// Code is one of the Code constants.
	Code string `json:"code"`
	// Message says what failed, for people.
	Message string `json:"message"`
}

// Error returns the message.
func (e *Error) Error() string {
	if e.Message == "" {
		return "agent: " + e.Code
	}
	return e.Message
}

// Is reports whether e matches target (see Error).
func (e *Error) Is(target error) bool {
	switch target {
	case fs.ErrNotExist:
		return e.Code == CodeNotFound
	case fs.ErrExist:
		return e.Code == CodeExists
	case fs.ErrPermission:
		return e.Code == CodePermissionDenied
	case fs.ErrInvalid:
		return e.Code == CodeInvalid
	case syscall.ENOTDIR:
		return e.Code == CodeNotDir
	case syscall.EISDIR:
		return e.Code == CodeIsDir
	}
	if t, ok := target.(*Error); ok {
		return t.Code == e.Code && (t.Message == "" || t.Message == e.Message)
	}
	return false
}

func knownCode(code string) bool {
	switch code {
	case CodeNotFound, CodeExists, CodePermissionDenied, CodeInvalid, CodeNotDir, CodeIsDir, CodeTooLarge, CodeInternal:
		return true
	}
	return false
}

func errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// toError turns an error of a system call into an *Error; its message is
// err's (an *fs.PathError names the operation and the path).
func toError(err error) *Error {
	var ae *Error
	if errors.As(err, &ae) {
		return ae
	}
	return &Error{Code: codeOf(err), Message: err.Error()}
}

func codeOf(err error) string {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		switch errno {
		case syscall.ENOENT, syscall.ESRCH:
			return CodeNotFound
		case syscall.EEXIST, syscall.ENOTEMPTY:
			return CodeExists
		case syscall.EACCES, syscall.EPERM, syscall.EROFS:
			return CodePermissionDenied
		case syscall.ENOTDIR:
			return CodeNotDir
		case syscall.EISDIR:
			return CodeIsDir
		case syscall.EINVAL, syscall.ENAMETOOLONG, syscall.ELOOP, syscall.EXDEV, syscall.EBUSY:
			return CodeInvalid
		case syscall.EFBIG, syscall.ENOSPC, syscall.E2BIG:
			return CodeTooLarge
		}
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return CodeNotFound
	case errors.Is(err, fs.ErrExist):
		return CodeExists
	case errors.Is(err, fs.ErrPermission):
		return CodePermissionDenied
	case errors.Is(err, fs.ErrInvalid):
		return CodeInvalid
	}
	return CodeInternal
}

// truncMessage cuts an error message to maxMessage bytes, marking the cut.
func truncMessage(m string) string {
	if len(m) <= maxMessage {
		return m
	}
	return strings.ToValidUTF8(m[:maxMessage], "") + "…"
}

// within puts what (an operation and its path) before err's message.
func within(what string, err error) *Error {
	e := toError(err)
	return &Error{Code: e.Code, Message: what + ": " + e.Message}
}

// checkPath validates a path a client gave: absolute, without NUL.
func checkPath(what, p string) *Error {
	if p == "" || p[0] != '/' {
		return errorf(CodeInvalid, "%s %q: path is not absolute", what, p)
	}
	if strings.IndexByte(p, 0) >= 0 {
		return errorf(CodeInvalid, "%s %q: path contains NUL", what, p)
	}
	return nil
}
