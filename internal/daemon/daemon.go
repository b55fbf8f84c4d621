// Package daemon is the core of `hutch serve`: it keeps long-lived
// sandboxes for tenants — creates them from a policy, in the isolation
// tier it names or the daemon's default, through that tier's runtime
// (sandbox.Runtime: sandbox.Namespaces today, with hutch's agent as PID
// 1), runs commands and file operations in them
// through their agents, expires them (timeout, idle timeout), and records
// them in the store so that nothing is left unaccounted for. Package api
// puts it on HTTP.
package daemon

import (
	"context"
	"crypto/x509"
	"errors"
	"net/netip"
	"time"

	"github.com/hutch-sandbox/hutch/internal/agent"
	"github.com/hutch-sandbox/hutch/internal/audit"
	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/sandbox"
	"github.com/hutch-sandbox/hutch/internal/secrets"
	"github.com/hutch-sandbox/hutch/internal/store"
)

// Category errors; package api maps them to HTTP statuses in one place.
var (
	ErrNotFound    = errors.New("not found")   // no such sandbox for this tenant
	ErrInvalid     = errors.New("invalid")     // bad request: policy, path, arguments
	ErrConflict    = errors.New("conflict")    // the sandbox's state does not allow it
	ErrQuota       = errors.New("quota")       // the tenant's quota is used up
	ErrUnavailable = errors.New("unavailable") // the daemon is shutting down
)

