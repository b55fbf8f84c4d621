package main

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/signal"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/hutch-sandbox/hutch/internal/api"
	"github.com/hutch-sandbox/hutch/internal/approve"
	"github.com/hutch-sandbox/hutch/internal/audit"
	"github.com/hutch-sandbox/hutch/internal/cli"
	"github.com/hutch-sandbox/hutch/internal/daemon"
	"github.com/hutch-sandbox/hutch/internal/e2b"
	"github.com/hutch-sandbox/hutch/internal/egress"
	"github.com/hutch-sandbox/hutch/internal/forward"
	"github.com/hutch-sandbox/hutch/internal/gvisor"
	"github.com/hutch-sandbox/hutch/internal/image"
	"github.com/hutch-sandbox/hutch/internal/kube"
	"github.com/hutch-sandbox/hutch/internal/mcp"
	"github.com/hutch-sandbox/hutch/internal/mcphttp"
	"github.com/hutch-sandbox/hutch/internal/microvm"
	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/runner"
	"github.com/hutch-sandbox/hutch/internal/sandbox"
	"github.com/hutch-sandbox/hutch/internal/store"
	"github.com/hutch-sandbox/hutch/internal/volume"
	"github.com/hutch-sandbox/hutch/internal/webui"
)

// defaultStateDir is where the daemon keeps its state by default.
const defaultStateDir = cli.DefaultStateDir

