// Command hutch runs commands in disposable sandboxes: `hutch run -- CMD`
// wraps one command in an OS-level sandbox, `hutch policy show` prints
// the effective policy, `hutch serve` runs the daemon that keeps
// long-lived sandboxes behind an HTTP API and `hutch mcp` serves an
// agent's session over MCP (both exec hutch-serve, the daemon's own
// binary), and `hutch create`, `exec`, `cp`, `ls` and `rm` use that
// daemon. What runs at every start of hutch is kept small: see
// docs/ARCHITECTURE.md, "one binary for the daemon, one for everything
// else".
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/hutch-sandbox/hutch/internal/cli"
	"github.com/hutch-sandbox/hutch/internal/gvisor"
	"github.com/hutch-sandbox/hutch/internal/microvm"
	"github.com/hutch-sandbox/hutch/internal/microvm/guest"
	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/proxyconnect"
	"github.com/hutch-sandbox/hutch/internal/runner"
	"github.com/hutch-sandbox/hutch/internal/sandbox"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

const usage = `hutch runs a command in a disposable sandbox.

Usage:
  hutch run [flags] -- COMMAND [ARGS...]   run COMMAND in a new sandbox
  hutch policy show [flags]                print the effective policy
  hutch version                            print hutch's version
  hutch approve check [--policy FILE] -- CMD...
                                           print what the approval rules
                                           decide for a command line: allow,
                                           deny or ask, and which rule
  hutch proxy-connect HOST PORT            (inside a sandbox) connect stdin and
                                           stdout to HOST:PORT through the
                                           sandbox's proxy, for ssh's ProxyCommand
  hutch changes ls|show|apply|export|discard
                                           review and apply what a hutch run
                                           --review command (or a hutch mcp
                                           --review session) wrote (hutch
                                           changes -h)

Agents (MCP, the Model Context Protocol):
  hutch mcp [flags]                        serve hutch's tools over MCP on
                                           stdio, for one agent session: a
                                           sandbox over the current directory
                                           and those the agent creates, never
                                           wider than the flags of hutch run
                                           given here
  hutch mcp wrap [flags] -- SERVER...      run a third-party MCP server (stdio)
                                           in a sandbox of the flags, relaying
                                           and recording its tool calls

Images:
  hutch image pull REF                     pull an image from its registry
  hutch image import FILE                  bring in a docker save tarball or an
                                           OCI layout; also ls, inspect, rm,
                                           prune, limit (hutch image -h)

The daemon and its clients:
  hutch serve [flags]                      run the daemon: long-lived sandboxes
                                           behind an HTTP API on a unix socket
                                           (and, with --listen, on TCP, where
                                           E2B's SDKs work too), in the
                                           isolation tier of --default-tier,
                                           none weaker than --min-tier
  hutch token create --tenant NAME [--e2b] make an API token for a tenant,
                                           through the daemon
  hutch audit verify [--state-dir DIR]     check the daemon's audit log
  hutch create [flags]                     create a sandbox (the flags of
                                           hutch run); prints its id
  hutch exec [-it] ID -- COMMAND...        run COMMAND in sandbox ID (-i: pass
                                           stdin; -t: on a terminal, this one)
  hutch run-code ID (-c CODE | FILE | -)   run code in sandbox ID's code
                                           interpreter (an image with Jupyter
                                           kernels; -l LANG, --context CTX,
                                           -e NAME=VALUE): its output, its
                                           value; plots and other rich results
                                           saved as files (--out DIR)
  hutch cp SRC ID:DST | ID:SRC DST         copy a file or directory into or
                                           out of a sandbox
  hutch ls [--label KEY=VALUE]...          list sandboxes, with their tier
                                           and image
  hutch image ls|pull|rm --remote          the daemon's images (hutch image
                                           --remote -h)
  hutch rm ID...                           destroy sandboxes
  hutch pause [--no-memory] ID...          freeze every process of sandboxes
                                           (a gvisor one's saved to disk); with
                                           --no-memory kill them all but the
                                           agent, keeping the files
  hutch resume ID...                       let paused sandboxes go on
  hutch snapshot ID... | rm SID...         snapshot sandboxes' roots (prints the
                                           snapshots' ids); delete snapshots
  hutch snapshot export SID -o FILE        a snapshot as an OCI image (--format docker
                                           for docker load; -o - for stdout)
  hutch snapshot push SID REF              a snapshot pushed to a registry, from here
  hutch snapshots [-q]                     list your snapshots
  hutch fork [-n N] ID                     N copies of sandbox ID as it is now
                                           (its files; under gVisor its processes too)
  hutch diff [--against ROOT] ID [PATH...] what sandbox ID changed in its root,
                                           against its image (or the host's
                                           root), a snapshot or a sandbox
  hutch events [--since N] ID              print sandbox ID's events as they
                                           happen, until it ends or Ctrl-C
  hutch metrics [--since D] ID             what sandbox ID used (CPU, memory,
                                           disk), sampled over the last hour
  hutch network [flags] ID                 replace running sandbox ID's egress
                                           rules (--allow-domain, --offline ...)
  hutch approvals [ID]                     the commands and hosts your sandboxes'
                                           approvals ask about, waiting
  hutch approvals answer APPROVAL ANSWER   answer one: once, run, always or deny

hutch serve, hutch token, hutch image (without --remote) and hutch mcp
run hutch-serve, the daemon's binary, installed next to hutch.

Run "hutch COMMAND -h" for the flags. Exit codes of "hutch run": the
command's own, 128+N if it was killed by signal N, 124 on --timeout, 125
when hutch itself failed or was called wrongly (the command did not run),
126 if the command cannot be executed, 127 if it was not found; "hutch exec"
exits the same way. The client commands find the daemon at $HUTCH_HOST
(unix:///PATH or http://HOST:PORT; default unix:///run/hutch/hutch.sock)
and send the token in $HUTCH_TOKEN; they exit with 1 when it refused
("hutch run-code" too when the code raised an exception).
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

func run(args []string, stdin, stdout, stderr *os.File) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "run":
		return cmdRun(args[1:], stdin, stdout, stderr)
	case "policy":
		if len(args) < 2 || args[1] != "show" {
			fmt.Fprintln(stderr, "hutch: usage: hutch policy show [flags]")
			return 2
		}
		return cmdPolicyShow(args[2:], stdout, stderr)
	case "proxy-connect":
		return proxyconnect.Main(args[1:], stdin, stdout, stderr)
	case guest.InitCommand:
		// Hidden: PID 1 of a microVM's guest, when no hutch-agent is
		// installed beside hutch.
		return guest.InitMain(args[1:], stderr)
	case microvm.ReaperCommand:
		// Hidden: PID 1 of the PID namespace of one of a microVM's host
		// processes, which ends it when hutch ends.
		return microvm.ReaperMain(args[1:], stderr)
	case gvisor.InitCommand:
		// Hidden: the first process of a gVisor sandbox with a proxy.
		return gvisor.InitMain(args[1:], stderr)
	case "serve", "token", "image", "mcp":
		// The daemon's commands, the images' (which link a registry
		// client) and MCP's (which link its SDK) are hutch-serve's (see
		// daemon.go); the daemon's images (--remote) are the API's.
		if args[0] == "image" && remoteImage(args[1:]) {
			return cmdRemoteImage(args[1:], stdout, stderr)
		}
		return execServe(args, stderr)
	case "changes":
		return cmdChanges(args[1:], stdout, stderr)
	case "audit":
		return cmdAudit(args[1:], stdout, stderr)
	case "approve":
		return cmdApprove(args[1:], stdout, stderr)
	case "approvals":
		return cmdApprovals(args[1:], stdout, stderr)
	case "create":
		return cmdCreate(args[1:], stdout, stderr)
	case "exec":
		return cmdExec(args[1:], stdin, stdout, stderr)
	case "run-code":
		return cmdRunCode(args[1:], stdin, stdout, stderr)
	case "cp":
		return cmdCp(args[1:], stdout, stderr)
	case "ls":
		return cmdLs(args[1:], stdout, stderr)
	case "rm":
		return cmdRm(args[1:], stdout, stderr)
	case "snapshot":
		return cmdSnapshot(args[1:], stdout, stderr)
	case "snapshots":
		return cmdSnapshots(args[1:], stdout, stderr)
	case "fork":
		return cmdFork(args[1:], stdout, stderr)
	case "diff":
		return cmdDiff(args[1:], stdout, stderr)
	case "pause":
		return cmdPause(args[1:], stdout, stderr)
	case "resume":
		return cmdResume(args[1:], stdout, stderr)
	case "events":
		return cmdEvents(args[1:], stdout, stderr)
	case "metrics":
		return cmdMetrics(args[1:], stdout, stderr)
	case "network":
		return cmdNetwork(args[1:], stdout, stderr)
	case "version", "--version":
		fmt.Fprintln(stdout, "hutch", version)
		return 0
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		msg := fmt.Sprintf("hutch: unknown command %q", args[0])
		if near := cli.Closest(args[0], commands); len(near) > 0 {
			msg += "; did you mean " + strings.Join(near, " or ") + "?"
		}
		fmt.Fprintf(stderr, "%s (\"hutch help\" lists the commands)\n", msg)
		return 2
	}
}

// commands are hutch's commands, for suggestions after a typo.
var commands = []string{"run", "policy", "version", "proxy-connect", "mcp", "serve", "token", "image", "audit", "changes", "create", "exec", "run-code", "cp", "ls", "rm", "pause", "resume", "snapshot", "snapshots", "fork", "diff", "events", "metrics", "network", "approve", "approvals", "help"}

func cmdRun(args []string, stdin, stdout, stderr *os.File) int {
	fs, rf := runner.NewFlags("run", "Usage: hutch run [flags] -- COMMAND [ARGS...]\n\nRuns COMMAND in a new sandbox.\n", stderr)
	if code, done := runner.Parse(fs, args, stderr); done {
		return code
	}
	rf.AskOnTerminal = true
	command := fs.Args()
	spec, code := rf.Spec(stderr)
	if code != 0 {
		return code
	}
	if rf.Check {
		return checkTier(spec.Tier, rf.AllowEmulation, stdout, stderr)
	}
	sb, err := rf.Prepare(spec, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "hutch: %v\n", err)
		return sandbox.ExitHutchError
	}
	defer sb.Close()
	if len(command) == 0 {
		// The image's own command starts where the image says; a command
		// given here works on the user's project, in the workspace.
		command = sb.UseImageCommand()
	}
	if len(command) == 0 {
		fmt.Fprintln(stderr, "hutch: no command given: hutch run [flags] -- COMMAND [ARGS...]")
		return sandbox.ExitHutchError
	}
	if err := sb.Approve(context.Background(), command); err != nil {
		fmt.Fprintf(stderr, "hutch: %v\n", err)
		return sandbox.ExitNotExecutable
	}
	sb.WarnPrivateArgs(command)
	environ, err := sb.Environ(command)
	if err != nil {
		fmt.Fprintf(stderr, "hutch: %v\n", err)
		return sandbox.ExitHutchError
	}
	c := sb.Config(environ)
	c.Args, c.Stdin, c.Stdout, c.Stderr = command, stdin, stdout, stderr
	review, err := rf.BeginReview(spec)
	if err != nil {
		fmt.Fprintf(stderr, "hutch: %v\n", err)
		return sandbox.ExitHutchError
	}
	if review != nil {
		c.ReviewDir = review.Dir()
	}
	res, err := sb.Runtime.Run(context.Background(), c)
	if err != nil && review != nil {
		review.Abort()
	}
	if err != nil {
		var ie *sandbox.InitError
		if errors.As(err, &ie) {
			fmt.Fprintf(stderr, "hutch: %s\n", ie.Msg)
			return ie.Code
		}
		fmt.Fprintf(stderr, "hutch: %v\n", err)
		return sandbox.ExitHutchError
	}
	sb.Finished(res)
	if review != nil {
		review.End(command, res.ExitCode, stderr)
	}
	return res.ExitCode
}

// checkTier is hutch run --check: what the host offers tier (microvm only).
func checkTier(tier string, allowEmulation bool, stdout, stderr *os.File) int {
	if tier != policy.TierMicroVM {
		fmt.Fprintf(stderr, "hutch: --check is for --tier %s only\n", policy.TierMicroVM)
		return sandbox.ExitHutchError
	}
	lines, ok := microvm.Check(os.Getenv(runner.GuestKernelEnv), allowEmulation)
	for _, l := range lines {
		fmt.Fprintln(stdout, l)
	}
	if !ok {
		return 1
	}
	return 0
}

func cmdPolicyShow(args []string, stdout, stderr *os.File) int {
	fs, rf := runner.NewFlags("policy show", "Usage: hutch policy show [flags]\n\nPrints the policy hutch run would apply with the same flags (--debug, --report,\n--upstream-ca and --state-dir, which are not policy, change nothing here).\n", stderr)
	if code, done := runner.Parse(fs, args, stderr); done {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "hutch: policy show takes no arguments, got %q\n", fs.Args())
		return sandbox.ExitHutchError
	}
	spec, code := rf.Spec(stderr)
	if code != 0 {
		return code
	}
	out, err := spec.Format()
	if err != nil {
		fmt.Fprintf(stderr, "hutch: %v\n", err)
		return 1
	}
	_, _ = stdout.Write(out)
	return 0
}

// usageCode is the exit code of the commands other than run, policy show
// and exec after cli.Parse failed: 0 after -h, else 2.
func usageCode(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	return 2
}
