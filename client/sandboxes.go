package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"time"
)

// Sandbox describes a sandbox.
type Sandbox struct {
	// ID names the sandbox.
	ID string `json:"id"`
	// Tenant owns it.
	Tenant string `json:"tenant"`
	// State is "starting", "running", "paused", "stopping" or "stopped".
	State string `json:"state"`
	// Labels are the tenant's key/value tags.
	Labels map[string]string `json:"labels,omitempty"`
	// CreatedAt is when it was created.
	CreatedAt time.Time `json:"created_at"`
	// ExpiresAt is when it will be destroyed unless extended.
	ExpiresAt time.Time `json:"expires_at"`
	// Workspace is the commands' working directory in the sandbox.
	Workspace string `json:"workspace"`
	// Image is the digest of the image the sandbox started from
	// ("sha256:…"; "" for the host's root).
	Image string `json:"image,omitempty"`
	// Tier is the isolation tier the sandbox runs in: "namespace" (the
	// host's kernel behind namespaces, Landlock and seccomp) or "gvisor"
	// (gVisor's application kernel).
	Tier string `json:"tier,omitempty"`
	// ChangeSet is the change set of its review workspace
	// (CreateOptions.ReviewWorkspace), if it has one.
	ChangeSet string `json:"change_set,omitempty"`
	// Resources are its limits, the daemon's defaults applied; 0 is no
	// limit.
	Resources Resources `json:"resources"`
}

// Resources are a sandbox's limits (Sandbox.Resources).
type Resources struct {
	CPUs        float64 `json:"cpus,omitempty"`
	MemoryBytes int64   `json:"memory_bytes,omitempty"`
	DiskBytes   int64   `json:"disk_bytes,omitempty"`
}

// CreateOptions describes a sandbox to create.
type CreateOptions struct {
	// ReviewWorkspace, when set, names a review workspace the daemon's
	// operator bound for the tenant (hutch serve --review-workspace): the
	// sandbox's workspace shows its host directory, and what it writes
	// there is kept as a change set (ChangeSets) to apply or discard once
	// the sandbox ended.
	ReviewWorkspace string
	// Snapshot, when set, is a snapshot (Snapshot) the sandbox starts
	// from: its files over its base, which the policy's root must be, or
	// which it is when the policy names none.
	Snapshot string
	// Policy is the sandbox's policy in hutch's policy-file schema, as
	// JSON (nil: the daemon's defaults). Its workspace is the sandbox's
	// own. A tenant on TCP may not name host paths, the daemon's own
	// environment or files as a secret's source, or the host's network in
	// it.
	Policy json.RawMessage
	// Image, when set, is the image the sandbox starts from instead of
	// the host's root: a name or digest of an image in the daemon's store
	// (Images; the daemon pulls nothing on a tenant's word). It is the
	// policy's root image:REF; a policy that names another root is
	// refused.
	Image string
	// Tier, when set, is the isolation tier the sandbox runs in
	// ("namespace", "gvisor"): the policy's tier, which a policy that
	// names another refuses. Empty: the daemon's default (hutch serve
	// --default-tier). The daemon refuses a tier weaker than its minimum
	// (hutch serve --min-tier) or one it does not run, with an *Error of
	// code CodeInvalid that names them.
	Tier string
	// Labels are the tenant's own key/value tags, to find it by.
	Labels map[string]string
	// Env is added to the environment of every command.
	Env map[string]string
	// Timeout is its lifetime (0: the daemon's default).
	Timeout time.Duration
	// IdleTimeout, when positive, ends it after that long without use.
	IdleTimeout time.Duration
	// Secrets are the real values of the policy's secrets, by name (for
	// the secrets without "from"). The sandbox sees only placeholders in
	// those variables; the daemon swaps the real values in on requests to
	// each secret's hosts, and never stores them.
	Secrets map[string]string
	// UpstreamCA holds PEM certificates the sandbox's egress proxy trusts
	// too when it connects to the hosts of the policy's secrets, for a
	// secret's host behind a private CA.
	UpstreamCA []byte
}

// ListOptions selects sandboxes. The zero value selects all of the
// tenant's.
type ListOptions struct {
	// Labels selects the sandboxes that have all of these labels.
	Labels map[string]string
	// State, if not empty, selects the sandboxes in that state.
	State string
}

// duration formats a duration for the API ("" for zero).
func duration(d time.Duration) string {
	if d == 0 {
		return ""
	}
	return d.String()
}

// Create starts a sandbox.
func (c *Client) Create(ctx context.Context, o CreateOptions) (*Sandbox, error) {
	// The options that are the policy's fields: the image is its root.
	var fields [][3]string // field, value, the option's name
	if o.Image != "" {
		fields = append(fields, [3]string{"root", "image:" + o.Image, "the image"})
	}
	if o.Tier != "" {
		fields = append(fields, [3]string{"tier", o.Tier, "the tier"})
	}
	for _, f := range fields {
		p, err := withField(o.Policy, f[0], f[1], f[2])
		if err != nil {
			return nil, err
		}
		o.Policy = p
	}
	in := struct {
		Policy      json.RawMessage   `json:"policy,omitempty"`
		Labels      map[string]string `json:"labels,omitempty"`
		Env         map[string]string `json:"env,omitempty"`
		Timeout     string            `json:"timeout,omitempty"`
		IdleTimeout string            `json:"idle_timeout,omitempty"`
		Secrets     map[string]string `json:"secrets,omitempty"`
		UpstreamCA  string            `json:"upstream_ca,omitempty"`
		Snapshot    string            `json:"snapshot,omitempty"`
		Review      string            `json:"review_workspace,omitempty"`
	}{o.Policy, o.Labels, o.Env, duration(o.Timeout), duration(o.IdleTimeout), o.Secrets, string(o.UpstreamCA), o.Snapshot, o.ReviewWorkspace}
	var sb Sandbox
	if err := c.call(ctx, http.MethodPost, "/v1/sandboxes", nil, in, &sb); err != nil {
		return nil, err
	}
	return &sb, nil
}

