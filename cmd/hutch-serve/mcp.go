package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/hutch-sandbox/hutch/internal/agent"
	"github.com/hutch-sandbox/hutch/internal/approve"
	"github.com/hutch-sandbox/hutch/internal/daemon"
	"github.com/hutch-sandbox/hutch/internal/egress"
	"github.com/hutch-sandbox/hutch/internal/image"
	"github.com/hutch-sandbox/hutch/internal/interp"
	"github.com/hutch-sandbox/hutch/internal/mcp"
	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/portfwd"
	"github.com/hutch-sandbox/hutch/internal/runner"
	"github.com/hutch-sandbox/hutch/internal/sandbox"
)

const mcpUsage = `Usage: hutch mcp [flags]
       hutch mcp wrap [flags] -- SERVER_COMMAND [ARGS...]

Serves hutch's tools to an agent's harness (Claude Code, Codex, Cursor, an
agent SDK) over MCP on stdin and stdout, for one session: exec, exec_poll,
exec_kill, file_read, file_write, file_edit, file_list, port_url and
sandbox_create, sandbox_list, sandbox_info, sandbox_kill. The tools act in
a sandbox over the current directory, exactly the one "hutch run" would
make with the same flags, started at the first call that needs it, and in
the sandboxes the agent creates; every one of them ends with the session.

The flags are the ceiling of what the agent may ask for: a sandbox it
creates starts from the same image (or the host's root), gets an empty
workspace of its own, no longer a timeout than --timeout, and reaches only
hosts its allow_domains name, each of which the flags' network policy must
allow.

A policy's approvals: (--policy FILE) decide every command exec runs, and
network.on_unknown: ask the hosts no rule allows; where they say ask, the
client's user is asked through MCP elicitation, and a client that cannot
be asked is refused.

Add it to Claude Code with: claude mcp add hutch -- hutch mcp [flags]

hutch mcp wrap runs a third-party MCP server in a sandbox (see README.md).
`

// mcpOwner owns the session's exec sessions (mcp.Options.Owner): one
// client per hutch mcp.
const mcpOwner = "hutch-mcp"

// Bounds of a hutch mcp session.
const (
	// maxMCPSandboxes is how many sandboxes a session may have at once,
	// its own included.
	maxMCPSandboxes = 32
	// maxAllowDomains bounds sandbox_create's allow_domains.
	maxAllowDomains = 256
	// agentReadyTimeout bounds the wait for a new sandbox's agent.
	agentReadyTimeout = 30 * time.Second
	// maxFrame bounds one message from the client: room for file_write's
	// largest file, base64-encoded or escaped in JSON (the SDK's default,
	// 16 MiB, would end the session at a file of 12 MiB).
	maxFrame = 2*mcp.MaxWrite + 1<<20
)

// cmdMCP is `hutch mcp [flags of hutch run]`, and `hutch mcp wrap …`.
func cmdMCP(args []string, stdin, stdout, stderr *os.File) int {
	if len(args) > 0 && args[0] == "wrap" {
		return cmdMCPWrap(args[1:], stdin, stdout, stderr)
	}
	fs, rf := runner.NewFlags("mcp", mcpUsage, stderr)
	if code, done := runner.Parse(fs, args, stderr); done {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "hutch: mcp takes no command, got %q (the agent runs its commands with the exec tool; hutch mcp wrap -- SERVER runs an MCP server in a sandbox)\n", fs.Args())
		return sandbox.ExitHutchError
	}
	spec, code := rf.Spec(stderr)
	if code != 0 {
		return code
	}
	b, err := newMCPBackend(rf, spec, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "hutch: %v\n", err)
		return sandbox.ExitHutchError
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	// A client gone while an answer is written: the write fails (and the
	// session ends with stdin's end) instead of SIGPIPE killing hutch
	// before it released anything.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	var backend mcp.Backend = b
	if b.kernels() {
		backend = mcpInterpreters{b}
	}
	o := mcp.Options{
		Version:  version,
		Backend:  backend,
		Owner:    mcpOwner,
		Execs:    b.execs,
		Links:    b.links,
		LinkBase: b.linkBase,
		Log:      b.debug,
	}
	if rf.Debug {
		o.Audit = func(c mcp.Call) {
			b.log.Debug("tool call", "tool", c.Tool, "sandbox", c.Sandbox, "arg_bytes", c.ArgBytes, "took", c.Duration, "err", c.Err)
		}
	}
	err = serveMCP(ctx, mcp.NewServer(o), &sdk.IOTransport{Reader: stdin, Writer: stdout, MaxLineLength: maxFrame}, &b.asker)
	switch {
	case ctx.Err() != nil:
		b.log.Debug("ending on a signal")
	case err != nil && !errors.Is(err, io.EOF):
		fmt.Fprintf(stderr, "hutch: mcp: %v\n", err)
	default:
		b.log.Debug("the client closed the session")
	}
	// Signals stay caught until everything is released: a client that
	// follows its close with SIGTERM does not cut the release short.
	if cerr := b.close(); cerr != nil {
		fmt.Fprintf(stderr, "hutch: mcp: %v\n", cerr)
		return 1
	}
	return 0
}

