package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/hutch-sandbox/hutch/client"
	"github.com/hutch-sandbox/hutch/internal/changes"
	"github.com/hutch-sandbox/hutch/internal/cli"
)

// cmdChangesRemote is hutch changes ls|show|apply|discard --remote: the
// change sets of the daemon's review workspaces.
func cmdChangesRemote(sub string, args []string, stdout, stderr io.Writer) int {
	fs := remoteFlags("changes "+sub+" --remote", "(hutch changes -h)", stderr)
	quiet := fs.Bool("q", false, "ls: print the ids only")
	stat := fs.Bool("stat", false, "show: lines added and removed per file, then totals")
	names := fs.Bool("name-only", false, "show: only the changed paths")
	color := fs.String("color", "auto", "show: colour: auto (on a terminal), always or never")
	var allow cli.List
	fs.Var(&allow, "allow", "apply: apply PATH (or what is below it) although it needs your word (repeatable)")
	skip := fs.Bool("skip-refused", false, "apply: apply the rest when some paths need your word")
	ops, err := parseMixed(fs, args, stderr)
	if err != nil {
		return usageCode(err)
	}
	useColor, ok := colorMode(*color, stdout)
	if !ok {
		fmt.Fprintln(stderr, "hutch changes: --color is auto, always or never")
		return 2
	}
	c, ok := newClient(stderr)
	if !ok {
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), remoteTimeout)
	defer cancel()
	fail := func(err error) int {
		fmt.Fprintf(stderr, "hutch changes %s: %v\n", sub, err)
		return 1
	}
	switch sub {
	case "ls", "list":
		list, err := c.ChangeSets(ctx)
		if err != nil {
			return fail(err)
		}
		if *quiet {
			for _, s := range list {
				fmt.Fprintln(stdout, s.ID)
			}
			return 0
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tSANDBOX\tWORKSPACE\tSTATE\tCHANGES\tCREATED")
		for _, s := range list {
			state := "ended"
			switch {
			case s.Running:
				state = "running"
			case !s.Applied.IsZero():
				state = "applied"
			}
			counts := map[changes.Kind]int{}
			for k, n := range s.Counts {
				counts[changes.Kind(k)] = n
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", s.ID, s.Sandbox, s.Workspace, state, changes.CountLine(counts), s.Created.Local().Format(time.DateTime))
		}
		_ = tw.Flush()
		return 0
	case "show", "diff", "apply", "discard", "rm":
	default:
		fmt.Fprintf(stderr, "hutch changes %s: not with --remote (ls, show, apply and discard are)\n", sub)
		return 2
	}
	if len(ops) == 0 {
		fmt.Fprintf(stderr, "hutch changes %s --remote: name a change set (hutch changes ls --remote)\n", sub)
		return 2
	}
	cid := ops[0]
	switch sub {
	case "show", "diff":
		opt := client.DiffOptions{Paths: ops[1:]}
		switch {
		case *stat && *names:
			fmt.Fprintln(stderr, "hutch changes show: --stat and --name-only do not go together")
			return 2
		case *stat:
			opt.Format = "stat"
		case *names:
			opt.Format = "names"
		}
		return writeDiff(stdout, useColor && opt.Format == "", func(w io.Writer) error { return c.ChangeSetDiff(ctx, cid, w, opt) }, fail)
	case "apply":
		res, err := c.ApplyChangeSet(ctx, cid, client.ApplyOptions{Paths: ops[1:], Allow: allow, SkipRefused: *skip})
		var conflict *client.ConflictError
		if errors.As(err, &conflict) {
			fmt.Fprintf(stderr, "hutch changes apply: nothing applied:\n")
			for _, p := range conflict.Problems {
				hint := ""
				if p.Refused {
					hint = " (--allow " + p.Path + ")"
				}
				fmt.Fprintf(stderr, "  %s: %s%s\n", p.Path, p.Problem, hint)
			}
			return 1
		}
		if err != nil {
			return fail(err)
		}
		fmt.Fprintf(stdout, "applied %d path%s of %s\n", len(res.Applied), plural(len(res.Applied)), cid)
		for _, p := range res.Skipped {
			fmt.Fprintf(stderr, "hutch changes apply: left out %s: %s\n", p.Path, p.Problem)
		}
		return 0
	default:
		code := 0
		for _, id := range ops {
			if err := c.DiscardChangeSet(ctx, id); err != nil {
				fmt.Fprintf(stderr, "hutch changes discard %s: %v\n", id, err)
				code = 1
			}
		}
		return code
	}
}
