package mcphttp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/hutch-sandbox/hutch/internal/agent"
	"github.com/hutch-sandbox/hutch/internal/api"
	"github.com/hutch-sandbox/hutch/internal/audit"
	"github.com/hutch-sandbox/hutch/internal/daemon"
	"github.com/hutch-sandbox/hutch/internal/mcp"
	"github.com/hutch-sandbox/hutch/internal/metrics"
	"github.com/hutch-sandbox/hutch/internal/portfwd"
)

// The paths the handler serves.
const (
	// Path is MCP with sessions.
	Path = "/mcp"
	// StatelessPath is MCP without sessions.
	StatelessPath = "/mcp/stateless"
	// LinksPath is the prefix of the links tool results carry.
	LinksPath = "/mcp/links/"
	// PortsPath is the prefix of the URLs port_url gives: servers
	// listening inside sandboxes, each behind a capability URL.
	PortsPath = "/mcp/ports/"
)

// Defaults of Config.
const (
	// DefaultMaxBody bounds a request's body: a 10 MiB file_write in
	// base64 (13.4 MiB) and its JSON fit.
	DefaultMaxBody = 32 << 20
	// DefaultSessionTimeout is how long a session may stay idle before
	// it ends.
	DefaultSessionTimeout = 30 * time.Minute
	// DefaultMaxSessions bounds the sessions a tenant has open at once.
	DefaultMaxSessions = 64
	// DefaultMaxLogs bounds the bytes of the exec logs of all tenants
	// together (hutch serve --mcp-max-logs); each tenant's are bounded by
	// mcp.MaxLogBytes too.
	DefaultMaxLogs = 4 << 30
	// LogDir is the directory of the state directory where exec logs
	// are kept.
	LogDir = "mcp-logs"
)

// maxServers is how many MCP servers a tenant keeps with no session
// (one per listener kind and Host its requests named, for their links):
// past it, those without a session are dropped.
const maxServers = 8

// maxBodies is how many bodies of MaxBody a tenant's requests may have
// at once (smaller ones count by their size).
const maxBodies = 2

// ToolCalls counts the tool calls on /mcp by tool and outcome, for the
// operator's GET /metrics (api.Config.Metrics).
var ToolCalls = metrics.NewCounter("hutch_mcp_tool_calls_total",
	"MCP tool calls on /mcp by tool and outcome (ok, or error: a tool error the model was shown).", "tool", "outcome")

// Config configures a Handler.
type Config struct {
	// Sandboxes is the daemon. Required.
	Sandboxes daemon.Sandboxes
	// Templates are the daemon's templates, which sandbox_create's image
	// may name.
	Templates map[string]string
	// Version is hutch's, as initialize reports it.
	Version string
	// PublicURL, when set, is the daemon's URL as clients reach it
	// (http[s]://HOST[:PORT], e.g. behind a proxy): links are made under
	// it rather than under the Host of each request, and its host is
	// allowed as AllowedHosts are.
	PublicURL string
	// AllowedHosts are the names (or addresses) besides the listener's
	// own address that a request on a TCP listener may give as its Host,
	// and an Origin may have.
	AllowedHosts []string
	// MaxBody bounds a request's body (DefaultMaxBody when zero).
	MaxBody int64
	// SessionTimeout ends a session idle that long
	// (DefaultSessionTimeout when zero).
	SessionTimeout time.Duration
	// MaxSessions bounds the sessions of a tenant (DefaultMaxSessions
	// when zero).
	MaxSessions int
	// Logs is where the tenants' exec logs are kept on the host, and
	// how much they may take together; nil: each tenant's table has a
	// space of its own in the host's temporary directory.
	Logs *mcp.LogSpace
	// Audit, when not nil, records every tool call.
	Audit *audit.Log
	// Log receives the handler's events; nil discards them.
	Log *slog.Logger
}