// Config is a daemon's configuration.
type Config struct {
	// StateDir holds the store (state.db), the audit log and one
	// directory per sandbox. Sandboxes never see it.
	StateDir string
	// DefaultDisk is the size of a sandbox's writable root layer when its
	// policy sets no resources.disk (1 GiB when zero); MaxDisk bounds what
	// a policy may ask for (16 GiB, or DefaultDisk if larger, when zero).
	// The layer lives in memory (tmpfs): what a sandbox writes counts
	// against its memory limit.
	DefaultDisk, MaxDisk int64
	// DefaultMemory is the memory limit of a sandbox whose policy sets
	// none (1 GiB, or TenantMemory if smaller, when zero); MaxMemory
	// bounds what a policy may ask for (16 GiB, or DefaultMemory if
	// larger, when zero). Every served sandbox has a memory limit: its
	// processes and every page it writes into its RAM-backed file systems
	// (its writable root, /tmp, /dev/shm) are charged to its memory
	// cgroup, so that no sandbox makes the host hold more than that.
	DefaultMemory, MaxMemory int64
	// MaxTmp bounds a policy's resources.tmp_size, the size of each of a
	// sandbox's private tmpfs mounts (/tmp, /dev/shm; 1 GiB when zero). A
	// policy without one gets policy.DefaultTmpBytes, or MaxTmp if
	// smaller.
	MaxTmp int64
	// TenantMemory, when positive, bounds the sum of the memory limits
	// of a tenant's sandboxes that are not stopped.
	TenantMemory int64
	// NoInternet refuses "*" in a policy's allowed domains: sandboxes reach
	// only the hosts their policies name.
	NoInternet bool
	// AllowPrivate lists the address ranges that every sandbox's egress
	// proxy lets through although its address guard refuses them
	// (loopback, private, link-local, metadata, this host's …): the
	// operator's decision (hutch serve --allow-private). A tenant's rules
	// open nothing else the guard refuses (CreateRequest.Operator).
	AllowPrivate []netip.Prefix
	// AllowImages, when set, are the only images a tenant's sandbox may
	// start from: patterns (path.Match) on image names in their normal
	// form ("docker.io/library/python:*"), or a manifest digest. Empty:
	// any image of the daemon's store (hutch serve --allow-image).
	AllowImages []string
	// AgentBinary is the PID 1 of every sandbox: a binary that serves
	// "agent" and "proxy-connect" as hutch does (hutch-agent, which costs
	// each sandbox half the memory); the daemon's own binary when empty.
	AgentBinary string
	// UpstreamRoots verify the upstreams of hosts a sandbox's secrets are
	// bound to (the system's roots when nil).
	UpstreamRoots *x509.CertPool
	// DefaultTimeout and MaxTimeout bound a sandbox's life (5 minutes and
	// 24 hours when zero).
	DefaultTimeout, MaxTimeout time.Duration
	// MetricsInterval is how often the daemon samples what each running
	// sandbox uses (Monitor; 5 s when zero, at least a second). It keeps
	// an hour of samples.
	MetricsInterval time.Duration
	// MaxSandboxes is the most sandboxes a tenant may have at once (0:
	// 100).
	MaxSandboxes int
	// MaxSnapshots is the most snapshots a tenant may keep (0: 32), and
	// MaxSnapshotBytes the most bytes of files they may hold together (0:
	// 8 GiB): snapshots are on the daemon's disk, not in a sandbox's
	// memory.
	MaxSnapshots     int
	MaxSnapshotBytes int64
	// ReviewWorkspaces are the host directories, by name, that sandboxes
	// may review (CreateRequest.ReviewWorkspace): hutch serve
	// --review-workspace. MaxChangeSets is the most change sets a tenant
	// may keep (0: 32).
	ReviewWorkspaces map[string]ReviewWorkspace
	MaxChangeSets    int
	// Warm is how many sandboxes of the default policy the daemon keeps
	// started and ready (0 to MaxWarm, and at most MaxSandboxes): a create
	// with the default policy takes one at once, and the pool refills in
	// the background. Warm sandboxes belong to no tenant until taken and
	// count against no quota. 0: no pool.
	Warm int
	// Pools are warm pools of other policies (E2B templates': hutch serve
	// --warm NAME=N): a create whose policy is a pool's takes one of its
	// sandboxes as a create with the default policy takes one of Warm's.
	// The warm sandboxes of all pools, Warm's included, are at most
	// MaxWarm.
	Pools []WarmPool
	// DefaultTier is the isolation tier of a sandbox whose policy names
	// none (hutch serve --default-tier; E2B's creates never name one):
	// policy.DefaultTier, or MinTier if stronger, when empty. It may not
	// be weaker than MinTier, and Runtimes must run it.
	DefaultTier string
	// MinTier is the weakest tier a policy may name (hutch serve
	// --min-tier): a create of a weaker one is refused (ErrInvalid). Any
	// tier when empty.
	MinTier string
	// Runtimes run the sandboxes of each tier, by its name (policy.Tiers;
	// each runtime's Tier is its key): a create whose policy resolves to a
	// tier without one is refused, never run in another (S2). Nil:
	// DefaultRuntimes().
	Runtimes map[string]sandbox.Runtime
	// ApprovalTimeout is how long a question of a sandbox's approvals
	// waits for its answer (through the API, the web UI, an MCP client)
	// before it is refused (hutch serve --approval-timeout;
	// approve.DefaultTimeout when zero).
	ApprovalTimeout time.Duration
	// Unavailable says, by tier, why there is no runtime of it (e.g. no
	// runsc of the pinned version, and how to install it): the message of
	// a create or a default of that tier, which is refused.
	Unavailable map[string]string
	// Store, when set, keeps the daemon's state (its sandboxes' records,
	// the tenants' tokens) instead of state.db in StateDir: a cluster's
	// (package kube), shared by replicas of hutch serve. The daemon does
	// not close it; its caller does, once Close returned.
	Store store.Backend
	// Replicas, when set with Store, makes the daemon one of several
	// replicas of hutch serve sharing Store: each sandbox of a remote
	// runtime is served by one of them (replicas.go).
	Replicas Replicas
	// Audit, when set, gets a line for each change to a sandbox the
	// daemon makes of its own: an approval decision ("approval"), a
	// sandbox taken again at a restart or after its connection was lost
	// ("take_back"), one taken over from a replica gone ("take_over").
	// The daemon does not close it.
	Audit *audit.Log
}

