package api

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/hutch-sandbox/hutch/internal/agent"
	"github.com/hutch-sandbox/hutch/internal/daemon"
	"github.com/hutch-sandbox/hutch/internal/execproto"
)

// maxArgs bounds the arguments of a command.
const maxArgs = 4096

// ExecBody is the body of POST /v1/sandboxes/{id}/exec.
type ExecBody struct {
	// Args is the command and its arguments; Args[0] is looked up in PATH
	// unless it contains a slash.
	Args []string `json:"args"`
	// Env is added to the command's environment.
	Env map[string]string `json:"env,omitempty"`
	// Cwd is the working directory, absolute; "" is the workspace.
	Cwd string `json:"cwd,omitempty"`
	// Stdin gives the command a stdin the stream feeds (upgrade only).
	Stdin bool `json:"stdin,omitempty"`
	// TTY runs the command on a terminal: stdout carries everything, and
	// stderr is empty.
	TTY bool `json:"tty,omitempty"`
	// Rows is the terminal's height (24 when zero).
	Rows uint16 `json:"rows,omitempty"`
	// Cols is the terminal's width (80 when zero).
	Cols uint16 `json:"cols,omitempty"`
	// Timeout kills the command once it has run that long ("30s").
	Timeout string `json:"timeout,omitempty"`
	// Input is the command's whole stdin (without upgrade only).
	Input string `json:"input,omitempty"`
	// InputB64 is the command's whole stdin, base64 (without upgrade
	// only), for input that is not UTF-8.
	InputB64 []byte `json:"input_b64,omitempty"`
}

// RunResult is the answer of an exec run to completion.
type RunResult struct {
	// PID was the command's pid in the sandbox.
	PID int `json:"pid"`
	// Stdout is the command's stdout when it is valid UTF-8.
	Stdout string `json:"stdout"`
	// Stderr is the command's stderr when it is valid UTF-8.
	Stderr string `json:"stderr"`
	// StdoutB64 holds stdout instead when it is not valid UTF-8.
	StdoutB64 []byte `json:"stdout_b64,omitempty"`
	// StderrB64 holds stderr instead when it is not valid UTF-8.
	StderrB64 []byte `json:"stderr_b64,omitempty"`
	// ExitCode is the exit code, 128+Signal when a signal killed it.
	ExitCode int `json:"exit_code"`
	// Signal is the signal that killed the command, or 0.
	Signal int `json:"signal"`
	// TimedOut reports that the timeout killed it.
	TimedOut bool `json:"timed_out"`
	// Truncated reports that an output exceeded the limit and was cut.
	Truncated bool `json:"truncated"`
}

// ProcessInfo describes a command started by exec that still runs.
type ProcessInfo struct {
	// PID is its pid in the sandbox.
	PID int `json:"pid"`
	// Args are its arguments (the first 4 KiB of them).
	Args []string `json:"args"`
	// Started is when it started.
	Started time.Time `json:"started"`
}

// SignalBody is the body of POST .../processes/{pid}/signal.
type SignalBody struct {
	// Signal is the signal's number (15 is SIGTERM, 9 SIGKILL).
	Signal int `json:"signal"`
}

// execRequest checks an exec body and turns it into the agent's request.
func execRequest(b ExecBody, stream bool) (agent.ExecRequest, error) {
	var req agent.ExecRequest
	switch {
	case len(b.Args) == 0 || b.Args[0] == "":
		return req, errorf(daemon.ErrInvalid, "args: no command")
	case len(b.Args) > maxArgs:
		return req, errorf(daemon.ErrInvalid, "args: %d arguments, at most %d", len(b.Args), maxArgs)
	case stream && (b.Input != "" || len(b.InputB64) > 0):
		return req, errorf(daemon.ErrInvalid, "input, input_b64: only without upgrade; send stdin frames on the stream")
	case !stream && b.Stdin:
		return req, errorf(daemon.ErrInvalid, "stdin: needs the stream (Upgrade: %s); give input or input_b64 instead", execproto.Protocol)
	case b.Input != "" && len(b.InputB64) > 0:
		return req, errorf(daemon.ErrInvalid, "input, input_b64: give one of them")
	case !b.TTY && (b.Rows != 0 || b.Cols != 0):
		return req, errorf(daemon.ErrInvalid, "rows, cols: only with tty")
	}
	for i, a := range b.Args {
		if strings.IndexByte(a, 0) >= 0 {
			return req, errorf(daemon.ErrInvalid, "args[%d]: contains NUL", i)
		}
	}
	if b.Cwd != "" {
		if err := checkPath("cwd", b.Cwd); err != nil {
			return req, err
		}
	}
	if err := checkEnv("env", b.Env); err != nil {
		return req, err
	}
	timeout, err := parseTimeout("timeout", b.Timeout)
	if err != nil {
		return req, err
	}
	return agent.ExecRequest{
		Args:    b.Args,
		Env:     envList(b.Env),
		Dir:     b.Cwd,
		Stdin:   b.Stdin || b.Input != "" || len(b.InputB64) > 0,
		TTY:     b.TTY,
		Rows:    b.Rows,
		Cols:    b.Cols,
		Timeout: timeout,
	}, nil
}