// Handler serves MCP at Path, StatelessPath and LinksPath. Safe for
// concurrent use.
type Handler struct {
	cfg       Config
	log       *slog.Logger
	links     *mcp.Links
	ports     *portfwd.Handler
	public    string // PublicURL without a trailing "/"
	allowed   api.Hosts
	stateful  http.Handler
	stateless http.Handler

	mu      sync.Mutex
	tenants map[string]*tenant
}

// tenant is what the handler keeps of a tenant.
type tenant struct {
	// execs are its commands left running, shared by all its servers.
	execs *mcp.ExecTable
	// servers are its MCP servers.
	servers map[serverKey]*sdk.Server
	// sessions are its initialized sessions, on whichever server (one
	// dropped from servers goes on serving its sessions), until they end.
	sessions map[*sdk.ServerSession]bool
	// starting is how many of its requests that may start a session
	// (a POST without one) are being served: counted with sessions, so
	// that several at once cannot pass MaxSessions together.
	starting int
	// bodies is the bytes of the bodies of its requests being served
	// (what their Content-Length announces), which the SDK holds in
	// memory, decoded more than once.
	bodies int64
}

// serverKey tells a tenant's servers apart: the listener kind (the
// operator's rights come with the unix socket) and where their links
// point.
type serverKey struct {
	operator bool
	linkBase string
}

// caller is who a request comes from.
type caller struct {
	tenant string
	// operator: the request came through the unix socket, whose callers
	// may ask for what only the machine's operator may (as hutch's API
	// allows them).
	operator bool
}

// userID is what a session is bound to: the tenant, and the listener
// kind, since a session made on the socket has the operator's rights.
func (c caller) userID() string {
	if c.operator {
		return c.tenant + " (unix socket)"
	}
	return c.tenant
}

type callerKey struct{}

func callerOf(r *http.Request) (caller, bool) {
	c, ok := r.Context().Value(callerKey{}).(caller)
	return c, ok
}

// New returns the handler.
func New(cfg Config) (*Handler, error) {
	if cfg.Sandboxes == nil {
		return nil, errors.New("mcphttp: no daemon")
	}
	if cfg.MaxBody < 0 || cfg.SessionTimeout < 0 || cfg.MaxSessions < 0 {
		return nil, errors.New("mcphttp: negative limit")
	}
	if cfg.MaxBody == 0 {
		cfg.MaxBody = DefaultMaxBody
	}
	if cfg.SessionTimeout == 0 {
		cfg.SessionTimeout = DefaultSessionTimeout
	}
	if cfg.MaxSessions == 0 {
		cfg.MaxSessions = DefaultMaxSessions
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	allowed, err := AllowedHosts(cfg.AllowedHosts, cfg.PublicURL)
	if err != nil {
		return nil, err
	}
	h := &Handler{cfg: cfg, log: cfg.Log, links: mcp.NewLinks(), ports: portfwd.NewHandler(), allowed: allowed, tenants: map[string]*tenant{}}
	if cfg.PublicURL != "" {
		u, _ := ParsePublicURL(cfg.PublicURL)
		h.public = strings.TrimSuffix(u.String(), "/")
	}
	h.stateful = auth.RequireBearerToken(bindSession, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})(
		sdk.NewStreamableHTTPHandler(h.server, &sdk.StreamableHTTPOptions{
			Logger:              cfg.Log,
			SessionTimeout:      cfg.SessionTimeout,
			MaxRequestBodyBytes: cfg.MaxBody,
		}))
	h.stateless = sdk.NewStreamableHTTPHandler(h.server, &sdk.StreamableHTTPOptions{
		Stateless:                    true,
		Logger:                       cfg.Log,
		MaxRequestBodyBytes:          cfg.MaxBody,
		PropagateRequestCancellation: true,
	})
	return h, nil
}

