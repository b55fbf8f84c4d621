package client

import (
	"context"
	"fmt"
	"io"
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
	Layers int   `json:"layers"`
	Size   int64 `json:"size"`
	// Tier is the isolation tier its source ran in. Memory says whether
	// its kernel, processes and memory were saved too (gVisor's):
	// sandboxes of that tier started from it go on where the source was;
	// MemorySize is the bytes saved of them.
	Tier       string    `json:"tier"`
	Memory     bool      `json:"memory"`
	MemorySize int64     `json:"memory_size,omitempty"`
	Name       string    `json:"name,omitempty"`
	CreatedAt  time.Time `json:"created_at"`
}

// Fork is one sandbox of a ForkSandbox: the sandbox, or why it could not
// be made.
type Fork struct {
	Sandbox *Sandbox `json:"sandbox,omitempty"`
	Error   string   `json:"error,omitempty"`
}

// snapshotPath is the path of snapshot sid.
func snapshotPath(sid string) string { return "/v1/snapshots/" + url.PathEscape(sid) }

// Snapshot snapshots sandbox id's root (under gVisor its memory too:
// Snapshot.Memory); the sandbox is frozen for the copy only. The daemon's
// snapshot quota refuses with ErrQuota; a sandbox whose root the daemon
// cannot read, with an *Error of code "not_implemented".
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

// ExportOptions say how ExportSnapshot writes an image.
type ExportOptions struct {
	// Format is "oci" (an OCI image layout in a tar, the default) or
	// "docker" (a docker save tarball, for docker load).
	Format string
	// Name, if set, is the reference the image is written under
	// ("registry.example/team/tpl:1"); it does not change the digest.
	Name string
}

// ExportSnapshot writes snapshot sid to w as an OCI image: its base
// image's layers, then its own, under the base's configuration, as
// ExportOptions.Format says. The same snapshot is always the same bytes.
// It returns the image's manifest digest. A snapshot of a sandbox over
// the host's root is not a whole image: the daemon refuses it
// (ErrInvalid). A transfer the daemon broke off is an error.
func (c *Client) ExportSnapshot(ctx context.Context, sid string, w io.Writer, o ExportOptions) (string, error) {
	q := url.Values{}
	if o.Format != "" {
		q.Set("format", o.Format)
	}
	if o.Name != "" {
		q.Set("name", o.Name)
	}
	req, err := c.newRequest(ctx, http.MethodGet, snapshotPath(sid)+"/image", q, nil)
	if err != nil {
		return "", err
	}
	resp, err := c.send(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(w, resp.Body); err != nil {
		return "", fmt.Errorf("hutch client: export %s: %w", sid, err)
	}
	return resp.Header.Get("Docker-Content-Digest"), nil
}
