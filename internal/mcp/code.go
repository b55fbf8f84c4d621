package mcp

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hutch-sandbox/hutch/internal/interp"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// Interpreters is what a Backend has when its sandboxes can run a code
// interpreter (those of an image with Jupyter kernels): run_code is a tool
// of a server whose backend has it, and only then.
type Interpreters interface {
	// Interpreter is a client of the code interpreter of sandbox id;
	// an error naming the problem when it has none.
	Interpreter(ctx context.Context, id string) (*interp.Client, error)
}

// RunCodeIn is run_code's arguments.
type RunCodeIn struct {
	Code      string            `json:"code" jsonschema:"the code to run; the value of its last expression is the main result, as in a notebook cell"`
	Language  string            `json:"language,omitempty" jsonschema:"the language whose default context runs the code: python (the default), or another the sandbox has a kernel for (javascript, r, …); not with context"`
	Context   string            `json:"context,omitempty" jsonschema:"the id of a context to run the code in (made with hutch's API), instead of the language's default one; not with language"`
	Env       map[string]string `json:"env,omitempty" jsonschema:"environment variables set for this execution only"`
	SandboxID string            `json:"sandbox_id,omitempty" jsonschema:"the sandbox to run in (one of an image with Jupyter kernels, such as hutch.local/code-interpreter); may be left out where a session sandbox is the default"`
}

// CodeResultOut is a rich result of run_code, as its structured content
// has it.
type CodeResultOut struct {
	Formats      []string `json:"formats" jsonschema:"every format the result came in (text, html, markdown, svg, png, jpeg, pdf, latex, json, javascript, data, chart, or a MIME type)"`
	IsMainResult bool     `json:"is_main_result" jsonschema:"true: the value of the code's last expression; false: something it displayed (a plot, a table)"`
	Text         string   `json:"text,omitempty" jsonschema:"the result as text"`
	HTML         string   `json:"html,omitempty"`
	Markdown     string   `json:"markdown,omitempty"`
	SVG          string   `json:"svg,omitempty"`
	LaTeX        string   `json:"latex,omitempty"`
	JSON         any      `json:"json,omitempty"`
	Data         any      `json:"data,omitempty" jsonschema:"a DataFrame's columns"`
	Chart        any      `json:"chart,omitempty" jsonschema:"a plot's data (type, title, axes, elements), when the interpreter could read it"`
	Image        int      `json:"image,omitempty" jsonschema:"when the result is a PNG or JPEG image: its place among the answer's image contents, from 1"`
	Omitted      []string `json:"omitted,omitempty" jsonschema:"formats left out here: binary ones (png and jpeg are image contents; pdf is not sent) and those larger than the server's cap"`
}

// RunCodeOut is run_code's result.
type RunCodeOut struct {
	Results        []CodeResultOut        `json:"results" jsonschema:"the rich results, in order"`
	Stdout         string                 `json:"stdout" jsonschema:"what the code printed on stdout; when longer than the server's cap, the head and the tail with a line saying how much was cut"`
	Stderr         string                 `json:"stderr" jsonschema:"what it printed on stderr, cut as stdout is"`
	TruncatedBytes int64                  `json:"truncated_bytes" jsonschema:"how many bytes of stdout and stderr were cut"`
	Error          *interp.ExecutionError `json:"error,omitempty" jsonschema:"the exception the code raised (name, value, traceback), if it raised one"`
	ExecutionCount int                    `json:"execution_count" jsonschema:"numbers the execution in its context"`
	DurationMS     int64                  `json:"duration_ms" jsonschema:"how long it ran, in milliseconds"`
}

func (t *tools) addCodeTools(s *sdk.Server) {
	addTool(s, t.tool("run_code", "Run code in a code interpreter",
		"Run code (Python by default) in the code interpreter of a sandbox of an image with Jupyter kernels, as a notebook cell: "+
			"variables, imports and definitions last from one call to the next in the same context. "+
			"Returns what it printed, the value of its last expression, rich results (a matplotlib plot comes back as an image; "+
			"tables as HTML and text) and the exception it raised with its traceback. "+
			"An exception is a result, not a tool error. Long output keeps its head and tail. Cancelling the call interrupts the execution.",
		false, true, false, true), t.runCode)
}

