package main

import (
	"context"
	"encoding/json"
	"reflect"
	"slices"

	"github.com/hutch-sandbox/hutch/internal/approve"
	"github.com/hutch-sandbox/hutch/internal/mcp"
	"github.com/hutch-sandbox/hutch/internal/policy"
)

// hutch mcp's approvals: the policy's approvals: rules decide every
// command exec runs, in each sandbox of the session. Where a rule says
// ask, the MCP client's user is asked through elicitation (the exec
// tool's call carries the asker, approve.WithAsker); a client that did
// not declare elicitation cannot be asked, and the command is refused at
// once with a message saying which rule asked and how to allow it. An
// "allow always" answer lasts for the session: every sandbox it starts
// afterwards has the command in its approvals.approved.

var _ mcp.Approver = (*mcpBackend)(nil)

// noElicitation explains a refusal no one was asked about.
const noElicitation = "the MCP client cannot be asked: it did not declare the elicitation capability"

// newGate is the approval gate of a sandbox of spec, id: nil when the
// policy has no approvals section.
func (b *mcpBackend) newGate(spec policy.Spec, id string) (*approve.Gate, error) {
	if reflect.ValueOf(spec.Approvals).IsZero() {
		return nil, nil
	}
	a := spec.Approvals
	b.mu.Lock()
	a.Approved = append(slices.Clip(a.Approved), b.approved...)
	b.mu.Unlock()
	set, err := a.ApprovalSet()
	if err != nil {
		return nil, err
	}
	return &approve.Gate{
		Commands: set,
		Asker:    approve.ContextAsker,
		NoAsker:  noElicitation,
		Sandbox:  id,
		Always:   b.always,
		Record:   b.recordApproval,
	}, nil
}

// always keeps an "allow always" answer for the rest of the session.
func (b *mcpBackend) always(r approve.Request) error {
	if r.Command == "" {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !slices.Contains(b.approved, r.Command) {
		b.approved = append(b.approved, r.Command)
	}
	return nil
}

// recordApproval writes a decision to the report (--report), as a line
// {"approval": RECORD}, and to the log.
func (b *mcpBackend) recordApproval(r approve.Record) {
	b.log.Debug("approval", "kind", r.Kind, "subject", r.Subject, "decision", r.Decision, "by", r.By, "rule", r.Rule)
	if b.reportW == nil {
		return
	}
	line, err := json.Marshal(struct {
		Approval approve.Record `json:"approval"`
	}{r})
	if err != nil {
		return
	}
	_, _ = b.reportW.Write(append(line, '\n'))
}

// ApproveCommand decides whether line may run in sandbox id (mcp.Approver).
func (b *mcpBackend) ApproveCommand(ctx context.Context, id, line string) error {
	box, err := b.lookup(id)
	if err != nil {
		return err
	}
	return box.gate.Command(ctx, line)
}
