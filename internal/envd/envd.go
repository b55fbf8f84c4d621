package envd

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/hutch-sandbox/hutch/internal/agent"
	"github.com/hutch-sandbox/hutch/internal/audit"
	"github.com/hutch-sandbox/hutch/internal/envd/envdpb/filesystem/filesystemconnect"
	"github.com/hutch-sandbox/hutch/internal/envd/envdpb/process/processconnect"
	"github.com/hutch-sandbox/hutch/internal/image"
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
	// User and Workdir, when set, are the sandbox's defaults (its
	// template's, E2B's setUser and setWorkdir): the user of a request
	// that names none instead of "user", and the working directory of a
	// command that names none instead of its user's home. User may be
	// any account of the sandbox's /etc/passwd.
	User, Workdir string
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
	errw    *connect.ErrorWriter

	mu    sync.Mutex
	boxes map[*agent.Client]*box
}

// box is the state envd keeps for one sandbox.
type box struct {
	id    string
	agent *agent.Client
	procs *registry
	audit func(Event) // the sandbox's Audit; nil: none
	// user and workdir are the sandbox's defaults (Sandbox.User,
	// Sandbox.Workdir).
	user, workdir string

	mu       sync.Mutex
	watchers map[string]*watcher
}

// New serves, for each request, the sandbox resolve returns: the Connect
// services process.Process and filesystem.Filesystem (with
// connectrpc.com/connect: the Connect protocol with JSON or binary
// protobuf, gRPC and gRPC-Web), GET and POST /files, and GET /health
// (204). log receives its events; nil discards them.
func New(resolve Resolver, log *slog.Logger) http.Handler {
	return newHandler(resolve, log, defaultUsers)
}

func newHandler(resolve Resolver, log *slog.Logger, users []user) *handler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	h := &handler{resolve: resolve, log: log, users: users, boxes: make(map[*agent.Client]*box)}
	h.errw = connect.NewErrorWriter(handlerOptions()...)
	mux := http.NewServeMux()
	registered := map[string]bool{}
	for _, rt := range h.table() {
		rt.Check()
		// connect-go answers every method of a procedure itself (an
		// error in the client's protocol), and /files serves GET and
		// POST: the mux routes by path.
		_, path, _ := strings.Cut(rt.Pattern, " ")
		if !registered[path] {
			registered[path] = true
			mux.Handle(path, rt.serve)
		}
	}
	h.mux = mux
	return h
}

// route is one route of envd: what the audit log records of it, and its
// handler.
type route struct {
	audit.Route
	serve http.Handler
}

// table is every route of envd, in the order registered. Each says
// whether it is audited (its action: a unary or client-streaming
// procedure is recorded by procedure once answered, a command by
// processStart once it ended, a file upload by files) or only reads
// (audit.ReadOnly).
func (h *handler) table() []route {
	const ro = audit.ReadOnly
	_, process := processconnect.NewProcessHandler(processServer{h}, handlerOptions()...)
	_, filesystem := filesystemconnect.NewFilesystemHandler(filesystemServer{h}, handlerOptions()...)
	procedure := func(name, action string, answered bool) route {
		svc := process
		if strings.HasPrefix(name, "filesystem.") {
			svc = filesystem
		}
		return route{audit.Route{Pattern: "POST /" + name, Action: action}, h.procedure(action, answered, svc)}
	}
	// unary: recorded once answered; streaming: by the procedure.
	unary := func(name, action string) route { return procedure(name, action, true) }
	streaming := func(name, action string) route { return procedure(name, action, false) }
	return []route{
		unary(processconnect.ProcessListProcedure[1:], ro),
		streaming(processconnect.ProcessStartProcedure[1:], "exec"),
		streaming(processconnect.ProcessConnectProcedure[1:], ro),
		unary(processconnect.ProcessUpdateProcedure[1:], "resize"),
		unary(processconnect.ProcessSendInputProcedure[1:], "stdin"),
		unary(processconnect.ProcessStreamInputProcedure[1:], "stdin"),
		unary(processconnect.ProcessSendSignalProcedure[1:], "signal"),
		unary(processconnect.ProcessCloseStdinProcedure[1:], "close_stdin"),
		unary(filesystemconnect.FilesystemStatProcedure[1:], ro),
		unary(filesystemconnect.FilesystemMakeDirProcedure[1:], "mkdir"),
		unary(filesystemconnect.FilesystemMoveProcedure[1:], "rename"),
		unary(filesystemconnect.FilesystemListDirProcedure[1:], ro),
		unary(filesystemconnect.FilesystemRemoveProcedure[1:], "remove"),
		streaming(filesystemconnect.FilesystemWatchDirProcedure[1:], ro),
		unary(filesystemconnect.FilesystemCreateWatcherProcedure[1:], "watch"),
		unary(filesystemconnect.FilesystemGetWatcherEventsProcedure[1:], ro),
		unary(filesystemconnect.FilesystemRemoveWatcherProcedure[1:], "unwatch"),
		{audit.Route{Pattern: "GET /files", Action: ro}, http.HandlerFunc(h.files)},
		{audit.Route{Pattern: "HEAD /files", Action: ro}, http.HandlerFunc(h.files)},
		{audit.Route{Pattern: "POST /files", Action: "write_file"}, http.HandlerFunc(h.files)},
		{audit.Route{Pattern: "GET /health", Action: ro}, http.HandlerFunc(h.health)},
	}
}

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
			_ = h.errw.Write(w, r, errorf(codeUnimplemented, "%s: no such procedure", strings.TrimPrefix(r.URL.Path, "/")).connect())
			return
		}
	}
	h.mux.ServeHTTP(w, r)
}

