package daemon

import (
	"context"
	"log/slog"
	"time"

	"github.com/hutch-sandbox/hutch/internal/agent"
	"github.com/hutch-sandbox/hutch/internal/store"
)

// Manager keeps the sandboxes of every tenant. Safe for concurrent use.
type Manager struct{}

// New opens the daemon's state in cfg.StateDir and cleans up whatever a
// previous daemon left behind (sandboxes whose processes are gone).
func New(cfg Config, log *slog.Logger) (*Manager, error) { panic("unimplemented") }

// Close destroys every sandbox and closes the store.
func (m *Manager) Close() error { panic("unimplemented") }

// Store is the daemon's state (tokens).
func (m *Manager) Store() *store.Store { panic("unimplemented") }

// Create starts a sandbox for tenant.
func (m *Manager) Create(ctx context.Context, tenant string, r CreateRequest) (Info, error) {
	panic("unimplemented")
}

// Get describes one of tenant's sandboxes ("" tenant: any).
func (m *Manager) Get(ctx context.Context, tenant, id string) (Info, error) { panic("unimplemented") }

// List lists tenant's sandboxes that have all of labels (and the state,
// when not empty).
func (m *Manager) List(ctx context.Context, tenant string, labels map[string]string, state string) ([]Info, error) {
	panic("unimplemented")
}

// Destroy ends a sandbox and removes everything it had.
func (m *Manager) Destroy(ctx context.Context, tenant, id string) error { panic("unimplemented") }

// Extend sets the sandbox to expire timeout from now (at most MaxTimeout).
func (m *Manager) Extend(ctx context.Context, tenant, id string, timeout time.Duration) (Info, error) {
	panic("unimplemented")
}

// Agent is the client of the sandbox's agent, for commands and files; the
// call counts as activity for the idle timeout.
func (m *Manager) Agent(ctx context.Context, tenant, id string) (*agent.Client, error) {
	panic("unimplemented")
}