// cmdServe runs the daemon until SIGINT or SIGTERM, then destroys every
// sandbox but those paused to disk (gVisor's), which the next daemon on
// the same state directory resumes; or until SIGUSR2, which leaves the
// sandboxes that can outlive it running as well, for the next daemon to
// take again. A daemon that crashed leaves them running too.
func cmdServe(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("hutch serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	socket := fs.String("socket", api.DefaultSocket, "listen on the unix socket at `path` (mode 0660; \"\" for none); requests there without a token act as the tenant \"admin\"; processes in another user namespace (any sandbox) are refused")
	listen := fs.String("listen", "", "also listen on TCP `address` (e.g. 127.0.0.1:7070); every request there needs a token (see hutch token create)")
	stateDir := fs.String("state-dir", serveStateDir(), "keep the daemon's state, its image store (DIR/images) and the sandboxes' directories in `dir`; $HUTCH_STATE_DIR, if set, is the default")
	maxUpload := fs.String("max-upload", "1g", "largest file or archive upload, a `size` such as 512m")
	defTimeout := fs.Duration("default-timeout", 0, "lifetime of a sandbox that asks for none (default 5m)")
	maxTimeout := fs.Duration("max-timeout", 0, "longest lifetime of a sandbox (default 24h)")
	approvalTimeout := fs.Duration("approval-timeout", approve.DefaultTimeout, "refuse a command or host a sandbox's approvals ask about when no one answered (GET/POST /v1/approvals) within `duration`")
	metricsEvery := fs.Duration("metrics-interval", 0, "sample what each sandbox uses (CPU, memory, disk) every `duration`, keeping an hour (default 5s)")
	maxSandboxes := fs.Int("max-sandboxes", 0, "most sandboxes a tenant may have at once (default 100)")
	maxSnapshots := fs.Int("max-snapshots", 0, "most snapshots a tenant may keep (default 32)")
	maxSnapshotBytes := fs.Int64("max-snapshot-bytes", 0, "most bytes a tenant's snapshots may hold together: their files, their memory and the EROFS roots of microVMs started from their files (default 8 GiB)")
	disk := fs.String("disk", "1g", "default `size` of a sandbox's writable root (its policy's resources.disk overrides it); it is kept in memory, charged to the sandbox's memory limit")
	maxDisk := fs.String("max-disk", "16g", "largest `size` of a sandbox's writable root a policy may ask for")
	maxTmp := fs.String("max-tmp-size", "1g", "largest `size` of a sandbox's /tmp and /dev/shm (each; in memory, charged to its memory limit) a policy may ask for")
	defaultMemory := fs.String("default-memory", "1g", "memory limit (`size`) of a sandbox whose policy sets none; everything a sandbox writes to /tmp, /dev/shm and its root counts against it")
	maxMemory := fs.String("max-memory", "16g", "largest memory limit (`size`) a policy may ask for")
	tenantMemory := fs.String("tenant-memory", "", "bound the sum of the memory limits of a tenant's sandboxes to `size` (default: this host's memory)")
	var warmFlags cli.List
	fs.Var(&warmFlags, "warm", "keep `N` sandboxes of the default policy started, for creates that ask for no other policy to take at once; NAME=N keeps N of E2B's template NAME (--template, or base), for E2B's creates of it with its defaults and any create of the same policy (repeatable)")
	noInternet := fs.Bool("no-internet", false, "refuse \"*\" (every public host) in sandboxes' allowed domains, and give E2B's sandboxes no network unless they list hosts")
	var reviewFlags cli.List
	fs.Var(&reviewFlags, "review-workspace", "let sandboxes review the host directory `NAME=DIR[@TENANT,...]`: one created with review_workspace NAME (the operator's, and the tenants named) sees DIR at its workspace, and what it writes there is kept as a change set to apply or discard (GET /v1/changes); repeatable")
	maxChangeSets := fs.Int("max-change-sets", 0, "most change sets of review workspaces a tenant may keep (default 32)")
	var allowImages cli.List
	fs.Var(&allowImages, "allow-image", "let tenants start sandboxes only from images whose name matches `pattern` (path.Match on the normal form, e.g. docker.io/library/python:*) or whose digest it is (repeatable; default: any image of the daemon's store)")
	imageCacheMax := fs.String("image-cache-max", "", "keep the image store within `size` (e.g. 20g; none: no limit), its standing limit, which pulls into it keep too (hutch image limit): the least recently used images not in use go after every pull and every minute (default: the store's limit, if set)")
	templatesFile := fs.String("templates", "", "E2B's templates from a YAML or JSON `file` mapping each NAME to an image REF, as --template does")
	var templateFlags cli.List
	fs.Var(&templateFlags, "template", "E2B's template `NAME=REF`: its templateID starts image REF of the daemon's image store (hutch image pull --state-dir); NAME base replaces the host's root for E2B's default (repeatable)")
	noBaseImage := fs.Bool("no-base-image", false, "keep the host's root for E2B's template base even when the daemon's image store holds hutch's base image ("+e2b.BaseImage+", scripts/base-image.sh)")
	var allowPrivate cli.List
	fs.Var(&allowPrivate, "allow-private", "let every sandbox's proxy connect to loopback, private, link-local or this host's addresses in `cidr` (repeatable); tenants' own rules never open such addresses")
	var upstreamCAs cli.List
	fs.Var(&upstreamCAs, "upstream-ca", "also trust the certificates in `file` (PEM) when a sandbox's proxy connects to a secret's host (repeatable)")
	defaultTier := fs.String("default-tier", "", "isolation `tier` of a sandbox whose policy names none, E2B's included: namespace (the default, or --min-tier if stronger), gvisor or microvm")
	minTier := fs.String("min-tier", "", "refuse sandboxes of a `tier` weaker than this (namespace < gvisor < microvm); default: none refused")
	allowEmulation := fs.Bool("allow-emulation", false, "let the microvm tier run its guests under QEMU's software emulation on a host without KVM (/dev/kvm), tens of times slower")
	runsc := fs.String("runsc", "", "gVisor's runsc `binary` for the gvisor tier (default: runsc on PATH; it must be the pinned version, and without one the tier is refused with the command that installs it)")
	noMCP := fs.Bool("no-mcp", false, "do not speak MCP at /mcp")
	noUI := fs.Bool("no-ui", false, "do not serve the review pages at /ui/")
	mcpMaxBody := fs.String("mcp-max-body", "32m", "largest body of an MCP request, a `size` (a file_write of 10 MiB in base64 takes 14m)")
	mcpSessionTimeout := fs.Duration("mcp-session-timeout", mcphttp.DefaultSessionTimeout, "end an MCP session idle for `duration`")
	mcpMaxSessions := fs.Int("mcp-max-sessions", mcphttp.DefaultMaxSessions, "most MCP sessions a tenant may have open at once")
	mcpMaxLogs := fs.String("mcp-max-logs", policy.FormatSize(mcphttp.DefaultMaxLogs), "most `bytes` the full outputs of MCP exec commands (kept for their links, in DIR/"+mcphttp.LogDir+" of --state-dir) may take on disk, all tenants together")
	var mcpAllowedHosts cli.List
	fs.Var(&mcpAllowedHosts, "mcp-allowed-host", "also answer MCP and review-page requests on TCP whose Host (and Origin) names `host`, a name or an address, besides the address the request reached (repeatable): the daemon's DNS name when clients use one")
	mcpPublicURL := fs.String("mcp-public-url", "", "the daemon's `URL` as MCP clients reach it (http[s]://HOST[:PORT], e.g. behind a proxy): tool results link to files and logs under it instead of under the Host of the request; its host is allowed as --mcp-allowed-host's are")
	domain := fs.String("domain", "", "serve E2B's domain layout under `name` D on --listen, routed by the request's host: api.D is E2B's API, 49983-ID.D sandbox ID's envd and PORT-ID.D its port PORT, so that E2B's SDKs need only E2B_DOMAIN=D (point *.D at the daemon in DNS); E2B's SDKs speak https to D, so give --tls-cert, or put a TLS proxy in front")
	tlsCert := fs.String("tls-cert", "", "serve --listen over TLS with the certificate chain in `file` (PEM), with --tls-key; with --domain D it must cover api.D and *.D")
	tlsKey := fs.String("tls-key", "", "the private key (PEM `file`) of --tls-cert")
	publicTraffic := fs.Bool("e2b-public-traffic", false, "make E2B sandboxes' ports (PORT-ID.D of --domain) public unless their create says network.allowPublicTraffic false, as E2B's are; without it they need the sandbox's traffic access token unless the create says allowPublicTraffic true")
	volumeSize := fs.String("volume-size", "1g", "`size` of each new E2B volume (its quota: a sparse ext4 image in DIR/volumes of --state-dir, loop-mounted)")
	maxVolumes := fs.Int("max-volumes", volume.DefaultMaxVolumes, "most E2B volumes a tenant may keep")
	debug := fs.Bool("debug", false, "log every request")
	onKubernetes := fs.Bool("kubernetes", false, "run every sandbox as a pod of a Kubernetes cluster (--kubeconfig, or the cluster hutch serve runs in): a pod of the RuntimeClass of its tier (hutch-runc on the nodes, docs/kubernetes.md), whose process is hutch's agent")
	kubeconfig := fs.String("kubeconfig", "", "the cluster's kubeconfig `file` for --kubernetes (default $KUBECONFIG, else the cluster hutch serve runs in)")
	kubeNamespace := fs.String("kubernetes-namespace", "", "`namespace` of the sandboxes' pods (default: the kubeconfig's, or hutch serve's own in a cluster)")
	kubeImage := fs.String("kubernetes-image", "", "`image` of a sandbox whose policy names none (E2B's base template included), as the cluster's nodes pull it")
	kubeNodePolicy := fs.String("kubernetes-node-policy", "", "the node policy (`name`, /etc/hutch/policies/NAME.yaml on the nodes) every pod names: the network and secrets its sandbox's own allow-list adds to (default: the node's default policy)")
	var kubeClasses cli.List
	fs.Var(&kubeClasses, "kubernetes-runtime-class", "the RuntimeClass of a tier's pods, `TIER=NAME` (default namespace=hutch, gvisor=hutch-gvisor; repeatable)")
	kubeName := fs.String("kubernetes-name", "hutch", "this hutch serve's `name` in its pods' labels (hutch.dev/daemon): a start deletes the pods a previous run of the same name left")
	kubeReplica := fs.String("kubernetes-replica", "", "make this hutch serve replica `name` (its pod's name, say) of several of one --kubernetes-name behind one Service: each sandbox is served by the replica that made it, requests for it that reach another are sent on to it, and the sandboxes of a replica gone are taken over by the others (with --kubernetes-advertise)")
	kubeAdvertise := fs.String("kubernetes-advertise", "", "the `URL` at which the other replicas reach this one (http://POD_IP:PORT), with --kubernetes-replica")
	kubeLease := fs.Duration("kubernetes-lease", kube.ReplicaLease, "a replica whose Lease was not renewed for `duration` is gone: the others take its sandboxes over (renewed every quarter of it)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: hutch serve [flags]\n\nRuns the daemon: an HTTP API for long-lived sandboxes, until SIGINT or SIGTERM,\nwhich destroy every sandbox but those paused to disk: a paused sandbox of the\ngvisor tier is saved in the state directory, processes and memory, and the\nnext hutch serve on it resumes it. SIGUSR2 stops it too but leaves the namespace\nand gvisor tiers' sandboxes running (an upgrade), as a crash does: the next hutch\nserve on the same --state-dir takes them again — their processes, files, egress\nproxy, timers and approvals — and ends those it cannot. Sandboxes given secrets,\nunder review or started from a snapshot do not outlive the daemon (their secrets\nlive in its memory only), nor does a gvisor sandbox once its memory was saved. With --warm N it keeps N sandboxes of the default\npolicy ready: a create with the default policy takes one at once, and the\npool refills in the background; --warm NAME=N does the same for E2B's\ntemplate NAME, whose image must be in the daemon's store at start (with\n--kubernetes: the cluster's nodes pull it).\n\nEvery sandbox runs in an isolation tier: its policy's, or --default-tier;\n--min-tier refuses weaker ones. The gvisor tier needs runsc of the pinned\nversion (--runsc, or on PATH); without it a create of gvisor is refused, and\nso is a --default-tier or --min-tier of gvisor at start. The microvm tier\n(docs/microvm.md) runs where the host offers it (hutch run --tier microvm\n--check): root, QEMU, virtiofsd, the guest kernel, and KVM or\n--allow-emulation; otherwise it is refused the same way, naming what is\nmissing. Its sandboxes pause in memory and have warm pools of the host's\nroot; snapshots, forks and images are refused naming the tier, and SIGUSR2 ends them (a guest does not\noutlive its daemon).\n\nThe daemon speaks MCP (streamable HTTP) on its listeners, with the same tokens\nand tenants as its API: /mcp with sessions, /mcp/stateless without (for clients\nof the protocol's newest revision); the tools act on the caller's sandboxes.\nOn TCP a request's Host must be the address it reached or a --mcp-allowed-host,\nand a browser page of another origin is refused. --no-mcp turns it off.\n\nOn TCP it serves review pages at /ui/: log in with a token, see the tenant's\nsandboxes, their events and diffs, and apply or discard change sets. The\ntoken is kept in an HttpOnly cookie the API takes only from those pages.\n--no-ui turns them off.\n\nFlags:")
		fs.PrintDefaults()
	}
	if err := cli.Parse(fs, args, stderr); err != nil {
		return usageCode(err)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "hutch: serve takes no arguments, got %q\n", fs.Args())
		return 2
	}
	for _, f := range []struct{ name, value string }{{"default-tier", *defaultTier}, {"min-tier", *minTier}} {
		if f.value == "" {
			continue
		}
		if err := policy.CheckTier(f.value); err != nil {
			fmt.Fprintf(stderr, "hutch: --%s: %v\n", f.name, err)
			return 2
		}
		if f.value == policy.TierMicroVM {
			// Every sandbox would be refused: say so at start, naming
			// what the host lacks.
			if why := microVMUnavailable(*onKubernetes, *allowEmulation); why != "" {
				fmt.Fprintf(stderr, "hutch: --%s: hutch serve cannot run the microvm tier: %s\n", f.name, why)
				return 2
			}
		}
	}
	templates, err := parseTemplates(*templatesFile, templateFlags)
	if err != nil {
		fmt.Fprintf(stderr, "hutch: %v\n", err)
		return 2
	}
	builtImages(*stateDir, templates, !*noBaseImage)
	warm, pools, err := parseWarm(warmFlags, templates, !*noInternet)
	if err != nil {
		fmt.Fprintf(stderr, "hutch: %v\n", err)
		return 2
	}
	for _, p := range allowImages {
		if _, err := path.Match(p, ""); err != nil {
			fmt.Fprintf(stderr, "hutch: --allow-image %q: %v\n", p, err)
			return 2
		}
	}
	if _, err := parseLimit(*imageCacheMax); *imageCacheMax != "" && err != nil {
		fmt.Fprintf(stderr, "hutch: --image-cache-max %q: %v\n", *imageCacheMax, err)
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
	volSize, err := policy.ParseSize(*volumeSize)
	if err != nil || volSize < volume.MinSize {
		fmt.Fprintf(stderr, "hutch: --volume-size %q: want a size of at least %s, such as 1g\n", *volumeSize, policy.FormatSize(volume.MinSize))
		return 2
	}
	if *maxVolumes <= 0 {
		fmt.Fprintln(stderr, "hutch: --max-volumes: want more than 0")
		return 2
	}
	mcpBody, err := policy.ParseSize(*mcpMaxBody)
	if err != nil || mcpBody <= 0 {
		fmt.Fprintf(stderr, "hutch: --mcp-max-body %q: want a size such as 32m\n", *mcpMaxBody)
		return 2
	}
	if *mcpSessionTimeout <= 0 || *mcpMaxSessions <= 0 {
		fmt.Fprintln(stderr, "hutch: --mcp-session-timeout and --mcp-max-sessions: want more than 0")
		return 2
	}
	for _, a := range mcpAllowedHosts {
		if _, err := mcphttp.CheckHost(a); err != nil {
			fmt.Fprintf(stderr, "hutch: %v\n", err)
			return 2
		}
	}
	if *mcpPublicURL != "" {
		if _, err := mcphttp.ParsePublicURL(*mcpPublicURL); err != nil {
			fmt.Fprintf(stderr, "hutch: %v\n", err)
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
	tlsConfig, err := serveTLS(*domain, *listen, *tlsCert, *tlsKey)
	if err != nil {
		fmt.Fprintf(stderr, "hutch: %v\n", err)
		return 2
	}
	if *kubeReplica != "" {
		if !*onKubernetes || *kubeAdvertise == "" {
			fmt.Fprintln(stderr, "hutch: --kubernetes-replica: needs --kubernetes and --kubernetes-advertise")
			return 2
		}
		if u, err := url.Parse(*kubeAdvertise); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			fmt.Fprintf(stderr, "hutch: --kubernetes-advertise %q: want http[s]://HOST:PORT\n", *kubeAdvertise)
			return 2
		}
	}
	if *kubeLease < 4*time.Second {
		fmt.Fprintln(stderr, "hutch: --kubernetes-lease: want at least 4s")
		return 2
	}
	if *domain != "" {
		// CheckDomain passed in serveTLS.
		*domain, _ = e2b.CheckDomain(*domain)
	}
	level := slog.LevelInfo
	if *debug {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	// SIGUSR2 stops too, leaving the sandboxes that can outlive the
	// daemon running for the next hutch serve on the state directory.
	ctx, leave := leaveOnSignal(ctx)

	// Listen first: a daemon already serving this socket must not have
	// its sandboxes taken for leftovers.
	ls, err := api.Listen(*socket, *listen)
	if err != nil {
		fmt.Fprintf(stderr, "hutch: %v\n", err)
		return 1
	}
	// startFailed closes the listeners and reports err.
	startFailed := func(err error) int {
		for _, l := range ls {
			l.Close()
		}
		fmt.Fprintf(stderr, "hutch: %v\n", err)
		return 1
	}
	if tlsConfig != nil {
		for i, l := range ls {
			if l.Addr().Network() != "unix" {
				ls[i] = tlsListener{tls.NewListener(l, tlsConfig)}
			}
		}
	}
	var runtimes map[string]sandbox.Runtime
	var unavailable map[string]string
	var state store.Backend // nil: the state directory's
	var replicas daemon.Replicas
	var e2bKey []byte // nil: the state directory's
	if *onKubernetes {
		var cl *kube.Cluster
		runtimes, unavailable, cl, err = kubeRuntimes(kube.Options{
			Kubeconfig: *kubeconfig,
			Namespace:  *kubeNamespace,
			Image:      *kubeImage,
			NodePolicy: *kubeNodePolicy,
			Daemon:     *kubeName,
			Replica:    *kubeReplica,
		}, kubeClasses)
		if err == nil {
			state = cl.Store()
			kctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			e2bKey, err = cl.SharedKey(kctx, "e2b", e2b.KeyBytes)
			cancel()
		}
		if err == nil && *kubeReplica != "" {
			kube.ReplicaLease, kube.ReplicaRenew = *kubeLease, *kubeLease/4
			var r *kubeReplicas
			if r, err = joinReplicas(cl, *kubeReplica, *kubeAdvertise); err == nil {
				defer func() {
					// Its Lease deleted: the others take its
					// sandboxes over at once.
					if err := r.Close(); err != nil {
						fmt.Fprintf(stderr, "hutch: close: %v\n", err)
					}
				}()
				replicas = r
			}
		}
	} else if runtimes, unavailable, err = tierRuntimes(*runsc, *allowEmulation); err != nil {
		err = fmt.Errorf("--runsc: %w", err)
	}
	if err != nil {
		return startFailed(err)
	}
	reviews, err := parseReviewWorkspaces(reviewFlags)
	if err != nil {
		fmt.Fprintf(stderr, "hutch: --review-workspace: %v\n", err)
		return 2
	}
	// The audit log is the daemon's from its start: the sandboxes it
	// takes again there are recorded (take_back).
	var al *audit.Log
	if err = os.MkdirAll(*stateDir, 0o700); err == nil {
		al, err = audit.Open(filepath.Join(*stateDir, audit.FileName))
	}
	if err != nil {
		return startFailed(err)
	}
	defer al.Close()
	m, err := daemon.New(daemon.Config{
		Audit:            al,
		StateDir:         *stateDir,
		AgentBinary:      logAgent(log, agentBinary()),
		NoInternet:       *noInternet,
		AllowPrivate:     private,
		AllowImages:      allowImages,
		DefaultTimeout:   *defTimeout,
		ApprovalTimeout:  *approvalTimeout,
		MetricsInterval:  *metricsEvery,
		MaxTimeout:       *maxTimeout,
		MaxSandboxes:     *maxSandboxes,
		MaxSnapshots:     *maxSnapshots,
		MaxSnapshotBytes: *maxSnapshotBytes,
		ReviewWorkspaces: reviews,
		MaxChangeSets:    *maxChangeSets,
		Warm:             warm,
		Pools:            pools,
		DefaultDisk:      sizes[0],
		MaxDisk:          sizes[1],
		TenantMemory:     sizes[2],
		DefaultMemory:    sizes[3],
		MaxMemory:        sizes[4],
		MaxTmp:           sizes[5],
		UpstreamRoots:    roots,
		DefaultTier:      *defaultTier,
		MinTier:          *minTier,
		Runtimes:         runtimes,
		Unavailable:      unavailable,
		Store:            state,
		Replicas:         replicas,
	}, log)
	if err != nil {
		return startFailed(err)
	}
	// failed closes what was opened so far and reports err.
	failed := func(err error) int {
		_ = m.Close()
		return startFailed(err)
	}
	waitImages, err := keepImageCache(ctx, *stateDir, *imageCacheMax, log)
	if err != nil {
		return failed(fmt.Errorf("--image-cache-max: %w", err))
	}
	defer waitImages()
	acfg := api.Config{Log: log, MaxUpload: upload, Audit: al}
	if !*noMCP {
		acfg.Metrics = append(acfg.Metrics, mcphttp.ToolCalls)
	}
	h, err := api.NewWithConfig(m, acfg)
	if err != nil {
		return failed(err)
	}
	// E2B's REST API and its in-sandbox API (envd) on the same listeners,
	// so that E2B's SDKs work with E2B_API_URL and E2B_SANDBOX_URL set to
	// the daemon; hutch's own routes are untouched.
	isEnvd, envdHandler := envdRoutes(log)
	// Tenants' templates (E2B's template builds) and their uploads are
	// kept in the state directory.
	if e2bKey == nil {
		if e2bKey, err = stateKey(filepath.Join(*stateDir, "e2b.key"), e2b.KeyBytes); err != nil {
			return failed(err)
		}
	}
	opts := []e2b.Option{e2b.WithAudit(al), e2b.WithTemplateDir(filepath.Join(*stateDir, "e2b-templates")), e2b.WithStateDir(*stateDir), e2b.WithKey(e2bKey)}
	if *noInternet {
		opts = append(opts, e2b.WithoutInternet())
	}
	if len(templates) > 0 {
		opts = append(opts, e2b.WithTemplates(templates))
	}
	if *domain != "" {
		opts = append(opts, e2b.WithDomain(*domain))
	}
	if *publicTraffic {
		opts = append(opts, e2b.WithPublicTraffic())
	}
	// E2B's volumes: their mounts outlive the daemon (sandboxes may still
	// use them) and the next one reuses them.
	vols, err := volume.Open(volume.Config{Dir: filepath.Join(*stateDir, "volumes"), Size: volSize, MaxVolumes: *maxVolumes})
	if err != nil {
		return failed(err)
	}
	defer vols.Close()
	if err := vols.MountErrors(); err != nil {
		log.Error("volumes that did not mount (tried again when used)", "err", err)
	}
	opts = append(opts, e2b.WithVolumes(vols))
	missingTemplates(m.Images(), templates, pools, log)
	e2bHandler := e2b.New(m, log, opts...)
	h = e2bHandler.Mount(h, isEnvd, envdHandler)
	if !*noMCP {
		// MCP on the same listeners, authenticated as the API is. Exec
		// logs go to the state directory's disk, not to the host's
		// temporary directory (often RAM).
		logs, err := mcpLogSpace(*stateDir, *mcpMaxLogs)
		if err != nil {
			return failed(err)
		}
		mh, err := mcphttp.New(mcphttp.Config{
			Sandboxes: m, Templates: templates, Version: version,
			PublicURL: *mcpPublicURL, AllowedHosts: mcpAllowedHosts,
			MaxBody: mcpBody, SessionTimeout: *mcpSessionTimeout, MaxSessions: *mcpMaxSessions,
			Logs: logs, Audit: al, Log: log,
		})
		if err != nil {
			return failed(err)
		}
		h = mh.Mount(h)
		// Its sessions' streams end at shutdown rather than hold it up.
		stopMCP := context.AfterFunc(ctx, mh.Close)
		defer stopMCP()
	}
	if !*noUI {
		// The review pages on the same listeners, their requests to the
		// API authenticated by the login cookie; the same names answered
		// as /mcp's.
		hosts, err := mcphttp.AllowedHosts(mcpAllowedHosts, *mcpPublicURL)
		if err != nil {
			return failed(err)
		}
		ui, err := webui.New(webui.Config{Store: m.Store(), Hosts: hosts, Secure: strings.HasPrefix(*mcpPublicURL, "https:"), Log: log})
		if err != nil {
			return failed(err)
		}
		h = ui.Mount(h)
	}
	// E2B's domain layout routes by host before all else: only api.D
	// (and hosts outside D) reach the API, a sandbox's host only its
	// envd or port.
	h = e2bHandler.Domain(h, isEnvd, envdHandler)
	if replicas != nil {
		// Requests for a sandbox another replica serves go to it; the
		// unix socket's operator is known only here.
		h = forward.New(h, m, forward.Config{
			Self: *kubeReplica, Log: log,
			IDs:  []func(*http.Request) string{api.SandboxOf, e2bHandler.SandboxOf},
			Here: func(r *http.Request) bool { return api.OriginOf(r.Context()) == api.OriginLocal },
		})
	}
	if *domain != "" {
		fmt.Fprintf(stderr, "hutch: E2B's domain %s: E2B_DOMAIN=%s (api.%s, PORT-SANDBOXID.%s)\n", *domain, *domain, *domain, *domain)
	}
	for _, l := range ls {
		fmt.Fprintf(stderr, "hutch: listening on %s\n", listenerURL(l))
		if l.Addr().Network() != "unix" && !*noUI {
			fmt.Fprintf(stderr, "hutch: review pages at %s%s\n", listenerURL(l), webui.Path)
		}
	}
	// Where this daemon answers, for `hutch token create --state-dir`,
	// next to the lock it holds.
	forget := recordSocket(*stateDir, ls, log)
	defer forget()
	serr := api.Serve(ctx, h, log, ls...)
	if *onKubernetes {
		fmt.Fprintln(stderr, "hutch: shutting down; the sandboxes' pods run on, for the next hutch serve of this --kubernetes-name")
	} else if leave() {
		m.LeaveRunning()
		fmt.Fprintln(stderr, "hutch: shutting down (SIGUSR2); the sandboxes that outlive the daemon (namespace and gvisor tiers) run on, for the next hutch serve of this --state-dir; destroying the others not paused to disk")
	} else {
		fmt.Fprintln(stderr, "hutch: shutting down; destroying every sandbox not paused to disk")
	}
	e2bHandler.Close() // the template builds running fail
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

// socketFile, in the state directory, holds the address of the unix socket
// of the daemon that holds the directory's lock.
const socketFile = "socket"

// recordSocket writes the address of the unix listener among ls into the
// state directory's socket file, and returns what removes it again.
func recordSocket(stateDir string, ls []net.Listener, log *slog.Logger) (forget func()) {
	p := filepath.Join(stateDir, socketFile)
	for _, l := range ls {
		if l.Addr().Network() != "unix" {
			continue
		}
		addr := listenerURL(l) + "\n"
		if err := os.WriteFile(p, []byte(addr), 0o644); err != nil {
			log.Warn("cannot record the socket in the state directory", "err", err)
			return func() {}
		}
		return func() {
			if b, err := os.ReadFile(p); err == nil && string(b) == addr {
				_ = os.Remove(p)
			}
		}
	}
	_ = os.Remove(p) // a socket of an earlier daemon
	return func() {}
}

// upstreamRoots are the roots the proxies verify a secret's host with: the
// system's and the certificates in files (--upstream-ca).
func upstreamRoots(files []string) (*x509.CertPool, error) {
	var pems [][]byte
	for _, f := range files {
		pem, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("--upstream-ca: %w", err)
		}
		pems = append(pems, pem)
	}
	return egress.UpstreamRoots(pems, func(i int) string { return "--upstream-ca " + files[i] })
}

// listenerURL is the address clients use for l (HUTCH_HOST).
func listenerURL(l net.Listener) string {
	if l.Addr().Network() == "unix" {
		return "unix://" + l.Addr().String()
	}
	if _, ok := l.(tlsListener); ok {
		return "https://" + l.Addr().String()
	}
	return "http://" + l.Addr().String()
}

// tlsListener is a TCP listener that speaks TLS (--tls-cert).
type tlsListener struct{ net.Listener }

// serveTLS checks --domain, --tls-cert and --tls-key and returns the TLS
// configuration of the TCP listener, nil for plain HTTP. With a domain
// D the certificate must cover api.D and a sandbox's host under D (a
// wildcard *.D), and --listen is needed.
func serveTLS(domain, listen, certFile, keyFile string) (*tls.Config, error) {
	if domain != "" {
		d, err := e2b.CheckDomain(domain)
		if err != nil {
			return nil, fmt.Errorf("--domain: %w", err)
		}
		domain = d
		if listen == "" {
			return nil, errors.New("--domain needs --listen: E2B's domain layout is served on TCP")
		}
	}
	if (certFile == "") != (keyFile == "") {
		return nil, errors.New("--tls-cert and --tls-key go together")
	}
	if certFile == "" {
		return nil, nil
	}
	if listen == "" {
		return nil, errors.New("--tls-cert needs --listen: TLS is served on TCP")
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert, --tls-key: %w", err)
	}
	if domain != "" {
		leaf := cert.Leaf
		if leaf == nil {
			if leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
				return nil, fmt.Errorf("--tls-cert: %w", err)
			}
		}
		for _, host := range []string{"api." + domain, strconv.Itoa(e2b.EnvdPort) + "-sb-aaaaaaaaaaaa." + domain} {
			if err := leaf.VerifyHostname(host); err != nil {
				return nil, fmt.Errorf("--tls-cert %s does not cover %s (want a certificate for *.%s): %w", certFile, host, domain, err)
			}
		}
	}
	// HTTP/1.1 only: WebSocket upgrades to sandboxes' ports need it.
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}}, nil
}

