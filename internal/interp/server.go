package interp

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/kernel"
)

// Bounds of the server's requests.
const (
	maxBody    = 16 << 20 // bytes of a request body (the code and its env_vars)
	maxEnvVars = 1024     // env_vars of one execution
	maxEnvName = 1024     // bytes of a variable's name
	// KeepaliveInterval is how often an execution's answer carries a
	// keepalive line while nothing else comes: a proxy between the client
	// and the server then sees traffic, and a write to a client that went
	// away fails.
	KeepaliveInterval = 5 * time.Second
	// restoreWait bounds putting an execution's env_vars back.
	restoreWait = 30 * time.Second
)

// Config configures a Server.
type Config struct {
	// Home is the working directory of a context created without one
	// ("" = $HOME of Env, else "/").
	Home string
	// Env is the contexts' environment (nil = the process's).
	Env []string
	// Defaults are the languages whose default context is started with
	// the server, so that their first execution finds it warm (nil =
	// Python, and JavaScript when node is installed: E2B's).
	Defaults []string
	// Log gets the server's own events (nil = none).
	Log *slog.Logger
	// KernelLog gets what kernel processes write on their own stdout and
	// stderr (nil = discarded).
	KernelLog io.Writer
}

// Server is E2B's Code Interpreter API over hutch's engines, for one
// sandbox: contexts (a kernel each, in creation order; a default one per
// language), executions streamed as newline-delimited JSON, one at a
// time per context. Its handler (Handler) answers:
//
//	GET    /health                 "OK"
//	POST   /execute                ExecuteRequest → Event lines, EventEnd last
//	POST   /contexts               CreateContextRequest → Context
//	GET    /contexts               [Context]
//	DELETE /contexts/{id}          null
//	POST   /contexts/{id}/restart  null
//	POST   /hutch/env              EnvRequest → null (SetEnv; hutch's own)
//	GET    /hutch/ready            null once every context started (hutch's own)
//
// Refusals are E2B's: text for 400 (context and language both given),
// 404 (no such context) and 500 (a kernel that could not start), JSON
// {"detail": …} for 422 (a malformed body). Every answer allows any
// origin (CORS), as E2B's does.
type Server struct {
	env     []string // under mu (environ), SetEnv changes it
	home    string
	node    string // node's path, "" when it is not installed
	startup string // the Python startup file's path
	tmp     string
	log     *slog.Logger

	kernelLog io.Writer

	mu       sync.Mutex
	list     []*execContext // in creation order
	byID     map[string]*execContext
	defaults map[string]*execContext
	closed   bool
}

// execContext is a context: its engine, started once and again after it
// died, and the turn of its executions.
type execContext struct {
	Context
	start func(context.Context) (Engine, error)
	turn  chan struct{} // one execution (or restart) at a time
	ready chan struct{} // closed once the first start ended

	mu  sync.Mutex
	eng Engine // nil while it has to be started (again)
	err error  // the first start's failure
	// pending are variables SetEnv set since eng started, which its next
	// execution sets first.
	pending map[string]string
}

