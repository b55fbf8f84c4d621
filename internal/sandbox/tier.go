package sandbox

import (
	"context"
	"net"

	"github.com/hutch-sandbox/hutch/internal/policy"
)

// Runtime is an isolation tier: what hutch run (Run) and the daemon
// (Start) hand a policy to. The namespace tier is this package
// (Namespaces); others live in packages of their own (internal/gvisor)
// and reuse what is tier-neutral here: Config, Result, the exit codes and
// the host side of the writable areas (Protect). Every tier boots the
// same command or the same agent and speaks the same agent protocol over
// the channel it has (a unix socket here; for gVisor a host socket it
// donates; for a microVM virtio-serial or vsock).
type Runtime interface {
	// Tier names the tier (one of policy.Tiers).
	Tier() string
	// Run runs c.Args in a new sandbox of the tier and waits for it to
	// end: the same contract as Run.
	Run(ctx context.Context, c Config) (Result, error)
	// Start starts a long-lived sandbox of the tier with hutch's agent as
	// its PID 1: the same contract as Start.
	Start(c Config) (Instance, error)
}

// Instance is a long-lived sandbox as the daemon holds it, whatever its
// tier (*Sandbox for the namespace tier).
type Instance interface {
	// Conn is the connection to the sandbox's agent.
	Conn() net.Conn
	// Done is closed when the sandbox's PID 1 has exited.
	Done() <-chan struct{}
	// ExitCode is PID 1's exit code once Done is closed.
	ExitCode() int
	// Dropped lists the layers not set up under best effort.
	Dropped() []string
	// Freeze stops every process of the sandbox; Thaw lets them go on.
	Freeze() error
	Thaw() error
	// Close kills everything in the sandbox (S4) and releases what the
	// host holds for it.
	Close() error
}

// Namespaces is the namespace tier, the default: the sandbox's processes
// run on the host's kernel behind namespaces, Landlock, seccomp and
// cgroups (this package's Run and Start).
type Namespaces struct{}

// Tier returns policy.TierNamespace.
func (Namespaces) Tier() string { return policy.TierNamespace }

// Run is Run.
func (Namespaces) Run(ctx context.Context, c Config) (Result, error) { return Run(ctx, c) }

// Reattach is Reattach: a sandbox of the tier started with
// Config.AgentSocket outlives its daemon, and the next one takes it again.
func (Namespaces) Reattach(r ReattachConfig) (Instance, error) {
	s, err := Reattach(r)
	if err != nil {
		return nil, err
	}
	return s, nil
}
