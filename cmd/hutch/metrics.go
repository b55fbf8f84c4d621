package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/hutch-sandbox/hutch/client"
	"github.com/hutch-sandbox/hutch/internal/cli"
)

// cmdMetrics is "hutch metrics [--since D] ID": what sandbox ID used over
// the last hour (or the last D), one line a sample, oldest first.
func cmdMetrics(args []string, stdout, stderr io.Writer) int {
	fs := remoteFlags("metrics", "[--since DURATION] ID", stderr)
	since := fs.Duration("since", 0, "only the samples of the last `DURATION` (e.g. 5m; default: all kept, the last hour)")
	if err := cli.Parse(fs, args, stderr); err != nil {
		return usageCode(err)
	}
	if fs.NArg() != 1 || *since < 0 {
		fmt.Fprintln(stderr, "hutch: usage: hutch metrics [--since DURATION] ID")
		return 2
	}
	c, ok := newClient(stderr)
	if !ok {
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), remoteTimeout)
	defer cancel()
	var from time.Time
	if *since > 0 {
		from = time.Now().Add(-*since)
	}
	us, err := c.Metrics(ctx, fs.Arg(0), from, time.Time{})
	if err != nil {
		fmt.Fprintf(stderr, "hutch: metrics: %v\n", err)
		return 1
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tCPU\tMEMORY\tDISK")
	for _, u := range us {
		fmt.Fprintf(tw, "%s\t%.1f%% of %d\t%s / %s\t%s / %s\n", u.Time.Local().Format(time.TimeOnly), u.CPUPercent, u.CPUCount,
			mib(u.MemoryBytes), mib(u.MemoryLimit), mib(u.DiskBytes), mib(u.DiskLimit))
	}
	_ = tw.Flush()
	return 0
}

// mib formats n bytes in MiB.
func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// cmdNetwork is "hutch network ID [--allow-domain D]... [--deny-domain
// D]... [--allow-cidr C]... [--host NAME:ADDR]... [--offline]": it
// replaces the egress rules of running sandbox ID and prints them.
func cmdNetwork(args []string, stdout, stderr io.Writer) int {
	fs := remoteFlags("network", "[--allow-domain D]... [--deny-domain D]... [--allow-cidr C]... [--host NAME:ADDR]... [--offline] ID", stderr)
	var n client.Network
	fs.Var((*cli.List)(&n.AllowedDomains), "allow-domain", "a host the sandbox may reach (example.com, *.example.com, an IP; :PORT or :*, else 80 and 443; * every public host); repeatable")
	fs.Var((*cli.List)(&n.DeniedDomains), "deny-domain", "a host it never may; repeatable")
	fs.Var((*cli.List)(&n.AllowedCIDRs), "allow-cidr", "an address range it may reach (10.1.0.0/16[:PORT]); repeatable")
	fs.Var((*cli.List)(&n.Hosts), "host", "pin a name to an address, NAME:ADDRESS; repeatable")
	offline := fs.Bool("offline", false, "let the sandbox reach nothing")
	if err := cli.Parse(fs, args, stderr); err != nil {
		return usageCode(err)
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(stderr, "hutch: usage: hutch network [flags] ID (the rules replace the sandbox's)")
		return 2
	}
	if *offline {
		if len(n.AllowedDomains)+len(n.AllowedCIDRs) > 0 {
			fmt.Fprintln(stderr, "hutch: network: --offline with hosts to allow: choose one")
			return 2
		}
		n.Mode = "none"
	}
	c, ok := newClient(stderr)
	if !ok {
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), remoteTimeout)
	defer cancel()
	got, err := c.UpdateNetwork(ctx, fs.Arg(0), n)
	if err != nil {
		fmt.Fprintf(stderr, "hutch: network: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "mode %s\n", got.Mode)
	for _, l := range []struct {
		name string
		list []string
	}{{"allow", got.AllowedDomains}, {"allow", got.AllowedCIDRs}, {"deny", got.DeniedDomains}} {
		for _, v := range l.list {
			fmt.Fprintf(stdout, "%s %s\n", l.name, v)
		}
	}
	return 0
}