// agentBinary is hutch-agent next to hutch-serve's own binary, the
// sandboxes' PID 1 (of hutch serve's and of hutch mcp's) when it is
// installed there: half the memory of hutch-serve's; "" (hutch-serve's
// own binary, which serves "agent" too) otherwise.
func agentBinary() string {
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	p := filepath.Join(filepath.Dir(exe), "hutch-agent")
	if fi, err := os.Stat(p); err != nil || !fi.Mode().IsRegular() || fi.Mode()&0o111 == 0 {
		return ""
	}
	return p
}

// logAgent says which binary is the daemon's sandboxes' agent, and
// returns it.
func logAgent(log *slog.Logger, bin string) string {
	if bin == "" {
		exe, _ := os.Executable()
		log.Info("the sandboxes' agent is hutch itself; install hutch-agent next to it to halve each sandbox's memory", "hutch", exe)
	} else {
		log.Info("the sandboxes' agent", "binary", bin)
	}
	return bin
}

// usageCode is the exit code after cli.Parse failed: 0 after -h, else 2.
func usageCode(err error) int {
	if errors.Is(err, flag.ErrHelp) {
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

// parseTemplates reads the templates file (if any) and --template
// NAME=REF flags: every name once, every reference an image reference.
func parseTemplates(file string, flags []string) (map[string]string, error) {
	out := map[string]string{}
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("--templates: %w", err)
		}
		var m map[string]string
		if err := yaml.Unmarshal(b, &m); err != nil {
			return nil, fmt.Errorf("--templates %s: want a map of template names to image references: %w", file, err)
		}
		for _, name := range slices.Sorted(maps.Keys(m)) {
			flags = append([]string{name + "=" + m[name]}, flags...)
		}
	}
	for _, f := range flags {
		name, ref, ok := strings.Cut(f, "=")
		if !ok || name == "" || ref == "" || strings.ContainsAny(name, " /:\t") {
			return nil, fmt.Errorf("--template %q: want NAME=REF (a name without spaces, '/' or ':', and an image reference)", f)
		}
		if _, err := image.Normalize(ref); err != nil {
			return nil, fmt.Errorf("--template %s: %w", name, err)
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("--template %s: given twice", name)
		}
		out[name] = ref
	}
	return out, nil
}