// CreateRequest is what a tenant asks for.
type CreateRequest struct {
	// Policy is the sandbox's policy (the policy-file schema). Its
	// workspace (DefaultWorkspace when empty) is a directory made in the
	// sandbox's writable root, not a host path.
	Policy policy.Spec
	// Labels are the tenant's own key/value tags, for listing.
	Labels map[string]string
	// Notes are kept in the sandbox's record from its start, by front
	// end (store.Sandbox.Notes): what a front end keeps of the sandbox,
	// written with the record rather than after it.
	Notes map[string]string
	// Env is added to the environment of every command.
	Env map[string]string
	// Timeout is the sandbox's lifetime (DefaultTimeout when zero).
	Timeout time.Duration
	// IdleTimeout, when positive, ends the sandbox after that long
	// without an exec, stdin or file call.
	IdleTimeout time.Duration
	// Secrets are the real values of the policy's secrets whose source is
	// policy.SecretFromRequest, by name. They stay in the daemon's memory:
	// the sandbox gets placeholders, the proxy swaps the values in for the
	// secrets' hosts only, and the store keeps none of them.
	Secrets map[string]secrets.Value
	// UpstreamCA holds PEM certificates that the sandbox's proxy trusts
	// too, besides Config.UpstreamRoots, when it connects to the hosts of
	// the policy's secrets (hutch create --upstream-ca). It must hold at
	// least one certificate when set.
	UpstreamCA []byte
	// Operator says that the request comes from the daemon's operator
	// (hutch's API on its unix socket), whose policy may open what the
	// egress proxy's address guard refuses: network.allow_private, and
	// IP-literal and CIDR rules for loopback, private, link-local,
	// metadata or this host's addresses. A tenant's request (false) may
	// not: such rules are refused (ErrInvalid), and its sandbox's proxy
	// lets through only what Config.AllowPrivate opens.
	Operator bool
	// Snapshot, when set, is a snapshot of the tenant's (Snapshot) the
	// sandbox starts from: its layers stacked read-only over the base,
	// which the policy's root names (or, when it names none, is the
	// snapshot's), under a fresh writable layer.
	Snapshot string
	// ReviewWorkspace, when set, names a review workspace of the daemon
	// (Config.ReviewWorkspaces) that the tenant may use: the policy's
	// workspace shows its host directory read-write, and what the sandbox
	// writes there is kept in a change set (ChangeSets) instead, to be
	// applied or discarded once the sandbox ended.
	ReviewWorkspace string
	// Lifecycle says what the sandbox's timeout does: end it (the zero
	// value) or pause it.
	Lifecycle Lifecycle
	// Volumes are host directories the daemon owns (a front end's
	// persistent volumes, never a path a tenant named) shown read-write
	// in the sandbox, each at its own path (at most MaxVolumes; see
	// docs/ARCHITECTURE.md, "Volumes", for what Dir and At may be). The
	// sandbox's record keeps them: pause, resume, restore and a restart
	// of the daemon mount them again. A snapshot or fork carries no
	// volume nor its content (a volume persists on its own): a sandbox
	// created from a snapshot gets only the volumes its own request
	// names (booting afresh over the snapshot's files, even one that
	// kept its source's memory), and a snapshot of a sandbox with
	// volumes keeps its files, not its memory.
	Volumes []Volume
}

// Volume is a host directory shown in a sandbox (CreateRequest.Volumes).
type Volume struct {
	// Name names the volume in messages and in the sandbox's record.
	Name string `json:"name"`
	// Dir is the host directory: absolute, clean, the daemon's own.
	Dir string `json:"dir"`
	// At is where the sandbox sees it: absolute and clean, not a system
	// directory, not under /proc, /sys or /dev, apart from the workspace
	// and the other volumes; made in the sandbox's root with no symbolic
	// link on the way (one there is refused, never followed).
	At string `json:"at"`
}