// serveMCP serves the session on t until it ends or ctx does, as
// sdk.Server.Run does, with the session handed to asker.
func serveMCP(ctx context.Context, server *sdk.Server, t sdk.Transport, asker *mcpAsker) error {
	ss, err := server.Connect(ctx, t, nil)
	if err != nil {
		return err
	}
	asker.session.Store(ss)
	ended := make(chan error, 1)
	go func() { ended <- ss.Wait() }()
	select {
	case <-ctx.Done():
		ss.Close()
		<-ended
		return ctx.Err()
	case err := <-ended:
		return err
	}
}

// mcpBackend is the sandboxes of one hutch mcp session (mcp.Backend): the
// session sandbox over the current directory, started at the first call
// that needs it (again after it ended), and those the agent creates,
// never wider than the flags.
type mcpBackend struct {
	rf       *runner.Flags
	spec     policy.Spec // the flags' policy: the session sandbox's, every other's ceiling
	ceiling  *egress.Rules
	stderr   io.Writer
	log      *slog.Logger // warnings, and everything with --debug
	debug    *slog.Logger // the MCP server's events: with --debug only
	agentBin string

	// review, in review mode, is the session's change set: the session
	// sandbox writes its workspace there, every session sandbox of it in
	// turn (made by the first one's start).
	review *runner.Review

	execs    *mcp.ExecTable
	links    *mcp.Links
	linkBase string
	linkSrv  *http.Server
	fwd      portfwd.Forwards
	report   *os.File // --report, shared by every sandbox
	reportW  *lockedWriter

	mu       sync.Mutex
	boxes    map[string]*mcpBox
	session  *mcpBox       // the session sandbox while it runs
	starting chan struct{} // closed when the session sandbox's start in progress ended
	startErr error         // how that start failed
	closed   bool

	asker mcpAsker // the approvals' questions go to the MCP client
}

var _ mcp.Backend = (*mcpBackend)(nil)

// mcpBox is one sandbox of the session.
type mcpBox struct {
	id        string
	session   bool
	image     string
	tier      string
	workspace string // as the sandbox sees it
	tmp       string // a created sandbox's workspace on the host, removed at its end
	created   time.Time
	expires   time.Time // zero: no timeout

	stderr io.Writer // hutch mcp's, where the change set's summary goes
	sb     *runner.Sandbox
	review *runner.Review // the session's change set, for the session sandbox in review mode
	inst   sandbox.Instance
	client *agent.Client
	gate   *approve.Gate  // its commands' approvals; nil: none
	interp *interp.Client // its code interpreter's client; nil: it has none
	timer  *time.Timer
	once   sync.Once
	ended  chan struct{} // closed once everything of it is released
}

