package e2b

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httputil"
	"strings"
	"sync"
	"time"

	"github.com/hutch-sandbox/hutch/internal/agent"
	"github.com/hutch-sandbox/hutch/internal/api"
	"github.com/hutch-sandbox/hutch/internal/audit"
	"github.com/hutch-sandbox/hutch/internal/daemon"
	"github.com/hutch-sandbox/hutch/internal/envd"
	"github.com/hutch-sandbox/hutch/internal/forward"
	"github.com/hutch-sandbox/hutch/internal/store"
	"github.com/hutch-sandbox/hutch/internal/volume"
)

// EnvdVersion is the version of E2B's in-sandbox API (envd) that create and
// connect report; E2B's SDKs choose the protocol features they use by it.
const EnvdVersion = "0.6.4"

// Template is the one template hutch offers: the host's root, read-only,
// under the sandbox's writable layer, as E2B's "base".
const Template = "base"

// BaseImage is hutch's base image, Debian with what E2B's base has
// (scripts/base-image.sh builds it): hutch serve makes it Template when its
// image store holds it.
const BaseImage = "hutch.local/base:latest"

// CodeInterpreterTemplate is the template E2B's Code Interpreter SDK
// starts its sandboxes from.
const CodeInterpreterTemplate = "code-interpreter-v1"

// CodeInterpreterImage is hutch's code-interpreter image, the base image
// with Jupyter's Python kernel, matplotlib, pandas and TypeScript
// (scripts/base-image.sh --code-interpreter builds it): hutch serve makes
// it CodeInterpreterTemplate when its image store holds it.
const CodeInterpreterImage = "hutch.local/code-interpreter:latest"

// Manager is what the handler needs of the daemon; *daemon.Manager
// implements it.
type Manager = daemon.Sandboxes

// keepEnded is how long the record of a sandbox that ended is kept, so that
// envd requests for it are told it is gone rather than refused.
const keepEnded = 10 * time.Minute

// record is what the handler keeps of a sandbox in memory.
type record struct {
	tenant  string
	token   string // the envd access token
	traffic string // the traffic access token of its ports
	// network is what create asked for, for GET /sandboxes/{id}; nil for
	// a sandbox made through hutch's own API.
	network *networkBody
	// template is the template it was created from ("" for Template).
	template string
	// internet is allow_internet_access as applied.
	internet *bool
	// pauseOnTimeout: its timeout pauses it (autoPause); autoResume: a
	// request for it resumes it when paused (Wake).
	pauseOnTimeout, autoResume bool
	ended                      time.Time // when it was seen gone; zero while it lives
	// user and workdir are its template's setUser and setWorkdir where
	// they differ from E2B's defaults: envd's defaults in it
	// (envd.Sandbox.User, envd.Sandbox.Workdir).
	user, workdir string
}

// Handler serves E2B's REST API. Safe for concurrent use.
type Handler struct {
	m     Manager
	log   *slog.Logger
	mux   *http.ServeMux
	audit *audit.Log // nil: no auditing
	// noInternet: the daemon gives sandboxes no access to every host
	// (WithoutInternet).
	noInternet bool
	// templates are the templates besides the host's root: name → image.
	templates map[string]string
	// domain is E2B's domain the daemon serves (WithDomain), "" for none.
	domain string
	// publicTraffic: sandboxes' ports answer without the traffic access
	// token unless their create says allowPublicTraffic false.
	publicTraffic bool
	// ports proxies requests to sandboxes' ports (ports.go).
	ports *httputil.ReverseProxy
	// secrets are the tenants' E2B secrets (WithStateDir); nil: none.
	secrets *secretStore
	// vols are the daemon's volumes (WithVolumes); nil: none.
	vols *volume.Store

	// setup prepares a new sandbox for E2B's SDKs (setupUser; tests
	// replace it when their sandboxes are not isolated).
	setup func(ctx context.Context, tenant, id string) error

	// key derives the sandboxes' access tokens (WithKey, persist.go).
	key []byte

	mu      sync.Mutex
	records map[string]*record // by sandbox id
	// signScan is held by the one scan of every sandbox's token that a
	// signed URL naming no sandbox takes (resolveSigned): such scans run
	// one at a time, outside mu.
	signScan chan struct{}
	waking   map[string]*wakeCall // the Wakes in progress, by sandbox id

	// reg is the tenants' templates (WithTemplateDir).
	reg registry
}

