package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/hutch-sandbox/hutch/client"
	"github.com/hutch-sandbox/hutch/internal/cli"
)

// cmdEvents prints a sandbox's events, one a line, as they happen, until
// the sandbox ended or hutch is interrupted (which exits with 0).
func cmdEvents(args []string, stdout, stderr io.Writer) int {
	fs := remoteFlags("events", "[--since N] ID", stderr)
	since := fs.Int64("since", 0, "print only the events after sequence number `N`")
	if err := cli.Parse(fs, args, stderr); err != nil {
		return usageCode(err)
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(stderr, "hutch: usage: hutch events [--since N] ID")
		return 2
	}
	c, ok := newClient(stderr)
	if !ok {
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	for ev, err := range c.Events(ctx, fs.Arg(0), *since) {
		if err != nil {
			if ctx.Err() != nil {
				return 0
			}
			fmt.Fprintf(stderr, "hutch: events: %v\n", err)
			return 1
		}
		fmt.Fprintln(stdout, formatEvent(ev))
	}
	return 0
}

// formatEvent is one line: the time, the type and the data as sorted
// key=value pairs, the values in JSON.
func formatEvent(ev client.Event) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %-14s", ev.Time.Local().Format(time.RFC3339Nano), ev.Type)
	for _, k := range slices.Sorted(maps.Keys(ev.Data)) {
		v, err := json.Marshal(ev.Data[k])
		if err != nil {
			v = []byte(fmt.Sprint(ev.Data[k]))
		}
		fmt.Fprintf(&b, " %s=%s", k, v)
	}
	return strings.TrimRight(b.String(), " ")
}