// newMCPBackend checks what can be checked before the first call (the
// tier's runtime, the network policy), opens the report and starts the
// links' listener.
func newMCPBackend(rf *runner.Flags, spec policy.Spec, stderr io.Writer) (*mcpBackend, error) {
	level := slog.LevelWarn
	if rf.Debug {
		level = slog.LevelDebug
	}
	b := &mcpBackend{
		rf: rf, spec: spec, stderr: stderr,
		log:      slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})),
		debug:    slog.New(slog.DiscardHandler),
		agentBin: agentBinary(),
		execs:    mcp.NewExecTable(nil),
		links:    mcp.NewLinks(),
		boxes:    map[string]*mcpBox{},
	}
	if rf.Debug {
		b.debug = b.log
	}
	rf.Asker = &b.asker
	b.fwd.Log = b.log
	if rf.DirectFS {
		// Its sandboxes are served ones, with hutch's agent as PID 1: the
		// gofer serves their files (runsc --directfs=false), as under
		// hutch serve. Saying so beats a flag that changes nothing.
		return nil, fmt.Errorf("--gvisor-directfs: hutch mcp's gVisor sandboxes run without direct file access (their files are served by gVisor's gofer, as under hutch serve); leave the flag out, or use hutch run for file-heavy work")
	}
	if _, err := rf.RuntimeFor(spec.Tier); err != nil {
		return nil, err
	}
	if spec.Network.Mode == "proxy" {
		cfg, err := egress.ConfigFromPolicy(spec.Network)
		if err != nil {
			return nil, err
		}
		for _, s := range spec.Secrets {
			// A secret's hosts are reachable as if allowed.
			cfg.AllowDomains = append(slices.Clip(cfg.AllowDomains), s.Hosts...)
		}
		cfg.OperatorRules = true
		if b.ceiling, err = egress.NewRules(cfg); err != nil {
			return nil, fmt.Errorf("network policy: %w", err)
		}
	}
	if rf.Report != "" {
		f, err := os.OpenFile(rf.Report, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			return nil, fmt.Errorf("--report: %w", err)
		}
		b.report, b.reportW = f, &lockedWriter{w: f}
		rf.ReportTo = b.reportW
	}
	// The links' base URL is the server's from its start, so their
	// listener is made now: a loopback socket and one goroutine.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.closeReport()
		return nil, fmt.Errorf("links listener: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/links/", b.links)
	b.linkSrv = &http.Server{Handler: mux, ReadHeaderTimeout: 30 * time.Second}
	b.linkBase = "http://" + l.Addr().String() + "/links/"
	go func() { _ = b.linkSrv.Serve(l) }()
	b.log.Debug("hutch mcp ready", "links", b.linkBase, "agent", cmp.Or(b.agentBin, "hutch-serve itself"), "workspace", spec.Filesystem.Workspace)
	return b, nil
}

// DefaultSandbox is the session sandbox, started now when it does not
// run (at the first call that needs it, or after it ended).
func (b *mcpBackend) DefaultSandbox(ctx context.Context) (string, error) {
	b.mu.Lock()
	for {
		switch {
		case b.closed:
			b.mu.Unlock()
			return "", errClosing
		case b.session != nil:
			id := b.session.id
			b.mu.Unlock()
			return id, nil
		case b.starting != nil:
			ch := b.starting
			b.mu.Unlock()
			select {
			case <-ch:
			case <-ctx.Done():
				return "", ctx.Err()
			}
			b.mu.Lock()
			if b.session == nil && b.startErr != nil {
				err := b.startErr
				b.mu.Unlock()
				return "", err
			}
			continue
		}
		break
	}
	if err := b.roomLocked(); err != nil {
		b.mu.Unlock()
		return "", err
	}
	ch := make(chan struct{})
	b.starting, b.startErr = ch, nil
	b.mu.Unlock()

	box, err := b.start(b.spec, true, "")
	if err == nil {
		err = b.adopt(box)
	}
	b.mu.Lock()
	b.starting, b.startErr = nil, err
	if err == nil {
		b.session = box
	}
	b.mu.Unlock()
	close(ch)
	if err != nil {
		return "", fmt.Errorf("start the session's sandbox: %w", err)
	}
	return box.id, nil
}

var errClosing = errors.New("hutch mcp is ending: its sandboxes are gone")