// NewServer returns a server for cfg; Close ends it.
func NewServer(cfg Config) (*Server, error) {
	env := cfg.Env
	if env == nil {
		env = os.Environ()
	}
	home := cfg.Home
	if home == "" {
		home = lookupEnv(env, "HOME")
	}
	if home == "" {
		home = "/"
	}
	tmp, err := os.MkdirTemp("", "hutch-interp-")
	if err != nil {
		return nil, fmt.Errorf("interp: %w", err)
	}
	startup := filepath.Join(tmp, "startup.py")
	if err := os.WriteFile(startup, Startup, 0o600); err != nil {
		os.RemoveAll(tmp)
		return nil, fmt.Errorf("interp: %w", err)
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{env: env, home: home, startup: startup, tmp: tmp, log: log, kernelLog: cfg.KernelLog,
		byID: map[string]*execContext{}, defaults: map[string]*execContext{}}
	if p := lookupEnv(env, "PATH"); p != "" {
		s.node = lookPath("node", p)
	}
	defaults := cfg.Defaults
	if defaults == nil {
		defaults = []string{Python}
		if s.node != "" {
			defaults = append(defaults, JavaScript)
		}
	}
	for _, lang := range defaults {
		if _, err := s.defaultContext(Normalize(lang)); err != nil {
			s.Close()
			return nil, err
		}
	}
	return s, nil
}

// lookPath finds an executable file on path.
func lookPath(name, path string) string {
	for _, d := range filepath.SplitList(path) {
		p := filepath.Join(d, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	return ""
}

// Close ends every context's engine and removes the server's files.
func (s *Server) Close() error {
	s.mu.Lock()
	list := s.list
	s.list, s.byID, s.defaults, s.closed = nil, map[string]*execContext{}, map[string]*execContext{}, true
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, c := range list {
		wg.Go(c.close)
	}
	wg.Wait()
	return os.RemoveAll(s.tmp)
}

// newID is a context's id: a random UUID, as Jupyter's kernel ids are.
func newID() string {
	var b [16]byte
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// errContext is a context's refusal, answered with its status.
type errContext struct {
	status int
	msg    string
}

func (e *errContext) Error() string { return e.msg }

// starter is how a context of lang starts its engine in dir.
func (s *Server) starter(lang, dir string) (func(context.Context) (Engine, error), error) {
	if err := checkLanguage(lang); err != nil {
		return nil, err
	}
	switch lang {
	case JavaScript, TypeScript:
		if s.node == "" {
			return nil, fmt.Errorf("no kernel for language %q: node is not installed (not on PATH)", lang)
		}
		return func(ctx context.Context) (Engine, error) { return s.startNode(ctx, lang, dir) }, nil
	}
	if _, err := findSpec(lang, s.environ(), s.home); err != nil {
		return nil, err
	}
	return func(ctx context.Context) (Engine, error) { return s.startJupyter(ctx, lang, dir) }, nil
}

// newContext adds a context of lang in dir, its engine starting in the
// background.
func (s *Server) newContext(lang, dir string, isDefault bool) (*execContext, error) {
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("cwd %q: want an absolute path", dir)
	}
	if fi, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("cwd %s: %v", dir, err)
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("cwd %s: not a directory", dir)
	} else if err := unix.Access(dir, unix.X_OK); err != nil {
		// The kernel's chdir would fail, which its start reports as the
		// exec of its program failing.
		return nil, fmt.Errorf("cwd %s: %v: the interpreter's user (uid %d) cannot enter it", dir, err, os.Geteuid())
	}
	start, err := s.starter(lang, dir)
	if err != nil {
		return nil, err
	}
	c := &execContext{Context: Context{ID: newID(), Language: lang, Cwd: dir}, start: start,
		turn: make(chan struct{}, 1), ready: make(chan struct{})}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, errors.New("the interpreter is closing")
	}
	if d := s.defaults[lang]; isDefault && d != nil {
		s.mu.Unlock()
		return d, nil
	}
	s.list = append(s.list, c)
	s.byID[c.ID] = c
	if isDefault {
		s.defaults[lang] = c
	}
	s.mu.Unlock()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), startWait)
		defer cancel()
		eng, err := c.start(ctx)
		c.mu.Lock()
		c.eng, c.err = eng, err
		c.mu.Unlock()
		if err != nil {
			s.log.Warn("a context's kernel did not start", "context", c.ID, "language", lang, "err", err)
			s.remove(c)
		}
		close(c.ready)
	}()
	return c, nil
}

// startWait bounds a kernel's start (seconds on a busy machine).
const startWait = 2 * time.Minute

// defaultContext is lang's default context, made if there is none.
func (s *Server) defaultContext(lang string) (*execContext, error) {
	s.mu.Lock()
	c := s.defaults[lang]
	s.mu.Unlock()
	if c != nil {
		return c, nil
	}
	return s.newContext(lang, s.home, true)
}

// remove takes c out of the server's contexts.
func (s *Server) remove(c *execContext) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byID[c.ID] != c {
		return false
	}
	delete(s.byID, c.ID)
	s.list = slices.DeleteFunc(s.list, func(x *execContext) bool { return x == c })
	if s.defaults[c.Language] == c {
		delete(s.defaults, c.Language)
	}
	return true
}

