package mcp

import (
	"context"
	"fmt"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// MaxSandboxTimeout bounds sandbox_create's timeout_s (the backend may
// bound it further).
const MaxSandboxTimeout = 7 * 24 * time.Hour

// SandboxCreateIn is sandbox_create's arguments.
type SandboxCreateIn struct {
	Image        string   `json:"image,omitempty" jsonschema:"a template name or an image reference (e.g. python:3.12); empty for the default environment"`
	TimeoutS     int64    `json:"timeout_s,omitempty" jsonschema:"the sandbox's lifetime in seconds, after which it ends with everything in it; 0 for the default"`
	AllowDomains []string `json:"allow_domains,omitempty" jsonschema:"hosts the sandbox may reach over the network, through its egress proxy (example.com, *.example.com); none when empty: no network"`
}

// SandboxIn names a sandbox.
type SandboxIn struct {
	SandboxID string `json:"sandbox_id,omitempty" jsonschema:"the sandbox's id (from sandbox_create or sandbox_list); may be left out where a session sandbox is the default"`
}

// SandboxListOut is sandbox_list's result.
type SandboxListOut struct {
	Sandboxes []Sandbox `json:"sandboxes" jsonschema:"the sandboxes, newest first"`
}

// SandboxKillOut is sandbox_kill's result.
type SandboxKillOut struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the sandbox that was killed"`
	Killed    bool   `json:"killed" jsonschema:"true: the sandbox and every process in it ended"`
}

// PortURLIn is port_url's arguments.
type PortURLIn struct {
	Port      int    `json:"port" jsonschema:"the TCP port a server listens on inside the sandbox (1-65535)"`
	SandboxID string `json:"sandbox_id,omitempty" jsonschema:"the sandbox's id; may be left out where a session sandbox is the default"`
}

// PortURLOut is port_url's result.
type PortURLOut struct {
	URL string `json:"url" jsonschema:"a URL on the host that reaches the server listening on the port inside the sandbox"`
}

func (t *tools) addSandboxTools(s *sdk.Server) {
	addTool(s, t.tool("sandbox_create", "Create a sandbox",
		"Create a new isolated Linux sandbox and return its sandbox_id, which exec and the file tools take. "+
			"A sandbox has its own file system (changes stay in it), processes and network: no network at all unless allow_domains names hosts. "+
			"It ends by itself after its lifetime (timeout_s, or the default); end it sooner with sandbox_kill. "+
			"What may be asked for is bounded by the operator: a request beyond it fails and says what is allowed.",
		false, false, false, true), t.sandboxCreate)
	addTool(s, t.tool("sandbox_list", "List sandboxes",
		"List your sandboxes, newest first, with their ids, states, images, workspaces and expiry times.",
		true, false, true, false), t.sandboxList)
	addTool(s, t.tool("sandbox_info", "Describe a sandbox",
		"Describe one sandbox: its state, isolation tier, image, workspace (the directory relative paths start from) and when it expires.",
		true, false, true, false), t.sandboxInfo)
	addTool(s, t.tool("sandbox_kill", "Kill a sandbox",
		"Kill a sandbox: every process in it ends and its files are gone for good, as are the exec sessions of its commands.",
		false, true, true, false), t.sandboxKill)
	addTool(s, t.tool("port_url", "URL of a sandbox port",
		"Give a URL on the host that reaches a server listening on a TCP port inside the sandbox (a dev server started with exec, say), to hand to a user or a browser.",
		true, false, true, false), t.portURL)
}

func (t *tools) sandboxCreate(ctx context.Context, _ *sdk.CallToolRequest, in SandboxCreateIn) (*sdk.CallToolResult, Sandbox, error) {
	if in.TimeoutS < 0 || in.TimeoutS > int64(MaxSandboxTimeout/time.Second) {
		return nil, Sandbox{}, fmt.Errorf("timeout_s %d: want 0 (the default) to %d seconds", in.TimeoutS, int64(MaxSandboxTimeout/time.Second))
	}
	sb, err := t.o.Backend.Create(ctx, CreateRequest{
		Image:        in.Image,
		Timeout:      time.Duration(in.TimeoutS) * time.Second,
		AllowDomains: in.AllowDomains,
	})
	if err != nil {
		return nil, Sandbox{}, err
	}
	noteSandbox(ctx, sb.ID)
	return jsonText(sb), sb, nil
}

func (t *tools) sandboxList(ctx context.Context, _ *sdk.CallToolRequest, _ struct{}) (*sdk.CallToolResult, SandboxListOut, error) {
	list, err := t.o.Backend.List(ctx)
	if err != nil {
		return nil, SandboxListOut{}, err
	}
	out := SandboxListOut{Sandboxes: list}
	if out.Sandboxes == nil {
		out.Sandboxes = []Sandbox{}
	}
	return jsonText(out), out, nil
}

func (t *tools) sandboxInfo(ctx context.Context, _ *sdk.CallToolRequest, in SandboxIn) (*sdk.CallToolResult, Sandbox, error) {
	sb, err := t.sandbox(ctx, in.SandboxID)
	if err != nil {
		return nil, Sandbox{}, err
	}
	return jsonText(sb), sb, nil
}

func (t *tools) sandboxKill(ctx context.Context, _ *sdk.CallToolRequest, in SandboxIn) (*sdk.CallToolResult, SandboxKillOut, error) {
	sb, err := t.sandbox(ctx, in.SandboxID)
	if err != nil {
		return nil, SandboxKillOut{}, err
	}
	t.o.Execs.DropSandbox(t.o.Owner, sb.ID)
	if err := t.o.Backend.Kill(ctx, sb.ID); err != nil {
		return nil, SandboxKillOut{}, err
	}
	out := SandboxKillOut{SandboxID: sb.ID, Killed: true}
	return jsonText(out), out, nil
}

func (t *tools) portURL(ctx context.Context, _ *sdk.CallToolRequest, in PortURLIn) (*sdk.CallToolResult, PortURLOut, error) {
	if in.Port < 1 || in.Port > 65535 {
		return nil, PortURLOut{}, fmt.Errorf("port %d: want a TCP port, 1-65535", in.Port)
	}
	sb, err := t.sandbox(ctx, in.SandboxID)
	if err != nil {
		return nil, PortURLOut{}, err
	}
	u, err := t.o.Backend.PortURL(ctx, sb.ID, in.Port)
	if err != nil {
		return nil, PortURLOut{}, err
	}
	out := PortURLOut{URL: u}
	return jsonText(out), out, nil
}
