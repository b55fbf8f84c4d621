package envd

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hutch-sandbox/hutch/internal/agent"
	"github.com/hutch-sandbox/hutch/internal/audit"
)

// Sandbox is what envd needs of the sandbox a request is for.
type Sandbox struct {
	// ID is the sandbox's id.
	ID string
	// Agent is the client of the sandbox's agent.
	Agent *agent.Client
	// Touch records activity in the sandbox; it may be nil.
	Touch func()
	// Audit, when not nil, receives every call that changes something
	// in the sandbox once it was answered, and every command started in
	// it once the command ended (see Event). It is called from the
	// request's goroutine or, for a command, from the one that followed
	// it; it must be safe for concurrent use.
	Audit func(Event)
	// Signed reports that the request was let in by a signed URL of
	// /files rather than the sandbox's access token: the signature is
	// for the query's username, so the request runs as that user (the
	// default user if none), never as its Authorization header's.
	Signed bool
}

// Resolver returns the sandbox a request is for, or an error; an error of
// type *Error carries its Connect code and so its HTTP status (such as
// unauthenticated, 401, or not_found, 404, for an unknown E2b-Sandbox-Id).
type Resolver func(r *http.Request) (Sandbox, error)

// user is an account E2B code runs as.
type user struct {
	name     string
	uid, gid uint32
	home     string
}

// defaultUsers are the accounts of every E2B sandbox.
var defaultUsers = []user{
	{name: "user", uid: 1000, gid: 1000, home: "/home/user"},
	{name: "root", uid: 0, gid: 0, home: "/root"},
}

// defaultUser is the user of requests that name none.
const defaultUser = "user"

// handler is what New returns.
type handler struct {
	resolve Resolver
	log     *slog.Logger
	users   []user
	mux     *http.ServeMux

	mu    sync.Mutex
	boxes map[*agent.Client]*box
}

// box is the state envd keeps for one sandbox.
type box struct {
	id    string
	agent *agent.Client
	procs *registry
	audit func(Event) // the sandbox's Audit; nil: none

	mu       sync.Mutex
	watchers map[string]*watcher
}

// New serves, for each request, the sandbox resolve returns: the Connect
// services process.Process and filesystem.Filesystem (JSON codec), GET and
// POST /files, and GET /health (204). log receives its events; nil
// discards them.
func New(resolve Resolver, log *slog.Logger) http.Handler {
	return newHandler(resolve, log, defaultUsers)
}

func newHandler(resolve Resolver, log *slog.Logger, users []user) *handler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	h := &handler{resolve: resolve, log: log, users: users, boxes: make(map[*agent.Client]*box)}
	mux := http.NewServeMux()
	registered := map[string]bool{}
	for _, rt := range h.table() {
		rt.Check()
		// Connect's procedures answer every method themselves (a
		// Connect error), and /files serves GET and POST: the mux
		// routes by path.
		_, path, _ := strings.Cut(rt.Pattern, " ")
		if !registered[path] {
			registered[path] = true
			mux.HandleFunc(path, rt.serve)
		}
	}
	h.mux = mux
	return h
}

// route is one route of envd: what the audit log records of it, and its
// handler.
type route struct {
	audit.Route
	serve http.HandlerFunc
}

// table is every route of envd, in the order registered. Each says
// whether it is audited (its action: a unary procedure is recorded by
// unary once answered, a command by processStart once it ended, a file
// upload by files) or only reads (audit.ReadOnly).
func (h *handler) table() []route {
	const ro = audit.ReadOnly
	unary := func(name, action string, f unaryFunc) route {
		return route{audit.Route{Pattern: "POST /" + name, Action: action}, func(w http.ResponseWriter, r *http.Request) { h.unary(w, r, action, f) }}
	}
	streaming := func(name, action string, f streamFunc) route {
		return route{audit.Route{Pattern: "POST /" + name, Action: action}, func(w http.ResponseWriter, r *http.Request) { h.streaming(w, r, f) }}
	}
	return []route{
		unary("process.Process/List", ro, h.processList),
		streaming("process.Process/Start", "exec", h.processStart),
		streaming("process.Process/Connect", ro, h.processConnect),
		unary("process.Process/Update", "resize", h.processUpdate),
		unary("process.Process/SendInput", "stdin", h.processSendInput),
		unary("process.Process/SendSignal", "signal", h.processSendSignal),
		unary("process.Process/CloseStdin", "close_stdin", h.processCloseStdin),
		unary("process.Process/StreamInput", ro, func(context.Context, *box, *http.Request, []byte) (any, error) {
			return nil, errorf(codeUnimplemented, "process.Process/StreamInput is not supported: use SendInput")
		}),
		unary("filesystem.Filesystem/Stat", ro, h.fsStat),
		unary("filesystem.Filesystem/MakeDir", "mkdir", h.fsMakeDir),
		unary("filesystem.Filesystem/Move", "rename", h.fsMove),
		unary("filesystem.Filesystem/ListDir", ro, h.fsListDir),
		unary("filesystem.Filesystem/Remove", "remove", h.fsRemove),
		streaming("filesystem.Filesystem/WatchDir", ro, h.fsWatchDir),
		unary("filesystem.Filesystem/CreateWatcher", "watch", h.fsCreateWatcher),
		unary("filesystem.Filesystem/GetWatcherEvents", ro, h.fsGetWatcherEvents),
		unary("filesystem.Filesystem/RemoveWatcher", "unwatch", h.fsRemoveWatcher),
		{audit.Route{Pattern: "GET /files", Action: ro}, h.files},
		{audit.Route{Pattern: "HEAD /files", Action: ro}, h.files},
		{audit.Route{Pattern: "POST /files", Action: "write_file"}, h.files},
		{audit.Route{Pattern: "GET /health", Action: ro}, h.health},
	}
}

