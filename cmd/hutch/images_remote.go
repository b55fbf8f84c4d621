package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/hutch-sandbox/hutch/client"
	"github.com/hutch-sandbox/hutch/internal/cli"
	"github.com/hutch-sandbox/hutch/internal/sandbox"
)

// hutch image COMMAND --remote works on the image store of the daemon at
// $HUTCH_HOST, through its API, instead of a local store: hutch itself
// serves it (the daemon pulls; hutch links no registry client), while
// hutch image without --remote is hutch-serve's (see daemon.go).

const remoteImageUsage = `Usage:
  hutch image ls --remote [-q]                     list the daemon's images (-q: digests only)
  hutch image pull --remote REF [--platform OS/ARCH] [--insecure-registry HOST:PORT]...
                                                   have the daemon pull an image into its store
  hutch image rm --remote REF...                   remove names from the daemon's store (a digest
                                                   removes the image; layers in use stay)

The daemon is at $HUTCH_HOST (default %s), with the token in $HUTCH_TOKEN.
Every tenant may list; pulling and removing are for the daemon's operator,
on its unix socket without a token.
`

// remoteImage reports whether the image command args asks for the
// daemon's store (--remote).
func remoteImage(args []string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		if a == "--remote" || a == "-remote" || a == "--remote=true" || a == "-remote=true" {
			return true
		}
	}
	return false
}

// cmdRemoteImage is hutch image COMMAND --remote.
func cmdRemoteImage(args []string, stdout, stderr io.Writer) int {
	usage := func() { fmt.Fprintf(stderr, remoteImageUsage, client.DefaultHost) }
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		usage()
		if slices.ContainsFunc(args, func(a string) bool { return a == "-h" || a == "--help" || a == "help" }) {
			return 0
		}
		return 2
	}
	sub, rest := args[0], args[1:]
	if !slices.Contains([]string{"ls", "pull", "rm"}, sub) {
		fmt.Fprintf(stderr, "hutch: image %s --remote: only ls, pull and rm work on the daemon's store (hutch image %s without --remote works on this machine's)\n", sub, sub)
		return 2
	}
	fs := flag.NewFlagSet("hutch image "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = usage
	fs.Bool("remote", true, "work on the store of the daemon at $HUTCH_HOST")
	quiet := fs.Bool("q", false, "for ls: print the digests only")
	plat := fs.String("platform", "", "for pull: the platform to take from a multi-platform image, e.g. linux/arm64")
	var insecure cli.List
	fs.Var(&insecure, "insecure-registry", "for pull: the daemon may reach registry `HOST:PORT` over plain HTTP (repeatable)")
	operands, err := parseInterspersed(fs, rest, stderr)
	if err != nil {
		return usageCode(err)
	}
	want := map[string]string{"ls": "no arguments", "pull": "one REF", "rm": "one REF or more"}[sub]
	if (sub == "ls" && len(operands) != 0) || (sub == "pull" && len(operands) != 1) || (sub == "rm" && len(operands) == 0) {
		fmt.Fprintf(stderr, "hutch: image %s --remote takes %s\n", sub, want)
		return 2
	}
	c, ok := newClient(stderr)
	if !ok {
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, remoteTimeout)
	defer cancel()
	switch sub {
	case "ls":
		imgs, err := c.Images(ctx)
		if err != nil {
			fmt.Fprintf(stderr, "hutch: image ls: %v\n", err)
			return 1
		}
		printImages(stdout, imgs, *quiet)
	case "pull":
		o := client.PullOptions{Platform: *plat, InsecureRegistries: insecure}
		inPlace := false // the last line counts bytes, and is redrawn
		if f, ok := stderr.(*os.File); ok && sandbox.IsTerminal(f) {
			o.Progress = func(e client.PullEvent) {
				if inPlace {
					fmt.Fprint(stderr, "\r\033[K")
				}
				inPlace = e.Fetched > 0
				if inPlace {
					fmt.Fprint(stderr, pullLine(e))
					return
				}
				fmt.Fprintln(stderr, pullLine(e))
			}
		}
		digest, err := c.PullImage(ctx, operands[0], o)
		if inPlace {
			fmt.Fprint(stderr, "\r\033[K")
		}
		if err != nil {
			fmt.Fprintf(stderr, "hutch: image pull: %v\n", err)
			return 1
		}
		fmt.Fprintln(stdout, digest)
	case "rm":
		code := 0
		for _, ref := range operands {
			if err := c.RemoveImage(ctx, ref); err != nil {
				fmt.Fprintf(stderr, "hutch: image rm %s: %v\n", ref, err)
				code = 1
				continue
			}
			fmt.Fprintf(stdout, "removed %s\n", ref)
		}
		return code
	}
	return 0
}

// parseInterspersed parses fs's flags wherever they stand among args (as
// git's and docker's commands take them after an image's name) and
// returns the other arguments; "--" ends the flags.
func parseInterspersed(fs *flag.FlagSet, args []string, stderr io.Writer) ([]string, error) {
	var operands []string
	for {
		if err := cli.Parse(fs, args, stderr); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return operands, nil
		}
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			return append(operands, rest...), nil
		}
		operands, args = append(operands, rest[0]), rest[1:]
	}
}

// printImages lists imgs as hutch image ls does: a line per name.
func printImages(w io.Writer, imgs []client.Image, quiet bool) {
	if quiet {
		for _, img := range imgs {
			fmt.Fprintln(w, img.Digest)
		}
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tDIGEST\tPLATFORM\tSIZE\tADDED")
	for _, img := range imgs {
		names := img.Refs
		if len(names) == 0 {
			names = []string{"<none>"}
		}
		for _, n := range names {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", n, shortDigest(img.Digest), img.Platform, mebibytes(img.Size), img.Added.Local().Format(time.DateTime))
		}
	}
	_ = tw.Flush()
}

// pullLine describes a step of a pull.
func pullLine(e client.PullEvent) string {
	switch {
	case e.Fetched > 0:
		return "fetched " + mebibytes(e.Fetched)
	case e.Layer == "":
		return fmt.Sprintf("%d layers, %s to fetch", e.Count, mebibytes(e.Size))
	}
	layer := fmt.Sprintf("layer %d/%d %s", e.Index, e.Count, shortDigest(e.Layer))
	switch {
	case e.Cached:
		return layer + ": in the store"
	case e.Done:
		return layer + ": " + mebibytes(e.Bytes)
	}
	return layer + ": fetching"
}

// mebibytes is n bytes in MiB, to a tenth.
func mebibytes(n int64) string {
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}
