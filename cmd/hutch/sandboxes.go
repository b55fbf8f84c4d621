package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/hutch-sandbox/hutch/client"
	"github.com/hutch-sandbox/hutch/internal/cli"
)

// cmdPause is "hutch pause [--no-memory] ID...": it freezes every process
// of each sandbox (a gVisor one's are saved to disk) — with --no-memory,
// kills them all but the agent first, keeping the files — and prints the
// ids it paused.
func cmdPause(args []string, stdout, stderr io.Writer) int {
	var o client.PauseOptions
	return eachSandboxFlags("pause", func(fs *flag.FlagSet) {
		fs.BoolVar(&o.FilesOnly, "no-memory", false, "pause without memory: kill every process of the sandbox but its agent, keep its files (resumed, commands run afresh)")
	}, func(c *client.Client, ctx context.Context, id string) error {
		_, err := c.PauseWith(ctx, id, o)
		return err
	}, args, stdout, stderr)
}

// cmdResume is "hutch resume ID...": it lets the processes of each paused
// sandbox go on, and prints the ids it resumed.
func cmdResume(args []string, stdout, stderr io.Writer) int {
	return eachSandbox("resume", dropInfo((*client.Client).Resume), args, stdout, stderr)
}

// cmdRm is "hutch rm ID...": it destroys each sandbox, and prints the ids
// it destroyed.
func cmdRm(args []string, stdout, stderr io.Writer) int {
	return eachSandbox("rm", (*client.Client).Destroy, args, stdout, stderr)
}

// dropInfo adapts a call that describes the sandbox to eachSandbox.
func dropInfo(f func(*client.Client, context.Context, string) (*client.Sandbox, error)) func(*client.Client, context.Context, string) error {
	return func(c *client.Client, ctx context.Context, id string) error {
		_, err := f(c, ctx, id)
		return err
	}
}

// eachSandbox runs the command name, which calls f for every sandbox named
// in args and prints the ids it succeeded for.
func eachSandbox(name string, f func(*client.Client, context.Context, string) error, args []string, stdout, stderr io.Writer) int {
	return eachSandboxFlags(name, func(*flag.FlagSet) {}, f, args, stdout, stderr)
}

// eachSandboxFlags is eachSandbox with flags of the command's own, which
// flags defines.
func eachSandboxFlags(name string, flags func(*flag.FlagSet), f func(*client.Client, context.Context, string) error, args []string, stdout, stderr io.Writer) int {
	fs := remoteFlags(name, "ID...", stderr)
	flags(fs)
	if err := cli.Parse(fs, args, stderr); err != nil {
		return usageCode(err)
	}
	if fs.NArg() == 0 {
		fmt.Fprintf(stderr, "hutch: usage: hutch %s ID...\n", name)
		return 2
	}
	return forEach(fs.Args(), stdout, stderr, name, func(ctx context.Context, c *client.Client, id string) (string, error) {
		return id, f(c, ctx, id)
	})
}