// lookup finds context id.
func (s *Server) lookup(id string) *execContext {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byID[id]
}

// wait waits for c's first start and reports its failure.
func (c *execContext) wait(ctx context.Context) error {
	select {
	case <-c.ready:
	case <-ctx.Done():
		return ctx.Err()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return c.err
	}
	return nil
}

// engine returns c's engine, started again if it died; the caller holds
// c's turn.
func (c *execContext) engine(ctx context.Context) (Engine, error) {
	if err := c.wait(ctx); err != nil {
		return nil, err
	}
	c.mu.Lock()
	eng := c.eng
	c.mu.Unlock()
	if eng != nil {
		return eng, nil
	}
	eng, err := c.start(ctx)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.eng, c.pending = eng, nil // it started with the server's environment
	c.mu.Unlock()
	return eng, nil
}

// died drops c's engine, which ended: the next execution starts another.
func (c *execContext) died(eng Engine) {
	c.mu.Lock()
	if c.eng == eng {
		c.eng = nil
	}
	c.mu.Unlock()
	go eng.Close()
}

// close ends c's engine once its first start ended.
func (c *execContext) close() {
	<-c.ready
	c.mu.Lock()
	eng := c.eng
	c.eng = nil
	c.mu.Unlock()
	if eng != nil {
		eng.Close()
	}
}

// take waits for c's turn.
func (c *execContext) take(ctx context.Context) bool {
	select {
	case c.turn <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

func (c *execContext) give() { <-c.turn }

// Handler returns the server's HTTP handler.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, http.StatusOK, "OK") })
	mux.HandleFunc("POST /execute", s.execute)
	mux.HandleFunc("POST /contexts", s.createContext)
	mux.HandleFunc("GET /contexts", s.listContexts)
	mux.HandleFunc("DELETE /contexts/{id}", s.deleteContext)
	mux.HandleFunc("POST /contexts/{id}/restart", s.restartContext)
	mux.HandleFunc("POST /hutch/env", s.setEnvHandler)
	mux.HandleFunc("GET /hutch/ready", s.ready)
	return s.logged(cors(mux))
}

// logged logs each request at debug level once it is answered.
func (s *Server) logged(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		h.ServeHTTP(w, r)
		s.log.Debug("request", "method", r.Method, "path", r.URL.Path, "took", time.Since(start).Round(time.Millisecond), "client_gone", r.Context().Err() != nil)
	})
}

// cors lets pages of any origin call the server, as E2B's does.
func cors(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Access-Control-Allow-Origin", "*")
		if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
			w.Header().Set("Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS")
			if h := r.Header.Get("Access-Control-Request-Headers"); h != "" {
				w.Header().Set("Access-Control-Allow-Headers", h)
			}
			w.Header().Set("Access-Control-Max-Age", "600")
			w.WriteHeader(http.StatusOK)
			return
		}
		h.ServeHTTP(w, r)
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

func writeText(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(status)
	io.WriteString(w, msg)
}

// unprocessable answers a malformed body, as FastAPI's validation does.
func unprocessable(w http.ResponseWriter, format string, args ...any) {
	writeJSON(w, http.StatusUnprocessableEntity, map[string]string{"detail": fmt.Sprintf(format, args...)})
}

// readBody decodes r's JSON body (bounded) into v.
func readBody(w http.ResponseWriter, r *http.Request, v any) bool {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeText(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body over %d bytes", maxBody))
		} else {
			writeText(w, http.StatusBadRequest, "reading the request: "+err.Error())
		}
		return false
	}
	if len(strings.TrimSpace(string(b))) == 0 {
		b = []byte("{}")
	}
	if err := json.Unmarshal(b, v); err != nil {
		unprocessable(w, "body: %v", err)
		return false
	}
	return true
}

// executeBody is ExecuteRequest as it may come: code checked to be a
// string.
type executeBody struct {
	Code      json.RawMessage   `json:"code"`
	ContextID *string           `json:"context_id"`
	Language  *string           `json:"language"`
	EnvVars   map[string]string `json:"env_vars"`
}

