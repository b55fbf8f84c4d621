// Package mcprelay relays the Model Context Protocol's stdio transport
// between an agent's client and a third-party MCP server that `hutch mcp
// wrap` runs in a sandbox: newline-delimited JSON-RPC messages, both
// ways, in order.
//
// Messages pass unchanged but for the filter on what goes to the client:
// no string of a server's message (keys and numbers too) that holds the
// real value of one of the sandbox's secrets, as it is or JSON-escaped,
// percent-encoded or in base64, reaches the client (the string becomes
// "[redacted: secret NAME]"); and an operator's deny patterns (regular
// expressions) redact their matches in the answers to tools/call and
// resources/read. What the client sends is not filtered: it comes from
// the user's agent.
//
// Every tools/call is recorded when it ends (its tool, the size of its
// arguments, its duration, its outcome), never its arguments, which may
// hold secrets.
//
// The relay is bounded: a message longer than the limit is refused (its
// sender, when it was a request, gets a JSON-RPC error; its receiver,
// when it was an answer, gets one in its place), not held; a line from
// the server that is not a JSON-RPC message is dropped; the requests in
// flight that the relay keeps track of are bounded too. Parsing is the
// official Go SDK's (its jsonrpc package).
package mcprelay

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// DefaultMaxMessage is the default bound of one message, in bytes.
const DefaultMaxMessage = 64 << 20

// maxPending bounds the client's requests in flight that the relay
// tracks; beyond it a request is refused with a JSON-RPC error.
const maxPending = 4096

// maxToolName bounds the tool name a record keeps.
const maxToolName = 256

// maxLogLines bounds the log lines the relay writes about what it
// dropped or refused; it counts the rest.
const maxLogLines = 20

// Outcome is how a tools/call ended.
type Outcome string

// The outcomes of a tools/call.
const (
	// OK: the server answered with a result.
	OK Outcome = "ok"
	// ToolError: the result said isError (the tool failed, the call
	// itself worked).
	ToolError Outcome = "tool_error"
	// Error: a JSON-RPC error (Call.ErrorCode), the server's or the
	// relay's.
	Error Outcome = "error"
	// Cancelled: the client cancelled the call (notifications/cancelled)
	// before an answer came.
	Cancelled Outcome = "cancelled"
	// NoAnswer: the session ended before the server answered.
	NoAnswer Outcome = "no_answer"
)

// Call is the record of one tools/call.
type Call struct {
	// Tool is the name of the tool called (cut to 256 bytes).
	Tool string
	// ArgumentBytes is the size of the call's arguments as sent (their
	// JSON), 0 without any.
	ArgumentBytes int
	// Start is when the relay passed the call to the server.
	Start time.Time
	// Duration is how long the answer took (until the cancellation, or
	// the end of the session, without one).
	Duration time.Duration
	// Outcome is how the call ended.
	Outcome Outcome
	// ErrorCode is the JSON-RPC error's code when Outcome is Error.
	ErrorCode int64
	// Redactions is the number of redactions made in the answer.
	Redactions int
}

// Options configure a Relay.
type Options struct {
	// MaxMessage bounds one message (a line, without its newline), in
	// bytes; DefaultMaxMessage when 0.
	MaxMessage int
	// Secrets are the values that never reach the client.
	Secrets []Secret
	// Patterns are the deny patterns whose matches are redacted in tool
	// results and resource contents (see CheckPattern).
	Patterns []*regexp.Regexp
	// Record, when set, gets every tools/call when it has ended.
	Record func(Call)
	// Log, when set, gets a line for each message dropped or refused
	// (at most 20; Finish says how many more there were).
	Log func(line string)
}

// Relay relays one session. FromClient and FromServer run at once, each
// in a goroutine of its own.
type Relay struct {
	o      Options
	f      *filter
	client lineWriter // toward the client
	server lineWriter // toward the server

	mu       sync.Mutex
	pending  map[any]*inflight // the client's requests, by id
	counts   Counts
	logged   int
	unlogged int
}

// inflight is a request of the client the server has not answered yet.
type inflight struct {
	method string
	tool   string // tools/call
	args   int
	start  time.Time
}

// New returns a relay that writes to client (the agent's client: hutch's
// stdout) and server (the server's stdin).
func New(client, server io.Writer, o Options) *Relay {
	if o.MaxMessage <= 0 {
		o.MaxMessage = DefaultMaxMessage
	}
	return &Relay{
		o:       o,
		f:       newFilter(o.Secrets, o.Patterns),
		client:  lineWriter{w: client},
		server:  lineWriter{w: server},
		pending: map[any]*inflight{},
	}
}

// StderrFilter returns a reader of src (the server's stderr) with each
// secret's value, in the forms the relay knows, replaced by its marker;
// src itself when there are no secrets.
func (r *Relay) StderrFilter(src io.Reader) io.Reader {
	if rep := r.f.streamReplacer(); rep != nil {
		return rep.Reader(src)
	}
	return src
}

