// Package runner is the sandbox that hutch run's flags describe, made
// ready to start: the flags themselves (which hutch run, hutch create,
// hutch policy show, hutch mcp and hutch mcp wrap all take), the policy
// they build, and a sandbox of that policy prepared with its root (an
// image's, or the host's), its egress proxy and report, and its tier's
// runtime. hutch run starts one command in it; hutch mcp keeps sandboxes
// of it for an agent's session; hutch mcp wrap runs an MCP server in one.
//
// It is a package of its own, not hutch's package main, because two
// binaries use it: hutch (run, create, policy show) and hutch-serve (hutch
// mcp, whose MCP packages hutch does not link; see docs/ARCHITECTURE.md).
package runner

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/hutch-sandbox/hutch/internal/approve"
	"github.com/hutch-sandbox/hutch/internal/cli"
	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/sandbox"
)

// Flags are the flags of hutch run. hutch create, hutch policy show and
// hutch mcp take exactly these too (create and hutch mcp wrap add their
// own): they are defined here once, so that the commands cannot drift
// apart.
type Flags struct {
	policyFlags
	// Debug is --debug: log sandbox setup to stderr.
	Debug bool
	// UpstreamCAs are the files of --upstream-ca.
	UpstreamCAs cli.List
	// Report is --report, the file of the report.
	Report string
	// StateDir is hutch run's --state-dir: whose image store --image
	// uses.
	StateDir string
	// Runsc is --runsc: the runsc binary of tier gvisor ("runsc" on PATH
	// when empty).
	Runsc string
	// DirectFS is --gvisor-directfs: tier gvisor with runsc's direct file
	// access (gvisor.Runtime.DirectFS).
	DirectFS bool
	// AllowEmulation is --allow-emulation: tier microvm under QEMU's
	// software emulation on a host without KVM.
	AllowEmulation bool
	// Check is --check: with tier microvm, print what the host offers
	// the tier instead of running anything.
	Check bool
	// Continue is --continue: the change set (its id, or a unique prefix)
	// a review-mode run goes on from; it implies --review.
	Continue string
	// ReportTo, when set, receives the report instead of the file
	// --report names (which its owner opened once): hutch mcp's
	// sandboxes share one report.
	ReportTo io.Writer
	// Asker asks about what the approval rules say ask; when nil,
	// AskOnTerminal asks on hutch's controlling terminal, else no one is
	// asked and ask is deny.
	Asker approve.Asker
	// AskOnTerminal: with no Asker, ask on /dev/tty (hutch run).
	AskOnTerminal bool
	// ApprovalTimeout bounds each question; 0 is approve.DefaultTimeout.
	ApprovalTimeout time.Duration
}

// policyFlags are the flags that build a policy.Spec; they override the
// policy file given with --policy (lists are added to the file's).
type policyFlags struct {
	policyFile, srtFile, workspace, root     string
	claudeFile, rulesFile                    string
	allowWrite, denyRead, denyWrite, allowRd cli.List
	env, passEnv                             cli.List
	memory, tmpSize, timeout                 string
	cpus                                     float64
	pids                                     int64
	bestEffort, noDefaultDenies              bool
	net, home, image, workspaceAt            string
	review                                   bool
	tier                                     string
	allowDomain, denyDomain, allowCIDR       cli.List
	allowPrivate, addHost, secret            cli.List
	// givenMode is the network mode the flags and the policy file named,
	// before the defaults ("" when none did).
	givenMode string
}