// roomLocked checks that the session may have one more sandbox; b.mu is
// held.
func (b *mcpBackend) roomLocked() error {
	if n := len(b.boxes); n >= maxMCPSandboxes {
		return fmt.Errorf("%d sandboxes run already, the most one session may have: kill one with sandbox_kill first", n)
	}
	return nil
}

// Create starts a sandbox as r asks, within the flags.
func (b *mcpBackend) Create(ctx context.Context, r mcp.CreateRequest) (mcp.Sandbox, error) {
	spec, err := b.createSpec(r)
	if err != nil {
		return mcp.Sandbox{}, err
	}
	b.mu.Lock()
	err = b.roomLocked()
	if b.closed {
		err = errClosing
	}
	b.mu.Unlock()
	if err != nil {
		return mcp.Sandbox{}, err
	}
	ws, err := os.MkdirTemp("", "hutch-mcp-")
	if err != nil {
		return mcp.Sandbox{}, fmt.Errorf("the sandbox's workspace: %w", err)
	}
	spec.Filesystem.Workspace = ws
	// A workspace of its own, nothing of the user's: no change set to
	// keep in review mode.
	spec.Filesystem.WorkspaceMode = ""
	box, err := b.start(spec, false, ws)
	if err != nil {
		os.RemoveAll(ws)
		return mcp.Sandbox{}, err
	}
	if err := b.adopt(box); err != nil {
		return mcp.Sandbox{}, err
	}
	return box.describe(), nil
}

// createSpec is the policy of a sandbox r asks for (its workspace still
// to be set): the flags' with r's image, timeout and allowed domains,
// each checked against the flags; an error that says what is allowed
// when r asks for more.
func (b *mcpBackend) createSpec(r mcp.CreateRequest) (policy.Spec, error) {
	var spec policy.Spec
	raw, err := json.Marshal(b.spec)
	if err == nil {
		err = json.Unmarshal(raw, &spec) // a deep copy
	}
	if err != nil {
		return spec, fmt.Errorf("copy the session's policy: %w", err)
	}
	ref, isImage := b.spec.Image()
	switch {
	case r.Image == "" || (isImage && r.Image == ref):
	case isImage:
		return spec, fmt.Errorf("image %q: this session starts sandboxes from image %s only (hutch mcp --image %s); leave image empty for it", r.Image, ref, ref)
	default:
		return spec, fmt.Errorf("image %q: this session's sandboxes run on the host's root filesystem, read-only, and no image (hutch mcp was started without --image); leave image empty", r.Image)
	}
	ceiling := b.spec.Resources.Timeout
	switch {
	case r.Timeout < 0:
		return spec, fmt.Errorf("timeout %s: negative", r.Timeout)
	case ceiling > 0 && r.Timeout > ceiling:
		return spec, fmt.Errorf("timeout %s: longer than this session allows (hutch mcp --timeout %s); ask for %s or less", r.Timeout, ceiling, ceiling)
	case r.Timeout > 0:
		spec.Resources.Timeout = r.Timeout
	}
	if err := b.checkDomains(r.AllowDomains); err != nil {
		return spec, err
	}
	// The sandbox reaches what its allow_domains name, and nothing else:
	// neither the flags' other hosts and CIDRs nor their secrets.
	nw := &spec.Network
	nw.AllowedDomains, nw.AllowedCIDRs, spec.Secrets = slices.Clone(r.AllowDomains), nil, nil
	nw.Mode = "none"
	if len(r.AllowDomains) > 0 {
		nw.Mode = "proxy"
	}
	return spec, nil
}

