package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/hutch-sandbox/hutch/internal/changes"
	"github.com/hutch-sandbox/hutch/internal/cli"
	"github.com/hutch-sandbox/hutch/internal/policy"
)

const changesUsage = `Usage: hutch changes COMMAND [ARGS...]

The change sets of hutch run --review: what a command wrote to its
workspace, kept aside until you apply it.

  hutch changes ls [-q]                          list sets, newest first
  hutch changes show ID [--stat | --name-only] [--color=auto|always|never] [PATH...]
                                                 the set's diff
  hutch changes apply ID [PATH...] [--allow PATH]... [--skip-refused] [--branch NAME]
                     [--policy FILE] [--yes-files]
                                                 write the set (or PATHs) into the
                                                 workspace, or commit it on a new
                                                 git branch; approvals.files rules
                                                 (the set's, and FILE's) deny or
                                                 ask, on the terminal
  hutch changes export ID [-o FILE]              a patch git apply takes
  hutch changes discard ID...                    remove sets

ID is a set's ID or a prefix of it that names one set.

With --remote, ls, show, apply and discard act on the change sets of the
daemon at $HUTCH_HOST (with the token in $HUTCH_TOKEN): what sandboxes
created with --review-workspace wrote to the host directories the operator
bound (hutch serve --review-workspace). A set is applied by the daemon,
once its sandbox ended; its full ID is needed.
`

// cmdChanges runs hutch changes.
func cmdChanges(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, changesUsage)
		return 2
	}
	if i := slices.Index(args, "--remote"); i > 0 {
		return cmdChangesRemote(args[0], slices.Delete(slices.Clone(args), i, i+1)[1:], stdout, stderr)
	}
	st, err := changes.DefaultStore()
	if err != nil {
		fmt.Fprintf(stderr, "hutch: %v\n", err)
		return 1
	}
	switch args[0] {
	case "ls", "list":
		return changesLs(st, args[1:], stdout, stderr)
	case "show", "diff":
		return changesShow(st, args[1:], stdout, stderr)
	case "apply":
		return changesApply(st, args[1:], stdout, stderr)
	case "export":
		return changesExport(st, args[1:], stdout, stderr)
	case "discard", "rm":
		return changesDiscard(st, args[1:], stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, changesUsage)
		return 0
	}
	msg := fmt.Sprintf("hutch changes: unknown command %q", args[0])
	if near := cli.Closest(args[0], []string{"ls", "show", "apply", "export", "discard"}); len(near) > 0 {
		msg += "; did you mean " + strings.Join(near, " or ") + "?"
	}
	fmt.Fprintln(stderr, msg)
	return 2
}

// changesFlags is the flag set of hutch changes NAME.
func changesFlags(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("hutch changes "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: hutch changes %s %s\n\n", name, synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// parseMixed parses args with fs, flags before, between or after the
// operands, and returns the operands ("--" ends the flags).
func parseMixed(fs *flag.FlagSet, args []string, stderr io.Writer) ([]string, error) {
	var operands []string
	for {
		if err := cli.Parse(fs, args, stderr); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return operands, nil
		}
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			return append(operands, rest...), nil
		}
		operands = append(operands, rest[0])
		args = rest[1:]
	}
}

// openSet opens the set named by the first operand.
// openChanges opens the set ops name (openSet) and returns its changes at
// or below the paths ops name after it; a failure is said on stderr.
func openChanges(st *changes.Store, name string, ops []string, stderr io.Writer) (*changes.Set, []changes.Change, bool) {
	s, paths, ok := openSet(st, name, ops, stderr)
	if !ok {
		return nil, nil, false
	}
	ch, err := s.Changes()
	if err == nil {
		ch, err = changes.Filter(ch, paths)
	}
	if err != nil {
		fmt.Fprintf(stderr, "hutch changes %s: %v\n", name, err)
		return nil, nil, false
	}
	return s, ch, true
}

func openSet(st *changes.Store, name string, ops []string, stderr io.Writer) (*changes.Set, []string, bool) {
	if len(ops) == 0 {
		fmt.Fprintf(stderr, "hutch changes %s: no ID given (hutch changes ls lists the sets)\n", name)
		return nil, nil, false
	}
	s, err := st.Open(ops[0])
	if err != nil {
		fmt.Fprintf(stderr, "hutch changes %s: %v\n", name, err)
		return nil, nil, false
	}
	paths := make([]string, 0, len(ops)-1)
	for _, p := range ops[1:] {
		c, err := changes.Clean(p)
		if err != nil {
			fmt.Fprintf(stderr, "hutch changes %s: %v\n", name, err)
			return nil, nil, false
		}
		paths = append(paths, c)
	}
	return s, paths, true
}