func (s *Server) execute(w http.ResponseWriter, r *http.Request) {
	var b executeBody
	if !readBody(w, r, &b) {
		return
	}
	var req ExecuteRequest
	if err := json.Unmarshal(b.Code, &req.Code); err != nil || len(b.Code) == 0 || b.Code[0] != '"' {
		unprocessable(w, "code: want a string")
		return
	}
	if b.ContextID != nil {
		req.ContextID = *b.ContextID
	}
	if b.Language != nil {
		req.Language = *b.Language
	}
	req.EnvVars = b.EnvVars
	if req.ContextID != "" && req.Language != "" {
		writeText(w, http.StatusBadRequest, "Only one of context_id or language can be provided")
		return
	}
	if err := checkEnvVars(req.EnvVars); err != nil {
		unprocessable(w, "env_vars: %v", err)
		return
	}
	c, err := s.resolve(req)
	if err != nil {
		var ec *errContext
		if errors.As(err, &ec) {
			writeText(w, ec.status, ec.msg)
		} else {
			writeText(w, http.StatusInternalServerError, err.Error())
		}
		return
	}
	if len(req.EnvVars) > 0 {
		if _, ok := envCode(c.Language, "X", nil); !ok {
			unprocessable(w, "env_vars: not supported for language %q", c.Language)
			return
		}
	}
	// The answer starts at once: E2B's SDKs time the request until its
	// headers come, the execution after that.
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	out := newEventWriter(w)
	out.flush()
	stop := out.keepalive(KeepaliveInterval)
	s.run(r.Context(), c, req, out.write)
	stop()
	out.write(Event{Type: EventEnd})
}

// checkEnvVars refuses names and values no environment can hold.
func checkEnvVars(env map[string]string) error {
	if len(env) > maxEnvVars {
		return fmt.Errorf("%d variables: at most %d", len(env), maxEnvVars)
	}
	for k, v := range env {
		if k == "" || len(k) > maxEnvName || strings.ContainsAny(k, "=\x00") {
			return fmt.Errorf("name %.80q: want a name without '=' or NUL, of 1 to %d bytes", k, maxEnvName)
		}
		if strings.ContainsRune(v, 0) {
			return fmt.Errorf("%s: the value holds a NUL byte", k)
		}
	}
	return nil
}

// resolve finds the context req runs in.
func (s *Server) resolve(req ExecuteRequest) (*execContext, error) {
	if req.ContextID != "" {
		if c := s.lookup(req.ContextID); c != nil {
			return c, nil
		}
		return nil, &errContext{http.StatusNotFound, "Context " + req.ContextID + " not found"}
	}
	lang := Normalize(req.Language)
	c, err := s.defaultContext(lang)
	if err != nil {
		return nil, &errContext{http.StatusInternalServerError, "Failed to create context: " + err.Error()}
	}
	return c, nil
}

// eventWriter writes an execution's events, one line each, flushed.
type eventWriter struct {
	mu sync.Mutex
	w  http.ResponseWriter
	rc *http.ResponseController
}

func newEventWriter(w http.ResponseWriter) *eventWriter {
	return &eventWriter{w: w, rc: http.NewResponseController(w)}
}

func (e *eventWriter) flush() { e.rc.Flush() }