// unaryFunc is a unary procedure; streamFunc a server-streaming one.
type (
	unaryFunc  func(ctx context.Context, b *box, r *http.Request, body []byte) (any, error)
	streamFunc func(ctx context.Context, b *box, r *http.Request, body []byte, s *stream) error
)

// Routes returns every route of envd and what the audit log records of
// it, from the table New registers.
func Routes() []audit.Route {
	var out []audit.Route
	for _, r := range (&handler{}).table() {
		out = append(out, r.Route)
	}
	return out
}

// Paths reports whether the request path belongs to envd: the Connect
// services' "/process.Process/" and "/filesystem.Filesystem/" prefixes,
// "/files" and "/health".
func Paths(path string) bool {
	return strings.HasPrefix(path, "/process.Process/") || strings.HasPrefix(path, "/filesystem.Filesystem/") ||
		path == "/files" || path == "/health"
}

// ServeHTTP implements http.Handler.
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !Paths(r.URL.Path) {
		http.NotFound(w, r)
		return
	}
	if strings.HasPrefix(r.URL.Path, "/process.Process/") || strings.HasPrefix(r.URL.Path, "/filesystem.Filesystem/") {
		if _, pattern := h.mux.Handler(r); pattern == "" {
			writeUnaryError(w, errorf(codeUnimplemented, "%s: no such procedure", strings.TrimPrefix(r.URL.Path, "/")))
			return
		}
	}
	h.mux.ServeHTTP(w, r)
}

// box resolves the sandbox of r and returns its state.
func (h *handler) box(r *http.Request) (*box, error) {
	b, _, err := h.boxOf(r)
	return b, err
}

