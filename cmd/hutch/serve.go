package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hutch-sandbox/hutch/internal/api"
	"github.com/hutch-sandbox/hutch/internal/audit"
	"github.com/hutch-sandbox/hutch/internal/daemon"
	"github.com/hutch-sandbox/hutch/internal/e2b"
	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/store"
)

// defaultStateDir is where the daemon keeps its state by default.
const defaultStateDir = "/var/lib/hutch"

// cmdServe runs the daemon until SIGINT or SIGTERM, then destroys every
// sandbox.
func cmdServe(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("hutch serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	socket := fs.String("socket", api.DefaultSocket, "listen on the unix socket at `path` (mode 0660; \"\" for none); requests there without a token act as the tenant \"admin\"; processes in another user namespace (any sandbox) are refused")
	listen := fs.String("listen", "", "also listen on TCP `address` (e.g. 127.0.0.1:7070); every request there needs a token (see hutch token create)")
	stateDir := fs.String("state-dir", defaultStateDir, "keep the daemon's state and the sandboxes' directories in `dir`")
	maxUpload := fs.String("max-upload", "1g", "largest file or archive upload, a `size` such as 512m")
	defTimeout := fs.Duration("default-timeout", 0, "lifetime of a sandbox that asks for none (default 5m)")
	maxTimeout := fs.Duration("max-timeout", 0, "longest lifetime of a sandbox (default 24h)")
	maxSandboxes := fs.Int("max-sandboxes", 0, "most sandboxes a tenant may have at once (default 100)")
	disk := fs.String("disk", "1g", "default `size` of a sandbox's writable root (its policy's resources.disk overrides it); it is kept in memory, charged to the sandbox's memory limit")
	maxDisk := fs.String("max-disk", "16g", "largest `size` of a sandbox's writable root a policy may ask for")
	maxTmp := fs.String("max-tmp-size", "1g", "largest `size` of a sandbox's /tmp and /dev/shm (each; in memory, charged to its memory limit) a policy may ask for")
	defaultMemory := fs.String("default-memory", "1g", "memory limit (`size`) of a sandbox whose policy sets none; everything a sandbox writes to /tmp, /dev/shm and its root counts against it")
	maxMemory := fs.String("max-memory", "16g", "largest memory limit (`size`) a policy may ask for")
	tenantMemory := fs.String("tenant-memory", "", "bound the sum of the memory limits of a tenant's sandboxes to `size` (default: this host's memory)")
	warm := fs.Int("warm", 0, "keep `N` sandboxes of the default policy started, for creates that ask for no other policy to take at once")
	noInternet := fs.Bool("no-internet", false, "refuse \"*\" (every public host) in sandboxes' allowed domains, and give E2B's sandboxes no network unless they list hosts")
	var allowPrivate listFlag
	fs.Var(&allowPrivate, "allow-private", "let every sandbox's proxy connect to loopback, private, link-local or this host's addresses in `cidr` (repeatable); tenants' own rules never open such addresses")
	var upstreamCAs listFlag
	fs.Var(&upstreamCAs, "upstream-ca", "also trust the certificates in `file` (PEM) when a sandbox's proxy connects to a secret's host (repeatable)")
	debug := fs.Bool("debug", false, "log every request")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: hutch serve [flags]\n\nRuns the daemon: an HTTP API for long-lived sandboxes, until SIGINT or SIGTERM,\nwhich destroy every sandbox. With --warm N it keeps N sandboxes of the default\npolicy ready: a create with the default policy takes one at once, and the\npool refills in the background.\n\nFlags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return usageCode(err)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "hutch: serve takes no arguments, got %q\n", fs.Args())
		return 2
	}
	upload, err := policy.ParseSize(*maxUpload)
	if err != nil || upload <= 0 {
		fmt.Fprintf(stderr, "hutch: --max-upload %q: want a size such as 512m or 2g\n", *maxUpload)
		return 2
	}
	var sizes [6]int64
	for i, f := range []struct{ name, value string }{{"disk", *disk}, {"max-disk", *maxDisk}, {"tenant-memory", *tenantMemory}, {"default-memory", *defaultMemory}, {"max-memory", *maxMemory}, {"max-tmp-size", *maxTmp}} {
		if f.name == "tenant-memory" && f.value == "" {
			total, err := hostMemory()
			if err != nil {
				fmt.Fprintf(stderr, "hutch: --tenant-memory: no default (%v); give a size\n", err)
				return 2
			}
			sizes[i] = total &^ (1<<20 - 1)
			continue
		}
		if sizes[i], err = policy.ParseSize(f.value); err != nil || sizes[i] <= 0 {
			fmt.Fprintf(stderr, "hutch: --%s %q: want a size such as 512m or 2g\n", f.name, f.value)
			return 2
		}
	}
	var private []netip.Prefix
	for _, c := range allowPrivate {
		p, err := netip.ParsePrefix(c)
		if err != nil || p != p.Masked() {
			fmt.Fprintf(stderr, "hutch: --allow-private %q: want a CIDR such as 10.1.0.0/16\n", c)
			return 2
		}
		private = append(private, p)
	}
	roots, err := upstreamRoots(upstreamCAs)
	if err != nil {
		fmt.Fprintf(stderr, "hutch: %v\n", err)
		return 2
	}
	level := slog.LevelInfo
	if *debug {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	// Listen first: a daemon already serving this socket must not have
	// its sandboxes taken for leftovers.
	ls, err := api.Listen(*socket, *listen)
	if err != nil {
		fmt.Fprintf(stderr, "hutch: %v\n", err)
		return 1
	}
	m, err := daemon.New(daemon.Config{
		StateDir:       *stateDir,
		AgentBinary:    agentBinary(log),
		NoInternet:     *noInternet,
		AllowPrivate:   private,
		DefaultTimeout: *defTimeout,
		MaxTimeout:     *maxTimeout,
		MaxSandboxes:   *maxSandboxes,
		Warm:           *warm,
		DefaultDisk:    sizes[0],
		MaxDisk:        sizes[1],
		TenantMemory:   sizes[2],
		DefaultMemory:  sizes[3],
		MaxMemory:      sizes[4],
		MaxTmp:         sizes[5],
		UpstreamRoots:  roots,
	}, log)
	if err != nil {
		for _, l := range ls {
			l.Close()
		}
		fmt.Fprintf(stderr, "hutch: %v\n", err)
		return 1
	}
	// failed closes what was opened so far and reports err.
	failed := func(err error) int {
		for _, l := range ls {
			l.Close()
		}
		_ = m.Close()
		fmt.Fprintf(stderr, "hutch: %v\n", err)
		return 1
	}
	al, err := audit.Open(filepath.Join(*stateDir, audit.FileName))
	if err != nil {
		return failed(err)
	}
	defer al.Close()
	h, err := api.NewWithConfig(m, api.Config{Log: log, MaxUpload: upload, Audit: al})
	if err != nil {
		return failed(err)
	}
	// E2B's REST API and its in-sandbox API (envd) on the same listeners,
	// so that E2B's SDKs work with E2B_API_URL and E2B_SANDBOX_URL set to
	// the daemon; hutch's own routes are untouched.
	isEnvd, envdHandler := envdRoutes(log)
	opts := []e2b.Option{e2b.WithAudit(al)}
	if *noInternet {
		opts = append(opts, e2b.WithoutInternet())
	}
	h = e2b.New(m, log, opts...).Mount(h, isEnvd, envdHandler)
	for _, l := range ls {
		fmt.Fprintf(stderr, "hutch: listening on %s\n", listenerURL(l))
	}
	serr := api.Serve(ctx, h, log, ls...)
	fmt.Fprintln(stderr, "hutch: shutting down; destroying every sandbox")
	cerr := m.Close()
	code := 0
	if serr != nil {
		fmt.Fprintf(stderr, "hutch: %v\n", serr)
		code = 1
	}
	if cerr != nil {
		fmt.Fprintf(stderr, "hutch: close: %v\n", cerr)
		code = 1
	}
	return code
}