// write sends ev as one write (so that a client which decodes each read
// on its own, as E2B's JavaScript SDK does, rarely sees a line cut).
func (e *eventWriter) write(ev Event) {
	b, err := json.Marshal(ev)
	if err != nil {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.w.Write(append(b, '\n'))
	e.rc.Flush()
}

// keepalive writes a keepalive every d until stop is called.
func (e *eventWriter) keepalive(d time.Duration) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				e.write(Event{Type: EventKeepalive})
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

// run runs req in c, in its turn, and emits its events (but the end).
// When ctx ends (the client went away) the execution is interrupted, so
// that the context's next one runs at once.
func (s *Server) run(ctx context.Context, c *execContext, req ExecuteRequest, emit func(Event)) {
	if !c.take(ctx) {
		return
	}
	defer c.give()
	eng, err := c.engine(ctx)
	if err != nil {
		if ctx.Err() == nil {
			emit(Event{Type: EventError, Error: &ExecutionError{Name: "ContextUnavailable", Value: err.Error()}})
		}
		return
	}
	if err := c.applyPending(ctx, eng); err != nil {
		if errors.Is(err, kernel.ErrDied) {
			c.died(eng)
		}
		if ctx.Err() == nil {
			emit(Event{Type: EventError, Error: &ExecutionError{Name: "EnvVarsFailed", Value: err.Error()}})
		}
		return
	}
	if len(req.EnvVars) > 0 {
		restore, err := s.setEnv(ctx, eng, c.Language, req.EnvVars)
		if err != nil {
			if errors.Is(err, kernel.ErrDied) {
				c.died(eng)
			}
			if ctx.Err() == nil {
				emit(Event{Type: EventError, Error: &ExecutionError{Name: "EnvVarsFailed", Value: err.Error()}})
			}
			return
		}
		defer func() {
			rctx, cancel := context.WithTimeout(context.Background(), restoreWait)
			defer cancel()
			if _, err := eng.Execute(rctx, restore, kernel.ExecuteOptions{Silent: true}, nil); err != nil {
				s.log.Warn("putting a context's environment back failed", "context", c.ID, "err", err)
				if errors.Is(err, kernel.ErrDied) {
					c.died(eng)
				}
			}
		}()
	}
	sentError := false
	reply, err := eng.Execute(ctx, req.Code, kernel.ExecuteOptions{}, func(o kernel.Output) {
		if ev, ok := eventOf(o); ok {
			if ev.Type == EventError {
				if sentError {
					return
				}
				sentError = true
			}
			emit(ev)
		}
	})
	switch {
	case err == nil:
		if sentError {
			return
		}
		switch {
		case reply.Status == "error" && reply.Error != nil:
			emit(Event{Type: EventError, Error: executionError(reply.Error)})
		case reply.Status == "aborted":
			emit(Event{Type: EventError, Error: &ExecutionError{Name: "ExecutionAborted", Value: "Execution was aborted"}})
		}
	case ctx.Err() != nil:
		// The client is gone; the execution was interrupted.
	case errors.Is(err, kernel.ErrDied):
		c.died(eng)
		emit(Event{Type: EventError, Error: &ExecutionError{Name: "ContextRestarting",
			Value: "The context's kernel exited during the execution (killed for memory, or the code ended it): its state is lost, and the next execution starts it again (" + err.Error() + ")"}})
	default:
		emit(Event{Type: EventError, Error: &ExecutionError{Name: "ExecutionFailed", Value: err.Error()}})
	}
}

// environ is the contexts' environment.
func (s *Server) environ() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.env)
}

// SetEnv sets variables in the environment of every context: of those
// that start from now on, and of the running ones before their next
// execution (a variable an execution's env_vars override is put back to
// this value after it). The daemon sets a warm sandbox's variables so
// when a create takes it.
func (s *Server) SetEnv(env map[string]string) error {
	if err := checkEnvVars(env); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range slices.Sorted(maps.Keys(env)) {
		s.env = setEnv(s.env, k, env[k])
	}
	for _, c := range s.list {
		c.mu.Lock()
		if c.pending == nil {
			c.pending = map[string]string{}
		}
		maps.Copy(c.pending, env)
		c.mu.Unlock()
	}
	return nil
}

// applyPending sets in eng the variables SetEnv set since it started; the
// caller holds c's turn.
func (c *execContext) applyPending(ctx context.Context, eng Engine) error {
	c.mu.Lock()
	pending := c.pending
	c.mu.Unlock()
	if len(pending) == 0 {
		return nil
	}
	var code []string
	for _, k := range slices.Sorted(maps.Keys(pending)) {
		v := pending[k]
		if line, ok := envCode(c.Language, k, &v); ok {
			code = append(code, line)
		}
	}
	if len(code) > 0 {
		if err := runSilent(ctx, eng, c.Language, code); err != nil {
			return err
		}
	}
	c.mu.Lock()
	if maps.Equal(c.pending, pending) {
		c.pending = nil
	}
	c.mu.Unlock()
	return nil
}

