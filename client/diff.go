package client

import (
	"context"
	"io"
	"net/http"
	"net/url"
)

// DiffOptions choose what Diff compares and writes.
type DiffOptions struct {
	// Against is the other root: "" or "base" (the sandbox's image, or
	// the host's root as it saw it), a snapshot's id, or another running
	// sandbox's id with the same base.
	Against string
	// Format is "patch" (the default: a unified diff with git's headers),
	// "stat", "names" or "export" (a patch git apply takes).
	Format string
	// Paths keep the changes at or below them (all when none).
	Paths []string
}

// query is o as the diff route's query.
func (o DiffOptions) query(format string) url.Values {
	q := url.Values{}
	if o.Against != "" {
		q.Set("against", o.Against)
	}
	if format != "" {
		q.Set("format", format)
	}
	for _, p := range o.Paths {
		q.Add("path", p)
	}
	return q
}

// Diff writes to w what sandbox id changed in its root against
// opt.Against, in opt.Format. A tier whose root the daemon cannot read
// answers an *Error of code "not_implemented".
func (c *Client) Diff(ctx context.Context, id string, w io.Writer, opt DiffOptions) error {
	_, err := c.copyTo(ctx, sandboxPath(id, "diff"), opt.query(opt.Format), w, "diff of "+id)
	return err
}

// Change is one changed path of a diff.
type Change struct {
	// Kind is "added", "modified", "deleted", "renamed", "type changed"
	// or "refused" (a device node, fifo or socket).
	Kind string `json:"kind"`
	// Path is relative to the root; From is a rename's old path.
	Path string `json:"path"`
	From string `json:"from,omitempty"`
	// Old and New are the path's entry in the other root and in the
	// sandbox's (nil when absent).
	Old *ChangeEntry `json:"old,omitempty"`
	New *ChangeEntry `json:"new,omitempty"`
}

// ChangeEntry is a path's entry in one root.
type ChangeEntry struct {
	// Type is "file", "dir", "symlink", "device", "fifo" or "socket".
	Type string `json:"type"`
	// Mode holds the permission, setuid, setgid and sticky bits.
	Mode   uint32 `json:"mode,omitempty"`
	Size   int64  `json:"size,omitempty"`
	SHA256 string `json:"sha256,omitempty"`
	// Link is a symbolic link's target.
	Link string `json:"link,omitempty"`
}

// Changes lists what sandbox id changed in its root against opt.Against
// (opt.Format is not used): the changes, sorted by path, and their counts
// by kind.
func (c *Client) Changes(ctx context.Context, id string, opt DiffOptions) ([]Change, map[string]int, error) {
	var out struct {
		Changes []Change       `json:"changes"`
		Counts  map[string]int `json:"counts"`
	}
	if err := c.call(ctx, http.MethodGet, sandboxPath(id, "diff"), opt.query("json"), nil, &out); err != nil {
		return nil, nil, err
	}
	return out.Changes, out.Counts, nil
}