// call is what a procedure knows of its request beyond its message: the
// sandbox's state and, for an audited call, its event to fill in.
type call struct {
	b  *box
	ev *Event // nil: not recorded once answered
}

type callKey struct{}

// callOf returns the call of a procedure's context (see procedure).
func callOf(ctx context.Context) *call {
	c, _ := ctx.Value(callKey{}).(*call)
	if c == nil {
		return &call{}
	}
	return c
}

// procedure serves the procedures of svc (connect-go's handler of a
// service): it resolves the sandbox first, answering an error in the
// client's protocol if it cannot, and, if answered, records the call in
// the audit log as action once answered unless that is audit.ReadOnly.
func (h *handler) procedure(action string, answered bool, svc http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := h.box(r)
		if err != nil {
			h.log.Debug("envd call refused", "path", r.URL.Path, "err", err)
			_ = h.errw.Write(w, r, asError(err).connect())
			return
		}
		c := &call{b: b}
		if answered && action != audit.ReadOnly && b.audit != nil {
			c.ev = &Event{Time: time.Now(), Action: action}
		}
		svc.ServeHTTP(flusher{w}, r.WithContext(context.WithValue(r.Context(), callKey{}, c)))
		if c.ev != nil {
			// The answer goes out first: the client need not wait
			// for the audit log.
			_ = http.NewResponseController(w).Flush()
			b.record(*c.ev)
		}
	})
}

// flusher is a ResponseWriter that is an http.Flusher, which connect-go
// asks of the writer of a stream, whatever wraps the server's (such as the
// daemon's metrics): it flushes through http.ResponseController.
type flusher struct{ http.ResponseWriter }

func (f flusher) Flush() { _ = http.NewResponseController(f.ResponseWriter).Flush() }

// Unwrap returns the writer f wraps, for http.ResponseController.
func (f flusher) Unwrap() http.ResponseWriter { return f.ResponseWriter }

// unaryCall runs f, a unary procedure, for req, and converts its error
// to connect-go's; an audited call's event gets the error's code.
func unaryCall[Req, Res any](h *handler, ctx context.Context, req *connect.Request[Req], f func(context.Context, *box, http.Header, *Req) (*Res, error)) (*connect.Response[Res], error) {
	c := callOf(ctx)
	if c.b == nil {
		return nil, errorf(codeInternal, "%s: no sandbox", req.Spec().Procedure).connect()
	}
	res, err := f(ctx, c.b, req.Header(), req.Msg)
	if err != nil {
		return nil, h.failed(c, req.Spec().Procedure, err)
	}
	return connect.NewResponse(res), nil
}

// failed logs the error of a call, records its code in the call's event,
// and returns it as connect-go's error.
func (h *handler) failed(c *call, procedure string, err error) error {
	e := asError(err)
	h.log.Debug("envd call failed", "sandbox", c.b.id, "procedure", procedure, "err", err)
	if c.ev != nil {
		c.ev.Error = e.Code
	}
	return e.connect()
}