// WithTemplates gives E2B's templates: each name (templateID) starts a
// sandbox from that image of the daemon's image store. A template named
// Template ("base") replaces the host's root for E2B's default; an
// unknown name is E2B's not-found error.
func WithTemplates(t map[string]string) Option {
	return func(h *Handler) { h.templates = maps.Clone(t) }
}

// templateOf is the template sandbox id was created from.
func (h *Handler) templateOf(id string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if rec := h.records[id]; rec != nil && rec.template != "" {
		return rec.template
	}
	return Template
}

// WithoutInternet makes the handler map E2B's default network (the
// internet) to none, and refuse requests for the internet, for a daemon
// whose sandboxes reach only the hosts they name (hutch serve
// --no-internet).
func WithoutInternet() Option {
	return func(h *Handler) { h.noInternet = true }
}

// New returns the handler of E2B's REST API over m, configured by opts
// (WithAudit, WithoutInternet).
func New(m Manager, log *slog.Logger, opts ...Option) *Handler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	h := &Handler{m: m, log: log, mux: http.NewServeMux(), records: map[string]*record{}, signScan: make(chan struct{}, 1)}
	for _, o := range opts {
		o(h)
	}
	if h.key == nil {
		var err error
		if h.key, err = NewKey(); err != nil {
			panic("e2b: no randomness for a key: " + err.Error())
		}
	}
	h.setup = h.setupUser
	h.ports = h.portProxy()
	if err := h.openTemplates(); err != nil {
		// Templates are refused (templatesOn) rather than the API.
		log.Error("e2b templates", "err", err)
		h.reg.dir = ""
	}
	h.register()
	return h
}

// route is one route of E2B's REST API: what the audit log records of
// it, and its handler.
type route struct {
	audit.Route
	handle handlerFunc
	// auth, when set, authenticates the request instead of its API key.
	auth func(*http.Request) (string, error)
}

// table is every route of the handler, in the order registered; each says
// whether it is audited (its action) or only reads (audit.ReadOnly).
// connect is audited as "resume" when it resumed the sandbox.
func (h *Handler) table() []route {
	const ro = audit.ReadOnly
	r := func(pattern, action string, f handlerFunc) route {
		return route{audit.Route{Pattern: pattern, Action: action}, f, nil}
	}
	v := func(pattern, action string, f handlerFunc) route {
		return route{audit.Route{Pattern: pattern, Action: action}, f, h.volumeAuth}
	}
	return []route{
		r("POST /sandboxes", "create", h.create),
		r("POST /v2/sandboxes", "create", h.create),
		r("GET /sandboxes", ro, h.listV1),
		r("GET /v2/sandboxes", ro, h.listV2),
		r("GET /sandboxes/{id}", ro, h.get),
		r("GET /sandboxes/metrics", ro, h.sandboxesMetrics),
		r("GET /sandboxes/{id}/metrics", ro, h.metrics),
		r("PUT /sandboxes/{id}/network", "update_network", h.updateNetwork),
		r("DELETE /sandboxes/{id}", "destroy", h.kill),
		r("POST /sandboxes/{id}/timeout", "extend", h.setTimeout),
		r("POST /sandboxes/{id}/refreshes", "extend", h.refresh),
		r("POST /sandboxes/{id}/pause", "pause", h.pause),
		r("POST /sandboxes/{id}/resume", "resume", h.resume),
		// The SDKs' connect: JavaScript 2.6 to 2.50 and Python send the
		// first, JavaScript 2.51 the second (older ones resume).
		r("POST /sandboxes/{id}/connect", "connect", h.connect),
		r("POST /v2/sandboxes/{id}/connect", "connect", h.connect),
		r("POST /sandboxes/{id}/snapshots", "snapshot", h.snapshot),
		r("GET /snapshots", ro, h.listSnapshots),
		r("DELETE /templates/{id}", "delete_snapshot", h.deleteTemplate),
		r("POST /sandboxes/{id}/fork", "fork", h.fork),
		// Templates (templates.go).
		r("POST /v3/templates", "template_build", h.requestBuild),
		r("GET /templates/{id}/files/{hash}", "template_upload_link", h.fileLink),
		{audit.Route{Pattern: "PUT /templates/{id}/files/{hash}", Action: "template_upload"}, h.upload, h.uploadTenant},
		r("POST /v2/templates/{id}/builds/{buildID}", "template_build_start", h.startBuild),
		r("GET /templates/{id}/builds/{buildID}/status", ro, h.buildStatus),
		r("GET /templates/{id}/builds/{buildID}/logs", ro, h.buildLogs),
		r("GET /templates", ro, h.listTemplates),
		r("GET /v2/templates", ro, h.listTemplates),
		r("GET /templates/{id}", ro, h.getTemplate),
		r("PATCH /templates/{id}", "template_update", h.updateTemplate),
		r("PATCH /v2/templates/{id}", "template_update", h.updateTemplate),
		r("GET /templates/aliases/{alias}", ro, h.alias),
		r("POST /templates/tags", "template_tag", h.assignTags),
		r("DELETE /templates/tags", "template_untag", h.removeTags),
		// GET /templates/{id}/tags, which ServeMux cannot tell from the
		// aliases' route otherwise (/templates/aliases/tags).
		r("GET /templates/{id}/{list}", ro, h.listTags),
		// Secrets (secrets.go).
		r("POST /secrets", "create_secret", h.createSecret),
		r("GET /secrets", ro, h.listSecrets),
		r("GET /secrets/{id}", ro, h.getSecret),
		r("POST /secrets/{id}", "update_secret", h.updateSecret),
		r("DELETE /secrets/{id}", "delete_secret", h.deleteSecret),
		// Volumes and their content (volumes.go); the content API is
		// authenticated by the volume's token.
		r("POST /volumes", "create_volume", h.createVolume),
		r("GET /volumes", ro, h.listVolumes),
		r("GET /volumes/{volumeID}", ro, h.getVolume),
		r("DELETE /volumes/{volumeID}", "delete_volume", h.deleteVolume),
		v("GET /volumecontent/{volumeID}/path", ro, h.statPath),
		v("PATCH /volumecontent/{volumeID}/path", "volume_change", h.changePath),
		v("DELETE /volumecontent/{volumeID}/path", "volume_remove", h.removePath),
		v("GET /volumecontent/{volumeID}/dir", ro, h.listDir),
		v("POST /volumecontent/{volumeID}/dir", "volume_mkdir", h.makeDir),
		v("GET /volumecontent/{volumeID}/file", ro, h.readFile),
		v("PUT /volumecontent/{volumeID}/file", "volume_write", h.writeFile),
	}
}

