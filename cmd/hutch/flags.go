package main

import (
	"flag"
	"fmt"
	"io"

	"github.com/hutch-sandbox/hutch/internal/cli"
)

// runFlags are the flags of hutch run. hutch create, hutch policy show and
// hutch mcp take exactly these too (create adds its own): they are defined here
// once, so that the commands cannot drift apart.
type runFlags struct {
	policyFlags
	debug       bool
	upstreamCAs cli.List
	report      string
	// stateDir is hutch run's --state-dir: whose image store --image
	// uses.
	stateDir string
	// runsc is --runsc: the runsc binary of tier gvisor ("runsc" on PATH
	// when empty).
	runsc string
	// directFS is --gvisor-directfs: tier gvisor with runsc's direct file
	// access (gvisor.Runtime.DirectFS).
	directFS bool
	// reportTo, when set, receives the report instead of the file
	// --report names (which its owner opened once): hutch mcp's
	// sandboxes share one report.
	reportTo io.Writer
}

// policyFlags are the flags that build a policy.Spec; they override the
// policy file given with --policy (lists are added to the file's).
type policyFlags struct {
	policyFile, srtFile, workspace, root     string
	allowWrite, denyRead, denyWrite, allowRd cli.List
	env, passEnv                             cli.List
	memory, tmpSize, timeout                 string
	cpus                                     float64
	pids                                     int64
	bestEffort, noDefaultDenies              bool
	net, home, image, workspaceAt            string
	tier                                     string
	allowDomain, denyDomain, allowCIDR       cli.List
	allowPrivate, addHost, secret            cli.List
	// givenMode is the network mode the flags and the policy file named,
	// before the defaults ("" when none did).
	givenMode string
}

// newRunFlags returns the flag set of the command name ("run", "create",
// "policy show", "mcp") with hutch run's flags.
func newRunFlags(name string, stderr io.Writer) (*flag.FlagSet, *runFlags) {
	fs := flag.NewFlagSet("hutch "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	r := &runFlags{}
	p := &r.policyFlags
	fs.StringVar(&p.policyFile, "policy", "", "policy `file` (YAML or JSON)")
	fs.StringVar(&p.srtFile, "srt-settings", "", "sandbox-runtime (srt) settings `file` to import")
	fs.StringVar(&p.workspace, "workspace", "", "writable workspace `dir` (default: the current directory)")
	fs.StringVar(&p.tier, "tier", "", "isolation `tier`: \"namespace\" (the default: namespaces, Landlock and seccomp on the host's kernel) or \"gvisor\" (gVisor's application kernel, runsc; root only)")
	fs.StringVar(&r.runsc, "runsc", "", "with --tier gvisor: the runsc `binary` (default: runsc on PATH); it must be the version hutch pins")
	fs.BoolVar(&r.directFS, "gvisor-directfs", false, "with --tier gvisor: let gVisor's kernel open the sandbox's files itself (runsc --directfs): file-heavy commands run faster (git status about 3× in hutch's benchmark), and gVisor's processes on the host are then the sandbox's root with file capabilities in its user namespace rather than nobody without any (see docs/ARCHITECTURE.md, The gVisor tier)")
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
	fs.StringVar(&p.home, "home", "", "your home directory in the sandbox: \"ro\" (default: read-only, the sandbox's writes kept in memory and dropped at its end), \"tmp\" (an empty one, dropped at its end) or \"persist\" (one of its own, kept per workspace); credentials stay masked in every `mode`")
	fs.StringVar(&p.net, "net", "", "network: \"none\" (loopback only, the default), \"proxy\" (only the allowed hosts, through hutch's egress proxy) or \"host\" (no isolation)")
	fs.Var(&p.allowDomain, "allow-domain", "let the sandbox reach `host` (example.com, *.example.com, optionally :PORT or :* for every port; without a port 80 and 443) through the proxy (repeatable)")
	fs.Var(&p.denyDomain, "deny-domain", "never let the sandbox reach `host` (same syntax; wins over --allow-domain) (repeatable)")
	fs.Var(&p.allowCIDR, "allow-cidr", "let the sandbox reach IP addresses in `cidr` (optionally :PORT) through the proxy (repeatable)")
	fs.Var(&p.allowPrivate, "allow-private", "let the proxy connect to loopback, private or link-local addresses in `cidr` (repeatable)")
	fs.Var(&p.secret, "secret", "give the sandbox a placeholder for the secret in hutch's variable `NAME@host1,host2`; the proxy puts the real value in only on requests to those hosts (repeatable)")
	fs.Var(&p.addHost, "add-host", "resolve `name:address` to that address in the proxy, like curl --resolve (repeatable)")
	fs.BoolVar(&r.debug, "debug", false, "log sandbox setup to stderr")
	fs.Var(&r.upstreamCAs, "upstream-ca", "also trust the certificates in `file` (PEM) when the proxy connects to a secret's host (repeatable)")
	fs.StringVar(&r.report, "report", "", "write every refused connection, and the traffic of every allowed host, to `file` as JSON lines")
	fs.StringVar(&r.stateDir, "state-dir", "", "the state `dir` whose image store --image takes images from and pulls into (default: $HUTCH_STATE_DIR, else /var/lib/hutch for root and ~/.local/share/hutch for a user); the sandbox can neither read nor write it")
	fs.Usage = func() {
		switch name {
		case "run":
			fmt.Fprint(stderr, "Usage: hutch run [flags] -- COMMAND [ARGS...]\n\nRuns COMMAND in a new sandbox.\n")
		case "mcp":
			fmt.Fprint(stderr, mcpUsage)
		case "policy show":
			fmt.Fprint(stderr, "Usage: hutch policy show [flags]\n\nPrints the policy hutch run would apply with the same flags (--debug, --report,\n--upstream-ca and --state-dir, which are not policy, change nothing here).\n")
		default:
			fmt.Fprintf(stderr, "Usage: hutch %s [flags]\n", name)
		}
		fmt.Fprintln(stderr, "\nFlags:")
		fs.PrintDefaults()
	}
	return fs, r
}