// CheckHost checks a name of --mcp-allowed-host: a host name or an IP
// address, without a scheme, port or path. It returns it as the handler
// compares it.
func CheckHost(s string) (string, error) {
	name := strings.TrimSuffix(strings.ToLower(s), ".")
	if ip, err := netip.ParseAddr(strings.Trim(name, "[]")); err == nil {
		return ip.String(), nil
	}
	ok := name != "" && len(name) <= 253
	for label := range strings.SplitSeq(name, ".") {
		ok = ok && label != "" && len(label) <= 63 && strings.Trim(label, "abcdefghijklmnopqrstuvwxyz0123456789-_") == ""
	}
	if !ok {
		return "", fmt.Errorf("--mcp-allowed-host %q: want a host name or an IP address, without a scheme or a port", s)
	}
	return name, nil
}

// AllowedHosts are the names a request on a TCP listener may give as its
// Host, besides the address it reached: names (--mcp-allowed-host, each
// checked by CheckHost) and the host of publicURL (--mcp-public-url,
// checked by ParsePublicURL), if not empty. The web UI answers them too.
func AllowedHosts(names []string, publicURL string) (api.Hosts, error) {
	hosts := api.Hosts{}
	for _, a := range names {
		name, err := CheckHost(a)
		if err != nil {
			return nil, err
		}
		hosts[name] = true
	}
	if publicURL != "" {
		u, err := ParsePublicURL(publicURL)
		if err != nil {
			return nil, err
		}
		hosts[api.HostName(u.Host)] = true
	}
	return hosts, nil
}

// ParsePublicURL checks a --mcp-public-url: http or https, a host, no
// query, fragment or user.
func ParsePublicURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" || (u.Path != "" && u.Path != "/") {
		return nil, fmt.Errorf("--mcp-public-url %q: want http[s]://HOST[:PORT], the daemon's URL as clients reach it", s)
	}
	return u, nil
}

// Paths reports whether path is the handler's: Path and everything under
// it.
func Paths(path string) bool {
	return path == Path || strings.HasPrefix(path, Path+"/")
}

