package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/hutch-sandbox/hutch/client"
	"github.com/hutch-sandbox/hutch/internal/changes"
	"github.com/hutch-sandbox/hutch/internal/cli"
	"github.com/hutch-sandbox/hutch/internal/sandbox"
)

// cmdSnapshot is "hutch snapshot ID..." (snapshot each sandbox, print the
// snapshots' ids), "hutch snapshot rm SID..." (delete snapshots), "hutch
// snapshot export SID -o FILE" (write one as an OCI image) and "hutch
// snapshot push SID REF", which is hutch-serve's: it links the registry
// client (see daemon.go).
func cmdSnapshot(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "push" {
		return execServe(append([]string{"snapshot"}, args...), stderr)
	}
	if len(args) > 0 && args[0] == "export" {
		return cmdSnapshotExport(args[1:], stdout, stderr)
	}
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
	fs := remoteFlags("snapshot", "ID... (or: hutch snapshot rm|export|push SID ...)", stderr)
	if err := cli.Parse(fs, args, stderr); err != nil {
		return usageCode(err)
	}
	if fs.NArg() == 0 {
		fmt.Fprintln(stderr, "hutch: usage: hutch snapshot ID... (hutch snapshot rm SID... deletes, export SID -o FILE and push SID REF write an image)")
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
	fmt.Fprintln(tw, "ID\tSOURCE\tROOT\tTIER\tLAYERS\tSIZE\tMEMORY\tCREATED")
	for _, s := range list {
		mem := "-" // its files only
		if s.Memory {
			mem = changes.Size(s.MemorySize)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", s.ID, s.Source, s.Root, s.Tier, s.Layers, changes.Size(s.Size), mem, s.CreatedAt.Local().Format(time.DateTime))
	}
	_ = tw.Flush()
	return 0
}

// cmdFork is "hutch fork [-n N] [--timeout D] ID": N independent copies of
// sandbox ID as it is now (its root's writes; under gVisor its processes
// and memory too), whose
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

// cmdSnapshotExport is "hutch snapshot export [--format oci|docker]
// [--name REF] -o FILE SID": the snapshot as an OCI image (an OCI layout
// in a tar, or a docker save tarball), written to FILE whole or not at
// all ("-": stdout, never a terminal); it prints the image's digest (on
// stderr when the image goes to stdout).
func cmdSnapshotExport(args []string, stdout, stderr io.Writer) int {
	fs := remoteFlags("snapshot export", "[--format oci|docker] [--name REF] -o FILE SID", stderr)
	out := fs.String("o", "", "write the image to `file` (- for stdout)")
	format := fs.String("format", "oci", "oci (an OCI image layout in a tar: hutch image import, skopeo, crane) or docker (docker load)")
	name := fs.String("name", "", "the `reference` the image is written under (e.g. registry.example/team/tpl:1)")
	operands, err := parseInterspersed(fs, args, stderr)
	if err != nil {
		return usageCode(err)
	}
	if len(operands) != 1 || *out == "" {
		fmt.Fprintln(stderr, "hutch: usage: hutch snapshot export [--format oci|docker] [--name REF] -o FILE SID")
		return 2
	}
	if *format != "oci" && *format != "docker" {
		fmt.Fprintf(stderr, "hutch: snapshot export: --format %q: want oci or docker\n", *format)
		return 2
	}
	var w io.Writer = stdout
	var f *os.File
	if *out == "-" {
		if o, ok := stdout.(*os.File); ok && sandbox.IsTerminal(o) {
			fmt.Fprintln(stderr, "hutch: snapshot export: not writing a tar to a terminal: give -o FILE, or redirect stdout")
			return 2
		}
	} else {
		// Written beside FILE and renamed over it once whole.
		if f, err = os.CreateTemp(filepath.Dir(*out), "."+filepath.Base(*out)+".*"); err != nil {
			fmt.Fprintf(stderr, "hutch: snapshot export: %v\n", err)
			return 1
		}
		defer os.Remove(f.Name())
		defer f.Close()
		w = f
	}
	c, ok := newClient(stderr)
	if !ok {
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	digest, err := c.ExportSnapshot(ctx, operands[0], w, client.ExportOptions{Format: *format, Name: *name})
	if err == nil && f != nil {
		if err = f.Chmod(0o644); err == nil {
			err = f.Close()
		}
		if err == nil {
			err = os.Rename(f.Name(), *out)
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "hutch: snapshot export %s: %v\n", operands[0], err)
		return 1
	}
	if *out == "-" {
		fmt.Fprintln(stderr, digest)
	} else {
		fmt.Fprintln(stdout, digest)
	}
	return 0
}
