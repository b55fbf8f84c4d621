package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/hutch-sandbox/hutch/internal/audit"
	"github.com/hutch-sandbox/hutch/internal/daemon"
	"github.com/hutch-sandbox/hutch/internal/forward"
	"github.com/hutch-sandbox/hutch/internal/image"
	"github.com/hutch-sandbox/hutch/internal/metrics"
	"github.com/hutch-sandbox/hutch/internal/store"
)

// Manager is what the API needs of the daemon. *daemon.Manager implements
// it; tests use fakes (see package apitest).
type Manager interface {
	daemon.Sandboxes
	// Emit records an event (such as daemon.EventExec or EventExit) in
	// the event log of tenant's sandbox id.
	Emit(tenant, id, typ string, data map[string]any)
	// Events returns the events of tenant's sandbox id after sequence
	// number since, then follows the new ones until ctx ends or the
	// sandbox ended (the channel is closed after its "ended" event).
	Events(ctx context.Context, tenant, id string, since int64) (<-chan daemon.Event, error)
	// Counts returns the number of sandboxes of all tenants in each of
	// daemon.CountedStates, for GET /metrics.
	Counts(ctx context.Context) (map[store.StateTier]int, error)
	// Images is the daemon's image store, which sandboxes start from.
	Images() *image.Store
}

var _ Manager = (*daemon.Manager)(nil)

// AdminTenant is the tenant of requests on the unix socket that carry no
// token.
const AdminTenant = store.SocketTenant

// Default limits.
const (
	// DefaultMaxUpload is the default of Config.MaxUpload: 1 GiB.
	DefaultMaxUpload = 1 << 30
	// DefaultMaxOutput is the default of Config.MaxOutput: 16 MiB.
	DefaultMaxOutput = 16 << 20
	// MaxJSONBody bounds every JSON request body: 1 MiB.
	MaxJSONBody = 1 << 20
	// OutputGrace is how long the daemon waits, once a command ended, for
	// more of its output before it stops waiting (a background process
	// may hold the output open).
	OutputGrace = 500 * time.Millisecond
)

// Config configures the API's handler.
type Config struct {
	// Log receives the handler's events; nil discards them.
	Log *slog.Logger
	// MaxUpload bounds the body of a file or archive upload (0:
	// DefaultMaxUpload).
	MaxUpload int64
	// MaxOutput bounds each output stream a command run to completion
	// returns (0: DefaultMaxOutput); the rest is read and dropped.
	MaxOutput int
	// Audit, when not nil, records every call that changes something and
	// every command run (see package audit). A failure to record is
	// logged; the call's answer was already sent.
	Audit *audit.Log
	// Metrics are more families GET /metrics writes for the operator:
	// those of the other front ends on the daemon's listeners (/mcp's).
	Metrics []metrics.Collector
}

// Validate checks the configuration.
func (c Config) Validate() error {
	if c.MaxUpload < 0 {
		return fmt.Errorf("api: negative upload limit %d", c.MaxUpload)
	}
	if c.MaxOutput < 0 {
		return fmt.Errorf("api: negative output limit %d", c.MaxOutput)
	}
	return nil
}

// handler is the API.
type handler struct {
	m      Manager
	log    *slog.Logger
	cfg    Config
	mux    *http.ServeMux
	routes []string // the patterns registered on mux, in order
	procs  *procTable
	met    *apiMetrics
}

// New returns the API's handler with the default limits.
func New(m Manager, log *slog.Logger) http.Handler {
	h, err := NewWithConfig(m, Config{Log: log})
	if err != nil {
		panic(err) // the default configuration is valid
	}
	return h
}

// NewWithConfig returns the API's handler.
func NewWithConfig(m Manager, cfg Config) (http.Handler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.MaxUpload == 0 {
		cfg.MaxUpload = DefaultMaxUpload
	}
	if cfg.MaxOutput == 0 {
		cfg.MaxOutput = DefaultMaxOutput
	}
	h := &handler{m: m, log: cfg.Log, cfg: cfg, mux: http.NewServeMux(), procs: newProcTable()}
	h.met = newAPIMetrics(m, cfg.Metrics)
	h.register()
	return h, nil
}

// route is one route of the API: what the audit log records of it, and
// its handler.
type route struct {
	audit.Route
	handle handlerFunc
}