// Mount returns a handler that serves the handler's paths and passes
// every other request to next.
func (h *Handler) Mount(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if Paths(r.URL.Path) {
			front := "mcp"
			if strings.HasPrefix(r.URL.Path, LinksPath) {
				front = "mcp_links"
			} else if strings.HasPrefix(r.URL.Path, PortsPath) {
				front = "mcp_ports"
			}
			api.Counted(front, h, w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// ServeHTTP serves a link, or checks, authenticates and serves an MCP
// request.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	if strings.HasPrefix(p, LinksPath) {
		// The token in the path is the capability; the links handler
		// serves nothing else.
		h.links.ServeHTTP(w, r)
		return
	}
	if strings.HasPrefix(p, PortsPath) {
		// So are a port URL's; the sandbox's server answers.
		http.StripPrefix(strings.TrimSuffix(PortsPath, "/"), h.ports).ServeHTTP(w, r)
		return
	}
	if p != Path && p != StatelessPath {
		h.fail(w, r, api.Errorf(daemon.ErrNotFound, "%s %s: no such route (MCP is at %s, and at %s without sessions)", r.Method, p, Path, StatelessPath))
		return
	}
	if err := h.allowed.CheckHost(r); err != nil {
		h.fail(w, r, err)
		return
	}
	if err := h.allowed.CheckOrigin(r); err != nil {
		h.fail(w, r, err)
		return
	}
	name, err := api.Authenticate(h.cfg.Sandboxes.Store(), r)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	c := caller{tenant: name, operator: api.OriginOf(r.Context()) == api.OriginLocal}
	r = r.WithContext(context.WithValue(r.Context(), callerKey{}, c))
	release, err := h.admitBody(c.tenant, r)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	// The body stops counting once it is read (or refused), not when
	// the answer is done: a client's next request must not find it still
	// counted.
	once := sync.OnceFunc(release)
	defer once()
	r.Body = &countedBody{ReadCloser: r.Body, done: once}
	if p == StatelessPath {
		h.stateless.ServeHTTP(w, r)
		return
	}
	if r.Method == http.MethodPost && r.Header.Get("Mcp-Session-Id") == "" {
		slot, n := h.startSession(c.tenant)
		if slot == nil {
			h.fail(w, r, api.Errorf(daemon.ErrQuota, "tenant %s has %d MCP sessions open or starting, the most it may: end one (DELETE %s with its Mcp-Session-Id) or let one idle out (%s)", c.tenant, n, Path, h.cfg.SessionTimeout))
			return
		}
		// Not counted past the answer's start: a client that has it may
		// start the next session at once.
		end := sync.OnceFunc(func() { h.endStart(slot) })
		defer end()
		w = &answerStart{ResponseWriter: w, start: end}
		r = r.WithContext(context.WithValue(r.Context(), startKey{}, slot))
	}
	if r.Header.Get("Authorization") == "" {
		// The operator on the socket, without a token: the SDK binds a
		// session to the caller bindSession names only for a request
		// with a bearer token, whose value it does not read again.
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer unix-socket")
	}
	h.stateful.ServeHTTP(w, r)
}

// admitBody counts the body of r, a request of tenant, among the
// tenant's bodies being served, unless they would pass maxBodies (then
// the request is refused: a tenant's concurrent requests of MaxBody would
// hold memory without bound). One request is always admitted. release
// ends the count.
func (h *Handler) admitBody(tenant string, r *http.Request) (release func(), err error) {
	n := r.ContentLength
	if n < 0 || n > h.cfg.MaxBody {
		n = h.cfg.MaxBody // read up to it, or refused past it
	}
	if n == 0 {
		return func() {}, nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	t := h.tenantLocked(tenant)
	if limit := maxBodies * h.cfg.MaxBody; t.bodies > 0 && t.bodies+n > limit {
		return nil, api.Errorf(daemon.ErrQuota, "tenant %s has %d bytes of requests being served, and this one has %d: at most %d at once (hutch serve --mcp-max-body times %d); send it when one ended", tenant, t.bodies, n, limit, maxBodies)
	}
	t.bodies += n
	return func() {
		h.mu.Lock()
		t.bodies -= n
		h.mu.Unlock()
	}, nil
}

// answerStart calls start before the answer's first byte or header goes
// out.
type answerStart struct {
	http.ResponseWriter
	start func()
}

func (a *answerStart) WriteHeader(code int) {
	a.start()
	a.ResponseWriter.WriteHeader(code)
}

func (a *answerStart) Write(p []byte) (int, error) {
	a.start()
	return a.ResponseWriter.Write(p)
}

// Unwrap is for http.ResponseController (the streams' flushes).
func (a *answerStart) Unwrap() http.ResponseWriter { return a.ResponseWriter }

// countedBody is a request's body that calls done once it has been read
// to its end, failed, or been closed.
type countedBody struct {
	io.ReadCloser
	done func()
}

func (b *countedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		b.done()
	}
	return n, err
}

func (b *countedBody) Close() error {
	b.done()
	return b.ReadCloser.Close()
}

// bindSession names the caller ServeHTTP authenticated as the user of the
// request, to the SDK, which binds a new session to it and refuses the
// session's requests from any other (403).
func bindSession(_ context.Context, _ string, r *http.Request) (*auth.TokenInfo, error) {
	c, ok := callerOf(r)
	if !ok {
		return nil, auth.ErrInvalidToken
	}
	return &auth.TokenInfo{UserID: c.userID()}, nil
}

// fail answers as hutch's API does.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	api.WriteError(w, r, h.log, err)
}

