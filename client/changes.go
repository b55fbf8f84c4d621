package client

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"time"
)

// ChangeSet is what a sandbox wrote to its review workspace.
type ChangeSet struct {
	ID      string `json:"id"`
	Tenant  string `json:"tenant"`
	Sandbox string `json:"sandbox"`
	// Workspace is the review workspace's name.
	Workspace string    `json:"workspace"`
	Created   time.Time `json:"created"`
	// Ended is when its sandbox ended; Applied when it was applied whole.
	Ended   time.Time      `json:"ended,omitzero"`
	Applied time.Time      `json:"applied,omitzero"`
	Counts  map[string]int `json:"counts,omitempty"`
	// Running says its sandbox still writes it: it cannot be applied or
	// discarded yet.
	Running bool `json:"running"`
}

// ApplyOptions choose what ApplyChangeSet applies.
type ApplyOptions struct {
	// Paths keep the changes at or below them (all when none).
	Paths []string `json:"paths,omitempty"`
	// Allow names paths applied although they need a person's word:
	// protected names, symbolic links out of the workspace, set-id bits.
	Allow []string `json:"allow,omitempty"`
	// SkipRefused applies the rest when some paths need that word.
	SkipRefused bool `json:"skip_refused,omitempty"`
}

// PathProblem is a path an apply did not write, and why.
type PathProblem struct {
	Path    string `json:"path"`
	Problem string `json:"problem"`
	// Refused says it needs a word (ApplyOptions.Allow); else the
	// workspace is no longer as the sandbox saw it.
	Refused bool `json:"refused,omitempty"`
}

// Applied is what ApplyChangeSet wrote and left out.
type Applied struct {
	Applied []string      `json:"applied"`
	Skipped []PathProblem `json:"skipped"`
}

// ConflictError is ApplyChangeSet's answer when it applied nothing: each
// path, and why. errors.Is(err, ErrConflict) holds for it.
type ConflictError struct {
	Err      *Error
	Problems []PathProblem
}

// Error returns the daemon's message, which names each problem.
func (e *ConflictError) Error() string { return e.Err.Error() }

// Unwrap returns the daemon's error.
func (e *ConflictError) Unwrap() error { return e.Err }

// changeSetPath is the path of change set cid.
func changeSetPath(cid string, rest ...string) string {
	p := "/v1/changes/" + url.PathEscape(cid)
	for _, r := range rest {
		p += "/" + r
	}
	return p
}

// ChangeSets lists the tenant's change sets, newest first.
func (c *Client) ChangeSets(ctx context.Context) ([]ChangeSet, error) {
	var out struct {
		Changes []ChangeSet `json:"changes"`
	}
	if err := c.call(ctx, http.MethodGet, "/v1/changes", nil, nil, &out); err != nil {
		return nil, err
	}
	return out.Changes, nil
}

// GetChangeSet describes change set cid.
func (c *Client) GetChangeSet(ctx context.Context, cid string) (*ChangeSet, error) {
	var cs ChangeSet
	if err := c.call(ctx, http.MethodGet, changeSetPath(cid), nil, nil, &cs); err != nil {
		return nil, err
	}
	return &cs, nil
}

// ChangeSetDiff writes change set cid against its workspace as it is now
// to w, in opt.Format (opt.Against is not used).
func (c *Client) ChangeSetDiff(ctx context.Context, cid string, w io.Writer, opt DiffOptions) error {
	_, err := c.copyTo(ctx, changeSetPath(cid, "diff"), opt.query(opt.Format), w, "diff of change set "+cid)
	return err
}

// ApplyChangeSet applies change set cid to its workspace. When it
// applies nothing (a path changed in the workspace meanwhile, or needs a
// word opt does not give), the error is a *ConflictError.
func (c *Client) ApplyChangeSet(ctx context.Context, cid string, opt ApplyOptions) (*Applied, error) {
	var out Applied
	err := c.call(ctx, http.MethodPost, changeSetPath(cid, "apply"), nil, opt, &out)
	var e *Error
	if errors.As(err, &e) && e.Status == http.StatusConflict && e.body != nil {
		var body struct {
			Problems []PathProblem `json:"problems"`
		}
		if json.Unmarshal(e.body, &body) == nil && len(body.Problems) > 0 {
			return nil, &ConflictError{Err: e, Problems: body.Problems}
		}
	}
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// DiscardChangeSet removes change set cid.
func (c *Client) DiscardChangeSet(ctx context.Context, cid string) error {
	return c.call(ctx, http.MethodDelete, changeSetPath(cid), nil, nil, nil)
}
