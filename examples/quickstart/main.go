// Command quickstart uses hutch's Go SDK (package client): it creates a
// sandbox in a running hutch serve, writes a file into it, runs a command
// there, reads the result back, and destroys the sandbox. The client finds
// the daemon at $HUTCH_HOST (default unix:///run/hutch/hutch.sock).
//
//	go run ./examples/quickstart
package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/hutch-sandbox/hutch/client"
)

func main() {
	if err := run(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	var c client.Client // the daemon at $HUTCH_HOST, with the token in $HUTCH_TOKEN
	sb, err := c.Create(ctx, client.CreateOptions{Timeout: 10 * time.Minute, Labels: map[string]string{"task": "quickstart"}})
	if err != nil {
		return err
	}
	defer c.Destroy(ctx, sb.ID)

	in := sb.Workspace + "/in.txt"
	if _, err := c.WriteFile(ctx, sb.ID, in, strings.NewReader("hello from the host\n"), 0o644); err != nil {
		return err
	}
	res, err := c.Run(ctx, sb.ID, client.Command{Args: []string{"sh", "-c", "tr a-z A-Z < in.txt > out.txt; echo done; exit 3"}})
	if err != nil {
		return err
	}
	fmt.Printf("sandbox %s: %sexit code %d\n", sb.ID, res.Stdout, res.Code)

	var out bytes.Buffer
	if _, err := c.ReadFile(ctx, sb.ID, sb.Workspace+"/out.txt", &out); err != nil {
		return err
	}
	fmt.Print(out.String())
	return nil
}
