package runner

import (
	"context"
	"fmt"

	"github.com/hutch-sandbox/hutch/internal/approve"
	"github.com/hutch-sandbox/hutch/internal/policy"
)

// approvalRecord is the report's line of an approval decision.
type approvalRecord struct {
	Sandbox string `json:"sandbox"`
	Action  string `json:"action"` // "approval"
	approve.Record
}

// setupApprovals makes the sandbox's approval gate when its policy has
// approvals or network.on_unknown; nil otherwise. Every decision goes to
// the report; "allow always" goes back to the policy file when there is
// one.
func (rf *Flags) setupApprovals(s *Sandbox) error {
	a := s.Spec.Approvals
	hasRules := a.HasCommandRules()
	if !hasRules && s.Spec.Network.OnUnknown == "" {
		return nil
	}
	g := &approve.Gate{Sandbox: s.ID(), Timeout: rf.ApprovalTimeout, OnUnknown: approve.Deny}
	if hasRules {
		set, err := a.ApprovalSet()
		if err != nil {
			return fmt.Errorf("approvals: %w", err)
		}
		g.Commands = set
	}
	if s.Spec.Network.OnUnknown == "ask" {
		g.OnUnknown = approve.Ask
	}
	g.Record = func(r approve.Record) {
		s.egress.rec.Note(approvalRecord{Sandbox: s.ID(), Action: "approval", Record: r})
	}
	file := rf.policyFile
	if file != "" {
		g.Always = func(r approve.Request) error {
			if r.Kind == approve.KindNetwork {
				return policy.AddAllowedDomain(file, r.Subject)
			}
			if r.Kind == approve.KindCommand && r.Command != "" {
				return policy.AddApproved(file, r.Command)
			}
			return fmt.Errorf("no rule to write for %s", r.Kind)
		}
	}
	switch {
	case rf.Asker != nil:
		g.Asker = rf.Asker
	case rf.AskOnTerminal:
		t, err := OpenTerminalAsker(file)
		if err != nil {
			g.NoAsker = "no terminal to ask on (hutch run asks on its controlling terminal)"
			break
		}
		g.Asker = t
		s.closers = append(s.closers, t.Close)
	default:
		g.NoAsker = "no one to ask here"
	}
	s.Gate = g
	if s.egress.proxy != nil && g.OnUnknown == approve.Ask {
		s.egress.proxy.Unknown = g.Host
	}
	return nil
}

// Approve decides whether command may run under the sandbox's approval
// rules, asking where they say ask: nil, or an error that says why not
// and how to allow it (errors.Is approve.ErrDenied).
func (s *Sandbox) Approve(ctx context.Context, command []string) error {
	if s.Gate == nil || s.Gate.Commands == nil {
		return nil
	}
	return s.Gate.Command(ctx, approve.Line(command))
}
