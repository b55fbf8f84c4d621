package client

import (
	"context"
	"net/http"
	"net/url"
	"time"
)

// Approval is a question of a sandbox's approvals waiting for its
// answer: a command (or a host, network.on_unknown: ask) its policy says
// ask about, held until someone answers or the question expires, which
// refuses it.
type Approval struct {
	ID string `json:"id"`
	// Kind is "command", "network" or "file".
	Kind string `json:"kind"`
	// Subject is the command line, "host:port", or the paths of a
	// change set, one per line.
	Subject string `json:"subject"`
	// Command is the simple command of the line that asked: what
	// AnswerRun and AnswerAlways allow from then on.
	Command string `json:"command,omitempty"`
	// Rule is the rule that asked, Reason why, in words.
	Rule    string    `json:"rule,omitempty"`
	Reason  string    `json:"reason"`
	Sandbox string    `json:"sandbox,omitempty"`
	Created time.Time `json:"created"`
	// Expires is when it is refused if no one answers.
	Expires time.Time `json:"expires"`
}

// The answers of Answer.
const (
	// AnswerOnce allows this one time.
	AnswerOnce = "once"
	// AnswerRun allows the same command (or host) for the rest of the
	// sandbox's life.
	AnswerRun = "run"
	// AnswerAlways does as AnswerRun on hutch serve, which has no policy
	// file to write it to.
	AnswerAlways = "always"
	// AnswerDeny refuses: the command never runs, and its exec fails
	// with an *Error matching ErrNotApproved.
	AnswerDeny = "deny"
)

// Approvals lists the questions waiting for the tenant's answer, oldest
// first: all its sandboxes', or only sandbox's when it is not "".
func (c *Client) Approvals(ctx context.Context, sandbox string) ([]Approval, error) {
	var q url.Values
	if sandbox != "" {
		q = url.Values{"sandbox": {sandbox}}
	}
	var out struct {
		Approvals []Approval `json:"approvals"`
	}
	if err := c.call(ctx, http.MethodGet, "/v1/approvals", q, nil, &out); err != nil {
		return nil, err
	}
	return out.Approvals, nil
}

// Approval describes question id while it waits; one answered, expired
// or of another tenant is an *Error matching ErrNotFound.
func (c *Client) Approval(ctx context.Context, id string) (*Approval, error) {
	var a Approval
	if err := c.call(ctx, http.MethodGet, "/v1/approvals/"+url.PathEscape(id), nil, nil, &a); err != nil {
		return nil, err
	}
	return &a, nil
}

// Answer answers question id with one of the Answer constants: the
// command it holds runs, or is refused, at once.
func (c *Client) Answer(ctx context.Context, id, answer string) error {
	in := struct {
		Answer string `json:"answer"`
	}{answer}
	return c.call(ctx, http.MethodPost, "/v1/approvals/"+url.PathEscape(id), nil, in, nil)
}