func (t *tools) runCode(ctx context.Context, _ *sdk.CallToolRequest, in RunCodeIn) (*sdk.CallToolResult, RunCodeOut, error) {
	switch {
	case strings.TrimSpace(in.Code) == "":
		return nil, RunCodeOut{}, errors.New("code is required")
	case len(in.Code) > MaxCommand:
		return nil, RunCodeOut{}, fmt.Errorf("code: %d bytes, at most %d (write a file with file_write and run it from code)", len(in.Code), MaxCommand)
	case in.Language != "" && in.Context != "":
		return nil, RunCodeOut{}, errors.New("language and context: give one of them (a context has its language)")
	}
	for k, v := range in.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.IndexByte(v, 0) >= 0 {
			return nil, RunCodeOut{}, fmt.Errorf("env: %.64q is not a variable name, or its value holds a NUL byte", k)
		}
	}
	sb, err := t.sandbox(ctx, in.SandboxID)
	if err != nil {
		return nil, RunCodeOut{}, err
	}
	ic, err := t.o.Backend.(Interpreters).Interpreter(ctx, sb.ID)
	if err != nil {
		return nil, RunCodeOut{}, err
	}
	start := time.Now()
	stdout, stderr := newCutter(t.o.MaxOutput), newCutter(t.o.MaxOutput)
	var out RunCodeOut
	var images []sdk.Content
	err = ic.Execute(ctx, interp.ExecuteRequest{Code: in.Code, Language: in.Language, ContextID: in.Context, EnvVars: in.Env}, func(ev interp.Event) {
		switch ev.Type {
		case interp.EventStdout:
			_, _ = stdout.Write([]byte(ev.Text))
		case interp.EventStderr:
			_, _ = stderr.Write([]byte(ev.Text))
		case interp.EventExecutionCount:
			out.ExecutionCount = ev.ExecutionCount
		case interp.EventError:
			out.Error = ev.Error
		case interp.EventResult:
			r, img := t.codeResult(ev.Result, len(images))
			if img != nil {
				images = append(images, img)
			}
			out.Results = append(out.Results, r)
		}
	})
	out.DurationMS = time.Since(start).Milliseconds()
	if err != nil {
		var se *interp.StatusError
		if errors.As(err, &se) {
			return nil, RunCodeOut{}, fmt.Errorf("sandbox %s: %s", sb.ID, strings.TrimPrefix(se.Message, "code interpreter: "))
		}
		if ctx.Err() != nil {
			return nil, RunCodeOut{}, fmt.Errorf("run_code cancelled: the execution was interrupted (%w)", ctx.Err())
		}
		return nil, RunCodeOut{}, fmt.Errorf("sandbox %s: %w", sb.ID, err)
	}
	oh, ot, ocut := stdout.take(true)
	eh, et, ecut := stderr.take(true)
	out.Stdout, out.Stderr = joinCut(oh, ot, ocut, ""), joinCut(eh, et, ecut, "")
	out.TruncatedBytes = ocut + ecut
	if out.Error != nil && len(out.Error.Traceback) > t.o.MaxOutput {
		e := *out.Error
		c := newCutter(t.o.MaxOutput)
		_, _ = c.Write([]byte(e.Traceback))
		h, tl, cut := c.take(true)
		e.Traceback = joinCut(h, tl, cut, "")
		out.Error = &e
	}
	if out.Results == nil {
		out.Results = []CodeResultOut{}
	}
	return &sdk.CallToolResult{Content: append([]sdk.Content{&sdk.TextContent{Text: codeText(out)}}, images...)}, out, nil
}

// codeResult is r as run_code's structured content has it, and its image
// content if it is an image (the n+1th of the answer).
func (t *tools) codeResult(r *interp.Result, n int) (CodeResultOut, sdk.Content) {
	out := CodeResultOut{IsMainResult: r.IsMainResult}
	var img sdk.Content
	text := func(name, v string, dst *string) {
		if v == "" {
			return
		}
		out.Formats = append(out.Formats, name)
		if len(v) > t.o.MaxOutput {
			out.Omitted = append(out.Omitted, name)
			return
		}
		*dst = v
	}
	value := func(name string, v json.RawMessage, dst *any) {
		if len(v) == 0 {
			return
		}
		out.Formats = append(out.Formats, name)
		if len(v) > t.o.MaxOutput {
			out.Omitted = append(out.Omitted, name)
			return
		}
		*dst = v
	}
	binary := func(name, mime, v string) {
		if v == "" {
			return
		}
		out.Formats = append(out.Formats, name)
		out.Omitted = append(out.Omitted, name)
		if mime == "" || img != nil {
			return
		}
		b, err := base64.StdEncoding.DecodeString(v)
		if err != nil || len(b) > MaxImage {
			return
		}
		img = &sdk.ImageContent{Data: b, MIMEType: mime}
		out.Image = n + 1
	}
	text("text", r.Text, &out.Text)
	text("html", r.HTML, &out.HTML)
	text("markdown", r.Markdown, &out.Markdown)
	text("svg", r.SVG, &out.SVG)
	binary("png", "image/png", r.PNG)
	binary("jpeg", "image/jpeg", r.JPEG)
	binary("pdf", "", r.PDF)
	text("latex", r.LaTeX, &out.LaTeX)
	value("json", r.JSON, &out.JSON)
	var js string
	text("javascript", r.JavaScript, &js)
	value("data", r.Data, &out.Data)
	value("chart", r.Chart, &out.Chart)
	for k := range r.Extra {
		out.Formats = append(out.Formats, k)
		out.Omitted = append(out.Omitted, k)
	}
	return out, img
}

// codeText is run_code's text content: the output, the value, what else
// came, the exception.
func codeText(out RunCodeOut) string {
	var b strings.Builder
	section := func(s string) {
		if s == "" {
			return
		}
		b.WriteString(s)
		if !strings.HasSuffix(s, "\n") {
			b.WriteByte('\n')
		}
	}
	section(out.Stdout)
	if out.Stderr != "" {
		section("[stderr]\n" + out.Stderr)
	}
	for _, r := range out.Results {
		switch {
		case r.IsMainResult && r.Text != "":
			section(fmt.Sprintf("Out[%d]: %s", out.ExecutionCount, r.Text))
		case r.Image > 0:
			section(fmt.Sprintf("[image %d: %s]", r.Image, strings.Join(r.Formats, ", ")))
		default:
			section(fmt.Sprintf("[result: %s]", strings.Join(r.Formats, ", ")))
		}
	}
	if e := out.Error; e != nil {
		section(fmt.Sprintf("%s: %s", e.Name, e.Value))
		section(e.Traceback)
	}
	if b.Len() == 0 {
		return "[no output]"
	}
	return b.String()
}
