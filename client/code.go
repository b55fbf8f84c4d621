package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
)

// maxCodeLine bounds one line of an execution's answer: a kernel's
// message is at most 32 MiB, and its JSON larger by its escaping.
const maxCodeLine = 2*32<<20 + 64<<10

// Types of a CodeEvent, as the daemon streams them.
const (
	CodeEventStdout         = "stdout"
	CodeEventStderr         = "stderr"
	CodeEventResult         = "result"
	CodeEventError          = "error"
	CodeEventExecutionCount = "number_of_executions"
	CodeEventKeepalive      = "keepalive"
	CodeEventEnd            = "end_of_execution"
)

// RunCodeRequest is code for a sandbox's code interpreter (a sandbox of
// an image with Jupyter kernels, such as hutch's code-interpreter image).
type RunCodeRequest struct {
	// Code is what to run.
	Code string
	// Language names the language whose default context runs it;
	// Context a context (CreateCodeContext) instead, whose state the
	// earlier executions in it left. Neither: Python's default context.
	Language string
	Context  string
	// Env is set for this execution only.
	Env map[string]string

	// OnStdout and OnStderr, when set, get the output as it comes;
	// OnResult each rich result (a displayed value, or the code's value)
	// as it comes. Execution has them all in the end too.
	OnStdout func(string)
	OnStderr func(string)
	OnResult func(CodeResult)
}

// CodeResult is a rich value of an execution: the code's value
// (IsMainResult) or something it displayed, in each format it came in.
// PNG, JPEG and PDF are base64; JSON, Data (a DataFrame's columns) and
// Chart (a matplotlib figure's data) are JSON values; Extra holds the
// formats without a field of their own, by MIME type.
type CodeResult struct {
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
	Extra        map[string]any  `json:"extra,omitempty"`
	IsMainResult bool            `json:"is_main_result"`
}

// Formats lists the formats r has, text first.
func (r CodeResult) Formats() []string {
	var out []string
	for _, f := range []struct {
		name string
		ok   bool
	}{
		{"text", r.Text != ""}, {"html", r.HTML != ""}, {"markdown", r.Markdown != ""}, {"svg", r.SVG != ""},
		{"png", r.PNG != ""}, {"jpeg", r.JPEG != ""}, {"pdf", r.PDF != ""}, {"latex", r.LaTeX != ""},
		{"json", len(r.JSON) > 0}, {"javascript", r.JavaScript != ""}, {"data", len(r.Data) > 0}, {"chart", len(r.Chart) > 0},
	} {
		if f.ok {
			out = append(out, f.name)
		}
	}
	for k := range r.Extra {
		out = append(out, k)
	}
	return out
}

// ExecutionError is an exception the code raised.
type ExecutionError struct {
	Name      string `json:"name"`
	Value     string `json:"value"`
	Traceback string `json:"traceback"`
}

// Error is "Name: Value".
func (e *ExecutionError) Error() string { return e.Name + ": " + e.Value }

// Execution is what an execution produced.
type Execution struct {
	// Results are its rich results, in order.
	Results []CodeResult `json:"results"`
	// Stdout and Stderr are its output, in the pieces it came in.
	Stdout []string `json:"stdout"`
	Stderr []string `json:"stderr"`
	// Error is the exception it raised, nil if none: a result of the
	// execution, not an error of RunCode.
	Error *ExecutionError `json:"error,omitempty"`
	// ExecutionCount numbers the execution in its context.
	ExecutionCount int `json:"execution_count"`
}

// Text is the text of the main result (the code's value), "" if none.
func (e *Execution) Text() string {
	for _, r := range e.Results {
		if r.IsMainResult {
			return r.Text
		}
	}
	return ""
}

// codeLine is a line of an execution's answer: the fields of its type,
// flat.
type codeLine struct {
	Type           string `json:"type"`
	Text           string `json:"text"`
	ExecutionCount int    `json:"execution_count"`
	Name           string `json:"name"`
	Value          string `json:"value"`
	Traceback      string `json:"traceback"`
}

