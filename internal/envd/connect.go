package envd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/hutch-sandbox/hutch/internal/agent"
	"github.com/hutch-sandbox/hutch/internal/approve"
)

// Connect codes.
const (
	codeCanceled           = "canceled"
	codeUnknown            = "unknown"
	codeInvalidArgument    = "invalid_argument"
	codeDeadlineExceeded   = "deadline_exceeded"
	codeNotFound           = "not_found"
	codeAlreadyExists      = "already_exists"
	codePermissionDenied   = "permission_denied"
	codeResourceExhausted  = "resource_exhausted"
	codeFailedPrecondition = "failed_precondition"
	codeUnimplemented      = "unimplemented"
	codeInternal           = "internal"
	codeUnavailable        = "unavailable"
	codeUnauthenticated    = "unauthenticated"
)

// maxMessage bounds one request message, as sent (compressed or not) and
// once decompressed.
const maxMessage = 16 << 20

// Error is an error of the envd API: a Connect code ("not_found",
// "unauthenticated", "invalid_argument", ...) and a message. A Resolver
// returns one to choose the code (and so the HTTP status) of its refusal.
type Error struct {
	// Code is the Connect code.
	Code string
	// Message says what failed.
	Message string
}

// Error returns the code and the message.
func (e *Error) Error() string {
	if e.Message == "" {
		return e.Code
	}
	return e.Code + ": " + e.Message
}

func errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// connect returns e as connect-go's error, which it writes in the
// client's protocol. A code connect-go does not know is "unknown".
func (e *Error) connect() *connect.Error {
	var c connect.Code
	if c.UnmarshalText([]byte(e.Code)) != nil {
		c = connect.CodeUnknown
	}
	return connect.NewError(c, errors.New(e.Message))
}

// httpStatus is the HTTP status of a Connect code, for /files and /health.
func httpStatus(code string) int {
	switch code {
	case codeCanceled:
		return 499
	case codeInvalidArgument, codeFailedPrecondition, "out_of_range":
		return http.StatusBadRequest
	case codeDeadlineExceeded:
		return http.StatusGatewayTimeout
	case codeNotFound:
		return http.StatusNotFound
	case codeAlreadyExists, "aborted":
		return http.StatusConflict
	case codePermissionDenied:
		return http.StatusForbidden
	case codeResourceExhausted:
		return http.StatusTooManyRequests
	case codeUnimplemented:
		return http.StatusNotImplemented
	case codeUnavailable:
		return http.StatusServiceUnavailable
	case codeUnauthenticated:
		return http.StatusUnauthorized
	}
	return http.StatusInternalServerError
}

// asError converts any error to an *Error: connect-go's (such as a
// malformed request's), the agent's codes, a closed agent connection, the
// end of a context.
func asError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return &Error{Code: ce.Code().String(), Message: ce.Message()}
	}
	if errors.Is(err, approve.ErrDenied) {
		// The sandbox's approvals refused the command: which rule,
		// and how to allow it.
		return &Error{Code: codePermissionDenied, Message: err.Error()}
	}
	var ae *agent.Error
	if errors.As(err, &ae) {
		code := codeInternal
		switch ae.Code {
		case agent.CodeNotFound:
			code = codeNotFound
		case agent.CodeExists:
			code = codeAlreadyExists
		case agent.CodePermissionDenied:
			code = codePermissionDenied
		case agent.CodeInvalid, agent.CodeNotDir, agent.CodeIsDir:
			code = codeInvalidArgument
		case agent.CodeTooLarge:
			code = codeResourceExhausted
		}
		return &Error{Code: code, Message: ae.Message}
	}
	switch {
	case errors.Is(err, agent.ErrClosed):
		return &Error{Code: codeUnavailable, Message: err.Error()}
	case errors.Is(err, agent.ErrProtocol):
		// The agent broke the protocol in this request alone, which
		// ended; the sandbox goes on.
		return &Error{Code: codeInternal, Message: err.Error()}
	case errors.Is(err, context.DeadlineExceeded):
		return &Error{Code: codeDeadlineExceeded, Message: err.Error()}
	case errors.Is(err, context.Canceled):
		return &Error{Code: codeCanceled, Message: err.Error()}
	}
	return &Error{Code: codeInternal, Message: err.Error()}
}

// jsonCodec is connect-go's JSON codec (protojson, unknown fields
// ignored) save that an empty body is the empty message, as a unary call
// of curl or fetch without a body means.
type jsonCodec struct{ name string }

func (c jsonCodec) Name() string { return c.name }

func (jsonCodec) Marshal(m any) ([]byte, error) {
	pm, ok := m.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("encode %T: not a protobuf message", m)
	}
	return protojson.Marshal(pm)
}

func (jsonCodec) Unmarshal(b []byte, m any) error {
	pm, ok := m.(proto.Message)
	if !ok {
		return fmt.Errorf("decode %T: not a protobuf message", m)
	}
	if len(bytes.TrimSpace(b)) == 0 {
		proto.Reset(pm)
		return nil
	}
	return protojson.UnmarshalOptions{DiscardUnknown: true}.Unmarshal(b, pm)
}

// handlerOptions are the options of envd's Connect handlers: every
// protocol and codec connect-go serves (Connect with JSON or binary
// protobuf, gRPC, gRPC-Web; gzip), messages bounded by maxMessage.
// WithRecover is not among them: a handler's panic(http.ErrAbortHandler)
// must reach net/http, which cuts the response off (see streamCall).
func handlerOptions() []connect.HandlerOption {
	return []connect.HandlerOption{
		connect.WithReadMaxBytes(maxMessage),
		connect.WithCodec(jsonCodec{"json"}),
		connect.WithCodec(jsonCodec{"json; charset=utf-8"}),
	}
}

// keepaliveInterval is the interval of keepalive messages the client asks
// for in Keepalive-Ping-Interval (seconds), 0 for none.
func keepaliveInterval(h http.Header) time.Duration {
	v := h.Get("Keepalive-Ping-Interval")
	if v == "" {
		return 0
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		return 0
	}
	return time.Duration(min(n, 3600)) * time.Second
}
