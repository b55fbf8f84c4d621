package changes

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/hutch-sandbox/hutch/internal/approve"
)

// SetFileRules records the approvals.files rules of the policy the set's
// runs had (policy.Approvals.FileRules): every apply of the set matches
// the paths it touches against them, whichever front end applies it.
func (s *Set) SetFileRules(rules []approve.FileRule) error {
	s.meta.FileRules = slices.Clone(rules)
	return s.save()
}

// touched returns the workspace paths that changes touch, each once, in
// order: both names of a rename.
func touched(changes []Change) []string {
	var out []string
	for _, c := range changes {
		for _, p := range c.paths() {
			if !slices.Contains(out, p) {
				out = append(out, p)
			}
		}
	}
	return out
}

// checkFiles matches the paths that changes touch against the set's file
// rules and opt.Files: nil when none says deny or ask, or when the
// question that an ask rule raised (opt.Gate's Files) was answered yes;
// else an *ApplyError with the paths and the rule.
func (s *Set) checkFiles(changes []Change, opt ApplyOptions) error {
	rules := append(slices.Clone(s.meta.FileRules), opt.Files...)
	if len(rules) == 0 {
		return nil
	}
	d := approve.DecideFiles(rules, touched(changes))
	switch d.Action {
	case approve.Allow:
		return nil
	case approve.Deny:
		return &ApplyError{Denied: problems(d), Rule: d.Rule()}
	}
	ctx := opt.Context
	if ctx == nil {
		ctx = context.Background()
	}
	gate := opt.Gate
	if gate == nil {
		gate = &approve.Gate{}
	}
	err := gate.Files(ctx, d.Paths, d.Rule(), "a file rule asks before a change set that touches them is applied")
	if err == nil {
		return nil
	}
	return &ApplyError{NotApproved: problems(d), Rule: d.Rule(), Answer: err}
}

// problems lists the decision's paths with its rule.
func problems(d approve.FileDecision) []Problem {
	out := make([]Problem, len(d.Paths))
	for i, p := range d.Paths {
		out[i] = Problem{Path: p, Why: d.Rule()}
	}
	return out
}

// filesError writes the part of ApplyError's message about file rules.
func (e *ApplyError) filesError(b *strings.Builder) {
	list := func(ps []Problem) {
		for _, p := range ps {
			fmt.Fprintf(b, "  %s\n", p.Path)
		}
	}
	if len(e.Denied) > 0 {
		fmt.Fprintf(b, "%d path%s denied by %s, nothing applied:\n", len(e.Denied), plural(len(e.Denied)), e.Rule)
		list(e.Denied)
		b.WriteString("a deny rule cannot be answered: change or remove the rule in the policy to apply them\n")
	}
	if len(e.NotApproved) > 0 {
		fmt.Fprintf(b, "%d path%s not approved under %s, nothing applied:\n", len(e.NotApproved), plural(len(e.NotApproved)), e.Rule)
		list(e.NotApproved)
		var d *approve.Denied
		if errors.As(e.Answer, &d) {
			why := "refused"
			switch d.Record.By {
			case "nobody", "timeout":
			default:
				why = "refused by " + d.Record.By
			}
			if d.Hint != "" {
				why += ": " + d.Hint
			}
			b.WriteString(why + "\n")
		} else if e.Answer != nil {
			b.WriteString(e.Answer.Error() + "\n")
		}
	}
}

// Unwrap gives the refusal of the question about the paths, so that
// errors.Is(err, approve.ErrDenied) holds for it.
func (e *ApplyError) Unwrap() error { return e.Answer }
