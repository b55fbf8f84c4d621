package envd

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hutch-sandbox/hutch/internal/agent"
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

const (
	// maxMessage bounds the JSON of one request message.
	maxMessage = 16 << 20
	// maxTimeout bounds Connect-Timeout-Ms (the protocol allows 10 digits).
	maxTimeout = 9_999_999_999
	// flagEndStream marks the last envelope of a stream.
	flagEndStream = 0x02
	// flagCompressed marks a compressed envelope.
	flagCompressed = 0x01
)

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

// httpStatus is the HTTP status of a Connect code.
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

// asError converts any error to an *Error: the agent's codes, a closed
// agent connection, the end of a context.
func asError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
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

// wireError is an error in a Connect body.
type wireError struct {
	Code    string `json:"code"`
	Message string `json:"message,omitempty"`
}

// writeUnaryError answers a unary call with err.
func writeUnaryError(w http.ResponseWriter, err error) {
	e := asError(err)
	b, _ := json.Marshal(wireError{Code: e.Code, Message: e.Message})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(httpStatus(e.Code))
	_, _ = w.Write(b)
}

// mediaType returns the media type of the request's Content-Type, "" when
// it has none or a malformed one.
func mediaType(r *http.Request) string {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil {
		return ""
	}
	return strings.ToLower(mt)
}

// withTimeout applies the request's Connect-Timeout-Ms to ctx.
func withTimeout(ctx context.Context, r *http.Request) (context.Context, context.CancelFunc, error) {
	v := r.Header.Get("Connect-Timeout-Ms")
	if v == "" {
		ctx, cancel := context.WithCancel(ctx)
		return ctx, cancel, nil
	}
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil || ms < 0 || ms > maxTimeout || len(v) > 10 {
		return nil, nil, errorf(codeInvalidArgument, "connect-timeout-ms %.20q: not a timeout in milliseconds", v)
	}
	ctx, cancel := context.WithTimeout(ctx, time.Duration(ms)*time.Millisecond)
	return ctx, cancel, nil
}

// checkEncoding refuses compressed requests: the SDKs send none.
func checkEncoding(r *http.Request, header string) error {
	if enc := r.Header.Get(header); enc != "" && !strings.EqualFold(enc, "identity") {
		return errorf(codeUnimplemented, "%s %.40q: compression is not supported", strings.ToLower(header), enc)
	}
	return nil
}

// decode unmarshals one request message; protobuf's JSON allows unknown
// fields to be skipped, and an empty body is the empty message.
func decode(b []byte, v any) error {
	if len(bytes.TrimSpace(b)) == 0 {
		return nil
	}
	if err := json.Unmarshal(b, v); err != nil {
		return errorf(codeInvalidArgument, "decode request: %v", err)
	}
	return nil
}

// readUnary reads the body of a unary call.
func readUnary(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	if r.Method != http.MethodPost {
		return nil, errorf(codeUnimplemented, "method %s: unary calls take POST", r.Method)
	}
	if mt := mediaType(r); mt != "application/json" {
		return nil, errorf(codeInvalidArgument, "content type %.60q: only application/json is supported", r.Header.Get("Content-Type"))
	}
	if err := checkEncoding(r, "Content-Encoding"); err != nil {
		return nil, err
	}
	if r.ContentLength > maxMessage {
		return nil, errorf(codeInvalidArgument, "request of %d bytes exceeds the limit of %d", r.ContentLength, maxMessage)
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxMessage))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, errorf(codeInvalidArgument, "request exceeds the limit of %d bytes", maxMessage)
		}
		return nil, errorf(codeInvalidArgument, "read request: %v", err)
	}
	return b, nil
}

// readStreamRequest reads the single envelope of a server-streaming call.
func readStreamRequest(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	if r.Method != http.MethodPost {
		return nil, errorf(codeUnimplemented, "method %s: streaming calls take POST", r.Method)
	}
	if mt := mediaType(r); mt != "application/connect+json" {
		return nil, errorf(codeInvalidArgument, "content type %.60q: only application/connect+json is supported", r.Header.Get("Content-Type"))
	}
	if err := checkEncoding(r, "Connect-Content-Encoding"); err != nil {
		return nil, err
	}
	body := http.MaxBytesReader(w, r.Body, maxMessage+5+1)
	var hdr [5]byte
	if _, err := io.ReadFull(body, hdr[:]); err != nil {
		return nil, errorf(codeInvalidArgument, "read request envelope: %v", err)
	}
	if hdr[0]&flagCompressed != 0 {
		return nil, errorf(codeUnimplemented, "compressed request envelope: compression is not supported")
	}
	if hdr[0] != 0 {
		return nil, errorf(codeInvalidArgument, "request envelope with flags %#x", hdr[0])
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if n > maxMessage {
		return nil, errorf(codeInvalidArgument, "request message of %d bytes exceeds the limit of %d", n, maxMessage)
	}
	// Read what arrives, up to the size the envelope declares: memory is
	// spent on data that came, not on a size the client merely claimed.
	msg, err := io.ReadAll(io.LimitReader(body, int64(n)))
	if err != nil {
		return nil, errorf(codeInvalidArgument, "read request message: %v", err)
	}
	if len(msg) != int(n) {
		return nil, errorf(codeInvalidArgument, "read request message: %d of %d bytes", len(msg), n)
	}
	var one [1]byte
	if m, _ := body.Read(one[:]); m != 0 {
		return nil, errorf(codeInvalidArgument, "more than one request message in a server-streaming call")
	}
	return msg, nil
}

// stream is the response of a server-streaming call.
type stream struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	mu      sync.Mutex
	started bool
	ended   bool
}

func newStream(w http.ResponseWriter) *stream {
	return &stream{w: w, rc: http.NewResponseController(w)}
}

func (s *stream) start() {
	if !s.started {
		s.started = true
		s.w.Header().Set("Content-Type", "application/connect+json")
		s.w.WriteHeader(http.StatusOK)
	}
}

// envelope writes one envelope and flushes it.
func (s *stream) envelope(flags byte, b []byte) error {
	s.start()
	buf := make([]byte, 5+len(b))
	buf[0] = flags
	binary.BigEndian.PutUint32(buf[1:5], uint32(len(b)))
	copy(buf[5:], b)
	if _, err := s.w.Write(buf); err != nil {
		return fmt.Errorf("write stream: %w", err)
	}
	if err := s.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return fmt.Errorf("flush stream: %w", err)
	}
	return nil
}

// send writes message v.
func (s *stream) send(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode message: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return errors.New("write stream: the stream ended")
	}
	return s.envelope(0, b)
}

// end writes the end of the stream, with err if not nil.
func (s *stream) end(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return
	}
	s.ended = true
	var m struct {
		Error *wireError `json:"error,omitempty"`
	}
	if err != nil {
		e := asError(err)
		m.Error = &wireError{Code: e.Code, Message: e.Message}
	}
	b, _ := json.Marshal(m)
	_ = s.envelope(flagEndStream, b)
}

// keepaliveInterval is the interval of keepalive messages the client asks
// for in Keepalive-Ping-Interval (seconds), 0 for none.
func keepaliveInterval(r *http.Request) time.Duration {
	v := r.Header.Get("Keepalive-Ping-Interval")
	if v == "" {
		return 0
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		return 0
	}
	return time.Duration(min(n, 3600)) * time.Second
}
