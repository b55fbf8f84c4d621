package envd

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hutch-sandbox/hutch/internal/agent"
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
	unary := func(name string, f func(ctx context.Context, b *box, r *http.Request, body []byte) (any, error)) {
		mux.HandleFunc("/"+name, func(w http.ResponseWriter, r *http.Request) { h.unary(w, r, f) })
	}
	streaming := func(name string, f func(ctx context.Context, b *box, r *http.Request, body []byte, s *stream) error) {
		mux.HandleFunc("/"+name, func(w http.ResponseWriter, r *http.Request) { h.streaming(w, r, f) })
	}
	unary("process.Process/List", h.processList)
	streaming("process.Process/Start", h.processStart)
	streaming("process.Process/Connect", h.processConnect)
	unary("process.Process/Update", h.processUpdate)
	unary("process.Process/SendInput", h.processSendInput)
	unary("process.Process/SendSignal", h.processSendSignal)
	unary("process.Process/CloseStdin", h.processCloseStdin)
	unary("process.Process/StreamInput", func(context.Context, *box, *http.Request, []byte) (any, error) {
		return nil, errorf(codeUnimplemented, "process.Process/StreamInput is not supported: use SendInput")
	})
	unary("filesystem.Filesystem/Stat", h.fsStat)
	unary("filesystem.Filesystem/MakeDir", h.fsMakeDir)
	unary("filesystem.Filesystem/Move", h.fsMove)
	unary("filesystem.Filesystem/ListDir", h.fsListDir)
	unary("filesystem.Filesystem/Remove", h.fsRemove)
	streaming("filesystem.Filesystem/WatchDir", h.fsWatchDir)
	unary("filesystem.Filesystem/CreateWatcher", h.fsCreateWatcher)
	unary("filesystem.Filesystem/GetWatcherEvents", h.fsGetWatcherEvents)
	unary("filesystem.Filesystem/RemoveWatcher", h.fsRemoveWatcher)
	mux.HandleFunc("/files", h.files)
	mux.HandleFunc("/health", h.health)
	h.mux = mux
	return h
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
	sb, err := h.resolve(r)
	if err != nil {
		return nil, err
	}
	if sb.Agent == nil {
		return nil, errorf(codeUnavailable, "sandbox %s has no agent", sb.ID)
	}
	select {
	case <-sb.Agent.Done():
		return nil, errorf(codeUnavailable, "sandbox %s: its agent is gone", sb.ID)
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
	return b, nil
}

func (h *handler) unary(w http.ResponseWriter, r *http.Request, f func(ctx context.Context, b *box, r *http.Request, body []byte) (any, error)) {
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
	if action := auditActions[r.URL.Path]; action != "" && b.audit != nil {
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

func (h *handler) streaming(w http.ResponseWriter, r *http.Request, f func(ctx context.Context, b *box, r *http.Request, body []byte, s *stream) error) {
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
	if err != nil {
		h.log.Debug("envd stream failed", "sandbox", b.id, "path", r.URL.Path, "err", err)
	}
	s.end(err)
}

func (h *handler) health(w http.ResponseWriter, r *http.Request) {
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
