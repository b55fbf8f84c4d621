package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
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

const approveUsage = `Usage: hutch approve check [--policy FILE] [--claude-settings FILE] [--approve-rules FILE] -- COMMAND...

Prints what the approval rules decide for COMMAND: a line whose first word
is allow, deny or ask, then the rule that decided (and where it is written)
and the simple command it was about. COMMAND's words are joined with spaces
into one shell command line; a single word is taken as a whole line
("hutch approve check -- 'ls && rm -rf /'").

The rules are the approvals: section of the policy file, the rules
imported from Claude Code's settings (--claude-settings; what was not
imported is printed as warnings), the rules of --approve-rules (a file
with an approvals: section), in that order, then the preset's (read-only
unless one says) and hutch's default rules. A later file's default and
preset, when set, win. Without a file: the read-only preset, default ask.

Exit code: 0 allow, 1 deny, 2 ask, 125 when the rules cannot be read or
hutch approve check is called wrongly.

Flags:
`

// cmdApprove is hutch approve check.
func cmdApprove(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "check" {
		fmt.Fprintln(stderr, "hutch: usage: hutch approve check [--policy FILE] [--claude-settings FILE] [--approve-rules FILE] -- COMMAND...")
		return approveExitError
	}
	fs := flag.NewFlagSet("hutch approve check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	policyFile := fs.String("policy", "", "read the approvals: section of the policy `file`")
	claudeFile := fs.String("claude-settings", "", "import the approval rules of Claude Code's settings `file` (settings.json), after the policy's")
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
	set, warnings, err := approvalSet(*policyFile, *claudeFile, *rulesFile)
	for _, w := range warnings {
		fmt.Fprintf(stderr, "hutch: warning: %s\n", w)
	}
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

// approvalSet reads the approval rules of a policy file, Claude Code's
// settings and a rules file (any may be ""), added up as hutch run does,
// with the warnings of the import.
func approvalSet(policyFile, claudeFile, rulesFile string) (*approve.Set, []string, error) {
	var a policy.Approvals
	var warnings []string
	if policyFile != "" {
		spec, err := policy.Load(policyFile)
		if err != nil {
			return nil, nil, err
		}
		a = spec.Approvals
	}
	if claudeFile != "" {
		spec, w, err := policy.LoadClaude(claudeFile)
		warnings = w
		if err != nil {
			return nil, warnings, err
		}
		a.Add(spec.Approvals)
	}
	if rulesFile != "" {
		more, err := policy.LoadApprovalRules(rulesFile)
		if err != nil {
			return nil, warnings, err
		}
		a.Add(more)
	}
	set, err := a.ApprovalSet()
	return set, warnings, err
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