// RunCode runs code in the code interpreter of sandbox id and returns
// what it produced once it ended; an exception the code raised is
// Execution.Error, not an error. A sandbox without the interpreter is an
// *Error of code CodeNoInterpreter; a context that does not exist,
// ErrNotFound. Ending ctx interrupts the execution.
func (c *Client) RunCode(ctx context.Context, id string, r RunCodeRequest) (*Execution, error) {
	in := struct {
		Code     string            `json:"code"`
		Language string            `json:"language,omitempty"`
		Context  string            `json:"context,omitempty"`
		Env      map[string]string `json:"env,omitempty"`
	}{r.Code, r.Language, r.Context, r.Env}
	b, err := json.Marshal(in)
	if err != nil {
		return nil, fmt.Errorf("hutch client: run code: %w", err)
	}
	req, err := c.newRequest(ctx, http.MethodPost, sandboxPath(id, "code"), nil, bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/x-ndjson")
	resp, err := c.send(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	ex := &Execution{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), maxCodeLine)
	for sc.Scan() {
		line := sc.Bytes()
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var l codeLine
		if err := json.Unmarshal(line, &l); err != nil {
			return ex, fmt.Errorf("hutch client: run code in %s: decode: %w", id, err)
		}
		switch l.Type {
		case CodeEventStdout:
			ex.Stdout = append(ex.Stdout, l.Text)
			if r.OnStdout != nil {
				r.OnStdout(l.Text)
			}
		case CodeEventStderr:
			ex.Stderr = append(ex.Stderr, l.Text)
			if r.OnStderr != nil {
				r.OnStderr(l.Text)
			}
		case CodeEventExecutionCount:
			ex.ExecutionCount = l.ExecutionCount
		case CodeEventError:
			ex.Error = &ExecutionError{Name: l.Name, Value: l.Value, Traceback: l.Traceback}
		case CodeEventResult:
			var res CodeResult
			if err := json.Unmarshal(line, &res); err != nil {
				return ex, fmt.Errorf("hutch client: run code in %s: decode a result: %w", id, err)
			}
			if len(res.Extra) == 0 {
				res.Extra = nil
			}
			ex.Results = append(ex.Results, res)
			if r.OnResult != nil {
				r.OnResult(res)
			}
		case CodeEventEnd:
			return ex, nil
		}
	}
	err = sc.Err()
	if ctx.Err() != nil {
		err = ctx.Err()
	} else if err == nil {
		err = io.ErrUnexpectedEOF
	}
	return ex, fmt.Errorf("hutch client: run code in %s: the answer broke off before the execution's end: %w", id, err)
}

// CodeContext is a context of a sandbox's code interpreter: a kernel of
// one language, whose state lasts from one execution to the next.
type CodeContext struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
}

// CodeContextOptions choose what CreateCodeContext makes.
type CodeContextOptions struct {
	// Language is its language ("": python).
	Language string `json:"language,omitempty"`
	// Cwd is its working directory, absolute ("": the user's home).
	Cwd string `json:"cwd,omitempty"`
}

// CodeContexts lists the contexts of sandbox id's code interpreter, in
// creation order.
func (c *Client) CodeContexts(ctx context.Context, id string) ([]CodeContext, error) {
	var out []CodeContext
	if err := c.call(ctx, http.MethodGet, sandboxPath(id, "code", "contexts"), nil, nil, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// CreateCodeContext starts a context in sandbox id's code interpreter; it
// returns once its kernel runs.
func (c *Client) CreateCodeContext(ctx context.Context, id string, o CodeContextOptions) (CodeContext, error) {
	var out CodeContext
	err := c.call(ctx, http.MethodPost, sandboxPath(id, "code", "contexts"), nil, o, &out)
	return out, err
}

// RemoveCodeContext ends context cid of sandbox id's code interpreter.
func (c *Client) RemoveCodeContext(ctx context.Context, id, cid string) error {
	return c.call(ctx, http.MethodDelete, sandboxPath(id, "code", "contexts", url.PathEscape(cid)), nil, nil, nil)
}

// RestartCodeContext starts context cid's kernel afresh: its state is
// lost.
func (c *Client) RestartCodeContext(ctx context.Context, id, cid string) error {
	return c.call(ctx, http.MethodPost, sandboxPath(id, "code", "contexts", url.PathEscape(cid), "restart"), nil, nil, nil)
}
