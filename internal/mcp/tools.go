package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"reflect"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/hutch-sandbox/hutch/internal/agent"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// tools are the tools of one server.
type tools struct {
	o     *Options
	names map[string]bool // of the tools registered
}

// maxNoted bounds what the audit of a call is told of a name the caller
// gave (a tool that does not exist, a sandbox id): longer than any real
// one, short enough for a log record.
const maxNoted = 64

// noted is name as the audit of a call is told of it: cut to maxNoted
// bytes.
func noted(name string) string {
	if len(name) <= maxNoted {
		return name
	}
	return strings.ToValidUTF8(name[:maxNoted], "") + "…"
}

// auditKey is the context key of a tool call's auditRec.
type auditKey struct{}

// auditRec is what a tool's handler tells the audit of its call.
type auditRec struct {
	sandbox string
	command []string
	paths   []string
}

// audit is a middleware that tells Options.Audit of every tool call once
// it ended, failed arguments included.
func (t *tools) audit(next sdk.MethodHandler) sdk.MethodHandler {
	return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
		cr, ok := req.(*sdk.CallToolRequest)
		if method != "tools/call" || !ok || cr.Params == nil {
			return next(ctx, method, req)
		}
		rec := &auditRec{}
		start := time.Now()
		res, err := next(context.WithValue(ctx, auditKey{}, rec), method, req)
		c := Call{Tool: noted(cr.Params.Name), Unknown: !t.names[cr.Params.Name], Sandbox: rec.sandbox,
			Command: rec.command, Paths: rec.paths, ArgBytes: len(cr.Params.Arguments), Duration: time.Since(start), Err: err}
		if r, ok := res.(*sdk.CallToolResult); ok && err == nil && r.IsError {
			c.Err = r.GetError()
			if c.Err == nil {
				c.Err = errors.New(resultText(r))
			}
		}
		if c.Err != nil {
			t.o.Log.Debug("tool call failed", "tool", c.Tool, "sandbox", c.Sandbox, "err", c.Err)
		}
		if t.o.Audit != nil {
			t.o.Audit(c)
		}
		return res, err
	}
}