// checkDomains checks that the flags' network policy allows every entry
// of domains.
func (b *mcpBackend) checkDomains(domains []string) error {
	if len(domains) > maxAllowDomains {
		return fmt.Errorf("allow_domains: %d entries, more than the %d a sandbox may have", len(domains), maxAllowDomains)
	}
	if len(domains) == 0 {
		return nil
	}
	switch b.spec.Network.Mode {
	case "host":
		// The flags share the host's network: every host is within
		// them. Each entry's syntax is checked as the sandbox's proxy
		// is made.
		return nil
	case "proxy":
	default:
		return errors.New("allow_domains: this session's sandboxes have no network (hutch mcp runs without --allow-domain, or with --net none): create the sandbox without allow_domains, or ask the user to restart hutch mcp with --allow-domain for the hosts needed")
	}
	for _, d := range domains {
		ok, err := b.ceiling.Covers(d)
		switch {
		case err != nil:
			return fmt.Errorf("allow_domains: %w", err)
		case !ok:
			return fmt.Errorf("allow_domains: %q is not allowed by this session's network policy, which allows %s; ask the user to restart hutch mcp with --allow-domain %s if the sandbox needs it", d, b.allowedList(), d)
		}
	}
	return nil
}

// allowedList names what the flags allow, for errors.
func (b *mcpBackend) allowedList() string {
	var all []string
	all = append(all, b.spec.Network.AllowedDomains...)
	all = append(all, b.spec.Network.AllowedCIDRs...)
	for _, s := range b.spec.Secrets {
		all = append(all, s.Hosts...)
	}
	if len(all) == 0 {
		return "nothing"
	}
	const most = 20
	if len(all) > most {
		return strings.Join(all[:most], ", ") + fmt.Sprintf(" and %d more", len(all)-most)
	}
	return strings.Join(all, ", ")
}

// start starts a sandbox of spec with hutch's agent as its PID 1 and waits
// for the agent; tmp is its workspace's directory to remove at its end
// ("" for the session sandbox's, the user's own). The sandbox is not the
// session's yet (adopt).
func (b *mcpBackend) start(spec policy.Spec, session bool, tmp string) (*mcpBox, error) {
	sb, err := b.rf.Prepare(spec, b.stderr)
	if err != nil {
		return nil, err
	}
	gate := sb.Gate
	if gate != nil {
		gate.NoAsker = noElicitation
	}
	environ, err := sb.Environ(nil)
	if err != nil {
		sb.Close()
		return nil, err
	}
	c := sb.Config(environ)
	c.AgentBinary = b.agentBin
	kernels := c.Image != nil && daemon.HasKernels(c.Image.Layers)
	if kernels {
		// hutch-serve itself, which serves the code interpreter too.
		c.AgentBinary = ""
	}
	var review *runner.Review
	if session {
		if review, err = b.beginReview(spec); err != nil {
			sb.Close()
			return nil, err
		}
		if review != nil {
			c.ReviewDir = review.Dir()
		}
	}
	t0 := time.Now()
	inst, err := sb.Runtime.Start(c)
	if err != nil {
		sb.Close()
		var ie *sandbox.InitError
		if errors.As(err, &ie) {
			return nil, errors.New(ie.Msg)
		}
		return nil, err
	}
	client := agent.NewClient(inst.Conn())
	box := &mcpBox{
		id: sb.ID(), session: session, tier: sb.Runtime.Tier(), tmp: tmp,
		workspace: spec.Filesystem.Workspace, created: time.Now(),
		sb: sb, review: review, inst: inst, client: client, gate: gate, ended: make(chan struct{}),
		stderr: b.stderr,
	}
	if ref, ok := spec.Image(); ok {
		box.image = ref
		if at := spec.Filesystem.WorkspaceAt; at != "" {
			box.workspace = at
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), agentReadyTimeout)
	_, err = client.ListProcesses(ctx)
	cancel()
	if err != nil {
		box.release(b.log)
		return nil, fmt.Errorf("the sandbox's agent did not answer: %w", err)
	}
	if kernels {
		if err := daemon.StartInterpreter(context.Background(), client, b.debug); err != nil {
			box.release(b.log)
			return nil, err
		}
		box.interp = interp.NewClient(func(ctx context.Context) (net.Conn, error) { return portfwd.Dial(ctx, client, interp.Port) })
	}
	if d := spec.Resources.Timeout; d > 0 {
		box.expires = box.created.Add(d)
	}
	b.log.Debug("sandbox started", "sandbox", box.id, "session", session, "took", time.Since(t0), "workspace", box.workspace)
	return box, nil
}

