package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/hutch-sandbox/hutch/internal/cli"
)

const approvalsSynopsis = `[-q] [ID]
       hutch approvals answer APPROVAL once|run|always|deny

Lists the questions of the approvals of your sandboxes that wait for an
answer (a command, or a host, their policies say ask about): all of them,
those of sandbox ID, or, for an approval's id (apr_…), that one in full.
answer answers one: once allows it this time, run for the rest of the
sandbox's life, always too (hutch serve has no policy file to write it
to), deny refuses it. A question no one answers is refused when it
expires (hutch serve --approval-timeout).`

// cmdApprovals is hutch approvals: list, show and answer the questions
// of the daemon's approvals.
func cmdApprovals(args []string, stdout, stderr io.Writer) int {
	fs := remoteFlags("approvals", approvalsSynopsis, stderr)
	quiet := fs.Bool("q", false, "print the ids only")
	if err := cli.Parse(fs, args, stderr); err != nil {
		return usageCode(err)
	}
	rest := fs.Args()
	answer := len(rest) > 0 && rest[0] == "answer"
	if (answer && len(rest) != 3) || (!answer && len(rest) > 1) {
		fs.Usage()
		return 2
	}
	c, ok := newClient(stderr)
	if !ok {
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), remoteTimeout)
	defer cancel()
	fail := func(err error) int {
		fmt.Fprintf(stderr, "hutch approvals: %v\n", err)
		return 1
	}
	switch {
	case answer:
		if err := c.Answer(ctx, rest[1], rest[2]); err != nil {
			return fail(err)
		}
		fmt.Fprintf(stdout, "%s: %s\n", rest[1], rest[2])
		return 0
	case len(rest) == 1 && strings.HasPrefix(rest[0], "apr_"):
		a, err := c.Approval(ctx, rest[0])
		if err != nil {
			return fail(err)
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		for _, kv := range [][2]string{{"id", a.ID}, {"sandbox", a.Sandbox}, {"kind", a.Kind}, {"subject", a.Subject},
			{"command", a.Command}, {"rule", a.Rule}, {"reason", a.Reason},
			{"created", a.Created.Local().Format(time.DateTime)}, {"expires", a.Expires.Local().Format(time.DateTime)}} {
			if kv[1] != "" {
				fmt.Fprintf(tw, "%s:\t%s\n", kv[0], shown(kv[1]))
			}
		}
		_ = tw.Flush()
		return 0
	}
	sandbox := ""
	if len(rest) == 1 {
		sandbox = rest[0]
	}
	list, err := c.Approvals(ctx, sandbox)
	if err != nil {
		return fail(err)
	}
	if *quiet {
		for _, a := range list {
			fmt.Fprintln(stdout, a.ID)
		}
		return 0
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSANDBOX\tKIND\tSUBJECT\tRULE\tEXPIRES IN")
	for _, a := range list {
		left := max(time.Until(a.Expires), 0).Round(time.Second)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", a.ID, a.Sandbox, a.Kind, shown(cut(a.Subject, 60)), shown(a.Rule), left)
	}
	_ = tw.Flush()
	return 0
}

// shown is s as a terminal may print it: what comes from a sandbox (a
// command line) may hold control characters, which are quoted.
func shown(s string) string {
	if strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) && r != ' ' }) < 0 {
		return s
	}
	return strconv.Quote(s)
}

// cut shortens s to n runes, with an ellipsis.
func cut(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