// table is every route of the API, in the order registered. Each says
// whether it is audited (its audit action) or only reads
// (audit.ReadOnly); the OpenAPI document (openapi.json) lists the same
// routes, which a test checks.
func (h *handler) table() []route {
	const ro = audit.ReadOnly
	r := func(pattern, action string, f handlerFunc) route {
		return route{audit.Route{Pattern: pattern, Action: action}, f}
	}
	return []route{
		r("GET /v1/health", ro, h.health),
		r("GET /v1/openapi.json", ro, h.openAPI),
		r("GET /metrics", ro, h.metrics),
		r("POST /v1/tokens", "create_token", h.createToken),

		r("GET /v1/images", ro, h.listImages),
		r("DELETE /v1/images", "remove_image", h.removeImage),
		r("POST /v1/images/pull", "pull_image", h.pullImage),

		r("POST /v1/sandboxes", "create", h.create),
		r("GET /v1/sandboxes", ro, h.list),
		r("GET /v1/sandboxes/{id}", ro, h.get),
		r("DELETE /v1/sandboxes/{id}", "destroy", h.destroy),
		r("POST /v1/sandboxes/{id}/timeout", "extend", h.extend),
		r("POST /v1/sandboxes/{id}/pause", "pause", h.pause),
		r("POST /v1/sandboxes/{id}/resume", "resume", h.resume),
		r("GET /v1/sandboxes/{id}/events", ro, h.events),
		r("GET /v1/sandboxes/{id}/metrics", ro, h.usage),
		r("PUT /v1/sandboxes/{id}/network", "update_network", h.updateNetwork),
		r("POST /v1/sandboxes/{id}/snapshots", "snapshot", h.snapshot),
		r("POST /v1/sandboxes/{id}/fork", "fork", h.fork),
		r("GET /v1/sandboxes/{id}/diff", ro, h.diff),
		r("GET /v1/changes", ro, h.listChangeSets),
		r("GET /v1/changes/{cid}", ro, h.getChangeSet),
		r("GET /v1/changes/{cid}/diff", ro, h.changeSetDiff),
		r("POST /v1/changes/{cid}/apply", "apply_changes", h.applyChangeSet),
		r("DELETE /v1/changes/{cid}", "discard_changes", h.discardChangeSet),
		r("GET /v1/approvals", ro, h.listApprovals),
		r("GET /v1/approvals/{aid}", ro, h.getApproval),
		r("POST /v1/approvals/{aid}", "answer_approval", h.answerApproval),
		r("GET /v1/snapshots", ro, h.listSnapshots),
		r("GET /v1/snapshots/{sid}", ro, h.getSnapshot),
		r("GET /v1/snapshots/{sid}/image", ro, h.snapshotImage),
		r("DELETE /v1/snapshots/{sid}", "delete_snapshot", h.deleteSnapshot),

		r("POST /v1/sandboxes/{id}/exec", "exec", h.exec),
		r("GET /v1/sandboxes/{id}/processes", ro, h.processes),
		r("POST /v1/sandboxes/{id}/processes/{pid}/signal", "signal", h.signal),

		r("POST /v1/sandboxes/{id}/code", "run_code", h.runCode),
		r("GET /v1/sandboxes/{id}/code/contexts", ro, h.listCodeContexts),
		r("POST /v1/sandboxes/{id}/code/contexts", "create_code_context", h.createCodeContext),
		r("DELETE /v1/sandboxes/{id}/code/contexts/{ctx}", "remove_code_context", h.removeCodeContext),
		r("POST /v1/sandboxes/{id}/code/contexts/{ctx}/restart", "restart_code_context", h.restartCodeContext),

		r("GET /v1/sandboxes/{id}/files", ro, h.readFile),
		r("PUT /v1/sandboxes/{id}/files", "write_file", h.writeFile),
		r("DELETE /v1/sandboxes/{id}/files", "remove", h.remove),
		r("GET /v1/sandboxes/{id}/files/stat", ro, h.stat),
		r("GET /v1/sandboxes/{id}/files/list", ro, h.listDir),
		r("POST /v1/sandboxes/{id}/files/mkdir", "mkdir", h.mkdir),
		r("POST /v1/sandboxes/{id}/files/rename", "rename", h.rename),
		r("GET /v1/sandboxes/{id}/archive", ro, h.download),
		r("PUT /v1/sandboxes/{id}/archive", "upload", h.upload),
	}
}

// Routes returns every route of the API and what the audit log records of
// it, from the table the handler registers.
func Routes() []audit.Route {
	var out []audit.Route
	for _, r := range (&handler{}).table() {
		out = append(out, r.Route)
	}
	return out
}

// register registers every route of the table.
func (h *handler) register() {
	for _, r := range h.table() {
		h.handle(r.Route, r.handle)
	}
}

// handlerFunc is a route's handler: an error it returns, h.fail answers
// with. One that already answered returns nil.
type handlerFunc func(w http.ResponseWriter, r *http.Request) error

// handle registers f for rt, audited unless it only reads (and the API
// has an audit log).
func (h *handler) handle(rt audit.Route, f handlerFunc) {
	rt.Check()
	if rt.Action != audit.ReadOnly && h.cfg.Audit != nil {
		f = h.audited(rt.Action, f)
	}
	h.mux.HandleFunc(rt.Pattern, func(w http.ResponseWriter, r *http.Request) {
		if err := f(w, r); err != nil {
			h.fail(w, r, err)
		}
	})
	h.routes = append(h.routes, rt.Pattern)
}