// builtImages makes the images scripts/base-image.sh builds E2B's
// templates when the daemon's store holds them as the daemon starts and no
// --template names another for the template: hutch's base image
// (e2b.BaseImage) the template base, unless base is false, and hutch's
// code-interpreter image (e2b.CodeInterpreterImage) the template
// code-interpreter-v1 of E2B's Code Interpreter SDK. Decision: by default
// when present, since E2B's base has what it lacks on a host's root (the
// user's sudo, python); --no-base-image keeps the host's root for base.
// Without its image, code-interpreter-v1 is no template of the daemon.
func builtImages(stateDir string, templates map[string]string, base bool) {
	st, err := image.Open(stateDir)
	if err != nil {
		return
	}
	for _, b := range []struct {
		template, ref string
		use           bool
	}{{e2b.Template, e2b.BaseImage, base}, {e2b.CodeInterpreterTemplate, e2b.CodeInterpreterImage, true}} {
		if _, set := templates[b.template]; set || !b.use {
			continue
		}
		if _, err := st.Get(b.ref); err == nil {
			templates[b.template] = b.ref
		}
	}
}

// parseWarm reads the --warm flags: N, the warm sandboxes of the default
// policy (once), and NAME=N, those of E2B's template NAME — one of
// templates, or base — whose policy is what E2B's create of it makes
// (internet: the daemon offers sandboxes the internet).
func parseWarm(flags []string, templates map[string]string, internet bool) (int, []daemon.WarmPool, error) {
	warm, seen := 0, map[string]bool{}
	var pools []daemon.WarmPool
	for _, f := range flags {
		name, count, named := strings.Cut(f, "=")
		if !named {
			name, count = "", f
		}
		n, err := strconv.Atoi(count)
		if err != nil || n < 0 || (named && n == 0) {
			return 0, nil, fmt.Errorf("--warm %q: want N or NAME=N, N a number of sandboxes (NAME=N: at least 1)", f)
		}
		if seen[name] {
			return 0, nil, fmt.Errorf("--warm %q: the pool of %s is given twice", f, cmp.Or(name, "the default policy"))
		}
		seen[name] = true
		if !named {
			warm = n
			continue
		}
		spec, err := e2b.TemplatePolicy(name, templates, internet)
		if err != nil {
			return 0, nil, fmt.Errorf("--warm %s: %v (name it with --template %s=REF)", f, err, name)
		}
		pools = append(pools, daemon.WarmPool{Name: name, Size: n, Policy: spec})
	}
	return warm, pools, nil
}

