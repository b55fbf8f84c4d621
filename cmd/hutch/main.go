// Command hutch runs commands in disposable sandboxes: `hutch run -- CMD`
// wraps one command in an OS-level sandbox, `hutch policy show` prints
// the effective policy, `hutch serve` runs the daemon that keeps
// long-lived sandboxes behind an HTTP API (it execs hutch-serve, the
// daemon's own binary), and `hutch create`, `exec`, `cp`, `ls` and `rm`
// use that daemon. What runs at every start of hutch is kept small: see
// docs/ARCHITECTURE.md, "one binary for the daemon, one for everything
// else".
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hutch-sandbox/hutch/internal/agent"
	"github.com/hutch-sandbox/hutch/internal/cli"
	"github.com/hutch-sandbox/hutch/internal/gvisor"
	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/portconnect"
	"github.com/hutch-sandbox/hutch/internal/proxyconnect"
	"github.com/hutch-sandbox/hutch/internal/sandbox"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

const usage = `hutch runs a command in a disposable sandbox.

Usage:
  hutch run [flags] -- COMMAND [ARGS...]   run COMMAND in a new sandbox
  hutch policy show [flags]                print the effective policy
  hutch version                            print hutch's version
  hutch proxy-connect HOST PORT            (inside a sandbox) connect stdin and
                                           stdout to HOST:PORT through the
                                           sandbox's proxy, for ssh's ProxyCommand

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
  hutch cp SRC ID:DST | ID:SRC DST         copy a file or directory into or
                                           out of a sandbox
  hutch ls [--label KEY=VALUE]...          list sandboxes, with their tier
                                           and image
  hutch image ls|pull|rm --remote          the daemon's images (hutch image
                                           --remote -h)
  hutch rm ID...                           destroy sandboxes
  hutch pause ID...                        freeze every process of sandboxes
                                           (a gvisor one's saved to disk)
  hutch resume ID...                       let paused sandboxes go on
  hutch events [--since N] ID              print sandbox ID's events as they
                                           happen, until it ends or Ctrl-C

hutch serve, hutch token and hutch image (without --remote) run
hutch-serve, the daemon's binary, installed next to hutch.

Run "hutch COMMAND -h" for the flags. Exit codes of "hutch run": the
command's own, 128+N if it was killed by signal N, 124 on --timeout, 125
when hutch itself failed or was called wrongly (the command did not run),
126 if the command cannot be executed, 127 if it was not found; "hutch exec"
exits the same way. The client commands find the daemon at $HUTCH_HOST
(unix:///PATH or http://HOST:PORT; default unix:///run/hutch/hutch.sock)
and send the token in $HUTCH_TOKEN; they exit with 1 when it refused.
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
	case portconnect.Command:
		// Hidden: a port forward's end inside a sandbox (port_url).
		return portconnect.Main(args[1:], stdin, stdout, stderr)
	case "agent":
		// Hidden: PID 1 of hutch mcp's sandboxes when hutch-agent is not
		// installed next to hutch.
		return agent.Main(args[1:], stderr)
	case "mcp":
		return cmdMCP(args[1:], stdin, stdout, stderr)
	case gvisor.InitCommand:
		// Hidden: the first process of a gVisor sandbox with a proxy.
		return gvisor.InitMain(args[1:], stderr)
	case "serve", "token", "image":
		// The daemon's commands, and the images' (which link a registry
		// client), are hutch-serve's (see daemon.go); the daemon's images
		// (--remote) are the API's.
		if args[0] == "image" && remoteImage(args[1:]) {
			return cmdRemoteImage(args[1:], stdout, stderr)
		}
		return execServe(args, stderr)
	case "audit":
		return cmdAudit(args[1:], stdout, stderr)
	case "create":
		return cmdCreate(args[1:], stdout, stderr)
	case "exec":
		return cmdExec(args[1:], stdin, stdout, stderr)
	case "cp":
		return cmdCp(args[1:], stdout, stderr)
	case "ls":
		return cmdLs(args[1:], stdout, stderr)
	case "rm":
		return cmdRm(args[1:], stdout, stderr)
	case "pause":
		return cmdPause(args[1:], stdout, stderr)
	case "resume":
		return cmdResume(args[1:], stdout, stderr)
	case "events":
		return cmdEvents(args[1:], stdout, stderr)
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
var commands = []string{"run", "policy", "version", "proxy-connect", "mcp", "serve", "token", "image", "audit", "create", "exec", "cp", "ls", "rm", "pause", "resume", "events", "help"}

func cmdRun(args []string, stdin, stdout, stderr *os.File) int {
	fs, rf := newRunFlags("run", stderr)
	if code, done := parseFlags(fs, args, stderr); done {
		return code
	}
	command := fs.Args()
	spec, code := rf.spec(stderr)
	if code != 0 {
		return code
	}
	sb, err := rf.prepare(spec, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "hutch: %v\n", err)
		return sandbox.ExitHutchError
	}
	defer sb.close()
	if len(command) == 0 && sb.img != nil {
		// The image's own command starts where the image says; a command
		// given here works on the user's project, in the workspace.
		command = imageCommand(sb.img)
		if wd := sb.img.Config.WorkingDir; wd != "" {
			sb.imgRoot.Dir = filepath.Join("/", wd)
		}
	}
	if len(command) == 0 {
		fmt.Fprintln(stderr, "hutch: no command given: hutch run [flags] -- COMMAND [ARGS...]")
		return sandbox.ExitHutchError
	}
	warnPrivateArgs(sb.spec, command, stderr)
	environ, err := sb.environ(command)
	if err != nil {
		fmt.Fprintf(stderr, "hutch: %v\n", err)
		return sandbox.ExitHutchError
	}
	c := sb.config(environ)
	c.Args, c.Stdin, c.Stdout, c.Stderr = command, stdin, stdout, stderr
	res, err := sb.rt.Run(context.Background(), c)
	if err != nil {
		var ie *sandbox.InitError
		if errors.As(err, &ie) {
			fmt.Fprintf(stderr, "hutch: %s\n", ie.Msg)
			return ie.Code
		}
		fmt.Fprintf(stderr, "hutch: %v\n", err)
		return sandbox.ExitHutchError
	}
	sb.finished(res)
	return res.ExitCode
}

func cmdPolicyShow(args []string, stdout, stderr *os.File) int {
	fs, rf := newRunFlags("policy show", stderr)
	if code, done := parseFlags(fs, args, stderr); done {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "hutch: policy show takes no arguments, got %q\n", fs.Args())
		return sandbox.ExitHutchError
	}
	spec, code := rf.spec(stderr)
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

// parseFlags parses args (see cli.Parse); done is true when the command
// must end here with code: 0 after -h, 125 (hutch's own error, never the
// command's) after a bad flag, which cli.Parse has reported.
func parseFlags(fs *flag.FlagSet, args []string, stderr io.Writer) (code int, done bool) {
	switch err := cli.Parse(fs, args, stderr); {
	case err == nil:
		return 0, false
	case errors.Is(err, flag.ErrHelp):
		return 0, true
	default:
		return sandbox.ExitHutchError, true
	}
}

// usageCode is the exit code of the commands other than run, policy show
// and exec after cli.Parse failed: 0 after -h, else 2.
func usageCode(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	return 2
}

// spec builds the effective policy; a non-zero code means it failed and the
// error was printed.
func (p *policyFlags) spec(stderr io.Writer) (policy.Spec, int) {
	fail := func(err error) (policy.Spec, int) {
		fmt.Fprintf(stderr, "hutch: %v\n", err)
		return policy.Spec{}, sandbox.ExitHutchError
	}
	var s policy.Spec
	var err error
	switch {
	case p.policyFile != "" && p.srtFile != "":
		return fail(errors.New("--policy and --srt-settings cannot be combined"))
	case p.policyFile != "":
		if s, err = policy.Load(p.policyFile); err != nil {
			return fail(err)
		}
	case p.srtFile != "":
		var warnings []string
		if s, warnings, err = policy.LoadSRT(p.srtFile); err != nil {
			return fail(err)
		}
		for _, w := range warnings {
			fmt.Fprintf(stderr, "hutch: warning: %s\n", w)
		}
	}
	if err := p.apply(&s); err != nil {
		return fail(err)
	}
	p.givenMode = s.Network.Mode

	cwd, err := os.Getwd()
	if err != nil {
		return fail(fmt.Errorf("current directory: %w", err))
	}
	home, _ := os.UserHomeDir()
	if err := s.Normalize(cwd, home); err != nil {
		return fail(err)
	}
	if _, img := s.Image(); img && s.Filesystem.WorkspaceAt == "" {
		s.Filesystem.WorkspaceAt = policy.DefaultWorkspaceAt
	}
	if err := s.Validate(); err != nil {
		return fail(err)
	}
	return s, 0
}

func (p *policyFlags) apply(s *policy.Spec) error {
	if p.workspace != "" {
		s.Filesystem.Workspace = p.workspace
	}
	if p.root != "" {
		s.Root = p.root
	}
	if p.tier != "" {
		if err := policy.CheckTier(p.tier); err != nil {
			return fmt.Errorf("--tier: %w", err)
		}
		s.Tier = p.tier
	}
	if p.image != "" {
		if p.root != "" {
			return errors.New("--root and --image cannot be combined")
		}
		s.Root = policy.ImagePrefix + p.image
	}
	if p.workspaceAt != "" {
		if err := policy.CheckWorkspaceAt(p.workspaceAt); err != nil {
			return fmt.Errorf("--workspace-at: %w", err)
		}
		s.Filesystem.WorkspaceAt = p.workspaceAt
	}
	s.Filesystem.AllowWrite = append(s.Filesystem.AllowWrite, p.allowWrite...)
	s.Filesystem.DenyRead = append(s.Filesystem.DenyRead, p.denyRead...)
	s.Filesystem.DenyWrite = append(s.Filesystem.DenyWrite, p.denyWrite...)
	s.Filesystem.AllowRead = append(s.Filesystem.AllowRead, p.allowRd...)
	if p.noDefaultDenies {
		s.Filesystem.NoDefaultDenies = true
	}
	if p.home != "" {
		if err := policy.CheckHome(p.home); err != nil {
			return fmt.Errorf("--home: %w", err)
		}
		s.Filesystem.Home = p.home
	}
	for _, kv := range p.env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return fmt.Errorf("--env %q: want NAME=VALUE", kv)
		}
		if s.Env.Set == nil {
			s.Env.Set = map[string]string{}
		}
		s.Env.Set[k] = v
	}
	s.Env.Pass = append(s.Env.Pass, p.passEnv...)
	var err error
	if p.memory != "" {
		if s.Resources.MemoryBytes, err = policy.ParseSize(p.memory); err != nil {
			return fmt.Errorf("--memory: %w", err)
		}
	}
	if p.tmpSize != "" {
		if s.Resources.TmpBytes, err = policy.ParseSize(p.tmpSize); err != nil {
			return fmt.Errorf("--tmp-size: %w", err)
		}
	}
	if p.timeout != "" {
		if s.Resources.Timeout, err = policy.ParseTimeout(p.timeout); err != nil {
			return fmt.Errorf("--timeout: %w", err)
		}
	}
	if p.cpus != 0 {
		s.Resources.CPUs = p.cpus
	}
	if p.pids != 0 {
		s.Resources.Pids = p.pids
	}
	if p.bestEffort {
		s.BestEffort = true
	}
	nw := &s.Network
	if p.net != "" {
		nw.Mode = p.net
	}
	nw.AllowedDomains = append(nw.AllowedDomains, p.allowDomain...)
	nw.DeniedDomains = append(nw.DeniedDomains, p.denyDomain...)
	nw.AllowedCIDRs = append(nw.AllowedCIDRs, p.allowCIDR...)
	nw.AllowPrivate = append(nw.AllowPrivate, p.allowPrivate...)
	nw.Hosts = append(nw.Hosts, p.addHost...)
	for _, sf := range p.secret {
		name, hosts, ok := strings.Cut(sf, "@")
		if !ok || name == "" || hosts == "" {
			return fmt.Errorf("--secret %q: want NAME@host1,host2", sf)
		}
		s.Secrets = append(s.Secrets, policy.Secret{Name: name, Hosts: strings.Split(hosts, ",")})
	}
	return nil
}

// setAsideRecord is the --report line of something hutch set aside.
type setAsideRecord struct {
	Time    time.Time `json:"time"`
	Sandbox string    `json:"sandbox"`
	Action  string    `json:"action"` // "set_aside"
	sandbox.SetAside
}

// fileRefusalRecord is a line of the report for what the sandbox was
// refused at a path hutch hid or protected (counted: one line a path and
// kind of access).
type fileRefusalRecord struct {
	Time     time.Time `json:"time"`
	Sandbox  string    `json:"sandbox"`
	Action   string    `json:"action"`   // "blocked"
	Protocol string    `json:"protocol"` // "file"
	sandbox.FileRefusal
}
