package client

import (
	"context"
	"net/http"
	"net/url"
	"time"
)

// Snapshot describes a snapshot of a sandbox's root: what the sandbox
// wrote, as an immutable layer that sandboxes start from
// (CreateOptions.Snapshot).
type Snapshot struct {
	ID     string `json:"id"`
	Tenant string `json:"tenant"`
	// Source is the sandbox it was taken of.
	Source string `json:"source"`
	// Root is its base: "host" or "image:REF"; Image the base image's
	// digest ("" for the host's root).
	Root  string `json:"root"`
	Image string `json:"image,omitempty"`
	// Layers is how many layers stack over the base; Size the bytes of
	// their files.
	Layers    int       `json:"layers"`
	Size      int64     `json:"size"`
	CreatedAt time.Time `json:"created_at"`
}

// Fork is one sandbox of a ForkSandbox: the sandbox, or why it could not
// be made.
type Fork struct {
	Sandbox *Sandbox `json:"sandbox,omitempty"`
	Error   string   `json:"error,omitempty"`
}

// snapshotPath is the path of snapshot sid.
func snapshotPath(sid string) string { return "/v1/snapshots/" + url.PathEscape(sid) }

// Snapshot snapshots sandbox id's root; the sandbox is frozen for the
// copy only. The daemon's snapshot quota refuses with ErrQuota; a tier
// that cannot be snapshotted, with an *Error of code "not_implemented".
func (c *Client) Snapshot(ctx context.Context, id string) (*Snapshot, error) {
	var sn Snapshot
	if err := c.call(ctx, http.MethodPost, sandboxPath(id, "snapshots"), nil, nil, &sn); err != nil {
		return nil, err
	}
	return &sn, nil
}

// Snapshots lists the tenant's snapshots, oldest first.
func (c *Client) Snapshots(ctx context.Context) ([]Snapshot, error) {
	var out struct {
		Snapshots []Snapshot `json:"snapshots"`
	}
	if err := c.call(ctx, http.MethodGet, "/v1/snapshots", nil, nil, &out); err != nil {
		return nil, err
	}
	return out.Snapshots, nil
}

// GetSnapshot describes snapshot sid.
func (c *Client) GetSnapshot(ctx context.Context, sid string) (*Snapshot, error) {
	var sn Snapshot
	if err := c.call(ctx, http.MethodGet, snapshotPath(sid), nil, nil, &sn); err != nil {
		return nil, err
	}
	return &sn, nil
}

// DeleteSnapshot deletes snapshot sid: no sandbox starts from it any
// more, and the sandboxes started from it run on.
func (c *Client) DeleteSnapshot(ctx context.Context, sid string) error {
	return c.call(ctx, http.MethodDelete, snapshotPath(sid), nil, nil, nil)
}

// ForkSandbox makes count independent copies of sandbox id (its files,
// policy and labels), each with timeout (0: the daemon's default): one
// result per fork, a sandbox or an error.
func (c *Client) ForkSandbox(ctx context.Context, id string, count int, timeout time.Duration) ([]Fork, error) {
	in := struct {
		Count   int    `json:"count"`
		Timeout string `json:"timeout,omitempty"`
	}{count, duration(timeout)}
	var out struct {
		Forks []Fork `json:"forks"`
	}
	if err := c.call(ctx, http.MethodPost, sandboxPath(id, "fork"), nil, in, &out); err != nil {
		return nil, err
	}
	return out.Forks, nil
}
