package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"

	"github.com/hutch-sandbox/hutch/client"
	"github.com/hutch-sandbox/hutch/internal/cli"
	"github.com/hutch-sandbox/hutch/internal/image/fetch"
)

const snapshotPushUsage = `Usage: hutch snapshot push [flags] SID REF

Pushes snapshot SID of the daemon at $HUTCH_HOST (token in $HUTCH_TOKEN) to
the registry of REF as an OCI image, from this machine: the daemon exports
it (GET /v1/snapshots/SID/image) and this command sends each layer to the
registry as it arrives; the daemon never reaches the registry. Credentials
come from ~/.docker/config.json ($DOCKER_CONFIG), or --registry-auth FILE.
It prints REF@DIGEST.

Flags:
  --insecure-registry HOST:PORT   reach this registry over plain HTTP (repeatable)
  --registry-auth FILE            take credentials from this Docker configuration file
`

// cmdSnapshot is "hutch snapshot push SID REF" (the other snapshot
// commands are hutch's own).
func cmdSnapshot(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "push" {
		fmt.Fprintln(stderr, "hutch-serve: snapshot: only push is hutch-serve's (hutch snapshot push SID REF)")
		return 2
	}
	fs := flag.NewFlagSet("hutch snapshot push", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, snapshotPushUsage) }
	var insecure cli.List
	fs.Var(&insecure, "insecure-registry", "reach registry `HOST:PORT` over plain HTTP (repeatable)")
	authFile := fs.String("registry-auth", "", "take credentials from this Docker configuration `file`")
	if err := cli.Parse(fs, flagsFirst(args[1:], "insecure-registry", "registry-auth"), stderr); err != nil {
		return usageCode(err)
	}
	if fs.NArg() != 2 {
		fmt.Fprint(stderr, snapshotPushUsage)
		return 2
	}
	sid, ref := fs.Arg(0), fs.Arg(1)
	c, err := client.New("", "")
	if err != nil {
		fmt.Fprintf(stderr, "hutch: %v\n", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	pr, pw := io.Pipe()
	exported := make(chan error, 1)
	go func() {
		_, err := c.ExportSnapshot(ctx, sid, pw, client.ExportOptions{Name: ref})
		pw.CloseWithError(err)
		exported <- err
	}()
	digest, err := fetch.PushLayout(ctx, pr, ref, fetch.PushOptions{Insecure: insecure, AuthFile: *authFile})
	// A push that stopped early stops the export.
	pr.CloseWithError(io.ErrClosedPipe)
	if xerr := <-exported; xerr != nil && !errors.Is(xerr, io.ErrClosedPipe) {
		// The daemon's refusal says more than the broken stream.
		err = xerr
	}
	if err != nil {
		fmt.Fprintf(stderr, "hutch: snapshot push %s: %v\n", sid, err)
		return 1
	}
	fmt.Fprintf(stdout, "%s@%s\n", ref, digest)
	return 0
}
