package main

import (
	"bytes"
	"context"
	"fmt"
	"io"

	"github.com/hutch-sandbox/hutch/client"
	"github.com/hutch-sandbox/hutch/internal/changes"
)

// cmdDiff is "hutch diff [--against X] [--stat | --name-only | --export]
// ID [PATH...]": what sandbox ID changed in its root, against its base, a
// snapshot or another sandbox, in the form of hutch changes show.
func cmdDiff(args []string, stdout, stderr io.Writer) int {
	const synopsis = "[--against base|SID|ID] [--stat | --name-only | --export] [--color=auto|always|never] ID [PATH...]"
	fs := remoteFlags("diff", synopsis, stderr)
	against := fs.String("against", "", "compare with `ROOT`: base (the default: the sandbox's image, or the host's root as it saw it), a snapshot's id, or another sandbox's id")
	stat := fs.Bool("stat", false, "lines added and removed per file, then totals")
	names := fs.Bool("name-only", false, "only the changed paths")
	export := fs.Bool("export", false, "a patch git apply takes (binary files whole)")
	color := fs.String("color", "auto", "colour: auto (on a terminal), always or never")
	ops, err := parseMixed(fs, args, stderr)
	if err != nil {
		return usageCode(err)
	}
	useColor, ok := colorMode(*color, stdout)
	picked := 0
	for _, b := range []bool{*stat, *names, *export} {
		if b {
			picked++
		}
	}
	if !ok || picked > 1 || len(ops) == 0 {
		fmt.Fprintln(stderr, "hutch: usage: hutch diff "+synopsis+" (--stat, --name-only and --export do not go together)")
		return 2
	}
	opt := client.DiffOptions{Against: *against, Paths: ops[1:]}
	switch {
	case *stat:
		opt.Format = "stat"
	case *names:
		opt.Format = "names"
	case *export:
		opt.Format, useColor = "export", false
	}
	c, ok := newClient(stderr)
	if !ok {
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), remoteTimeout)
	defer cancel()
	return writeDiff(stdout, useColor && opt.Format == "", func(w io.Writer) error { return c.Diff(ctx, ops[0], w, opt) }, func(err error) int {
		fmt.Fprintf(stderr, "hutch: diff %s: %v\n", ops[0], err)
		return 1
	})
}

// writeDiff writes to stdout what get writes, in colour when color (a
// patch); an error of get is fail's to report.
func writeDiff(stdout io.Writer, color bool, get func(io.Writer) error, fail func(error) int) int {
	var buf bytes.Buffer
	if err := get(&buf); err != nil {
		return fail(err)
	}
	if color {
		changes.Colorize(stdout, buf.Bytes())
		return 0
	}
	stdout.Write(buf.Bytes())
	return 0
}