// adopt makes box one of the session's, watched until it ends by itself
// (its timeout, its PID 1's end); when the session is ending it is ended
// at once instead.
func (b *mcpBackend) adopt(box *mcpBox) error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		box.release(b.log)
		return errClosing
	}
	b.boxes[box.id] = box
	b.mu.Unlock()
	if !box.expires.IsZero() {
		box.timer = time.AfterFunc(time.Until(box.expires), func() { b.end(box, "its timeout ran out") })
	}
	go func() {
		select {
		case <-box.inst.Done():
			b.end(box, "its PID 1 ended")
		case <-box.ended:
		}
	}()
	return nil
}

// end ends box (why says what ended it) and forgets it.
func (b *mcpBackend) end(box *mcpBox, why string) {
	b.mu.Lock()
	if b.boxes[box.id] == box {
		delete(b.boxes, box.id)
	}
	if b.session == box {
		b.session = nil
	}
	b.mu.Unlock()
	b.fwd.CloseSandbox(box.id)
	b.execs.DropSandbox(mcpOwner, box.id)
	if box.release(b.log) {
		b.log.Debug("sandbox ended", "sandbox", box.id, "why", why)
	}
}

// release kills everything in the sandbox (S4) and releases what the
// host held for it: its proxy (its report lines written), its image, its
// own workspace. It reports whether this call did it.
func (box *mcpBox) release(log *slog.Logger) bool {
	did := false
	box.once.Do(func() {
		did = true
		if box.timer != nil {
			box.timer.Stop()
		}
		box.client.Close()
		if err := box.inst.Close(); err != nil {
			log.Warn("close sandbox", "sandbox", box.id, "err", err)
		}
		if box.review != nil {
			// What the session sandbox wrote, for the user to review.
			box.review.End([]string{"hutch mcp session " + box.id}, 0, box.stderr)
		}
		box.sb.Close()
		if box.tmp != "" {
			if err := os.RemoveAll(box.tmp); err != nil {
				log.Warn("remove the sandbox's workspace", "sandbox", box.id, "dir", box.tmp, "err", err)
			}
		}
		close(box.ended)
	})
	<-box.ended
	return did
}

func (box *mcpBox) describe() mcp.Sandbox {
	return mcp.Sandbox{
		ID: box.id, State: "running", Tier: box.tier, Image: box.image,
		Workspace: box.workspace, CreatedAt: box.created, ExpiresAt: box.expires,
	}
}

// lookup returns the running sandbox id.
func (b *mcpBackend) lookup(id string) (*mcpBox, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, errClosing
	}
	box := b.boxes[id]
	if box == nil {
		return nil, fmt.Errorf("no sandbox %.64q in this session (it ended: killed, timed out, or its last process exited; sandbox_list lists those running)", id)
	}
	return box, nil
}

// List lists the session's sandboxes, newest first.
func (b *mcpBackend) List(context.Context) ([]mcp.Sandbox, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]mcp.Sandbox, 0, len(b.boxes))
	for _, box := range b.boxes {
		out = append(out, box.describe())
	}
	slices.SortFunc(out, func(x, y mcp.Sandbox) int { return y.CreatedAt.Compare(x.CreatedAt) })
	return out, nil
}

// Get describes one of the session's sandboxes.
func (b *mcpBackend) Get(_ context.Context, id string) (mcp.Sandbox, error) {
	box, err := b.lookup(id)
	if err != nil {
		return mcp.Sandbox{}, err
	}
	return box.describe(), nil
}

// Kill ends one of the session's sandboxes. The session sandbox too: the
// next call that needs it starts a fresh one over the same workspace.
func (b *mcpBackend) Kill(_ context.Context, id string) error {
	box, err := b.lookup(id)
	if err != nil {
		return err
	}
	b.end(box, "sandbox_kill")
	return nil
}

// Agent is the client of the sandbox's agent.
func (b *mcpBackend) Agent(_ context.Context, id string) (*agent.Client, error) {
	box, err := b.lookup(id)
	if err != nil {
		return nil, err
	}
	select {
	case <-box.client.Done():
		return nil, fmt.Errorf("sandbox %s: its agent is gone: %v", id, box.client.Err())
	default:
	}
	return box.client, nil
}