// listenerURL is the address clients use for l (HUTCH_HOST).
func listenerURL(l net.Listener) string {
	if l.Addr().Network() == "unix" {
		return "unix://" + l.Addr().String()
	}
	return "http://" + l.Addr().String()
}

// tenantName is the syntax of a tenant's name.
var tenantName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// cmdToken makes an API token for a tenant, in the daemon's store (the
// daemon may be running).
func cmdToken(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "create" {
		fmt.Fprintln(stderr, "hutch: usage: hutch token create --tenant NAME [--e2b] [--state-dir DIR]")
		return 2
	}
	fs := flag.NewFlagSet("hutch token create", flag.ContinueOnError)
	fs.SetOutput(stderr)
	tenant := fs.String("tenant", "", "the tenant the token acts as (letters, digits, '.', '_', '-')")
	stateDir := fs.String("state-dir", defaultStateDir, "the daemon's state `dir`")
	e2bShape := fs.Bool("e2b", false, "make the token shaped as an E2B API key (e2b_ and 40 hex digits), for E2B's SDKs; it works for hutch's API too")
	if err := fs.Parse(args[1:]); err != nil {
		return usageCode(err)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "hutch: token create takes no arguments, got %q\n", fs.Args())
		return 2
	}
	if !tenantName.MatchString(*tenant) {
		fmt.Fprintf(stderr, "hutch: --tenant %q: want 1-64 letters, digits, '.', '_' or '-'\n", *tenant)
		return 2
	}
	if err := os.MkdirAll(*stateDir, 0o700); err != nil {
		fmt.Fprintf(stderr, "hutch: %v\n", err)
		return 1
	}
	st, err := store.Open(filepath.Join(*stateDir, "state.db"))
	if err != nil {
		fmt.Fprintf(stderr, "hutch: %v\n", err)
		return 1
	}
	defer st.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	create := st.CreateToken
	if *e2bShape {
		create = st.CreateE2BToken
	}
	token, err := create(ctx, *tenant)
	if err != nil {
		fmt.Fprintf(stderr, "hutch: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "A token for the tenant %q; it is shown only this once:\n%s\n", *tenant, token)
	return 0
}

// agentBinary is hutch-agent next to hutch's own binary, the sandboxes'
// PID 1 when it is installed there; "" (hutch's own binary) otherwise.
func agentBinary(log *slog.Logger) string {
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	p := filepath.Join(filepath.Dir(exe), "hutch-agent")
	if fi, err := os.Stat(p); err != nil || !fi.Mode().IsRegular() || fi.Mode()&0o111 == 0 {
		log.Info("the sandboxes' agent is hutch itself; install hutch-agent next to it to halve each sandbox's memory", "hutch", exe)
		return ""
	}
	log.Info("the sandboxes' agent", "binary", p)
	return p
}

// usageCode is the exit code after a flag error: 0 after -h, else 2.
func usageCode(err error) int {
	if err == flag.ErrHelp {
		return 0
	}
	return 2
}

// hostMemory is the host's memory (MemTotal in /proc/meminfo), in bytes.
func hostMemory() (int64, error) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil || kb <= 0 {
				return 0, fmt.Errorf("/proc/meminfo: %q", line)
			}
			return kb << 10, nil
		}
	}
	return 0, errors.New("/proc/meminfo has no MemTotal")
}
