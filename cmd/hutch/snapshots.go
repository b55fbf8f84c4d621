package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/hutch-sandbox/hutch/client"
	"github.com/hutch-sandbox/hutch/internal/changes"
	"github.com/hutch-sandbox/hutch/internal/cli"
)

// cmdSnapshot is "hutch snapshot ID..." (snapshot each sandbox, print the
// snapshots' ids) and "hutch snapshot rm SID..." (delete snapshots).
func cmdSnapshot(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "rm" {
		fs := remoteFlags("snapshot rm", "SID...", stderr)
		if err := cli.Parse(fs, args[1:], stderr); err != nil {
			return usageCode(err)
		}
		if fs.NArg() == 0 {
			fmt.Fprintln(stderr, "hutch: usage: hutch snapshot rm SID...")
			return 2
		}
		return forEach(fs.Args(), stdout, stderr, "snapshot rm", func(ctx context.Context, c *client.Client, sid string) (string, error) {
			return sid, c.DeleteSnapshot(ctx, sid)
		})
	}
	fs := remoteFlags("snapshot", "ID... (or: hutch snapshot rm SID...)", stderr)
	if err := cli.Parse(fs, args, stderr); err != nil {
		return usageCode(err)
	}
	if fs.NArg() == 0 {
		fmt.Fprintln(stderr, "hutch: usage: hutch snapshot ID... (hutch snapshot rm SID... deletes)")
		return 2
	}
	return forEach(fs.Args(), stdout, stderr, "snapshot", func(ctx context.Context, c *client.Client, id string) (string, error) {
		s, err := c.Snapshot(ctx, id)
		if err != nil {
			return "", err
		}
		return s.ID, nil
	})
}

// forEach calls f with the daemon's client for every argument, printing
// what it returns, and each error on stderr; 1 when any failed.
func forEach(args []string, stdout, stderr io.Writer, name string, f func(context.Context, *client.Client, string) (string, error)) int {
	c, ok := newClient(stderr)
	if !ok {
		return 1
	}
	code := 0
	for _, a := range args {
		ctx, cancel := context.WithTimeout(context.Background(), remoteTimeout)
		out, err := f(ctx, c, a)
		cancel()
		if err != nil {
			fmt.Fprintf(stderr, "hutch: %s %s: %v\n", name, a, err)
			code = 1
			continue
		}
		fmt.Fprintln(stdout, out)
	}
	return code
}

// cmdSnapshots is "hutch snapshots [-q]": the tenant's snapshots, newest
// first.
func cmdSnapshots(args []string, stdout, stderr io.Writer) int {
	fs := remoteFlags("snapshots", "[-q]", stderr)
	quiet := fs.Bool("q", false, "print the ids only")
	if err := cli.Parse(fs, args, stderr); err != nil {
		return usageCode(err)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "hutch: snapshots takes no arguments, got %q\n", fs.Args())
		return 2
	}
	c, ok := newClient(stderr)
	if !ok {
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), remoteTimeout)
	defer cancel()
	list, err := c.Snapshots(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "hutch: snapshots: %v\n", err)
		return 1
	}
	if *quiet {
		for _, s := range list {
			fmt.Fprintln(stdout, s.ID)
		}
		return 0
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSOURCE\tROOT\tLAYERS\tSIZE\tCREATED")
	for _, s := range list {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", s.ID, s.Source, s.Root, s.Layers, changes.Size(s.Size), s.CreatedAt.Local().Format(time.DateTime))
	}
	_ = tw.Flush()
	return 0
}

// cmdFork is "hutch fork [-n N] [--timeout D] ID": N independent copies of
// sandbox ID as it is now (its root's writes; not its processes), whose
// ids it prints; each copy that could not be made is said on stderr.
func cmdFork(args []string, stdout, stderr io.Writer) int {
	fs := remoteFlags("fork", "[-n N] [--timeout DURATION] ID", stderr)
	n := fs.Int("n", 1, "how many copies")
	timeout := fs.Duration("timeout", 0, "each copy's lifetime (default: the source's policy, or the daemon's)")
	if err := cli.Parse(fs, args, stderr); err != nil {
		return usageCode(err)
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(stderr, "hutch: usage: hutch fork [-n N] [--timeout DURATION] ID")
		return 2
	}
	c, ok := newClient(stderr)
	if !ok {
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), remoteTimeout)
	defer cancel()
	forks, err := c.ForkSandbox(ctx, fs.Arg(0), *n, *timeout)
	if err != nil {
		fmt.Fprintf(stderr, "hutch: fork %s: %v\n", fs.Arg(0), err)
		return 1
	}
	code := 0
	for i, f := range forks {
		if f.Sandbox == nil {
			fmt.Fprintf(stderr, "hutch: fork %s: copy %d: %s\n", fs.Arg(0), i+1, f.Error)
			code = 1
			continue
		}
		fmt.Fprintln(stdout, f.Sandbox.ID)
	}
	return code
}
