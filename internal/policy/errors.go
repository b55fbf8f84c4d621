package policy

import (
	"errors"
	"fmt"
)

// ErrInvalid is matched (with errors.Is) by every error about the content of
// a policy: a syntax or type error in a file, a bad value, or a failed
// Validate. Errors reading a file are not ErrInvalid.
var ErrInvalid = errors.New("invalid policy")

// Error is one problem with a policy. Errors found in a file carry the file's
// name and the 1-based line and column of the offending node; errors found by
// Validate or Normalize carry neither.
type Error struct {
	// File is the path of the policy file as given to Load, or empty.
	File string
	// Line and Column locate the problem in File; zero when unknown.
	Line, Column int
	// Msg is the problem, starting with the dotted field name when there is
	// one, e.g. `resources.memory: invalid size "12q" (use e.g. 512m, 2g)`.
	Msg string
}

// Error formats the problem as "file:line:column: msg", dropping the parts
// that are unknown.
func (e *Error) Error() string {
	switch {
	case e.File != "" && e.Line > 0:
		return fmt.Sprintf("%s:%d:%d: %s", e.File, e.Line, e.Column, e.Msg)
	case e.File != "":
		return e.File + ": " + e.Msg
	}
	return e.Msg
}

// Is reports whether target is ErrInvalid.
func (e *Error) Is(target error) bool { return target == ErrInvalid }

// fieldErrorf returns an Error without a position, for Validate and Normalize.
func fieldErrorf(format string, args ...any) error {
	return &Error{Msg: fmt.Sprintf(format, args...)}
}