// Sandboxes is what a front end of the daemon (hutch's API, E2B's) needs
// to serve tenants' sandboxes; *Manager implements it.
type Sandboxes interface {
	// Store is the daemon's state, for tokens.
	Store() store.Backend
	// Unknown reports whether id is known to name no sandbox without a
	// read of the store (see Manager.Unknown); NotStopped lists the
	// store's sandboxes that are not stopped, every tenant's.
	Unknown(ctx context.Context, id string) bool
	NotStopped(ctx context.Context) ([]string, error)
	// Create starts a sandbox for tenant.
	Create(ctx context.Context, tenant string, r CreateRequest) (Info, error)
	// Get describes one of tenant's sandboxes.
	Get(ctx context.Context, tenant, id string) (Info, error)
	// List lists tenant's sandboxes with all of labels (and state, if set).
	List(ctx context.Context, tenant string, labels map[string]string, state string) ([]Info, error)
	// Destroy ends a sandbox.
	Destroy(ctx context.Context, tenant, id string) error
	// Extend sets the sandbox to expire timeout from now.
	Extend(ctx context.Context, tenant, id string, timeout time.Duration) (Info, error)
	// Pause freezes every process of the sandbox until Resume.
	Pause(ctx context.Context, tenant, id string) (Info, error)
	// PauseWith pauses the sandbox as Pause does, with options: without
	// its memory (every process but its agent killed first).
	PauseWith(ctx context.Context, tenant, id string, o PauseOptions) (Info, error)
	// PausedWithMemory reports whether a paused sandbox kept its memory.
	PausedWithMemory(ctx context.Context, tenant, id string) (bool, error)
	// Resume lets the processes of a paused sandbox go on.
	Resume(ctx context.Context, tenant, id string) (Info, error)
	// ResumeWith resumes a paused sandbox as Resume does, with options:
	// as a cold boot even if it kept its memory.
	ResumeWith(ctx context.Context, tenant, id string, o ResumeOptions) (Info, error)
	// Agent is the client of the sandbox's agent; the call counts as
	// activity.
	Agent(ctx context.Context, tenant, id string) (*agent.Client, error)
	// CheckTenantRule checks an egress allow rule a tenant wrote, in the
	// syntax of network.allowed_domains (cidr false) or allowed_cidrs
	// (cidr true), before its front end maps it into a policy: an error
	// of category ErrInvalid, naming field, when it asks for addresses
	// only the operator may open (see egress.SpecialRule).
	CheckTenantRule(field, entry string, cidr bool) error
}

var _ Sandboxes = (*Manager)(nil)

// Info describes a sandbox.
type Info struct {
	ID        string            `json:"id"`
	Tenant    string            `json:"tenant"`
	State     string            `json:"state"`
	Labels    map[string]string `json:"labels,omitempty"`
	CreatedAt time.Time         `json:"created_at"`
	ExpiresAt time.Time         `json:"expires_at"`
	// Workspace is the commands' working directory in the sandbox.
	Workspace string `json:"workspace"`
	// Image is the digest of the image the sandbox started from ("" for
	// the host's root), kept in its record: every answer gives it, also
	// once the sandbox stopped and after a restart of the daemon.
	Image string `json:"image,omitempty"`
	// Tier is the isolation tier the sandbox runs in (policy.Tiers), kept
	// in its record as Image is.
	Tier string `json:"tier"`
	// ChangeSet is the change set of its review workspace, if it has one.
	ChangeSet string `json:"change_set,omitempty"`
	// Volumes are the volumes shown in it (CreateRequest.Volumes), kept
	// in its record as Image is.
	Volumes []Volume `json:"volumes,omitempty"`
	// Resources are its limits, as its policy (normalized by the create,
	// the daemon's defaults applied) sets them.
	Resources Resources `json:"resources"`
}

// Resources are a sandbox's limits (Info.Resources); 0 is no limit.
type Resources struct {
	CPUs        float64 `json:"cpus,omitempty"`
	MemoryBytes int64   `json:"memory_bytes,omitempty"`
	DiskBytes   int64   `json:"disk_bytes,omitempty"`
}