// boxOf resolves the sandbox of r and returns its state, and the sandbox
// as the resolver returned it.
func (h *handler) boxOf(r *http.Request) (*box, Sandbox, error) {
	sb, err := h.resolve(r)
	if err != nil {
		return nil, sb, err
	}
	if sb.Agent == nil {
		return nil, sb, errorf(codeUnavailable, "sandbox %s has no agent", sb.ID)
	}
	select {
	case <-sb.Agent.Done():
		return nil, sb, errorf(codeUnavailable, "sandbox %s: its agent is gone", sb.ID)
	default:
	}
	if sb.Touch != nil {
		sb.Touch()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	b := h.boxes[sb.Agent]
	if b == nil {
		b = &box{id: sb.ID, agent: sb.Agent, procs: newRegistry(), audit: sb.Audit, watchers: make(map[string]*watcher)}
		h.boxes[sb.Agent] = b
		go func() {
			<-sb.Agent.Done()
			h.mu.Lock()
			delete(h.boxes, sb.Agent)
			h.mu.Unlock()
		}()
	}
	return b, sb, nil
}

// unary serves a unary procedure, recorded in the audit log as action
// once answered unless that is audit.ReadOnly.
func (h *handler) unary(w http.ResponseWriter, r *http.Request, action string, f unaryFunc) {
	body, err := readUnary(w, r)
	if err != nil {
		writeUnaryError(w, err)
		return
	}
	ctx, cancel, err := withTimeout(r.Context(), r)
	if err != nil {
		writeUnaryError(w, err)
		return
	}
	defer cancel()
	b, err := h.box(r)
	if err != nil {
		writeUnaryError(w, err)
		return
	}
	var ev *Event
	if action != audit.ReadOnly && b.audit != nil {
		ev = &Event{Time: time.Now(), Action: action}
		r = withEvent(r, ev)
		// The answer goes out first: the client need not wait for the
		// audit log.
		defer func() { b.record(*ev) }()
	}
	resp, err := f(ctx, b, r, body)
	if err == nil {
		var out []byte
		if out, err = json.Marshal(resp); err != nil {
			err = fmt.Errorf("encode response: %w", err)
		} else {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(out)
			_ = http.NewResponseController(w).Flush()
			return
		}
	}
	h.log.Debug("envd call failed", "sandbox", b.id, "path", r.URL.Path, "err", err)
	if ev != nil {
		ev.Error = asError(err).Code
	}
	writeUnaryError(w, err)
	if ev != nil {
		_ = http.NewResponseController(w).Flush()
	}
}

func (h *handler) streaming(w http.ResponseWriter, r *http.Request, f streamFunc) {
	s := newStream(w)
	body, err := readStreamRequest(w, r)
	if err != nil {
		s.end(err)
		return
	}
	ctx, cancel, err := withTimeout(r.Context(), r)
	if err != nil {
		s.end(err)
		return
	}
	defer cancel()
	b, err := h.box(r)
	if err != nil {
		s.end(err)
		return
	}
	err = f(ctx, b, r, body, s)
	if errors.Is(err, agent.ErrClosed) && b.agent.Err() != nil {
		// The sandbox ended (killed, timed out, paused) under the
		// stream: as envd's, which ends with it, the response is cut
		// off, without an end. E2B's SDKs then ask /health, which
		// answers 502 for a sandbox that does not run, and report that
		// the sandbox was killed (a TimeoutError), not a command's exit.
		h.log.Debug("envd stream cut: the sandbox ended", "sandbox", b.id, "path", r.URL.Path, "err", err)
		panic(http.ErrAbortHandler)
	}
	if err != nil {
		h.log.Debug("envd stream failed", "sandbox", b.id, "path", r.URL.Path, "err", err)
	}
	s.end(err)
}

// health is envd's GET /health: 204 for a sandbox that runs, the error of
// one that does not (E2B's SDKs ask it when a stream breaks). A request
// that names no sandbox (no E2b-Sandbox-Id, no access token) is E2B's
// API's own health check, which needs no key: 204.
func (h *handler) health(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("E2b-Sandbox-Id") == "" && r.Header.Get("X-Access-Token") == "" {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if _, err := h.box(r); err != nil {
		e := asError(err)
		writeHTTPError(w, httpStatus(e.Code), e.Message)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// lookupUser returns the account called name, the default user for "".
func (h *handler) lookupUser(name string) (user, error) {
	if name == "" {
		name = defaultUser
	}
	for _, u := range h.users {
		if u.name == name {
			return u, nil
		}
	}
	return user{}, errorf(codeInvalidArgument, "user %.64q: no such user (use \"user\" or \"root\")", name)
}

// requestUser is the user an RPC runs as: HTTP basic authentication
// ("name:"), the default user without it.
func (h *handler) requestUser(r *http.Request) (user, error) {
	a := r.Header.Get("Authorization")
	scheme, cred, ok := strings.Cut(a, " ")
	if !ok || !strings.EqualFold(scheme, "basic") {
		return h.lookupUser("")
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(cred))
	if err != nil {
		return user{}, errorf(codeInvalidArgument, "authorization header: %v", err)
	}
	name, _, _ := strings.Cut(string(raw), ":")
	return h.lookupUser(name)
}

// ownerName is the name of uid (or gid), its number if not a known user.
func (h *handler) ownerName(id uint32, group bool) string {
	for _, u := range h.users {
		if (!group && u.uid == id) || (group && u.gid == id) {
			return u.name
		}
	}
	return strconv.FormatUint(uint64(id), 10)
}

// resolvePath makes p absolute: relative to the user's home, "~" being the
// home too.
func resolvePath(u user, p string) (string, error) {
	switch {
	case p == "":
		return "", errorf(codeInvalidArgument, "empty path")
	case strings.IndexByte(p, 0) >= 0:
		return "", errorf(codeInvalidArgument, "path contains NUL")
	case len(p) > 4096:
		return "", errorf(codeInvalidArgument, "path of %d bytes is too long", len(p))
	case p == "~":
		return u.home, nil
	case strings.HasPrefix(p, "~/"):
		return path.Join(u.home, p[2:]), nil
	case !path.IsAbs(p):
		return path.Join(u.home, p), nil
	}
	return path.Clean(p), nil
}

// pbTime is a google.protobuf.Timestamp in JSON.
func pbTime(t time.Time) string {
	return t.UTC().Format("2006-01-02T15:04:05.000000000Z")
}