// ServeHTTP authenticates the request and routes it.
// Every request is counted by route and status.
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, pattern := h.mux.Handler(r)
	sw := &statusWriter{ResponseWriter: w}
	var tenant string
	defer func() { h.met.request(tenant, pattern, sw.status()) }()
	w = sw
	tenant, err := h.authenticate(r)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	r = r.WithContext(context.WithValue(r.Context(), tenantKey{}, tenant))
	if pattern == "" {
		h.noRoute(w, r)
		return
	}
	h.mux.ServeHTTP(w, r)
}

// noRoute answers a request no pattern matches: 405 when the path exists
// for other methods, else 404.
func (h *handler) noRoute(w http.ResponseWriter, r *http.Request) {
	var allow []string
	for _, m := range []string{http.MethodGet, http.MethodPut, http.MethodPost, http.MethodDelete} {
		if m == r.Method {
			continue
		}
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, pattern := h.mux.Handler(probe); pattern != "" {
			allow = append(allow, m)
		}
	}
	if len(allow) > 0 {
		w.Header().Set("Allow", strings.Join(allow, ", "))
		h.fail(w, r, errorf(errMethod, "%s %s: method not allowed (allowed: %s)", r.Method, r.URL.Path, strings.Join(allow, ", ")))
		return
	}
	h.fail(w, r, errorf(daemon.ErrNotFound, "%s %s: no such route", r.Method, r.URL.Path))
}

// Origin is the kind of listener a request came through.
type Origin int

const (
	// OriginRemote is a TCP listener: every request needs a token. It is
	// the zero value, so a request whose origin nobody set needs one too.
	OriginRemote Origin = iota
	// OriginLocal is the unix socket: a request without a token acts as
	// AdminTenant.
	OriginLocal
)

type originKey struct{}

type tenantKey struct{}

// WithOrigin returns ctx marked with the origin of the requests that
// carry it; Serve marks every connection with its listener's.
func WithOrigin(ctx context.Context, o Origin) context.Context {
	return context.WithValue(ctx, originKey{}, o)
}

// OriginOf returns the origin ctx was marked with, OriginRemote if none.
func OriginOf(ctx context.Context) Origin {
	o, _ := ctx.Value(originKey{}).(Origin)
	return o
}

// authenticate returns the request's tenant.
func (h *handler) authenticate(r *http.Request) (string, error) {
	return Authenticate(h.m.Store(), r)
}

// Authenticate returns the tenant r acts as, as the API authenticates
// every request, for the front ends on the same listeners (/mcp):
// Authorization: Bearer TOKEN, a token of st (E2B-shaped ones too); on
// the unix socket (OriginLocal), no token at all is AdminTenant. Without
// an Authorization header, the web UI's cookie (UICookie) holds the
// token, taken only from a request of the UI's own pages (CheckUIRequest).
// Its error is a 401 for WriteError (403 for a cookie from elsewhere).
func Authenticate(st store.Backend, r *http.Request) (string, error) {
	authz := r.Header.Get("Authorization")
	if authz == "" {
		if c, err := r.Cookie(UICookie); err == nil {
			if err := CheckUIRequest(r); err != nil {
				return "", err
			}
			return TenantForToken(r.Context(), st, c.Value)
		}
		if OriginOf(r.Context()) == OriginLocal {
			return AdminTenant, nil
		}
		return "", errorf(errUnauthorized, "this listener needs a token: Authorization: Bearer TOKEN")
	}
	scheme, token, ok := strings.Cut(authz, " ")
	token = strings.TrimSpace(token)
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return "", errorf(errUnauthorized, "Authorization: want Bearer TOKEN")
	}
	return TenantForToken(r.Context(), st, token)
}

// TenantForToken returns the tenant of token, a token of st, as the API
// checks every token; its error is a 401 for WriteError when the token is
// not valid.
func TenantForToken(ctx context.Context, st store.Backend, token string) (string, error) {
	tenant, err := st.TenantForToken(ctx, token)
	if errors.Is(err, store.ErrNotFound) {
		return "", errorf(errUnauthorized, "the token is not valid")
	}
	if err != nil {
		return "", fmt.Errorf("check token: %w", err)
	}
	return tenant, nil
}

// tenantOf is the tenant ServeHTTP authenticated.
func tenantOf(r *http.Request) string {
	t, _ := r.Context().Value(tenantKey{}).(string)
	return t
}

func (h *handler) health(w http.ResponseWriter, r *http.Request) error {
	writeJSON(w, http.StatusOK, map[string]bool{"ok": true})
	return nil
}

// SandboxOf is the sandbox a request of the API names in its path
// (/v1/sandboxes/ID/...), "" for none.
var SandboxOf = forward.PathID("/v1/sandboxes/")
