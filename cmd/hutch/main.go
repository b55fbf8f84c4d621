// Command hutch runs commands in disposable sandboxes: `hutch run -- CMD`
// wraps one command in an OS-level sandbox, `hutch policy show` prints
// the effective policy, `hutch serve` runs the daemon that keeps
// long-lived sandboxes behind an HTTP API, and `hutch create`, `exec`,
// `cp`, `ls` and `rm` use that daemon.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hutch-sandbox/hutch/internal/policy"
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

The daemon and its clients:
  hutch serve [flags]                      run the daemon: long-lived sandboxes
                                           behind an HTTP API on a unix socket
                                           (and, with --listen, on TCP, where
                                           E2B's SDKs work too)
  hutch token create --tenant NAME [--e2b] make an API token for a tenant
                                           (--e2b: shaped as E2B's API keys)
  hutch audit verify [--state-dir DIR]     check the daemon's audit log
  hutch create [flags]                     create a sandbox; prints its id
  hutch exec [-i] [-t] ID -- COMMAND...    run COMMAND in sandbox ID
  hutch cp SRC ID:DST | ID:SRC DST         copy a file or directory into or
                                           out of a sandbox
  hutch ls [--label KEY=VALUE]...          list sandboxes
  hutch rm ID...                           destroy sandboxes
  hutch pause ID...                        freeze every process of sandboxes
  hutch resume ID...                       let paused sandboxes go on
  hutch events [--since N] ID              print sandbox ID's events as they
                                           happen, until it ends or Ctrl-C

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
	case "agent":
		return cmdAgent(args[1:], stderr)
	case "proxy-connect":
		return proxyconnect.Main(args[1:], stdin, stdout, stderr)
	case "serve":
		return cmdServe(args[1:], stderr)
	case "token":
		return cmdToken(args[1:], stdout, stderr)
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
		fmt.Fprintf(stderr, "hutch: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
}

func cmdRun(args []string, stdin, stdout, stderr *os.File) int {
	fs, pf := newPolicyFlags("run", stderr)
	debug := fs.Bool("debug", false, "log sandbox setup to stderr")
	var upstreamCAs listFlag
	fs.Var(&upstreamCAs, "upstream-ca", "also trust the certificates in `file` (PEM) when the proxy connects to a secret's host (repeatable)")
	report := fs.String("report", "", "write every refused connection, and the traffic of every allowed host, to `file` as JSON lines")
	if code, done := parseFlags(fs, args); done {
		return code
	}
	command := fs.Args()
	if len(command) == 0 {
		fmt.Fprintln(stderr, "hutch: no command given: hutch run [flags] -- COMMAND [ARGS...]")
		return sandbox.ExitHutchError
	}
	spec, code := pf.spec(stderr)
	if code != 0 {
		return code
	}
	// The sandbox may never change the policy it runs under, even when the
	// file lies in its workspace (ESCAPES item 20).
	for _, f := range []string{pf.policyFile, pf.srtFile} {
		if abs, err := filepath.Abs(f); f != "" && err == nil {
			spec.Filesystem.DenyWrite = append(spec.Filesystem.DenyWrite, abs)
		}
	}
	log := slog.New(slog.DiscardHandler)
	if *debug {
		log = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	egress, err := newEgress(spec, pf.givenMode == "none", *report, upstreamCAs, stderr, log)
	if err != nil {
		fmt.Fprintf(stderr, "hutch: %v\n", err)
		return sandbox.ExitHutchError
	}
	defer egress.finish()
	environ, err := egress.sandboxEnv(policy.BuildEnv(spec.Env, os.Environ()), command)
	if err != nil {
		fmt.Fprintf(stderr, "hutch: %v\n", err)
		return sandbox.ExitHutchError
	}
	res, err := sandbox.Run(context.Background(), sandbox.Config{
		Spec:     spec,
		Args:     command,
		Environ:  environ,
		CABundle: egress.caBundle,
		Wipe:     egress.secretValues(),
		Stdin:    stdin,
		Stdout:   stdout,
		Stderr:   stderr,
		Warn:     stderr,
		Log:      log,
		Proxy:    egress.sandboxProxy(),
	})
	if err != nil {
		var ie *sandbox.InitError
		if errors.As(err, &ie) {
			fmt.Fprintf(stderr, "hutch: %s\n", ie.Msg)
			return ie.Code
		}
		fmt.Fprintf(stderr, "hutch: %v\n", err)
		return sandbox.ExitHutchError
	}
	if res.TimedOut {
		fmt.Fprintf(stderr, "hutch: timed out after %s; the sandbox was killed\n", spec.Resources.Timeout)
	}
	if res.OOMKilled {
		fmt.Fprintf(stderr, "hutch: the sandbox ran out of memory (limit %s)\n", policy.FormatSize(spec.Resources.MemoryBytes))
	}
	for _, line := range sandbox.SetAsideReport(res.SetAside) {
		fmt.Fprintln(stderr, line)
	}
	for _, sa := range res.SetAside {
		egress.rec.Note(setAsideRecord{Time: time.Now(), Action: "set_aside", SetAside: sa})
	}
	return res.ExitCode
}

func cmdPolicyShow(args []string, stdout, stderr *os.File) int {
	fs, pf := newPolicyFlags("policy show", stderr)
	if code, done := parseFlags(fs, args); done {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "hutch: policy show takes no arguments, got %q\n", fs.Args())
		return sandbox.ExitHutchError
	}
	spec, code := pf.spec(stderr)
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

// parseFlags parses args; done is true when the command must end here with
// code: 0 after -h, 125 (hutch's own error, never the command's) after a bad
// flag, which the flag package has already reported.
func parseFlags(fs *flag.FlagSet, args []string) (code int, done bool) {
	err := fs.Parse(args)
	switch {
	case err == nil:
		return 0, false
	case errors.Is(err, flag.ErrHelp):
		return 0, true
	default:
		return sandbox.ExitHutchError, true
	}
}

// policyFlags are the flags that build a policy.Spec; they override the
// policy file given with --policy (lists are added to the file's).
type policyFlags struct {
	set                                      map[string]bool
	policyFile, srtFile, workspace, root     string
	allowWrite, denyRead, denyWrite, allowRd listFlag
	env, passEnv                             listFlag
	memory, tmpSize, timeout                 string
	cpus                                     float64
	pids                                     int64
	bestEffort, noDefaultDenies              bool
	net                                      string
	allowDomain, denyDomain, allowCIDR       listFlag
	allowPrivate, addHost, secret            listFlag
	// givenMode is the network mode the flags and the policy file named,
	// before the defaults ("" when none did).
	givenMode string
}

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

func newPolicyFlags(name string, stderr io.Writer) (*flag.FlagSet, *policyFlags) {
	fs := flag.NewFlagSet("hutch "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	p := &policyFlags{}
	fs.StringVar(&p.policyFile, "policy", "", "policy `file` (YAML or JSON)")
	fs.StringVar(&p.srtFile, "srt-settings", "", "sandbox-runtime (srt) settings `file` to import")
	fs.StringVar(&p.workspace, "workspace", "", "writable workspace `dir` (default: the current directory)")
	fs.StringVar(&p.root, "root", "", "root filesystem: \"host\" (read-only host root, default) or a `dir`")
	fs.Var(&p.allowWrite, "allow-write", "make `path` writable too (repeatable)")
	fs.Var(&p.denyRead, "deny-read", "hide `path` from the sandbox (repeatable)")
	fs.Var(&p.denyWrite, "deny-write", "keep `path` read-only even inside a writable area (repeatable)")
	fs.Var(&p.allowRd, "allow-read", "re-allow reading `path` that a deny-read hides (repeatable)")
	fs.Var(&p.env, "env", "set `NAME=VALUE` in the sandbox (repeatable)")
	fs.Var(&p.passEnv, "pass-env", "pass the caller's variable `NAME` (or PREFIX_*) through (repeatable)")
	fs.StringVar(&p.memory, "memory", "", "memory limit of the whole sandbox, e.g. `512m`")
	fs.Float64Var(&p.cpus, "cpus", 0, "CPU limit in `cores`, e.g. 1.5")
	fs.Int64Var(&p.pids, "pids", 0, "maximum number of processes and threads")
	fs.StringVar(&p.timeout, "timeout", "", "kill the sandbox after this `duration`, e.g. 30s")
	fs.StringVar(&p.tmpSize, "tmp-size", "", "size of the private /tmp, e.g. `256m`")
	fs.BoolVar(&p.bestEffort, "best-effort", false, "run even if a layer cannot be set up (prints what was dropped)")
	fs.BoolVar(&p.noDefaultDenies, "no-default-denies", false, "drop hutch's built-in deny-read and deny-write lists")
	fs.StringVar(&p.net, "net", "", "network: \"none\" (loopback only, the default), \"proxy\" (only the allowed hosts, through hutch's egress proxy) or \"host\" (no isolation)")
	fs.Var(&p.allowDomain, "allow-domain", "let the sandbox reach `host` (example.com, *.example.com, optionally :PORT or :* for every port; without a port 80 and 443) through the proxy (repeatable)")
	fs.Var(&p.denyDomain, "deny-domain", "never let the sandbox reach `host` (same syntax; wins over --allow-domain) (repeatable)")
	fs.Var(&p.allowCIDR, "allow-cidr", "let the sandbox reach IP addresses in `cidr` (optionally :PORT) through the proxy (repeatable)")
	fs.Var(&p.allowPrivate, "allow-private", "let the proxy connect to loopback, private or link-local addresses in `cidr` (repeatable)")
	fs.Var(&p.secret, "secret", "give the sandbox a placeholder for the secret in hutch's variable `NAME@host1,host2`; the proxy puts the real value in only on requests to those hosts (repeatable)")
	fs.Var(&p.addHost, "add-host", "resolve `name:address` to that address in the proxy, like curl --resolve (repeatable)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: hutch %s [flags]", name)
		if name == "run" {
			fmt.Fprint(stderr, " -- COMMAND [ARGS...]")
		}
		fmt.Fprintln(stderr, "\n\nFlags:")
		fs.PrintDefaults()
	}
	p.set = map[string]bool{}
	return fs, p
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
	s.Filesystem.AllowWrite = append(s.Filesystem.AllowWrite, p.allowWrite...)
	s.Filesystem.DenyRead = append(s.Filesystem.DenyRead, p.denyRead...)
	s.Filesystem.DenyWrite = append(s.Filesystem.DenyWrite, p.denyWrite...)
	s.Filesystem.AllowRead = append(s.Filesystem.AllowRead, p.allowRd...)
	if p.noDefaultDenies {
		s.Filesystem.NoDefaultDenies = true
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
	Time   time.Time `json:"time"`
	Action string    `json:"action"` // "set_aside"
	sandbox.SetAside
}
