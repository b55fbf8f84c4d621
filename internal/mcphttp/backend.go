package mcphttp

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/hutch-sandbox/hutch/internal/agent"
	"github.com/hutch-sandbox/hutch/internal/daemon"
	"github.com/hutch-sandbox/hutch/internal/interp"
	"github.com/hutch-sandbox/hutch/internal/mcp"
	"github.com/hutch-sandbox/hutch/internal/policy"
)

// DaemonBackend is the sandboxes of one tenant of hutch serve: what /mcp
// on the daemon's listeners serves a token's holder. Everything the
// daemon bounds for its API bounds the tools too (images a tenant may
// start, egress rules, quotas, lifetimes), since they are the same calls.
type DaemonBackend struct {
	// Sandboxes is the daemon.
	Sandboxes daemon.Sandboxes
	// Tenant is the caller.
	Tenant string
	// Operator is true for the daemon's operator (its unix socket).
	Operator bool
	// Templates are the daemon's templates (hutch serve --template
	// NAME=REF): sandbox_create's image may name one.
	Templates map[string]string
	// Ports, when not nil, gives a URL on the host for port inside
	// sandbox id (port_url); nil: port_url is refused, saying so.
	Ports func(ctx context.Context, id string, port int) (string, error)
	// Killed, when not nil, is told of a sandbox Kill ended (its ports'
	// URLs end with it).
	Killed func(id string)
}

var (
	_ mcp.Backend      = (*DaemonBackend)(nil)
	_ mcp.Interpreters = (*DaemonBackend)(nil)
)

// Create starts a sandbox for the tenant.
func (b *DaemonBackend) Create(ctx context.Context, r mcp.CreateRequest) (mcp.Sandbox, error) {
	var spec policy.Spec
	if r.Image != "" {
		ref := r.Image
		if t, ok := b.Templates[r.Image]; ok {
			ref = t
		}
		spec.Root = policy.ImagePrefix + ref
	}
	if len(r.AllowDomains) > 0 {
		for _, d := range r.AllowDomains {
			if err := b.Sandboxes.CheckTenantRule("allow_domains", d, false); err != nil && !b.Operator {
				return mcp.Sandbox{}, err
			}
		}
		spec.Network.Mode = "proxy"
		spec.Network.AllowedDomains = slices.Clone(r.AllowDomains)
	}
	info, err := b.Sandboxes.Create(ctx, b.Tenant, daemon.CreateRequest{
		Policy:   spec,
		Timeout:  r.Timeout,
		Operator: b.Operator,
		Labels:   map[string]string{"hutch.mcp": "true"},
	})
	if err != nil {
		return mcp.Sandbox{}, b.explain(err)
	}
	return sandboxOf(info), nil
}

// List lists the tenant's sandboxes, newest first.
func (b *DaemonBackend) List(ctx context.Context) ([]mcp.Sandbox, error) {
	infos, err := b.Sandboxes.List(ctx, b.Tenant, nil, "")
	if err != nil {
		return nil, err
	}
	out := make([]mcp.Sandbox, 0, len(infos))
	for _, in := range infos {
		out = append(out, sandboxOf(in))
	}
	slices.SortStableFunc(out, func(a, b mcp.Sandbox) int { return b.CreatedAt.Compare(a.CreatedAt) })
	return out, nil
}

// Get describes one of the tenant's sandboxes.
func (b *DaemonBackend) Get(ctx context.Context, id string) (mcp.Sandbox, error) {
	info, err := b.Sandboxes.Get(ctx, b.Tenant, id)
	if err != nil {
		return mcp.Sandbox{}, err
	}
	return sandboxOf(info), nil
}

// Kill destroys one of the tenant's sandboxes.
func (b *DaemonBackend) Kill(ctx context.Context, id string) error {
	if err := b.Sandboxes.Destroy(ctx, b.Tenant, id); err != nil {
		return err
	}
	if b.Killed != nil {
		b.Killed(id)
	}
	return nil
}

// Agent is the client of the sandbox's agent.
func (b *DaemonBackend) Agent(ctx context.Context, id string) (*agent.Client, error) {
	return b.Sandboxes.Agent(ctx, b.Tenant, id)
}

// Interpreter is the code interpreter of one of the tenant's sandboxes.
func (b *DaemonBackend) Interpreter(ctx context.Context, id string) (*interp.Client, error) {
	im, ok := b.Sandboxes.(interface {
		Interpreter(ctx context.Context, tenant, id string) (*interp.Client, error)
	})
	if !ok {
		return nil, errors.New("this daemon runs no code interpreter")
	}
	return im.Interpreter(ctx, b.Tenant, id)
}

// PortURL is Ports'.
func (b *DaemonBackend) PortURL(ctx context.Context, id string, port int) (string, error) {
	if _, err := b.Get(ctx, id); err != nil {
		return "", err
	}
	if b.Ports == nil {
		return "", errors.New("this daemon publishes no sandbox ports")
	}
	return b.Ports(ctx, id, port)
}

// DefaultSandbox is an error: a tenant of hutch serve has no session
// sandbox, every call names one.
func (b *DaemonBackend) DefaultSandbox(context.Context) (string, error) {
	return "", errors.New("sandbox_id is required: create a sandbox with sandbox_create, or pick one from sandbox_list")
}

// explain adds to a create's error what the model may ask for instead.
func (b *DaemonBackend) explain(err error) error {
	if errors.Is(err, daemon.ErrNotFound) && len(b.Templates) > 0 {
		return fmt.Errorf("%w (this daemon's templates: %s)", err, strings.Join(slices.Sorted(maps.Keys(b.Templates)), ", "))
	}
	return err
}

func sandboxOf(in daemon.Info) mcp.Sandbox {
	return mcp.Sandbox{
		ID:        in.ID,
		State:     in.State,
		Tier:      in.Tier,
		Image:     in.Image,
		Workspace: in.Workspace,
		CreatedAt: in.CreatedAt,
		ExpiresAt: in.ExpiresAt,
	}
}