// missingTemplates warns of the templates whose images are not in the
// daemon's store. Decision: a warning, not an error, since an image can
// be brought in while the daemon runs (POST /v1/images/pull, hutch image
// pull); until then E2B's creates of the template fail with its name. A
// template with a warm pool is different: its pool could never fill, and
// the daemon refuses to start (daemon.New).
func missingTemplates(st *image.Store, templates map[string]string, pools []daemon.WarmPool, log *slog.Logger) {
	warm := map[string]bool{}
	for _, p := range pools {
		warm[p.Name] = true
	}
	for _, name := range slices.Sorted(maps.Keys(templates)) {
		if warm[name] {
			continue
		}
		if _, err := st.Get(templates[name]); err != nil {
			log.Warn("an E2B template's image is not in the daemon's image store: its creates fail until it is pulled (hutch image pull --remote, or hutch image pull --state-dir)",
				"template", name, "image", templates[name], "err", err)
		}
	}
}

// tierRuntimes are the tiers this daemon runs: the namespace tier, and
// the gVisor tier when runsc (the flag's, or the one on PATH) is of the
// pinned version. A runsc named by the flag that is not is an error; one
// missing from PATH leaves the tier out, with the reason (and the command
// that installs it) for the creates that ask for it.
func tierRuntimes(runsc string, allowEmulation bool) (map[string]sandbox.Runtime, map[string]string, error) {
	rts := daemon.DefaultRuntimes()
	unavailable := map[string]string{}
	path, err := gvisor.Find(runsc)
	switch {
	case err == nil:
		rts[policy.TierGVisor] = &gvisor.Runtime{Runsc: path}
	case runsc != "":
		return nil, nil, err
	default:
		unavailable[policy.TierGVisor] = err.Error()
	}
	if why := microVMUnavailable(false, allowEmulation); why != "" {
		unavailable[policy.TierMicroVM] = why
	} else {
		rts[policy.TierMicroVM] = &microvm.Runtime{KernelDir: os.Getenv(runner.GuestKernelEnv), AllowEmulation: allowEmulation}
	}
	return rts, unavailable, nil
}