// streamCall runs f, a server-streaming procedure, for req, its messages
// sent on st.
func streamCall[Req, Res any](h *handler, ctx context.Context, req *connect.Request[Req], st *connect.ServerStream[Res], f func(context.Context, *box, http.Header, *Req, func(*Res) error) error) error {
	c := callOf(ctx)
	if c.b == nil {
		return errorf(codeInternal, "%s: no sandbox", req.Spec().Procedure).connect()
	}
	err := f(ctx, c.b, req.Header(), req.Msg, st.Send)
	if errors.Is(err, agent.ErrClosed) && c.b.agent.Err() != nil {
		// The sandbox ended (killed, timed out, paused) under the
		// stream: as envd's, which ends with it, the response is cut
		// off, without an end. E2B's SDKs then ask /health, which
		// answers 502 for a sandbox that does not run, and report that
		// the sandbox was killed (a TimeoutError), not a command's exit.
		// connect-go does not recover panics (no WithRecover): net/http
		// aborts the response.
		h.log.Debug("envd stream cut: the sandbox ended", "sandbox", c.b.id, "procedure", req.Spec().Procedure, "err", err)
		panic(http.ErrAbortHandler)
	}
	if err != nil {
		return h.failed(c, req.Spec().Procedure, err)
	}
	return nil
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
		b = &box{id: sb.ID, agent: sb.Agent, procs: newRegistry(), audit: sb.Audit, watchers: make(map[string]*watcher),
			user: sb.User, workdir: sb.Workdir}
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

// lookupUser returns the account called name in b's sandbox, its
// default user for "": "user" and "root" as every E2B sandbox has them,
// any other from the sandbox's own /etc/passwd (read through its agent,
// bounded: the sandbox writes that file).
func (h *handler) lookupUser(ctx context.Context, b *box, name string) (user, error) {
	if name == "" {
		name = b.user
	}
	if name == "" {
		name = defaultUser
	}
	for _, u := range h.users {
		if u.name == name {
			return u, nil
		}
	}
	if len(name) > 64 || strings.ContainsAny(name, ":/") || strings.TrimLeft(name, "0123456789") == "" {
		return user{}, errorf(codeInvalidArgument, "user %.64q: no such user", name)
	}
	u, err := image.ResolveUser(name, func(file string) ([]byte, error) {
		return readBounded(ctx, b.agent, "/"+file, maxAccountFile)
	})
	if err != nil || u.Name != name {
		return user{}, errorf(codeInvalidArgument, "user %.64q: no such user in the sandbox", name)
	}
	return user{name: u.Name, uid: uint32(u.UID), gid: uint32(u.GID), home: u.Home}, nil
}

// maxAccountFile bounds what lookupUser reads of /etc/passwd or
// /etc/group.
const maxAccountFile = 1 << 20

// readBounded reads the sandbox's file p, at most max bytes; a longer
// file is an error.
func readBounded(ctx context.Context, c *agent.Client, p string, max int) ([]byte, error) {
	var buf bytes.Buffer
	w := &boundedWriter{w: &buf, left: max}
	if _, err := c.ReadFile(ctx, p, w); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// boundedWriter refuses to write past left bytes.
type boundedWriter struct {
	w    io.Writer
	left int
}

func (b *boundedWriter) Write(p []byte) (int, error) {
	if len(p) > b.left {
		return 0, errors.New("file too long")
	}
	b.left -= len(p)
	return b.w.Write(p)
}

// requestUser is the user an RPC runs as: HTTP basic authentication
// ("name:"), the sandbox's default user without it.
func (h *handler) requestUser(ctx context.Context, b *box, hdr http.Header) (user, error) {
	a := hdr.Get("Authorization")
	scheme, cred, ok := strings.Cut(a, " ")
	if !ok || !strings.EqualFold(scheme, "basic") {
		return h.lookupUser(ctx, b, "")
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(cred))
	if err != nil {
		return user{}, errorf(codeInvalidArgument, "authorization header: %v", err)
	}
	name, _, _ := strings.Cut(string(raw), ":")
	return h.lookupUser(ctx, b, name)
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