// Routes returns every route of E2B's REST API and what the audit log
// records of it, from the table the handler registers.
func Routes() []audit.Route {
	var out []audit.Route
	for _, r := range (&Handler{}).table() {
		out = append(out, r.Route)
	}
	return out
}

// register registers every route of the table.
func (h *Handler) register() {
	for _, r := range h.table() {
		h.handle(r)
	}
}

// handlerFunc is a route's handler, given the request's tenant: an error
// it returns, fail answers with.
type handlerFunc func(w http.ResponseWriter, r *http.Request, tenant string) error

// handle registers rt, behind authentication (its API key, or rt.auth);
// audited unless it only reads (and the handler has an audit log).
func (h *Handler) handle(rt route) {
	rt.Check()
	f, auth := rt.handle, rt.auth
	if rt.Action != audit.ReadOnly && h.audit != nil {
		f = h.audited(rt.Action, f)
	}
	if auth == nil {
		auth = h.authenticate
	}
	h.mux.HandleFunc(rt.Pattern, func(w http.ResponseWriter, r *http.Request) {
		tenant, err := auth(r)
		if err == nil {
			err = f(w, r, tenant)
		}
		if err != nil {
			h.fail(w, r, err)
		}
	})
}

// prefixes are the first segments of the paths of E2B's REST API (its
// versioned forms /v2/... and /v3/... whole: hutch's own API is /v1/...).
// envd's /health, which E2B's API has too, is envd's here.
var prefixes = []string{
	"/sandboxes", "/snapshots", "/templates", "/volumes", "/volumecontent", "/secrets",
	"/teams", "/nodes", "/admin", "/access-tokens", "/api-keys", "/v2", "/v3",
}

// Paths reports whether path belongs to E2B's REST API, which the handler
// answers (a route it does not serve with E2B's error, 501 or 404); hutch's
// own API has none of them.
func Paths(path string) bool {
	for _, p := range prefixes {
		if path == p || strings.HasPrefix(path, p+"/") {
			return true
		}
	}
	return false
}