// mcpInterpreters is the session's backend when the flags' image has
// Jupyter kernels: its sandboxes run the code interpreter, and its server
// has run_code.
type mcpInterpreters struct{ *mcpBackend }

var _ mcp.Interpreters = mcpInterpreters{}

// Interpreter is the client of sandbox id's code interpreter.
func (b mcpInterpreters) Interpreter(_ context.Context, id string) (*interp.Client, error) {
	box, err := b.lookup(id)
	if err != nil {
		return nil, err
	}
	if box.interp == nil {
		return nil, fmt.Errorf("sandbox %s: %w", id, daemon.ErrNoInterpreter)
	}
	return box.interp, nil
}

// kernels reports whether the flags' image holds Jupyter kernels (in the
// image store now: an image pulled at the first start is not looked at).
func (b *mcpBackend) kernels() bool {
	ref, ok := b.spec.Image()
	if !ok {
		return false
	}
	dir := cmp.Or(b.rf.StateDir, image.DefaultStateDir())
	st, err := image.Open(dir)
	if err != nil {
		return false
	}
	img, err := st.Get(ref)
	if err != nil {
		return false
	}
	layers, release, err := st.Stack(img)
	if err != nil {
		return false
	}
	defer release()
	return daemon.HasKernels(layers)
}

// PortURL is a loopback URL of the host that reaches port inside sandbox
// id, for as long as the sandbox runs.
func (b *mcpBackend) PortURL(_ context.Context, id string, port int) (string, error) {
	if _, err := b.lookup(id); err != nil {
		return "", err
	}
	return b.fwd.URL(id, port, func(ctx context.Context) (*agent.Client, error) { return b.Agent(ctx, id) })
}

// close ends the session: every sandbox and everything in it, the exec
// sessions, the forwards and links, the report.
func (b *mcpBackend) close() error {
	b.mu.Lock()
	b.closed = true
	boxes := make([]*mcpBox, 0, len(b.boxes))
	for _, box := range b.boxes {
		boxes = append(boxes, box)
	}
	b.boxes, b.session = map[string]*mcpBox{}, nil
	b.mu.Unlock()
	var wg sync.WaitGroup
	for _, box := range boxes {
		wg.Go(func() { b.end(box, "the session ended") })
	}
	wg.Wait()
	var errs []error
	if err := b.execs.Close(); err != nil {
		errs = append(errs, err)
	}
	b.fwd.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	_ = b.linkSrv.Shutdown(ctx)
	cancel()
	_ = b.linkSrv.Close()
	if err := b.closeReport(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// closeReport closes the shared report, saying whether writing it failed.
func (b *mcpBackend) closeReport() error {
	if b.report == nil {
		return nil
	}
	b.reportW.mu.Lock()
	err := b.reportW.err
	b.reportW.mu.Unlock()
	if cerr := b.report.Close(); err == nil {
		err = cerr
	}
	b.report = nil
	if err != nil {
		return fmt.Errorf("--report: %w", err)
	}
	return nil
}

// lockedWriter serializes the writes of the sandboxes' recorders to one
// report, each a whole line.
type lockedWriter struct {
	mu  sync.Mutex
	w   io.Writer
	err error
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n, err := l.w.Write(p)
	if err != nil && l.err == nil {
		l.err = err
	}
	return n, err
}

// beginReview returns the session's change set for a session sandbox of
// spec in review mode (nil otherwise): made, or --continue's opened, at
// the first start; each later session sandbox goes on in it (a fresh one
// when the last ended with nothing in it, and so was discarded).
func (b *mcpBackend) beginReview(spec policy.Spec) (*runner.Review, error) {
	b.mu.Lock()
	r := b.review
	b.mu.Unlock()
	if r != nil && !r.Discarded() {
		return r, r.Again()
	}
	r, err := b.rf.BeginReview(spec)
	if err != nil || r == nil {
		return nil, err
	}
	b.mu.Lock()
	b.review = r
	b.mu.Unlock()
	return r, nil
}