// linkBase is where the links published for r point: under PublicURL, or
// under the scheme and Host r came with.
func (h *Handler) linkBase(r *http.Request) string {
	if h.public != "" {
		return h.public + LinksPath
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host + LinksPath
}

// server is the MCP server of the request's caller (nil, which the SDK
// answers 400, for a request ServeHTTP did not authenticate).
func (h *Handler) server(r *http.Request) *sdk.Server {
	c, ok := callerOf(r)
	if !ok {
		return nil
	}
	key := serverKey{operator: c.operator, linkBase: h.linkBase(r)}
	h.mu.Lock()
	defer h.mu.Unlock()
	t := h.tenantLocked(c.tenant)
	if s := t.servers[key]; s != nil {
		return s
	}
	if len(t.servers) >= maxServers {
		for k, s := range t.servers {
			if countSessions(s) == 0 {
				delete(t.servers, k)
			}
		}
	}
	s := mcp.NewServer(mcp.Options{
		Name:    "hutch",
		Version: h.cfg.Version,
		Backend: &DaemonBackend{
			Sandboxes: h.cfg.Sandboxes,
			Tenant:    c.tenant,
			Operator:  c.operator,
			Templates: h.cfg.Templates,
			Ports:     h.portURL(c.tenant, strings.TrimSuffix(key.linkBase, LinksPath)+PortsPath),
			Killed:    h.ports.Forget,
		},
		Owner:    c.tenant,
		Execs:    t.execs,
		Links:    h.links,
		LinkBase: key.linkBase,
		Audit:    h.recorder(c.tenant),
		Log:      slog.New(quiet{h.log.Handler()}).With("tenant", c.tenant),
	})
	s.AddReceivingMiddleware(h.count(t))
	t.servers[key] = s
	return s
}

// count is a middleware that counts every session that initialize
// initialized among t's sessions, until it ends.
func (h *Handler) count(t *tenant) sdk.Middleware {
	return func(next sdk.MethodHandler) sdk.MethodHandler {
		return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
			res, err := next(ctx, method, req)
			ss, ok := req.GetSession().(*sdk.ServerSession)
			if method != "initialize" || err != nil || !ok {
				return res, err
			}
			h.mu.Lock()
			defer h.mu.Unlock()
			if slot, ok := ctx.Value(startKey{}).(*startSlot); ok {
				slot.releaseLocked() // counted as the session below instead
			}
			if !t.sessions[ss] {
				t.sessions[ss] = true
				go func() {
					_ = ss.Wait()
					h.mu.Lock()
					delete(t.sessions, ss)
					h.mu.Unlock()
				}()
			}
			return res, err
		}
	}
}

// tenantLocked is what the handler keeps of tenant name, made on first
// use; h.mu is held.
func (h *Handler) tenantLocked(name string) *tenant {
	t := h.tenants[name]
	if t == nil {
		t = &tenant{execs: mcp.NewExecTable(h.cfg.Logs), servers: map[serverKey]*sdk.Server{}, sessions: map[*sdk.ServerSession]bool{}}
		h.tenants[name] = t
	}
	return t
}

// startKey is the context key of a request's start slot.
type startKey struct{}

// startSlot is a request of a tenant's that may start a session, counted
// among its sessions (tenant.starting) until the session it made is
// counted instead (count, in the same step) or the request ends.
type startSlot struct {
	t    *tenant
	done bool
}

// releaseLocked stops counting s; h.mu is held.
func (s *startSlot) releaseLocked() {
	if !s.done {
		s.done = true
		s.t.starting--
	}
}

// startSession counts a request of tenant that may start a session among
// its sessions, unless they are MaxSessions already (slot is then nil; n
// is how many). The count moves to the session when initialize made one
// (count), so that neither a concurrent start passes the bound nor the
// next one after it is refused while this request is finishing; endStart
// ends it otherwise.
func (h *Handler) startSession(tenant string) (slot *startSlot, n int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	t := h.tenantLocked(tenant)
	if n = len(t.sessions) + t.starting; n >= h.cfg.MaxSessions {
		return nil, n
	}
	t.starting++
	return &startSlot{t: t}, n
}

// endStart stops counting slot, if the session it made does not count
// already.
func (h *Handler) endStart(slot *startSlot) {
	h.mu.Lock()
	slot.releaseLocked()
	h.mu.Unlock()
}

// sessions is how many sessions tenant name has open (and, while their
// requests last, stateless ones that an initialize began): those that a
// request without one made and that end with it (a probe of the newest
// revision, a refused body) are not.
func (h *Handler) sessions(name string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	if t := h.tenants[name]; t != nil {
		return len(t.sessions)
	}
	return 0
}