// e2bRoutes are the routes of E2B's REST API (its OpenAPI description,
// and those the SDKs of the last year call) that hutch does not serve:
// asked for, they are answered 501 with their name; any other path under
// Paths is answered 404.
var e2bRoutes = []string{
	"GET /teams", "GET /teams/{teamID}/metrics", "GET /teams/{teamID}/metrics/max",
	"GET /sandboxes/{sandboxID}/logs", "GET /v2/sandboxes/{sandboxID}/logs",
	// The template routes of E2B's CLI's old builds (a Dockerfile built
	// by E2B's servers); the SDK's are served.
	"POST /v2/templates", "POST /templates", "POST /templates/{templateID}",
	"POST /templates/{templateID}/builds/{buildID}", "DELETE /templates/tags/{name}",
	"GET /nodes", "GET /nodes/{nodeID}", "POST /nodes/{nodeID}",
	"POST /admin/teams/{teamID}/sandboxes/kill", "GET /admin/sandboxes/running-counts",
	"POST /admin/teams/{teamID}/builds/cancel", "POST /admin/teams/{teamID}/api-keys",
	"DELETE /admin/teams/{teamID}/api-keys/{apiKeyID}",
	"POST /access-tokens", "DELETE /access-tokens/{accessTokenID}",
	"GET /api-keys", "POST /api-keys", "PATCH /api-keys/{apiKeyID}", "DELETE /api-keys/{apiKeyID}",
}

// ServeHTTP routes a request of E2B's REST API. A route of E2B's that
// hutch does not serve (e2bRoutes) is answered 501 with its name, any
// other path or method 404: never by hutch's own API, whose refusals (a
// token it wants) the SDKs would misread.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, pattern := h.mux.Handler(r)
	// A route without wildcards is more specific than one of hutch's
	// with them: DELETE /templates/tags is not DELETE /templates/{id}.
	if known := unserved(r.Method, r.URL.Path); known != "" && (pattern == "" || !strings.Contains(known, "{")) {
		h.fail(w, r, errorf(errNoRoute, "%s %s: E2B's %s is not supported by hutch", r.Method, r.URL.Path, known))
		return
	}
	if pattern == "" {
		h.fail(w, r, errorf(daemon.ErrNotFound, "%s %s: no such route of E2B's API", r.Method, r.URL.Path))
		return
	}
	h.mux.ServeHTTP(w, r)
}

// unserved returns the route of e2bRoutes that method and path ask for,
// "" if none. A wildcard ({name}) matches one non-empty segment.
func unserved(method, path string) string {
	segs := strings.Split(path, "/")
	for _, route := range e2bRoutes {
		m, p, _ := strings.Cut(route, " ")
		want := strings.Split(p, "/")
		if m != method || len(want) != len(segs) {
			continue
		}
		match := true
		for i, w := range want {
			if strings.HasPrefix(w, "{") {
				match = match && segs[i] != ""
			} else {
				match = match && segs[i] == w
			}
		}
		if match {
			return route
		}
	}
	return ""
}

// authenticate returns the tenant of the request's API key: X-API-Key (as
// E2B's SDKs send it) or Authorization: Bearer, a hutch token.
func (h *Handler) authenticate(r *http.Request) (string, error) {
	key := r.Header.Get("X-API-Key")
	if key == "" {
		if scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " "); ok && strings.EqualFold(scheme, "Bearer") {
			key = strings.TrimSpace(tok)
		}
	}
	if key == "" {
		return "", errorf(ErrUnauthenticated, "missing API key: send a hutch token (hutch token create --e2b) in X-API-Key")
	}
	tenant, err := h.m.Store().TenantForToken(r.Context(), key)
	if errors.Is(err, store.ErrNotFound) {
		return "", errorf(ErrUnauthenticated, "invalid API key")
	}
	if err != nil {
		return "", fmt.Errorf("check API key: %w", err)
	}
	if tenant == "" {
		// The manager reads an empty tenant as "any tenant"; no token
		// has one, and none may act as one.
		return "", errorf(ErrUnauthenticated, "invalid API key")
	}
	return tenant, nil
}

// accessTokenBytes is the size of an access token: 192 bits of an
// HMAC-SHA256 of the sandbox's id under the handler's key (persist.go).
const accessTokenBytes = 24

// noToken is what Resolve compares a token with when the sandbox has no
// record: as long as a real token, and never one (not hexadecimal).
var noToken = strings.Repeat("-", 2*accessTokenBytes)

