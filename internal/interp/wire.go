package interp

import (
	"encoding/json"
	"fmt"
)

// Port is the sandbox port the code interpreter listens on: E2B's.
const Port = 49999

// The types of Event, as E2B's Code Interpreter SDK reads them.
const (
	EventStdout         = "stdout"
	EventStderr         = "stderr"
	EventResult         = "result"
	EventError          = "error"
	EventExecutionCount = "number_of_executions"
	EventKeepalive      = "keepalive"
	EventEnd            = "end_of_execution"
)

// ExecuteRequest is the body of POST /execute.
type ExecuteRequest struct {
	// Code is what to run.
	Code string `json:"code"`
	// ContextID names the context to run it in; Language the language
	// whose default context runs it (at most one of them; neither: the
	// default Python context).
	ContextID string `json:"context_id,omitempty"`
	Language  string `json:"language,omitempty"`
	// EnvVars are set for this execution only.
	EnvVars map[string]string `json:"env_vars,omitempty"`
}

// CreateContextRequest is the body of POST /contexts.
type CreateContextRequest struct {
	Language string `json:"language,omitempty"` // default "python"
	Cwd      string `json:"cwd,omitempty"`      // default the user's home
}

// Context is a kernel of one language, with its state.
type Context struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
}

// Result is a rich value of an execution: its value (IsMainResult) or
// something it displayed, in each format it came in. Images are base64;
// JSON, Data (a DataFrame's columns) and Chart (a matplotlib figure's
// data) are JSON values; Extra holds the formats without a field of
// their own, by MIME type.
type Result struct {
	Text         string          `json:"text,omitempty"`
	HTML         string          `json:"html,omitempty"`
	Markdown     string          `json:"markdown,omitempty"`
	SVG          string          `json:"svg,omitempty"`
	PNG          string          `json:"png,omitempty"`
	JPEG         string          `json:"jpeg,omitempty"`
	PDF          string          `json:"pdf,omitempty"`
	LaTeX        string          `json:"latex,omitempty"`
	JSON         json.RawMessage `json:"json,omitempty"`
	JavaScript   string          `json:"javascript,omitempty"`
	Data         json.RawMessage `json:"data,omitempty"`
	Chart        json.RawMessage `json:"chart,omitempty"`
	Extra        map[string]any  `json:"extra"`
	IsMainResult bool            `json:"is_main_result"`
}

// ExecutionError is an exception the code raised.
type ExecutionError struct {
	Name      string `json:"name"`
	Value     string `json:"value"`
	Traceback string `json:"traceback"`
}

// Event is one line of POST /execute's answer (newline-delimited JSON):
// by Type, output on a stream (Text, Timestamp), the execution's count,
// a Result, an Error, a keepalive, or the end, always last.
type Event struct {
	Type           string
	Text           string // EventStdout, EventStderr
	Timestamp      string // of the output, RFC 3339
	ExecutionCount int    // EventExecutionCount
	Result         *Result
	Error          *ExecutionError
}

type streamWire struct {
	Type      string `json:"type"`
	Text      string `json:"text"`
	Timestamp string `json:"timestamp,omitempty"`
}

type countWire struct {
	Type           string `json:"type"`
	ExecutionCount int    `json:"execution_count"`
}

type resultWire struct {
	Type string `json:"type"`
	*Result
}

type errorWire struct {
	Type string `json:"type"`
	*ExecutionError
}

// MarshalJSON writes e as E2B's server does: the type and the fields of
// that type, flat.
func (e Event) MarshalJSON() ([]byte, error) {
	switch e.Type {
	case EventStdout, EventStderr:
		return json.Marshal(streamWire{e.Type, e.Text, e.Timestamp})
	case EventExecutionCount:
		return json.Marshal(countWire{e.Type, e.ExecutionCount})
	case EventResult:
		r := e.Result
		if r == nil {
			r = &Result{}
		}
		if r.Extra == nil {
			c := *r
			c.Extra = map[string]any{}
			r = &c
		}
		return json.Marshal(resultWire{e.Type, r})
	case EventError:
		x := e.Error
		if x == nil {
			x = &ExecutionError{}
		}
		return json.Marshal(errorWire{e.Type, x})
	case EventKeepalive, EventEnd:
		return json.Marshal(struct {
			Type string `json:"type"`
		}{e.Type})
	}
	return nil, fmt.Errorf("interp: event of unknown type %q", e.Type)
}

// UnmarshalJSON reads a line of the answer. A type it does not know is
// kept in Type with no fields.
func (e *Event) UnmarshalJSON(b []byte) error {
	var head struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(b, &head); err != nil {
		return err
	}
	*e = Event{Type: head.Type}
	switch head.Type {
	case EventStdout, EventStderr:
		var w streamWire
		if err := json.Unmarshal(b, &w); err != nil {
			return err
		}
		e.Text, e.Timestamp = w.Text, w.Timestamp
	case EventExecutionCount:
		var w countWire
		if err := json.Unmarshal(b, &w); err != nil {
			return err
		}
		e.ExecutionCount = w.ExecutionCount
	case EventResult:
		e.Result = &Result{}
		if err := json.Unmarshal(b, e.Result); err != nil {
			return err
		}
	case EventError:
		e.Error = &ExecutionError{}
		if err := json.Unmarshal(b, e.Error); err != nil {
			return err
		}
	}
	return nil
}