// countSessions counts the sessions of s that were initialized.
func countSessions(s *sdk.Server) int {
	n := 0
	for ss := range s.Sessions() {
		if ss.InitializeParams() != nil {
			n++
		}
	}
	return n
}

// Close ends every session (their streams end; commands they left running
// end with their sandboxes).
func (h *Handler) Close() {
	h.mu.Lock()
	var servers []*sdk.Server
	var sessions []*sdk.ServerSession
	for _, t := range h.tenants {
		servers = slices.AppendSeq(servers, maps.Values(t.servers))
		sessions = slices.AppendSeq(sessions, maps.Keys(t.sessions))
	}
	h.mu.Unlock()
	for _, s := range servers {
		sessions = slices.AppendSeq(sessions, s.Sessions())
	}
	for _, ss := range sessions {
		_ = ss.Close()
	}
	h.ports.Close()
}

// recorder returns the audit hook of tenant's servers: every tool call is
// counted (ToolCalls) and recorded in the audit log as an mcp_call.
func (h *Handler) recorder(tenant string) func(mcp.Call) {
	return func(c mcp.Call) {
		outcome, code := "ok", ""
		if c.Err != nil {
			outcome, code = "error", api.ErrorCode(c.Err)
			if code == api.CodeInternal {
				code = "tool_error"
			}
		}
		label := c.Tool
		if c.Unknown {
			// The caller chose the name: one series for them all.
			label = "unknown"
		}
		ToolCalls.With(label, outcome).Inc()
		if h.cfg.Audit == nil {
			return
		}
		e := audit.Entry{
			Time: time.Now().Add(-c.Duration), Tenant: tenant, Action: "mcp_call", Tool: c.Tool, Sandbox: c.Sandbox,
			Command: c.Command, Paths: c.Paths,
			DurationMS: c.Duration.Milliseconds(), BytesIn: int64(c.ArgBytes), Error: code,
		}
		if err := h.cfg.Audit.Append(e); err != nil {
			h.log.Error("audit log", "action", e.Action, "tool", c.Tool, "sandbox", c.Sandbox, "err", err)
		}
	}
}

// quiet logs what is below a warning at debug level: the SDK's servers
// log every session's start and end (for /mcp/stateless, every request's)
// as information, which only --debug wants.
type quiet struct{ slog.Handler }

// Enabled reports whether the record would be logged at its new level.
func (q quiet) Enabled(ctx context.Context, l slog.Level) bool {
	return q.Handler.Enabled(ctx, demote(l))
}

// Handle logs r at its new level.
func (q quiet) Handle(ctx context.Context, r slog.Record) error {
	r.Level = demote(r.Level)
	return q.Handler.Handle(ctx, r)
}

// WithAttrs is the handler's, quiet.
func (q quiet) WithAttrs(as []slog.Attr) slog.Handler { return quiet{q.Handler.WithAttrs(as)} }

// WithGroup is the handler's, quiet.
func (q quiet) WithGroup(name string) slog.Handler { return quiet{q.Handler.WithGroup(name)} }

func demote(l slog.Level) slog.Level {
	if l < slog.LevelWarn {
		return min(l, slog.LevelDebug)
	}
	return l
}

// portURL is port_url for tenant: a capability URL under base for a port
// of one of its sandboxes, which ends with the sandbox (killed through
// MCP, or at the expiry it had when the URL was made; a sandbox extended
// since gets a new URL from the next call). Each connection reaches the
// port through the sandbox's agent, looked up as tenant's.
func (h *Handler) portURL(tenant, base string) func(ctx context.Context, id string, port int) (string, error) {
	return func(ctx context.Context, id string, port int) (string, error) {
		info, err := h.cfg.Sandboxes.Get(ctx, tenant, id)
		if err != nil {
			return "", err
		}
		agentOf := func(ctx context.Context) (*agent.Client, error) { return h.cfg.Sandboxes.Agent(ctx, tenant, id) }
		return h.ports.URLUntil(base, id, port, portfwd.Dialer(agentOf, port), info.ExpiresAt)
	}
}
