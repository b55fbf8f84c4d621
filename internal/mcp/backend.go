package mcp

import (
	"context"
	"time"

	"github.com/hutch-sandbox/hutch/internal/agent"
)

// Backend is where the tools' sandboxes live, for one caller: a tenant of
// hutch serve, or one hutch mcp session. Its errors are shown to the
// model as they are, so they name the problem (and, when something is
// refused, what would be allowed).
type Backend interface {
	// Create starts a sandbox as r asks, within what the operator
	// allows: a request wider than that is refused, never narrowed in
	// silence.
	Create(ctx context.Context, r CreateRequest) (Sandbox, error)
	// List lists the caller's sandboxes, newest first.
	List(ctx context.Context) ([]Sandbox, error)
	// Get describes one of the caller's sandboxes.
	Get(ctx context.Context, id string) (Sandbox, error)
	// Kill ends one of the caller's sandboxes and everything in it.
	Kill(ctx context.Context, id string) error
	// Agent is the client of the sandbox's agent, which runs its commands
	// and file operations; the call counts as activity of the sandbox.
	Agent(ctx context.Context, id string) (*agent.Client, error)
	// PortURL is a URL on the host that reaches the server listening on
	// port inside sandbox id.
	PortURL(ctx context.Context, id string, port int) (string, error)
	// DefaultSandbox is the sandbox a tool call that names none means
	// (hutch mcp's session sandbox, over the current directory); an
	// error saying that sandbox_id is required when there is none.
	DefaultSandbox(ctx context.Context) (string, error)
}

// CreateRequest is what sandbox_create asks for.
type CreateRequest struct {
	// Image is a template name or an image reference; "" for the
	// backend's default.
	Image string
	// Timeout is the sandbox's lifetime; 0 for the backend's default.
	Timeout time.Duration
	// AllowDomains are the hosts the sandbox may reach through its
	// egress proxy (policy network.allowed_domains syntax); none when
	// empty.
	AllowDomains []string
}

// Sandbox describes a sandbox, as the tools return it.
type Sandbox struct {
	ID        string    `json:"sandbox_id" jsonschema:"the sandbox's id, which the other tools take as sandbox_id"`
	State     string    `json:"state" jsonschema:"starting, running, paused, stopping or stopped"`
	Tier      string    `json:"tier,omitempty" jsonschema:"the isolation tier: namespace (Linux namespaces, seccomp, Landlock) or gvisor (gVisor's user-space kernel)"`
	Image     string    `json:"image,omitempty" jsonschema:"the image the sandbox started from; empty for the host's root file system, read-only"`
	Workspace string    `json:"workspace" jsonschema:"the working directory of commands, and what relative paths of the file tools start from"`
	CreatedAt time.Time `json:"created_at" jsonschema:"when the sandbox was created (RFC 3339)"`
	ExpiresAt time.Time `json:"expires_at,omitzero" jsonschema:"when the sandbox ends by itself, with everything in it (RFC 3339)"`
}