// token returns the envd access token of tenant's sandbox id, making one
// (and its record) if it has none: a sandbox made through hutch's own API
// gets one when an E2B client connects to it. The record of another
// tenant's sandbox is never replaced: that sandbox is not found.
func (h *Handler) token(ctx context.Context, tenant, id string) (string, error) {
	h.load(ctx, id)
	h.mu.Lock()
	defer h.mu.Unlock()
	if rec := h.records[id]; rec != nil {
		if rec.tenant != tenant {
			return "", errorf(daemon.ErrNotFound, "sandbox %s: not found", id)
		}
		rec.ended = time.Time{}
		return rec.token, nil
	}
	rec := &record{tenant: tenant, token: h.derive("envd", id), traffic: h.derive("traffic", id)}
	h.records[id] = rec
	return rec.token, nil
}

// record returns a copy of the record of tenant's sandbox id, if any.
func (h *Handler) record(ctx context.Context, tenant, id string) (record, bool) {
	h.load(ctx, id)
	h.mu.Lock()
	defer h.mu.Unlock()
	rec := h.records[id]
	if rec == nil || rec.tenant != tenant {
		return record{}, false
	}
	return *rec, true
}

// ended notes that sandbox id is gone; its record is dropped keepEnded
// later.
func (h *Handler) ended(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if rec := h.records[id]; rec != nil && rec.ended.IsZero() {
		rec.ended = time.Now()
	}
}

// prune drops the records of sandboxes that ended more than keepEnded ago,
// and notes the end of those of tenant no longer in live (the ids of
// tenant's sandboxes that run or are paused).
func (h *Handler) prune(tenant string, live map[string]bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := time.Now()
	for id, rec := range h.records {
		if rec.tenant == tenant && !live[id] && rec.ended.IsZero() {
			rec.ended = now
		}
		if !rec.ended.IsZero() && now.Sub(rec.ended) > keepEnded {
			delete(h.records, id)
		}
	}
}

// Sandbox is a sandbox an envd request is for, as Resolve found it.
type Sandbox struct {
	// ID is the sandbox's id.
	ID string
	// Agent is the client of its agent. Resolve got it from the
	// manager, which recorded the request as activity in the sandbox.
	Agent *agent.Client

	audit         func(envd.Event) // see Envd
	signed        bool             // let in by a signed URL (envd.Sandbox.Signed)
	user, workdir string           // its template's defaults (record)
}

// Resolve returns the sandbox a request of E2B's in-sandbox API (envd) is
// for: the one named by its E2b-Sandbox-Id header, whose envd access token
// X-Access-Token must carry; or, for a request of /files without the
// header, the one whose token signed its URL (see signing.go). A paused
// sandbox that traffic may resume (Wake) is resumed first, unless the
// request is a health check. An error wraps ErrUnauthenticated (no or a
// wrong token), daemon.ErrNotFound (the sandbox is gone) or
// daemon.ErrConflict (it is paused or stopping).
func (h *Handler) Resolve(r *http.Request) (Sandbox, error) {
	id := r.Header.Get("E2b-Sandbox-Id")
	tok := r.Header.Get("X-Access-Token")
	if id == "" {
		// E2B's own routing names the sandbox in the host name
		// (PORT-ID.DOMAIN); older SDKs send only the token.
		id = sandboxOfHost(r.Host)
	}
	op := signedOperation(r)
	if tok == "" && op == "" {
		return Sandbox{}, errorf(ErrUnauthenticated, "missing X-Access-Token header (the envd access token of the sandbox)")
	}
	h.load(r.Context(), id)
	h.mu.Lock()
	var tenant string
	if tok == "" {
		// A signed URL of /files (see signing.go).
		sid, rec, err := h.resolveSigned(r, id, op)
		if err != nil {
			h.mu.Unlock()
			return Sandbox{}, err
		}
		id, tenant = sid, rec.tenant
	} else {
		if id == "" {
			id = h.sandboxOfToken(tok)
		}
		if id == "" {
			h.mu.Unlock()
			return Sandbox{}, errorf(ErrUnauthenticated, "missing E2b-Sandbox-Id header, and the access token names no sandbox")
		}
		rec := h.records[id]
		want := noToken
		if rec != nil {
			want = rec.token
		}
		// Compared in constant time, and compared even for an unknown
		// sandbox, so that timing tells neither the token nor whether
		// the sandbox exists.
		ok := subtle.ConstantTimeCompare([]byte(want), []byte(tok)) == 1 && rec != nil
		if !ok {
			h.mu.Unlock()
			return Sandbox{}, errorf(ErrUnauthenticated, "sandbox %s: invalid envd access token", id)
		}
		tenant = rec.tenant
	}
	var user, workdir string
	if rec := h.records[id]; rec != nil {
		user, workdir = rec.user, rec.workdir
	}
	h.mu.Unlock()
	c, err := h.m.Agent(r.Context(), tenant, id)
	if errors.Is(err, daemon.ErrConflict) && r.URL.Path != "/health" {
		// Paused, perhaps: a sandbox made with autoResume wakes up for
		// the request (a health check only asks, and wakes nothing).
		if werr := h.Wake(r.Context(), tenant, id); werr == nil {
			c, err = h.m.Agent(r.Context(), tenant, id)
		} else if !errors.Is(werr, ErrNoAutoResume) {
			err = werr
		}
	}
	if err != nil {
		if errors.Is(err, daemon.ErrNotFound) {
			h.ended(id)
		}
		return Sandbox{}, err
	}
	return Sandbox{ID: id, Agent: c, audit: h.envdAuditor(tenant, id), signed: tok == "", user: user, workdir: workdir}, nil
}