func changesLs(st *changes.Store, args []string, stdout, stderr io.Writer) int {
	fs := changesFlags("ls", "[-q]", stderr)
	quiet := fs.Bool("q", false, "print only the IDs")
	ops, err := parseMixed(fs, args, stderr)
	if err != nil {
		return usageCode(err)
	}
	if len(ops) > 0 {
		fmt.Fprintf(stderr, "hutch changes ls: unexpected argument %q\n", ops[0])
		return 2
	}
	sets, err := st.List()
	if err != nil {
		fmt.Fprintf(stderr, "hutch changes ls: %v\n", err)
		return 1
	}
	w := bufio.NewWriter(stdout)
	defer w.Flush()
	if !*quiet {
		fmt.Fprintf(w, "%-12s  %-8s  %-10s  %s\n", "ID", "AGE", "STATE", "WORKSPACE · COMMAND · CHANGES")
	}
	for _, s := range sets {
		m := s.Meta()
		if *quiet {
			fmt.Fprintln(w, m.ID)
			continue
		}
		state := "to review"
		switch {
		case m.Branch != "":
			state = "branched"
		case !m.Applied.IsZero():
			state = "applied"
		case m.Ended.IsZero() || m.Ended.Before(m.Started):
			state = "running"
		}
		counts := changes.CountLine(m.Counts)
		if counts == "" {
			counts = "no changes"
		}
		fmt.Fprintf(w, "%-12s  %-8s  %-10s  %s · %s · %s\n", m.ID, age(time.Since(m.Created)), state,
			m.Workspace, strings.Join(m.Command, " "), counts)
	}
	return 0
}