// joiner joins lines of lang into one cell.
func joiner(lang string) string {
	if lang == JavaScript || lang == TypeScript {
		return ";\n"
	}
	return "\n"
}

// runSilent runs lines of lang as one silent execution, which must not
// fail.
func runSilent(ctx context.Context, eng Engine, lang string, lines []string) error {
	reply, err := eng.Execute(ctx, strings.Join(lines, joiner(lang)), kernel.ExecuteOptions{Silent: true}, nil)
	if err != nil {
		return err
	}
	if reply.Status != "ok" {
		msg := reply.Status
		if reply.Error != nil {
			msg = reply.Error.Error()
		}
		return fmt.Errorf("setting environment variables: %s", msg)
	}
	return nil
}

// setEnv sets env in eng (a silent execution) and returns the code that
// puts the variables back as the context started with them.
func (s *Server) setEnv(ctx context.Context, eng Engine, lang string, env map[string]string) (restore string, err error) {
	var set, back []string
	global := s.environ()
	for _, k := range slices.Sorted(maps.Keys(env)) {
		v := env[k]
		code, _ := envCode(lang, k, &v)
		set = append(set, code)
		var orig *string
		if v, ok := lookupEnvOK(global, k); ok {
			orig = &v
		}
		code, _ = envCode(lang, k, orig)
		back = append(back, code)
	}
	if err := runSilent(ctx, eng, lang, set); err != nil {
		return "", err
	}
	return strings.Join(back, joiner(lang)), nil
}

func lookupEnvOK(env []string, name string) (string, bool) {
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(env[i], name+"="); ok {
			return v, true
		}
	}
	return "", false
}

// eventOf maps an engine's output to the event E2B's SDKs read.
func eventOf(o kernel.Output) (Event, bool) {
	switch o := o.(type) {
	case *kernel.Stream:
		t := o.Time
		if t.IsZero() {
			t = time.Now()
		}
		typ := EventStdout
		if o.Name == "stderr" {
			typ = EventStderr
		}
		return Event{Type: typ, Text: o.Text, Timestamp: t.UTC().Format(time.RFC3339Nano)}, true
	case *kernel.Input:
		return Event{Type: EventExecutionCount, ExecutionCount: o.ExecutionCount}, true
	case *kernel.Result:
		return Event{Type: EventResult, Result: resultOf(o)}, true
	case *kernel.Error:
		return Event{Type: EventError, Error: executionError(o)}, true
	case *kernel.Dropped:
		what := "an output"
		if o.MsgType != "" {
			what = "a " + o.MsgType + " message"
		}
		return Event{Type: EventStderr, Timestamp: time.Now().UTC().Format(time.RFC3339Nano),
			Text: fmt.Sprintf("[hutch: %s of %d bytes was dropped: %s]\n", what, o.Size, o.Reason)}, true
	}
	return Event{}, false
}

// executionError is e with its traceback as one text, a line per chunk.
func executionError(e *kernel.Error) *ExecutionError {
	var tb strings.Builder
	for _, chunk := range e.Traceback {
		tb.WriteString(chunk)
		if !strings.HasSuffix(chunk, "\n") {
			tb.WriteByte('\n')
		}
	}
	return &ExecutionError{Name: e.Name, Value: e.Value, Traceback: strings.TrimSuffix(tb.String(), "\n")}
}

// resultOf maps a result's MIME bundle to E2B's fields. The plain text
// loses one pair of surrounding quotes (Python's 'bar' is bar), as E2B's
// users expect.
func resultOf(r *kernel.Result) *Result {
	out := &Result{IsMainResult: r.Main, Extra: map[string]any{}}
	for mime, v := range r.Data {
		switch mime {
		case "text/plain":
			out.Text = unquote(text(v))
		case "text/html":
			out.HTML = text(v)
		case "text/markdown":
			out.Markdown = text(v)
		case "image/svg+xml":
			out.SVG = text(v)
		case "image/png":
			out.PNG = strings.Join(strings.Fields(text(v)), "")
		case "image/jpeg":
			out.JPEG = strings.Join(strings.Fields(text(v)), "")
		case "application/pdf":
			out.PDF = strings.Join(strings.Fields(text(v)), "")
		case "text/latex":
			out.LaTeX = text(v)
		case "application/javascript":
			out.JavaScript = text(v)
		case "application/json":
			out.JSON, _ = json.Marshal(v)
		case "e2b/data":
			out.Data, _ = json.Marshal(v)
		case "e2b/chart":
			out.Chart, _ = json.Marshal(v)
		default:
			out.Extra[mime] = v
		}
	}
	return out
}