// microVMUnavailable says what this host lacks for the microvm tier
// (microvm.Check's failed lines), "" when it can run it.
func microVMUnavailable(onKubernetes, allowEmulation bool) string {
	if onKubernetes {
		return "its sandboxes run on this machine only, not as pods (--kubernetes)"
	}
	lines, ok := microvm.Check(os.Getenv(runner.GuestKernelEnv), allowEmulation)
	if ok {
		return ""
	}
	var no []string
	for _, l := range lines {
		if rest, bad := strings.CutPrefix(l, "no  "); bad {
			no = append(no, rest)
		}
	}
	return strings.Join(no, "; ") + " (hutch run --tier microvm --check tells the same; see docs/microvm.md)"
}

// mcpLogSpace is the space of MCP's exec logs: DIR/mcp-logs of the state
// directory (private, emptied: a log's file has no name once made, so
// what is there is nobody's) of at most max bytes (--mcp-max-logs).
func mcpLogSpace(stateDir, max string) (*mcp.LogSpace, error) {
	n, err := policy.ParseSize(max)
	if err != nil || n <= 0 {
		return nil, fmt.Errorf("--mcp-max-logs %q: want a size such as 4g", max)
	}
	dir := filepath.Join(stateDir, mcphttp.LogDir)
	if err := os.RemoveAll(dir); err != nil {
		return nil, fmt.Errorf("MCP's exec logs: %w", err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, fmt.Errorf("MCP's exec logs: %w", err)
	}
	return mcp.NewLogSpace(dir, n), nil
}

// parseReviewWorkspaces reads --review-workspace NAME=DIR[@TENANT,...]:
// the directory must exist (symbolic links resolved), a name once.
func parseReviewWorkspaces(flags []string) (map[string]daemon.ReviewWorkspace, error) {
	out := map[string]daemon.ReviewWorkspace{}
	for _, f := range flags {
		name, rest, ok := strings.Cut(f, "=")
		if !ok || name == "" || rest == "" {
			return nil, fmt.Errorf("%q: want NAME=DIR or NAME=DIR@TENANT[,TENANT]", f)
		}
		var ws daemon.ReviewWorkspace
		dir, tenants, _ := strings.Cut(rest, "@")
		if tenants != "" {
			ws.Tenants = strings.Split(tenants, ",")
		}
		abs, err := filepath.Abs(dir)
		if err == nil {
			abs, err = filepath.EvalSymlinks(abs)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if fi, err := os.Stat(abs); err != nil || !fi.IsDir() {
			return nil, fmt.Errorf("%s: %s is not a directory", name, dir)
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("%s: named twice", name)
		}
		ws.Dir = abs
		out[name] = ws
	}
	return out, nil
}

// leaveOnSignal is ctx, cancelled also at SIGUSR2, and a function that
// says, once it is done, whether SIGUSR2 ended it.
func leaveOnSignal(ctx context.Context) (context.Context, func() bool) {
	ctx, cancel := context.WithCancel(ctx)
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGUSR2)
	var got atomic.Bool
	go func() {
		select {
		case <-ch:
			got.Store(true)
			cancel()
		case <-ctx.Done():
		}
		signal.Stop(ch)
	}()
	return ctx, got.Load
}