// upgrade reports whether the request asks for the exec stream.
func upgrade(r *http.Request) (bool, error) {
	up := r.Header.Get("Upgrade")
	if up == "" {
		return false, nil
	}
	if !headerHas(r.Header, "Connection", "upgrade") {
		return false, errorf(daemon.ErrInvalid, "Upgrade without Connection: Upgrade")
	}
	if !strings.EqualFold(strings.TrimSpace(up), execproto.Protocol) {
		return false, errorf(daemon.ErrInvalid, "Upgrade: unknown protocol %q (want %s)", up, execproto.Protocol)
	}
	if r.ProtoMajor != 1 {
		return false, errorf(daemon.ErrInvalid, "the exec stream needs HTTP/1.1, not %s", r.Proto)
	}
	return true, nil
}

// headerHas reports whether the comma-separated header name holds token.
func headerHas(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for t := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

func (h *handler) exec(w http.ResponseWriter, r *http.Request) error {
	if _, err := query(r); err != nil {
		return err
	}
	stream, err := upgrade(r)
	if err != nil {
		return err
	}
	var b ExecBody
	if err := decodeJSON(w, r, &b, false); err != nil {
		return err
	}
	req, err := execRequest(b, stream)
	if err != nil {
		return err
	}
	ac, err := h.agentFor(r)
	if err != nil {
		return err
	}
	if stream {
		return h.execStream(w, r, ac, req)
	}
	input := []byte(b.Input)
	if len(b.InputB64) > 0 {
		input = b.InputB64
	}
	return h.execRun(w, r, ac, req, input)
}

// execRun runs a command to completion and answers with its result.
func (h *handler) execRun(w http.ResponseWriter, r *http.Request, ac *agent.Client, req agent.ExecRequest, input []byte) error {
	ctx := r.Context()
	start := time.Now()
	p, err := ac.Exec(ctx, req)
	if err != nil {
		return err
	}
	defer func() { h.met.ran(tenantOf(r), "run", time.Since(start)) }()
	h.emitExec(r, p, req.Args)
	var out atomic.Int64
	var code *int // set once the command ended
	defer func() { auditExec(r, req.Args, start, code, int64(len(input)), out.Load()) }()
	id := r.PathValue("id")
	h.procs.add(id, p)
	defer h.procs.remove(id, p)
	if p.Stdin != nil {
		go func() {
			_, _ = p.Stdin.Write(input)
			_ = p.Stdin.Close()
		}()
	}
	stdout, stderr := &capture{limit: h.cfg.MaxOutput}, &capture{limit: h.cfg.MaxOutput}
	var rl relay
	rl.start(p.Stdout, counted(&out, stdout.write))
	rl.start(p.Stderr, counted(&out, stderr.write))
	status, err := waitProcess(ctx, p)
	h.emitExit(r, p, status, err)
	rl.settle()
	if err != nil {
		return err
	}
	code = &status.Code
	res := RunResult{PID: p.PID, ExitCode: status.Code, Signal: status.Signal, TimedOut: status.TimedOut}
	var outTrunc, errTrunc bool
	res.Stdout, res.StdoutB64, outTrunc = stdout.result()
	res.Stderr, res.StderrB64, errTrunc = stderr.result()
	res.Truncated = outTrunc || errTrunc
	writeJSON(w, http.StatusOK, res)
	return nil
}

// counted returns sink that also adds the length of what it gets to n.
func counted(n *atomic.Int64, sink func([]byte) error) func([]byte) error {
	return func(b []byte) error {
		n.Add(int64(len(b)))
		return sink(b)
	}
}

// waitProcess waits for p to end; if ctx ends first, it kills p and still
// waits, and returns ctx's error.
func waitProcess(ctx context.Context, p *agent.Process) (agent.ExitStatus, error) {
	type waited struct {
		status agent.ExitStatus
		err    error
	}
	ch := make(chan waited, 1)
	go func() {
		s, err := p.Wait()
		ch <- waited{s, err}
	}()
	select {
	case w := <-ch:
		return w.status, w.err
	case <-ctx.Done():
		_ = p.Signal(syscall.SIGKILL)
		<-ch
		return agent.ExitStatus{}, ctx.Err()
	}
}

// capture keeps the first limit bytes of an output.
type capture struct {
	mu        sync.Mutex
	limit     int
	buf       []byte
	truncated bool
	closed    bool
}

func (c *capture) write(b []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	room := c.limit - len(c.buf)
	if len(b) > room {
		b = b[:max(room, 0)]
		c.truncated = true
	}
	c.buf = append(c.buf, b...)
	return nil
}

// result closes the capture and returns its content, as a string when it
// is valid UTF-8 and else as bytes for base64.
func (c *capture) result() (string, []byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	if utf8.Valid(c.buf) {
		return string(c.buf), nil, c.truncated
	}
	return "", c.buf, c.truncated
}

// relay copies a command's output streams to sinks. A sink that fails is
// no longer called, but its stream is still read to its end, so that the
// command never blocks on it.
type relay struct {
	wg      sync.WaitGroup
	copiers []*copier
}

type copier struct {
	idleSince atomic.Int64 // when it began waiting for data, 0 while it handles some
	finished  atomic.Bool
	src       io.Reader
}

// pending is what a command's output stream says of itself: data waiting
// to be read, or its end (agent streams do).
type pending interface{ Pending() bool }

// start copies r to sink in a new goroutine.
func (rl *relay) start(r io.Reader, sink func([]byte) error) {
	c := &copier{src: r}
	rl.copiers = append(rl.copiers, c)
	rl.wg.Add(1)
	go func() {
		defer rl.wg.Done()
		defer c.finished.Store(true)
		buf := make([]byte, execproto.Chunk)
		failed := false
		for {
			c.idleSince.Store(time.Now().UnixNano())
			n, err := r.Read(buf)
			c.idleSince.Store(0)
			if n > 0 && !failed && sink(buf[:n]) != nil {
				failed = true
			}
			if err != nil {
				return
			}
		}
	}()
}

// settle waits until every stream ended, or until those still open have
// been idle for OutputGrace (a process in the background holds them).
func (rl *relay) settle() {
	done := make(chan struct{})
	go func() {
		rl.wg.Wait()
		close(done)
	}()
	tick := time.NewTicker(OutputGrace / 5)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return
		case <-tick.C:
			if rl.idle() {
				return
			}
		}
	}
}