// withField is policy (JSON; nil for the defaults) with its top-level
// string field set to value (an option of CreateOptions, called name); a
// policy that names another value is refused.
func withField(policy json.RawMessage, field, value, name string) (json.RawMessage, error) {
	fields := map[string]json.RawMessage{}
	if p := bytes.TrimSpace(policy); len(p) > 0 && !bytes.Equal(p, []byte("null")) {
		if err := json.Unmarshal(p, &fields); err != nil {
			return nil, fmt.Errorf("hutch client: create: policy: want a JSON object: %w", err)
		}
	}
	want, _ := json.Marshal(value)
	if old, ok := fields[field]; ok {
		var s string
		if json.Unmarshal(old, &s) != nil || s != value {
			return nil, fmt.Errorf("hutch client: create: %s %s and the policy's %s %s: give one of them", name, value, field, old)
		}
	}
	fields[field] = want
	return json.Marshal(fields)
}

// Get describes a sandbox.
func (c *Client) Get(ctx context.Context, id string) (*Sandbox, error) {
	var sb Sandbox
	if err := c.call(ctx, http.MethodGet, sandboxPath(id), nil, nil, &sb); err != nil {
		return nil, err
	}
	return &sb, nil
}

// List lists the tenant's sandboxes that o selects.
func (c *Client) List(ctx context.Context, o ListOptions) ([]Sandbox, error) {
	q := url.Values{}
	keys := make([]string, 0, len(o.Labels))
	for k := range o.Labels {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		q.Add("label", k+"="+o.Labels[k])
	}
	if o.State != "" {
		q.Set("state", o.State)
	}
	var out []Sandbox
	if err := c.call(ctx, http.MethodGet, "/v1/sandboxes", q, nil, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// Destroy ends a sandbox and removes everything it had.
func (c *Client) Destroy(ctx context.Context, id string) error {
	return c.call(ctx, http.MethodDelete, sandboxPath(id), nil, nil, nil)
}

// Pause freezes every process of a sandbox where it is, until Resume. While
// it is paused, commands and file calls fail with ErrConflict (409) and
// its idle timeout does not run; its timeout still does, and Destroy ends
// it. Pausing a paused sandbox fails with ErrConflict. A sandbox of the
// gvisor tier (without secrets) is paused to disk: its processes and
// memory are saved in the daemon's state directory and the host's memory
// is freed; it outlives a restart of the daemon, and commands still
// running through the API lose their output streams (the processes go
// on).
func (c *Client) Pause(ctx context.Context, id string) (*Sandbox, error) {
	return c.PauseWith(ctx, id, PauseOptions{})
}

// PauseOptions are the options of PauseWith.
type PauseOptions struct {
	// FilesOnly pauses the sandbox without its memory: every process of
	// it but its agent (PID 1) is killed first (commands running through
	// the API end with SIGKILL), and its files are kept. Resumed, it runs
	// no process but the agent: commands run afresh. Its paused event
	// says {"memory": false}. If the kill does not finish, the sandbox is
	// not paused, and the error says why.
	FilesOnly bool
}

// PauseWith pauses a sandbox as Pause does, with o.
func (c *Client) PauseWith(ctx context.Context, id string, o PauseOptions) (*Sandbox, error) {
	var in any
	if o.FilesOnly {
		in = struct {
			Memory bool `json:"memory"`
		}{false}
	}
	var sb Sandbox
	if err := c.call(ctx, http.MethodPost, sandboxPath(id, "pause"), nil, in, &sb); err != nil {
		return nil, err
	}
	return &sb, nil
}

// Resume lets the processes of a paused sandbox go on; its idle timeout
// counts from now. Resuming a sandbox that is not paused fails with
// ErrConflict.
func (c *Client) Resume(ctx context.Context, id string) (*Sandbox, error) {
	var sb Sandbox
	if err := c.call(ctx, http.MethodPost, sandboxPath(id, "resume"), nil, nil, &sb); err != nil {
		return nil, err
	}
	return &sb, nil
}

// Extend sets the sandbox to expire timeout from now.
func (c *Client) Extend(ctx context.Context, id string, timeout time.Duration) (*Sandbox, error) {
	in := struct {
		Timeout string `json:"timeout"`
	}{timeout.String()}
	var sb Sandbox
	if err := c.call(ctx, http.MethodPost, sandboxPath(id, "timeout"), nil, in, &sb); err != nil {
		return nil, err
	}
	return &sb, nil
}