// age says a duration the short way: 45s, 12m, 3h, 5d.
func age(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

func changesShow(st *changes.Store, args []string, stdout, stderr io.Writer) int {
	fs := changesFlags("show", "ID [--stat | --name-only] [--color=auto|always|never] [PATH...]", stderr)
	stat := fs.Bool("stat", false, "lines added and removed per file, then totals")
	names := fs.Bool("name-only", false, "only the changed paths")
	color := fs.String("color", "auto", "colour: auto (on a terminal), always or never")
	ops, err := parseMixed(fs, args, stderr)
	if err != nil {
		return usageCode(err)
	}
	useColor, ok := colorMode(*color, stdout)
	if !ok || (*stat && *names) {
		fmt.Fprintln(stderr, "hutch changes show: --color is auto, always or never, and --stat and --name-only do not go together")
		return 2
	}
	s, ch, ok := openChanges(st, "show", ops, stderr)
	if !ok {
		return 1
	}
	w := bufio.NewWriterSize(stdout, 64<<10)
	defer w.Flush()
	switch {
	case *names:
		changes.WriteNames(w, ch)
	case *stat:
		err = s.WriteStat(w, ch, useColor)
	default:
		err = s.WriteDiff(w, ch, changes.ShowOptions{Color: useColor})
	}
	if err != nil {
		w.Flush()
		fmt.Fprintf(stderr, "hutch changes show: %v\n", err)
		return 1
	}
	return 0
}

// colorMode resolves --color for out: auto is colour on a terminal.
func colorMode(mode string, out io.Writer) (bool, bool) {
	switch mode {
	case "always":
		return true, true
	case "never":
		return false, true
	case "auto":
		f, ok := out.(*os.File)
		if !ok || os.Getenv("NO_COLOR") != "" || os.Getenv("TERM") == "dumb" {
			return false, true
		}
		fi, err := f.Stat()
		return err == nil && fi.Mode()&os.ModeCharDevice != 0, true
	}
	return false, false
}

func changesApply(st *changes.Store, args []string, stdout, stderr io.Writer) int {
	fs := changesFlags("apply", "ID [PATH...] [--allow PATH]... [--skip-refused] [--branch NAME]", stderr)
	var allow cli.List
	fs.Var(&allow, "allow", "apply PATH (or what is below it) although it needs your word: a protected name, a symbolic link out of the workspace, a setuid or setgid bit (repeatable)")
	skip := fs.Bool("skip-refused", false, "apply the rest when some paths need your word, leaving those out")
	branch := fs.String("branch", "", "commit the set on a new git branch NAME (parent HEAD) instead, touching neither the working tree nor the index")
	policyFile := fs.String("policy", "", "also match the approvals.files rules of the policy `file` (besides those recorded with the set)")
	yesFiles := fs.Bool("yes-files", false, "answer yes to what approvals.files rules ask (deny rules still refuse)")
	ops, err := parseMixed(fs, args, stderr)
	if err != nil {
		return usageCode(err)
	}
	s, paths, ok := openSet(st, "apply", ops, stderr)
	if !ok {
		return 1
	}
	opt := changes.ApplyOptions{Paths: paths, SkipRefused: *skip}
	if *policyFile != "" {
		p, err := policy.Load(*policyFile)
		if err == nil {
			opt.Files, err = p.Approvals.FileRules()
		}
		if err != nil {
			fmt.Fprintf(stderr, "hutch changes apply: --policy: %v\n", err)
			return 2
		}
	}
	gate, closeGate := applyGate(*yesFiles)
	defer closeGate()
	opt.Gate = gate
	for _, a := range allow {
		c, err := changes.Clean(a)
		if err != nil {
			fmt.Fprintf(stderr, "hutch changes apply: --allow %v\n", err)
			return 2
		}
		opt.Allow = append(opt.Allow, c)
	}
	ch, err := s.Changes()
	if err != nil {
		fmt.Fprintf(stderr, "hutch changes apply: %v\n", err)
		return 1
	}
	var res *changes.Result
	if *branch != "" {
		var commit string
		commit, res, err = s.ApplyBranch(ch, *branch, opt)
		if err == nil {
			fmt.Fprintf(stdout, "branch %s: commit %s with %d path%s of change set %s (working tree and index untouched)\n",
				*branch, commit, len(res.Applied), plural(len(res.Applied)), s.ID())
		}
	} else {
		res, err = s.Apply(ch, opt)
		if res != nil {
			fmt.Fprintf(stdout, "applied %d path%s of change set %s to %s\n", len(res.Applied), plural(len(res.Applied)), s.ID(), s.Workspace())
		}
	}
	if res != nil {
		for _, p := range res.Skipped {
			fmt.Fprintf(stderr, "hutch changes apply: left out %s: %s\n", p.Path, p.Why)
		}
	}
	if err != nil {
		var ae *changes.ApplyError
		if errors.As(err, &ae) {
			fmt.Fprintf(stderr, "hutch changes apply: %v\n", ae)
			return 1
		}
		fmt.Fprintf(stderr, "hutch changes apply: %v\n", err)
		return 1
	}
	return 0
}

// plural is "s" unless n is 1.
func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

func changesExport(st *changes.Store, args []string, stdout, stderr io.Writer) int {
	fs := changesFlags("export", "ID [-o FILE] [PATH...]", stderr)
	out := fs.String("o", "", "write the patch to FILE (default: standard output)")
	ops, err := parseMixed(fs, args, stderr)
	if err != nil {
		return usageCode(err)
	}
	s, ch, ok := openChanges(st, "export", ops, stderr)
	if !ok {
		return 1
	}
	var w io.Writer = stdout
	var f *os.File
	if *out != "" {
		if f, err = os.Create(*out); err != nil {
			fmt.Fprintf(stderr, "hutch changes export: %v\n", err)
			return 1
		}
		w = f
	}
	bw := bufio.NewWriterSize(w, 64<<10)
	notes, err := s.Export(bw, ch)
	if ferr := bw.Flush(); err == nil {
		err = ferr
	}
	if f != nil {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	for _, n := range notes {
		fmt.Fprintf(stderr, "hutch changes export: %s\n", n)
	}
	if err != nil {
		fmt.Fprintf(stderr, "hutch changes export: %v\n", err)
		return 1
	}
	return 0
}

func changesDiscard(st *changes.Store, args []string, stdout, stderr io.Writer) int {
	fs := changesFlags("discard", "ID...", stderr)
	ops, err := parseMixed(fs, args, stderr)
	if err != nil {
		return usageCode(err)
	}
	if len(ops) == 0 {
		fmt.Fprintln(stderr, "hutch changes discard: no ID given (hutch changes ls lists the sets)")
		return 2
	}
	code := 0
	for _, id := range ops {
		s, err := st.Open(id)
		if err == nil {
			err = st.Discard(s.ID())
		}
		if err != nil {
			fmt.Fprintf(stderr, "hutch changes discard: %v\n", err)
			code = 1
			continue
		}
		fmt.Fprintln(stdout, s.ID())
	}
	return code
}