// FromClient relays the client's messages from src to the server until
// src ends (nil) or reading it or writing to the server fails.
func (r *Relay) FromClient(src io.Reader) error {
	return r.lines(src, r.fromClient, func(o *oversize) {
		r.refuse("client", o, &r.client, &r.server)
	})
}

// FromServer relays the server's messages from src to the client until
// src ends (nil) or reading it or writing to the client fails.
func (r *Relay) FromServer(src io.Reader) error {
	return r.lines(src, r.fromServer, func(o *oversize) {
		if p := r.refuse("server", o, &r.server, &r.client); p != nil {
			r.record(p, Error, jsonrpc.CodeInternalError, 0)
		}
	})
}

// lines reads src's lines, giving each to line and each one too long to
// over, until src ends (nil) or reading it, or line, fails.
func (r *Relay) lines(src io.Reader, line func([]byte) error, over func(*oversize)) error {
	lr := newLineReader(src, r.o.MaxMessage)
	for {
		b, o, err := lr.next()
		switch {
		case o != nil:
			over(o)
		case b != nil:
			if werr := line(b); werr != nil {
				return werr
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// Finish records the tools/calls still unanswered (the session has
// ended) and logs how many log lines were left out; call it once both
// directions are done.
func (r *Relay) Finish() {
	r.mu.Lock()
	var left []*inflight
	for id, p := range r.pending {
		if p.method == "tools/call" {
			left = append(left, p)
		}
		delete(r.pending, id)
	}
	unlogged := r.unlogged
	r.mu.Unlock()
	for _, p := range left {
		r.record(p, NoAnswer, 0, 0)
	}
	if unlogged > 0 && r.o.Log != nil {
		r.o.Log(fmt.Sprintf("%d more messages dropped or refused", unlogged))
	}
}

// Redactions returns the redactions made so far.
func (r *Relay) Redactions() Counts {
	r.mu.Lock()
	defer r.mu.Unlock()
	var c Counts
	c.add(r.counts)
	return c
}

// fromClient passes one line of the client's on, tracking its requests.
func (r *Relay) fromClient(line []byte) error {
	if isBlank(line) {
		return nil
	}
	if msg, err := jsonrpc.DecodeMessage(line); err == nil {
		if req, ok := msg.(*jsonrpc.Request); ok {
			cancelled, err := r.track(req)
			if err != nil {
				r.logf("refused a request of the client: %v", err)
				return r.client.answer(req.ID, jsonrpc.CodeInternalError, "hutch mcp wrap: "+err.Error())
			}
			if cancelled != nil {
				r.record(cancelled, Cancelled, 0, 0)
			}
		}
	}
	// What the relay cannot read goes on all the same: the server
	// answers it as it sees fit.
	return r.server.write(line)
}

// errTooMany refuses a request beyond maxPending in flight.
var errTooMany = fmt.Errorf("more than %d requests in flight", maxPending)

// track notes a request of the client's, and a cancellation: it returns
// the tools/call a cancellation ended, if any.
func (r *Relay) track(req *jsonrpc.Request) (*inflight, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !req.IsCall() {
		if req.Method != "notifications/cancelled" {
			return nil, nil
		}
		var p struct {
			RequestID any `json:"requestId"`
		}
		if json.Unmarshal(req.Params, &p) != nil {
			return nil, nil
		}
		id, err := jsonrpc.MakeID(p.RequestID)
		if err != nil || !id.IsValid() {
			return nil, nil
		}
		c := r.pending[id.Raw()]
		if c == nil {
			return nil, nil
		}
		delete(r.pending, id.Raw())
		if c.method != "tools/call" {
			return nil, nil
		}
		return c, nil
	}
	if len(r.pending) >= maxPending {
		return nil, errTooMany
	}
	c := &inflight{method: req.Method, start: time.Now()}
	if req.Method == "tools/call" {
		var p struct {
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		}
		_ = json.Unmarshal(req.Params, &p)
		c.tool = toolName(p.Name)
		if string(p.Arguments) != "null" {
			c.args = len(p.Arguments)
		}
	}
	r.pending[req.ID.Raw()] = c
	return nil, nil
}

// toolName is a tool's name as recorded: at most maxToolName bytes, valid
// UTF-8.
func toolName(s string) string {
	if len(s) > maxToolName {
		s = s[:maxToolName]
	}
	return string([]rune(s))
}

// fromServer filters one line of the server's and passes it on.
func (r *Relay) fromServer(line []byte) error {
	if isBlank(line) {
		return nil
	}
	msg, err := jsonrpc.DecodeMessage(line)
	if err == nil && !oneValue(line) {
		err = errNotJSON
	}
	if err != nil {
		// The error is not logged as it is: it may quote the line.
		what := "not JSON"
		if json.Valid(line) {
			what = "JSON but not a JSON-RPC 2.0 message"
		}
		r.logf("dropped a line of %d bytes from the server: %s", len(line), what)
		return nil
	}
	var p *inflight
	var resp *jsonrpc.Response
	scoped := false
	if resp, _ = msg.(*jsonrpc.Response); resp != nil {
		r.mu.Lock()
		p = r.pending[resp.ID.Raw()]
		delete(r.pending, resp.ID.Raw())
		r.mu.Unlock()
		// An answer the relay cannot place (cancelled, or to a request it
		// never saw) is filtered as a tool result would be.
		scoped = p == nil || p.method == "tools/call" || p.method == "resources/read"
	}
	out, counts, err := r.f.apply(line, scoped)
	if err != nil {
		r.logf("dropped a message of %d bytes from the server: %v", len(line), err)
		if p != nil {
			if p.method == "tools/call" {
				r.record(p, Error, jsonrpc.CodeInternalError, 0)
			}
			return r.client.answer(resp.ID, jsonrpc.CodeInternalError, "hutch mcp wrap: the server's answer could not be read, and was dropped")
		}
		return nil
	}
	n := counts.Total()
	if n > 0 {
		r.mu.Lock()
		r.counts.add(counts)
		r.mu.Unlock()
	}
	werr := r.client.write(out)
	if p != nil && p.method == "tools/call" {
		outcome, code := OK, int64(0)
		var we *jsonrpc.Error
		switch {
		case errors.As(resp.Error, &we):
			outcome, code = Error, we.Code
		case resp.Error != nil:
			outcome, code = Error, jsonrpc.CodeInternalError
		case isToolError(resp.Result):
			outcome = ToolError
		}
		r.record(p, outcome, code, n)
	}
	return werr
}

// isToolError reports whether a tools/call result says isError.
func isToolError(result json.RawMessage) bool {
	// Inside a string a quote is escaped: without the key, no need to
	// parse what may be megabytes.
	if !bytes.Contains(result, []byte(`"isError"`)) {
		return false
	}
	var v struct {
		IsError bool `json:"isError"`
	}
	return json.Unmarshal(result, &v) == nil && v.IsError
}

// refuse handles a line of from's ("client" or "server") longer than the
// limit, which toSender and toReceiver lead back and on: a request's
// sender gets an error for it; an answer's receiver gets an error in
// its place. It returns the client's request the refused line answered,
// if the line was the server's answer to one the relay tracks.
func (r *Relay) refuse(from string, o *oversize, toSender, toReceiver *lineWriter) *inflight {
	what := "notification"
	switch {
	case o.request && o.id.IsValid():
		what = "request"
	case !o.request && o.id.IsValid():
		what = "answer"
	case !o.request:
		what = "message"
	}
	r.logf("refused a %s of %d bytes from the %s: larger than the relay's limit of %d bytes", what, o.size, from, r.o.MaxMessage)
	msg := fmt.Sprintf("hutch mcp wrap: the %s's %s of %d bytes is larger than the relay's limit of %d bytes; it was dropped", from, what, o.size, r.o.MaxMessage)
	switch what {
	case "request":
		code := int64(jsonrpc.CodeInvalidRequest)
		_ = toSender.answer(o.id, code, msg)
	case "answer":
		var p *inflight
		if from == "server" {
			r.mu.Lock()
			p = r.pending[o.id.Raw()]
			delete(r.pending, o.id.Raw())
			r.mu.Unlock()
		}
		_ = toReceiver.answer(o.id, jsonrpc.CodeInternalError, msg)
		if p != nil && p.method == "tools/call" {
			return p
		}
	}
	return nil
}

// record reports a tools/call that ended.
func (r *Relay) record(p *inflight, outcome Outcome, code int64, redactions int) {
	if r.o.Record == nil {
		return
	}
	r.o.Record(Call{
		Tool: p.tool, ArgumentBytes: p.args, Start: p.start, Duration: time.Since(p.start),
		Outcome: outcome, ErrorCode: code, Redactions: redactions,
	})
}

// logf writes a log line, the first maxLogLines only.
func (r *Relay) logf(format string, args ...any) {
	if r.o.Log == nil {
		return
	}
	r.mu.Lock()
	ok := r.logged < maxLogLines
	if ok {
		r.logged++
	} else {
		r.unlogged++
	}
	r.mu.Unlock()
	if ok {
		r.o.Log(fmt.Sprintf(format, args...))
	}
}

// isBlank reports whether a line holds nothing but white space.
func isBlank(b []byte) bool {
	for _, c := range b {
		if c != ' ' && c != '\t' && c != '\r' && c != '\n' {
			return false
		}
	}
	return true
}

// lineWriter writes whole lines to one side, one at a time.
type lineWriter struct {
	mu sync.Mutex
	w  io.Writer
}

// write writes line and a newline.
func (lw *lineWriter) write(line []byte) error {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	_, err := lw.w.Write(append(line, '\n'))
	return err
}

// answer writes a JSON-RPC error answering the request id.
func (lw *lineWriter) answer(id jsonrpc.ID, code int64, msg string) error {
	resp := &jsonrpc.Response{ID: id, Error: &jsonrpc.Error{Code: code, Message: msg}}
	b, err := jsonrpc.EncodeMessage(resp)
	if err != nil {
		return err
	}
	return lw.write(b)
}
