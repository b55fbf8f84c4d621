package kernel

import (
	"encoding/json"
	"fmt"
	"time"
)

// Output is one thing an execution produced, from the kernel's iopub
// channel: a *Stream, *Result, *Error, *Input or *Dropped.
type Output interface{ output() }

// Stream is text the code wrote to stdout or stderr.
type Stream struct {
	Name string    // "stdout" or "stderr"
	Text string    // may hold several lines or part of one
	Time time.Time // the kernel's timestamp (header date); zero if absent
}

// Result is a rich value: the cell's value (execute_result, Main true) or
// something it displayed (display_data, Main false).
type Result struct {
	Main bool
	// Data maps a MIME type to its value: a string for text and for
	// base64-encoded images, a JSON value for application/json and the
	// like.
	Data     map[string]any
	Metadata map[string]any
	// ExecutionCount is set for the main result only.
	ExecutionCount int
}

// Text returns the value of mime in r.Data when it is a string.
func (r *Result) Text(mime string) (string, bool) {
	s, ok := r.Data[mime].(string)
	return s, ok
}

// Error is an exception the code raised.
type Error struct {
	Name      string   // ename, e.g. "NameError"
	Value     string   // evalue
	Traceback []string // as the kernel sent it, one chunk per entry
}

// Error formats e as "Name: Value".
func (e *Error) Error() string { return e.Name + ": " + e.Value }

// Input reports that the kernel started the code under ExecutionCount.
type Input struct {
	ExecutionCount int
}

// Dropped marks a message of the execution that was not delivered because
// it was larger than Config.MaxMessageBytes or could not be parsed.
type Dropped struct {
	MsgType string // "" when the header was not read
	Size    int    // bytes, all frames
	Reason  string
}

func (*Stream) output()  {}
func (*Result) output()  {}
func (*Error) output()   {}
func (*Input) output()   {}
func (*Dropped) output() {}

// parseOutput turns an iopub message into an Output. It returns nil for
// the message types an execution does not report (status, clear_output,
// comm messages and the like).
func parseOutput(m message) (Output, error) {
	var out Output
	var err error
	switch m.Header.MsgType {
	case "stream":
		var c struct{ Name, Text string }
		err = json.Unmarshal(m.Content, &c)
		s := &Stream{Name: c.Name, Text: c.Text}
		s.Time, _ = time.Parse(time.RFC3339Nano, m.Header.Date)
		out = s
	case "execute_result", "display_data":
		var c struct {
			Data           map[string]any `json:"data"`
			Metadata       map[string]any `json:"metadata"`
			ExecutionCount int            `json:"execution_count"`
		}
		err = json.Unmarshal(m.Content, &c)
		out = &Result{Main: m.Header.MsgType == "execute_result", Data: c.Data, Metadata: c.Metadata, ExecutionCount: c.ExecutionCount}
	case "error":
		var e errorContent
		err = json.Unmarshal(m.Content, &e)
		out = e.toError()
	case "execute_input":
		var c struct {
			ExecutionCount int `json:"execution_count"`
		}
		err = json.Unmarshal(m.Content, &c)
		out = &Input{ExecutionCount: c.ExecutionCount}
	default:
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("kernel: malformed %s: %w", m.Header.MsgType, err)
	}
	return out, nil
}

// errorContent is the shape of an error, both in iopub error messages and
// in an execute_reply whose status is "error".
type errorContent struct {
	Ename     string   `json:"ename"`
	Evalue    string   `json:"evalue"`
	Traceback []string `json:"traceback"`
}

func (e errorContent) toError() *Error {
	return &Error{Name: e.Ename, Value: e.Evalue, Traceback: e.Traceback}
}