// resultText is the text of a result's text contents.
func resultText(r *sdk.CallToolResult) string {
	var b strings.Builder
	for _, c := range r.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// sandbox resolves a call's sandbox_id ("" for the backend's default)
// and describes the sandbox.
func (t *tools) sandbox(ctx context.Context, id string) (Sandbox, error) {
	if id == "" {
		var err error
		if id, err = t.o.Backend.DefaultSandbox(ctx); err != nil {
			return Sandbox{}, err
		}
	}
	noteSandbox(ctx, id)
	return t.o.Backend.Get(ctx, id)
}

// noteSandbox tells the audit of the call in ctx which sandbox it acts on.
func noteSandbox(ctx context.Context, id string) {
	if rec, ok := ctx.Value(auditKey{}).(*auditRec); ok {
		rec.sandbox = noted(id)
	}
}

// noteChange tells the audit of the call in ctx what it runs (command) or
// writes (path), as hutch's API records its exec and envd its writes.
func noteChange(ctx context.Context, command []string, path string) {
	if rec, ok := ctx.Value(auditKey{}).(*auditRec); ok {
		rec.command = command
		if path != "" {
			rec.paths = []string{path}
		}
	}
}

// agentOf is the client of the agent of the call's sandbox, and the
// sandbox.
func (t *tools) agentOf(ctx context.Context, id string) (Sandbox, *agent.Client, error) {
	sb, err := t.sandbox(ctx, id)
	if err != nil {
		return sb, nil, err
	}
	ac, err := t.o.Backend.Agent(ctx, sb.ID)
	if err != nil {
		return sb, nil, err
	}
	return sb, ac, nil
}

// resolve makes p (named by field) absolute in sb: a relative path starts
// from the sandbox's workspace.
func resolve(sb Sandbox, field, p string) (string, error) {
	switch {
	case p == "":
		return "", fmt.Errorf("%s is required", field)
	case strings.IndexByte(p, 0) >= 0:
		return "", fmt.Errorf("%s %.200q: contains a NUL byte", field, p)
	case len(p) > 4096:
		return "", fmt.Errorf("%s: %d bytes, longer than a path may be (4096)", field, len(p))
	case path.IsAbs(p):
		return path.Clean(p), nil
	case sb.Workspace == "":
		return "", fmt.Errorf("%s %.200q: relative, and sandbox %s has no workspace: give an absolute path", field, p, sb.ID)
	}
	return path.Join(sb.Workspace, p), nil
}

// tool is tool's description of the tool named name, which it records as
// one of the server's.
func (t *tools) tool(name, title, description string, readOnly, destructive, idempotent, openWorld bool) *sdk.Tool {
	t.names[name] = true
	return tool(name, title, description, readOnly, destructive, idempotent, openWorld)
}

// tool describes a tool: its annotations say whether it only reads,
// whether it may destroy what it does not create, whether repeating it
// changes nothing more, and whether it reaches outside the sandboxes.
func tool(name, title, description string, readOnly, destructive, idempotent, openWorld bool) *sdk.Tool {
	ann := &sdk.ToolAnnotations{Title: title, ReadOnlyHint: readOnly, IdempotentHint: idempotent, OpenWorldHint: &openWorld}
	if !readOnly {
		ann.DestructiveHint = &destructive
	}
	return &sdk.Tool{Name: name, Title: title, Description: description, Annotations: ann}
}

// text is a result with text content (the structured content is the
// tool's output, which the SDK adds).
func text(s string, more ...sdk.Content) *sdk.CallToolResult {
	return &sdk.CallToolResult{Content: append([]sdk.Content{&sdk.TextContent{Text: s}}, more...)}
}

// jsonText is a result whose text content is out as JSON.
func jsonText(out any) *sdk.CallToolResult {
	b, err := json.Marshal(out)
	if err != nil {
		return text(fmt.Sprint(out))
	}
	return text(string(b))
}

// addTool adds tool t with handler h to s as sdk.AddTool does — input and
// output schemas inferred from In and Out once, a handler's error a tool
// error, the output as structured content and, without other content, as
// text — but decodes each call's arguments straight into In (unknown
// properties refused, as the schema says) and sends the output as it
// marshals, where sdk.AddTool validates the arguments and the output
// against their schemas at every call: that took about half of what MCP
// added to an exec (bench/mcp.sh). The handlers check what a schema
// cannot (a command or path that is required, a port's range); the
// output is hutch's own.
func addTool[In, Out any](s *sdk.Server, t *sdk.Tool, h sdk.ToolHandlerFor[In, Out]) {
	in, err := jsonschema.ForType(reflect.TypeFor[In](), &jsonschema.ForOptions{})
	if err != nil {
		panic(fmt.Sprintf("tool %s: input schema: %v", t.Name, err))
	}
	out, err := jsonschema.ForType(reflect.TypeFor[Out](), &jsonschema.ForOptions{})
	if err != nil {
		panic(fmt.Sprintf("tool %s: output schema: %v", t.Name, err))
	}
	tt := *t
	tt.InputSchema, tt.OutputSchema = in, out
	s.AddTool(&tt, func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		var args In
		if raw := req.Params.Arguments; len(raw) > 0 && string(raw) != "null" {
			dec := json.NewDecoder(bytes.NewReader(raw))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&args); err != nil {
				return toolError(fmt.Errorf("arguments: %v", err)), nil
			}
		}
		res, outv, err := h(ctx, req, args)
		if err != nil {
			var wire *jsonrpc.Error
			if errors.As(err, &wire) {
				return nil, wire
			}
			return toolError(err), nil
		}
		if res == nil {
			res = &sdk.CallToolResult{}
		}
		b, err := json.Marshal(outv)
		if err != nil {
			return nil, fmt.Errorf("tool %s: output: %w", t.Name, err)
		}
		res.StructuredContent = json.RawMessage(b)
		if res.Content == nil {
			res.Content = []sdk.Content{&sdk.TextContent{Text: string(b)}}
		}
		return res, nil
	})
}

// toolError is the result of a call that failed with err.
func toolError(err error) *sdk.CallToolResult {
	var r sdk.CallToolResult
	r.SetError(err)
	return &r
}