// SandboxOf is the sandbox a request of E2B's names, "" for none: its
// E2b-Sandbox-Id header, the host name PORT-ID.DOMAIN, or the path of a
// sandbox's REST routes (/sandboxes/ID/..., /v2/sandboxes/ID/...).
func SandboxOf(r *http.Request) string {
	if id := r.Header.Get("E2b-Sandbox-Id"); id != "" {
		return id
	}
	if id := sandboxOfHost(normalHost(r.Host)); id != "" {
		return id
	}
	return sandboxPath(r)
}

// sandboxPath is the sandbox of E2B's REST routes of one sandbox.
var sandboxPath = forward.PathID("/sandboxes/", "/v2/sandboxes/")

// sandboxOfHost is the sandbox id in a host name of E2B's form
// PORT-ID.DOMAIN, "" for any other host.
func sandboxOfHost(host string) string {
	label, _, ok := strings.Cut(host, ".")
	if !ok {
		return ""
	}
	port, id, ok := strings.Cut(label, "-")
	if !ok || port == "" || strings.Trim(port, "0123456789") != "" || id == "" {
		return ""
	}
	return id
}

// sandboxOfToken is the sandbox whose envd access token tok is, "" if
// none; every token is compared, in constant time. Under h.mu.
func (h *Handler) sandboxOfToken(tok string) string {
	found := ""
	for id, rec := range h.records {
		if subtle.ConstantTimeCompare([]byte(rec.token), []byte(tok)) == 1 {
			found = id
		}
	}
	return found
}

type resolvedKey struct{}

// Resolved returns the sandbox Mount resolved for an envd request.
func Resolved(r *http.Request) (Sandbox, bool) {
	s, ok := r.Context().Value(resolvedKey{}).(Sandbox)
	return s, ok
}

// Mount returns a handler that serves E2B's REST paths (Paths) with h, the
// paths for which isEnvd is true with envd once Resolve found their sandbox
// (which Resolved then returns), and every other request with next
// (hutch's own API). A nil isEnvd serves no envd paths. An envd request
// without a valid access token is answered 401; one for a sandbox that is
// gone or paused 502, as E2B's proxy answers (its SDKs read that as "not
// running").
func (h *Handler) Mount(next http.Handler, isEnvd func(string) bool, envd http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case Paths(r.URL.Path):
			api.Counted("e2b", h, w, r)
		case isEnvd != nil && isEnvd(r.URL.Path):
			api.Counted("envd", h.resolving(envd), w, r)
		default:
			next.ServeHTTP(w, r)
		}
	})
}

// resolving serves a request of envd with envd once Resolve found its
// sandbox, and refuses it otherwise.
func (h *Handler) resolving(envd http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, err := h.Resolve(r)
		if err != nil {
			h.refuseEnvd(w, r, err)
			return
		}
		envd.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), resolvedKey{}, s)))
	})
}

// refuseEnvd answers an envd request whose sandbox Resolve refused.
func (h *Handler) refuseEnvd(w http.ResponseWriter, r *http.Request, err error) {
	status := classify(err)
	if status == http.StatusNotFound || status == http.StatusConflict {
		// E2B's proxy answers 502 for a sandbox that does not run.
		status = http.StatusBadGateway
	}
	msg := err.Error()
	if status == http.StatusInternalServerError {
		h.log.Error("envd request failed", "path", r.URL.Path, "status", status, "err", err)
		msg = internalMessage
	} else {
		h.log.Debug("envd request refused", "path", r.URL.Path, "status", status, "err", err)
	}
	writeJSON(w, status, Error{Code: status, Message: msg})
}
