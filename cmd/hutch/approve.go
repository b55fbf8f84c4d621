package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"reflect"
	"strings"

	"github.com/hutch-sandbox/hutch/internal/approve"
	"github.com/hutch-sandbox/hutch/internal/cli"
	"github.com/hutch-sandbox/hutch/internal/policy"
)

// Exit codes of hutch approve check.
const (
	approveExitAllow = 0
	approveExitDeny  = 1
	approveExitAsk   = 2
	approveExitError = 125
)

const approveUsage = `Usage: hutch approve check [--policy FILE] [--approve-rules FILE] -- COMMAND...

Prints what the approval rules decide for COMMAND: a line whose first word
is allow, deny or ask, then the rule that decided (and where it is written)
and the simple command it was about. COMMAND's words are joined with spaces
into one shell command line; a single word is taken as a whole line
("hutch approve check -- 'ls && rm -rf /'").

The rules are the approvals: section of the policy file, the rules of
--approve-rules (a file with an approvals: section; its default and preset,
when set, win), its preset's (read-only unless it says) and hutch's
default rules. Without a file: the read-only preset, default ask.

Exit code: 0 allow, 1 deny, 2 ask, 125 when the rules cannot be read or
hutch approve check is called wrongly.

Flags:
`

// cmdApprove is hutch approve check.
func cmdApprove(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "check" {
		fmt.Fprintln(stderr, "hutch: usage: hutch approve check [--policy FILE] [--approve-rules FILE] -- COMMAND...")
		return approveExitError
	}
	fs := flag.NewFlagSet("hutch approve check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	policyFile := fs.String("policy", "", "read the approvals: section of the policy `file`")
	rulesFile := fs.String("approve-rules", "", "read more approval rules from `file` (an approvals: section), after the policy's")
	fs.Usage = func() {
		fmt.Fprint(stderr, approveUsage)
		fs.PrintDefaults()
	}
	if err := cli.Parse(fs, args[1:], stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return approveExitError
	}
	if fs.NArg() == 0 {
		fmt.Fprintln(stderr, "hutch: approve check needs the command to check, after --")
		return approveExitError
	}
	line := strings.Join(fs.Args(), " ")
	set, err := approvalSet(*policyFile, *rulesFile)
	if err != nil {
		fmt.Fprintf(stderr, "hutch: %v\n", err)
		return approveExitError
	}
	d := set.Decide(line)
	fmt.Fprintln(stdout, describeApproval(d))
	switch d.Action {
	case approve.Allow:
		return approveExitAllow
	case approve.Deny:
		return approveExitDeny
	}
	return approveExitAsk
}

// approvalSet reads the approval rules of a policy file and a rules file
// (either may be "").
func approvalSet(policyFile, rulesFile string) (*approve.Set, error) {
	var a policy.Approvals
	for _, f := range []string{policyFile, rulesFile} {
		if f == "" {
			continue
		}
		spec, err := policy.Load(f)
		if err != nil {
			return nil, err
		}
		more := spec.Approvals
		if f == rulesFile {
			rest := spec
			rest.Approvals = policy.Approvals{}
			if !reflect.DeepEqual(rest, policy.Spec{}) {
				return nil, fmt.Errorf("%s: an approval rules file holds only an approvals: section", f)
			}
		}
		if more.Default != "" {
			a.Default = more.Default
		}
		if more.Preset != "" {
			a.Preset = more.Preset
		}
		a.NoDefaultRules = a.NoDefaultRules || more.NoDefaultRules
		a.Commands = append(a.Commands, more.Commands...)
	}
	return a.ApprovalSet()
}

// describeApproval prints a decision in one line: its action first.
func describeApproval(d approve.Decision) string {
	var b strings.Builder
	b.WriteString(d.Action.String())
	switch {
	case d.Rule >= 0:
		fmt.Fprintf(&b, " by rule %s", d.RuleText)
		if d.Source != "" {
			fmt.Fprintf(&b, " (%s)", d.Source)
		}
		if strings.HasPrefix(d.Reason, "it may match") {
			b.WriteString(", which an argument not known before it runs may match")
		}
	default:
		fmt.Fprintf(&b, " (%s)", d.Reason)
	}
	if d.Command != "" {
		fmt.Fprintf(&b, "; command: %s", d.Command)
	}
	return b.String()
}