// NewFlags returns the flag set of the command name ("run", "create",
// "policy show", "mcp", "mcp wrap") with hutch run's flags. Its usage
// message is header ("Usage: hutch NAME [flags]" when empty), then the
// flags.
func NewFlags(name, header string, stderr io.Writer) (*flag.FlagSet, *Flags) {
	fs := flag.NewFlagSet("hutch "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	r := &Flags{}
	p := &r.policyFlags
	fs.StringVar(&p.policyFile, "policy", "", "policy `file` (YAML or JSON)")
	fs.StringVar(&p.srtFile, "srt-settings", "", "sandbox-runtime (srt) settings `file` to import")
	fs.StringVar(&p.claudeFile, "claude-settings", "", "import the permissions and sandbox of Claude Code's settings `file` (settings.json), added to --policy or --srt-settings (docs/claude-settings.md)")
	fs.StringVar(&p.rulesFile, "approve-rules", "", "add the approval rules of `file` (an approvals: section; its default and preset, when set, win)")
	fs.StringVar(&p.workspace, "workspace", "", "writable workspace `dir` (default: the current directory)")
	fs.StringVar(&p.tier, "tier", "", "isolation `tier`: \"namespace\" (the default: namespaces, Landlock and seccomp on the host's kernel), \"gvisor\" (gVisor's application kernel, runsc; root only) or \"microvm\" (a QEMU microVM with a kernel of its own; root only, network none, see docs/microvm.md)")
	fs.StringVar(&r.Runsc, "runsc", "", "with --tier gvisor: the runsc `binary` (default: runsc on PATH); it must be the version hutch pins")
	fs.BoolVar(&r.DirectFS, "gvisor-directfs", false, "with --tier gvisor: let gVisor's kernel open the sandbox's files itself (runsc --directfs): file-heavy commands run faster (git status about 3× in hutch's benchmark), and gVisor's processes on the host are then the sandbox's root with file capabilities in its user namespace rather than nobody without any (see docs/ARCHITECTURE.md, The gVisor tier)")
	fs.BoolVar(&r.Check, "check", false, "with --tier microvm: print what this machine offers the tier (KVM, QEMU, virtiofsd, the guest kernel) and exit, 0 when a guest can boot")
	fs.BoolVar(&r.AllowEmulation, "allow-emulation", false, "with --tier microvm: on a host without KVM (/dev/kvm), run the guest under QEMU's software emulation, tens of times slower")
	fs.StringVar(&p.root, "root", "", "root filesystem: \"host\" (read-only host root, default) or a `dir`")
	fs.StringVar(&p.image, "image", "", "start the sandbox from `image` REF of hutch's image store, pulled first if it is not there: the workspace is at /workspace (--workspace-at), the command runs as the image's user, in the workspace; with no command, the image's own runs in its working directory")
	fs.StringVar(&p.workspaceAt, "workspace-at", "", "with --image: where the workspace is in the sandbox, an absolute `path` (default /workspace)")
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
	fs.BoolVar(&p.review, "review", false, "review mode: the command writes its workspace into a copy-on-write layer, kept as a change set that you look at and apply with hutch changes; your files do not change until then")
	fs.Func("continue", "review mode on top of the change set `ID` (or a unique prefix of it), adding to it: an agent's session across several commands (implies --review)", func(v string) error {
		if v == "" {
			return errors.New("want a change set's ID")
		}
		r.Continue, p.review = v, true
		return nil
	})
	fs.StringVar(&p.home, "home", "", "your home directory in the sandbox: \"ro\" (default: read-only, the sandbox's writes kept in memory and dropped at its end), \"tmp\" (an empty one, dropped at its end) or \"persist\" (one of its own, kept per workspace); credentials stay masked in every `mode`")
	fs.StringVar(&p.net, "net", "", "network: \"none\" (loopback only, the default), \"proxy\" (only the allowed hosts, through hutch's egress proxy) or \"host\" (no isolation)")
	fs.Var(&p.allowDomain, "allow-domain", "let the sandbox reach `host` (example.com, *.example.com, optionally :PORT or :* for every port; without a port 80 and 443) through the proxy (repeatable)")
	fs.Var(&p.denyDomain, "deny-domain", "never let the sandbox reach `host` (same syntax; wins over --allow-domain) (repeatable)")
	fs.Var(&p.allowCIDR, "allow-cidr", "let the sandbox reach IP addresses in `cidr` (optionally :PORT) through the proxy (repeatable)")
	fs.Var(&p.allowPrivate, "allow-private", "let the proxy connect to loopback, private or link-local addresses in `cidr` (repeatable)")
	fs.Var(&p.secret, "secret", "give the sandbox a placeholder for the secret in hutch's variable `NAME@host1,host2`; the proxy puts the real value in only on requests to those hosts (repeatable)")
	fs.Var(&p.addHost, "add-host", "resolve `name:address` to that address in the proxy, like curl --resolve (repeatable)")
	fs.BoolVar(&r.Debug, "debug", false, "log sandbox setup to stderr")
	fs.DurationVar(&r.ApprovalTimeout, "approval-timeout", approve.DefaultTimeout, "how long a question of the approval rules waits for its answer before it is denied")
	fs.Var(&r.UpstreamCAs, "upstream-ca", "also trust the certificates in `file` (PEM) when the proxy connects to a secret's host (repeatable)")
	fs.StringVar(&r.Report, "report", "", "write every refused connection, and the traffic of every allowed host, to `file` as JSON lines")
	fs.StringVar(&r.StateDir, "state-dir", "", "the state `dir` whose image store --image takes images from and pulls into (default: $HUTCH_STATE_DIR, else /var/lib/hutch for root and ~/.local/share/hutch for a user); the sandbox can neither read nor write it")
	if header == "" {
		header = "Usage: hutch " + name + " [flags]\n"
	}
	fs.Usage = func() {
		fmt.Fprint(stderr, header)
		fmt.Fprintln(stderr, "\nFlags:")
		fs.PrintDefaults()
	}
	return fs, r
}

// Parse parses args (see cli.Parse); done is true when the command
// must end here with code: 0 after -h, 125 (hutch's own error, never the
// command's) after a bad flag, which cli.Parse has reported.
func Parse(fs *flag.FlagSet, args []string, stderr io.Writer) (code int, done bool) {
	switch err := cli.Parse(fs, args, stderr); {
	case err == nil:
		return 0, false
	case errors.Is(err, flag.ErrHelp):
		return 0, true
	default:
		return sandbox.ExitHutchError, true
	}
}

// Spec builds the effective policy; a non-zero code means it failed and the
// error was printed.
func (p *policyFlags) Spec(stderr io.Writer) (policy.Spec, int) {
	fail := func(err error) (policy.Spec, int) {
		fmt.Fprintf(stderr, "hutch: %v\n", err)
		return policy.Spec{}, sandbox.ExitHutchError
	}
	s, warnings, err := p.Policy()
	for _, w := range warnings {
		fmt.Fprintf(stderr, "hutch: warning: %s\n", w)
	}
	if err != nil {
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

// Policy is the policy of the flags on top of the policy or srt settings
// file, the Claude Code settings and the approval rules added to it (see
// policy.Spec.Add), not normalized (hutch create's daemon does that), with
// the warnings of importing the srt and Claude Code settings.
func (p *policyFlags) Policy() (policy.Spec, []string, error) {
	var s policy.Spec
	var warnings []string
	var err error
	switch {
	case p.policyFile != "" && p.srtFile != "":
		return s, nil, errors.New("--policy and --srt-settings cannot be combined")
	case p.policyFile != "":
		s, err = policy.Load(p.policyFile)
	case p.srtFile != "":
		s, warnings, err = policy.LoadSRT(p.srtFile)
	}
	if err == nil && p.claudeFile != "" {
		var more policy.Spec
		var w []string
		more, w, err = policy.LoadClaude(p.claudeFile)
		warnings = append(warnings, w...)
		s.Add(more)
	}
	if err == nil && p.rulesFile != "" {
		var rules policy.Approvals
		rules, err = policy.LoadApprovalRules(p.rulesFile)
		s.Approvals.Add(rules)
	}
	if err == nil {
		err = p.apply(&s)
	}
	return s, warnings, err
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
	if p.review {
		s.Filesystem.WorkspaceMode = policy.WorkspaceReview
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

// RefuseReview refuses review mode (--review, --continue, or the policy's
// filesystem.workspace_mode) for command, which keeps no change set in
// this version: failing is better than letting its sandboxes write the
// user's files instead.
func (rf *Flags) RefuseReview(spec policy.Spec, command string) error {
	if spec.Filesystem.WorkspaceMode == policy.WorkspaceReview || rf.Continue != "" {
		return fmt.Errorf("review mode (--review, --continue, filesystem.workspace_mode: review) is hutch run's and hutch mcp's only in this version, not %s's", command)
	}
	return nil
}