// text is a MIME value as text: a string, or a list of lines (as some
// kernels send them).
func text(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case []any:
		var b strings.Builder
		for _, x := range v {
			if s, ok := x.(string); ok {
				b.WriteString(s)
			}
		}
		return b.String()
	}
	b, _ := json.Marshal(v)
	return string(b)
}

func unquote(s string) string {
	if len(s) >= 2 && (s[0] == '\'' && s[len(s)-1] == '\'' || s[0] == '"' && s[len(s)-1] == '"') {
		return s[1 : len(s)-1]
	}
	return s
}

// ready answers once every context there is has started its kernel (or
// failed to): a warm sandbox is ready when its default contexts are.
func (s *Server) ready(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	list := slices.Clone(s.list)
	s.mu.Unlock()
	for _, c := range list {
		select {
		case <-c.ready:
		case <-r.Context().Done():
			return
		}
	}
	writeJSON(w, http.StatusOK, nil)
}

// EnvRequest is the body of POST /hutch/env (SetEnv), hutch's own route.
type EnvRequest struct {
	Env map[string]string `json:"env"`
}

func (s *Server) setEnvHandler(w http.ResponseWriter, r *http.Request) {
	var req EnvRequest
	if !readBody(w, r, &req) {
		return
	}
	if err := s.SetEnv(req.Env); err != nil {
		unprocessable(w, "env: %v", err)
		return
	}
	writeJSON(w, http.StatusOK, nil)
}

// createContext is POST /contexts.
func (s *Server) createContext(w http.ResponseWriter, r *http.Request) {
	var req CreateContextRequest
	if !readBody(w, r, &req) {
		return
	}
	lang := Normalize(req.Language)
	dir := req.Cwd
	if dir == "" {
		dir = s.home
	}
	c, err := s.newContext(lang, dir, false)
	if err == nil {
		err = c.wait(r.Context())
	}
	if err != nil {
		writeText(w, http.StatusInternalServerError, "Failed to create context: "+err.Error())
		return
	}
	writeJSON(w, http.StatusOK, c.Context)
}

// listContexts is GET /contexts: every context, in creation order.
func (s *Server) listContexts(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	out := make([]Context, 0, len(s.list))
	for _, c := range s.list {
		out = append(out, c.Context)
	}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) deleteContext(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	c := s.lookup(id)
	if c == nil || !s.remove(c) {
		writeText(w, http.StatusNotFound, "Context "+id+" not found")
		return
	}
	go c.close()
	writeJSON(w, http.StatusOK, nil)
}

func (s *Server) restartContext(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	c := s.lookup(id)
	if c == nil {
		writeText(w, http.StatusNotFound, "Context "+id+" not found")
		return
	}
	ctx := r.Context()
	if err := c.wait(ctx); err != nil {
		writeText(w, http.StatusInternalServerError, "Failed to restart context "+id+": "+err.Error())
		return
	}
	// A running execution is interrupted, as Jupyter's restart ends it.
	c.mu.Lock()
	eng := c.eng
	c.mu.Unlock()
	if eng != nil {
		eng.Interrupt()
	}
	if !c.take(ctx) {
		return
	}
	defer c.give()
	c.mu.Lock()
	eng = c.eng
	c.mu.Unlock()
	var err error
	if eng == nil {
		_, err = c.engine(ctx)
	} else if err = eng.Restart(ctx); err != nil {
		c.died(eng)
	}
	if err != nil {
		writeText(w, http.StatusInternalServerError, "Failed to restart context "+id+": "+err.Error())
		return
	}
	writeJSON(w, http.StatusOK, nil)
}