func (rl *relay) idle() bool {
	now := time.Now().UnixNano()
	for _, c := range rl.copiers {
		if c.finished.Load() {
			continue
		}
		since := c.idleSince.Load()
		if since == 0 || time.Duration(now-since) < OutputGrace {
			return false
		}
		// Output that arrived with the exit is not idleness: the agent
		// sends everything a command wrote before its exit.
		if p, ok := c.src.(pending); ok && p.Pending() {
			return false
		}
	}
	return true
}

func (h *handler) processes(w http.ResponseWriter, r *http.Request) error {
	if _, err := query(r); err != nil {
		return err
	}
	ac, err := h.agentFor(r)
	if err != nil {
		return err
	}
	ps, err := ac.ListProcesses(r.Context())
	if err != nil {
		return err
	}
	out := make([]ProcessInfo, 0, len(ps))
	for _, p := range ps {
		out = append(out, ProcessInfo{PID: p.PID, Args: p.Args, Started: p.Started})
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (h *handler) signal(w http.ResponseWriter, r *http.Request) error {
	if _, err := query(r); err != nil {
		return err
	}
	id := r.PathValue("id")
	pid, err := strconv.Atoi(r.PathValue("pid"))
	if err != nil || pid <= 0 {
		return errorf(daemon.ErrInvalid, "pid %q: want a positive integer", r.PathValue("pid"))
	}
	var b SignalBody
	if err := decodeJSON(w, r, &b, false); err != nil {
		return err
	}
	if b.Signal < 1 || b.Signal > 64 {
		return errorf(daemon.ErrInvalid, "signal: %d is not a signal number (1-64)", b.Signal)
	}
	if _, err := h.agentFor(r); err != nil {
		return err
	}
	p := h.procs.get(id, pid)
	if p == nil {
		return errorf(daemon.ErrNotFound, "process %d: no command started by exec runs with this pid", pid)
	}
	if err := p.Signal(syscall.Signal(b.Signal)); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// procTable holds the commands started by exec that still run, per
// sandbox, so that they can be signalled by pid.
type procTable struct {
	mu sync.Mutex
	m  map[string]map[int]*agent.Process
}

func newProcTable() *procTable { return &procTable{m: map[string]map[int]*agent.Process{}} }

func (t *procTable) add(id string, p *agent.Process) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m[id] == nil {
		t.m[id] = map[int]*agent.Process{}
	}
	t.m[id][p.PID] = p
}

func (t *procTable) remove(id string, p *agent.Process) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m[id][p.PID] == p {
		delete(t.m[id], p.PID)
		if len(t.m[id]) == 0 {
			delete(t.m, id)
		}
	}
}

func (t *procTable) get(id string, pid int) *agent.Process {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.m[id][pid]
}
