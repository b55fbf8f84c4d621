package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/hutch-sandbox/hutch/internal/daemon"
	"github.com/hutch-sandbox/hutch/internal/policy"
)

// decodeJSON reads the request's body, at most MaxJSONBody bytes, into v,
// refusing unknown fields and anything after the value. An empty body
// leaves v alone when allowEmpty, else it is an error.
func decodeJSON(w http.ResponseWriter, r *http.Request, v any, allowEmpty bool) error {
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxJSONBody))
	if err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			return errorf(errTooLarge, "body: larger than %d bytes of JSON", MaxJSONBody)
		}
		return errorf(daemon.ErrInvalid, "body: %v", err)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		if allowEmpty {
			return nil
		}
		return errorf(daemon.ErrInvalid, "body: empty; want a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return errorf(daemon.ErrInvalid, "body: %s", describeJSONError(data, err))
	}
	if _, err := dec.Token(); err != io.EOF {
		line, col := position(data, int(dec.InputOffset()))
		return errorf(daemon.ErrInvalid, "body: unexpected data after the JSON value at line %d, column %d", line, col)
	}
	return nil
}

// describeJSONError says what is wrong with a JSON body, naming the field
// or the position.
func describeJSONError(data []byte, err error) string {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		line, col := position(data, int(syn.Offset))
		return fmt.Sprintf("invalid JSON at line %d, column %d: %s", line, col, strings.TrimPrefix(syn.Error(), "json: "))
	case errors.As(err, &typ):
		if typ.Field == "" {
			return fmt.Sprintf("want %s, got %s", jsonKind(typ.Type.Kind().String()), typ.Value)
		}
		return fmt.Sprintf("field %q: want %s, got %s", typ.Field, jsonKind(typ.Type.Kind().String()), typ.Value)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "truncated JSON"
	}
	msg := strings.TrimPrefix(err.Error(), "json: ")
	if name, ok := strings.CutPrefix(msg, "unknown field "); ok {
		return "unknown field " + name
	}
	return msg
}

// jsonKind names a Go kind as JSON people know it.
func jsonKind(kind string) string {
	switch kind {
	case "struct", "map":
		return "an object"
	case "slice", "array":
		return "an array"
	case "string":
		return "a string"
	case "bool":
		return "a boolean"
	case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64":
		return "an integer"
	case "float32", "float64":
		return "a number"
	}
	return kind
}

// position turns a byte offset into a 1-based line and column.
func position(data []byte, off int) (line, col int) {
	off = min(max(off, 0), len(data))
	line = 1 + bytes.Count(data[:off], []byte("\n"))
	col = off - bytes.LastIndexByte(data[:off], '\n')
	return line, col
}

// query returns the request's query parameters, refusing any not in
// allowed.
func query(r *http.Request, allowed ...string) (url.Values, error) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, errorf(daemon.ErrInvalid, "query: %v", err)
	}
	for k := range q {
		if !slices.Contains(allowed, k) {
			if len(allowed) == 0 {
				return nil, errorf(daemon.ErrInvalid, "query: unknown parameter %q (this route takes none)", k)
			}
			return nil, errorf(daemon.ErrInvalid, "query: unknown parameter %q (known: %s)", k, strings.Join(allowed, ", "))
		}
	}
	return q, nil
}

// decodeBody refuses any query parameter, then decodes the request's JSON
// body into v as decodeJSON does.
func decodeBody(w http.ResponseWriter, r *http.Request, v any, allowEmpty bool) error {
	if _, err := query(r); err != nil {
		return err
	}
	return decodeJSON(w, r, v, allowEmpty)
}

// single returns the one value of query parameter name, "" if absent.
func single(q url.Values, name string) (string, error) {
	switch vs := q[name]; len(vs) {
	case 0:
		return "", nil
	case 1:
		return vs[0], nil
	}
	return "", errorf(daemon.ErrInvalid, "query: parameter %q given %d times", name, len(q[name]))
}

// parseTimeout parses the duration field of a request: a Go duration
// ("90s", "5m") or a number of seconds; "" is zero.
func parseTimeout(field, s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := policy.ParseTimeout(s)
	if err != nil {
		return 0, errorf(daemon.ErrInvalid, "%s: %v", field, err)
	}
	return d, nil
}

// maxPath bounds a path in the sandbox (PATH_MAX).
const maxPath = 4096

// checkPath validates a path in the sandbox a client gave: absolute,
// without ".." elements or NUL bytes.
func checkPath(field, p string) error {
	switch {
	case p == "":
		return errorf(daemon.ErrInvalid, "%s: missing path", field)
	case p[0] != '/':
		return errorf(daemon.ErrInvalid, "%s %q: the path must be absolute", field, p)
	case len(p) > maxPath:
		return errorf(daemon.ErrInvalid, "%s: the path is longer than %d bytes", field, maxPath)
	case strings.IndexByte(p, 0) >= 0:
		return errorf(daemon.ErrInvalid, "%s %q: the path contains NUL", field, p)
	}
	if slices.Contains(strings.Split(p, "/"), "..") {
		return errorf(daemon.ErrInvalid, "%s %q: the path may not contain \"..\"", field, p)
	}
	return nil
}

// pathParam returns the validated query parameter "path".
func pathParam(q url.Values) (string, error) {
	p, err := single(q, "path")
	if err != nil {
		return "", err
	}
	if err := checkPath("path", p); err != nil {
		return "", err
	}
	return p, nil
}
