package envd

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hutch-sandbox/hutch/internal/agent"
)

const (
	// maxProcesses bounds the commands one sandbox runs through envd.
	maxProcesses = 1024
	// subscriberBuffer is the number of output chunks buffered for one
	// stream connected to a command before its output waits.
	subscriberBuffer = 64
	// outputChunk bounds the data of one data event.
	outputChunk = 32 << 10
	// exitGrace is how long the end of a command waits for its output
	// after it exited (a background child may hold its stdout open).
	exitGrace = 500 * time.Millisecond
)

// pbBytes is a protobuf bytes field in JSON: base64, standard or URL-safe,
// padded or not.
type pbBytes []byte

// UnmarshalJSON implements json.Unmarshaler.
func (b *pbBytes) UnmarshalJSON(data []byte) error {
	var s string
	if err := json.Unmarshal(data, &s); err != nil {
		return err
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if v, err := enc.DecodeString(s); err == nil {
			*b = v
			return nil
		}
	}
	return errors.New("bytes field: not base64")
}

// processConfig is process.ProcessConfig.
type processConfig struct {
	Cmd  string            `json:"cmd"`
	Args []string          `json:"args,omitempty"`
	Envs map[string]string `json:"envs,omitempty"`
	Cwd  *string           `json:"cwd,omitempty"`
}

// selector is process.ProcessSelector.
type selector struct {
	PID *uint32 `json:"pid,omitempty"`
	Tag *string `json:"tag,omitempty"`
}

// ptyConfig is process.PTY.
type ptyConfig struct {
	Size *struct {
		Cols uint32 `json:"cols"`
		Rows uint32 `json:"rows"`
	} `json:"size"`
}

// processInput is process.ProcessInput.
type processInput struct {
	Stdin pbBytes `json:"stdin,omitempty"`
	PTY   pbBytes `json:"pty,omitempty"`
}

// processEvent is process.ProcessEvent.
type processEvent struct {
	Start     *startEvent `json:"start,omitempty"`
	Data      *dataEvent  `json:"data,omitempty"`
	End       *endEvent   `json:"end,omitempty"`
	Keepalive *struct{}   `json:"keepalive,omitempty"`
}

type startEvent struct {
	PID uint32 `json:"pid"`
}

type dataEvent struct {
	Stdout []byte `json:"stdout,omitempty"`
	Stderr []byte `json:"stderr,omitempty"`
	PTY    []byte `json:"pty,omitempty"`
}

type endEvent struct {
	ExitCode int32   `json:"exitCode"`
	Exited   bool    `json:"exited"`
	Status   string  `json:"status"`
	Error    *string `json:"error,omitempty"`
}

// eventResponse is process.StartResponse and process.ConnectResponse.
type eventResponse struct {
	Event *processEvent `json:"event"`
}

// registry holds the commands envd started in one sandbox.
type registry struct {
	mu    sync.Mutex
	byPID map[int]*proc
}

func newRegistry() *registry { return &registry{byPID: make(map[int]*proc)} }

// proc is a command envd started.
type proc struct {
	pid int
	tag *string
	cfg processConfig
	tty bool
	p   *agent.Process

	args    []string     // as run, for the audit log
	start   time.Time    // when it started
	in, out atomic.Int64 // bytes of input sent, of output read

	inMu        sync.Mutex // serializes writes to stdin
	stdinClosed bool       // under inMu

	mu   sync.Mutex
	subs map[*sub]struct{}

	done chan struct{} // closed once end is set
	end  endEvent
	// lost is set (before done is closed) when the sandbox's agent
	// connection ended before the command did: the sandbox was killed,
	// or paused, under it.
	lost error
}

// sub is a stream connected to a command.
type sub struct {
	ch   chan *processEvent
	gone chan struct{} // closed when the stream no longer reads ch
}

func (p *proc) subscribe() *sub {
	s := &sub{ch: make(chan *processEvent, subscriberBuffer), gone: make(chan struct{})}
	p.mu.Lock()
	p.subs[s] = struct{}{}
	p.mu.Unlock()
	return s
}

func (p *proc) unsubscribe(s *sub) {
	p.mu.Lock()
	delete(p.subs, s)
	p.mu.Unlock()
	close(s.gone)
}

// fanout hands ev to every connected stream, waiting for those whose
// buffer is full.
func (p *proc) fanout(ev *processEvent) {
	p.mu.Lock()
	subs := slices.Collect(maps.Keys(p.subs))
	p.mu.Unlock()
	for _, s := range subs {
		select {
		case s.ch <- ev:
		case <-s.gone:
		}
	}
}

// pump reads one output stream of the command to its end.
func (p *proc) pump(r io.Reader, kind string) {
	buf := make([]byte, outputChunk)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			p.out.Add(int64(n))
			data := slices.Clone(buf[:n])
			d := &dataEvent{}
			switch kind {
			case "stdout":
				d.Stdout = data
			case "stderr":
				d.Stderr = data
			default:
				d.PTY = data
			}
			p.fanout(&processEvent{Data: d})
		}
		if err != nil {
			return
		}
	}
}

// run follows the command to its end, then forgets it and records it in
// the audit log of b.
func (p *proc) run(b *box) {
	reg := b.procs
	var pumps sync.WaitGroup
	pumps.Add(1)
	if p.tty {
		go func() { defer pumps.Done(); p.pump(p.p.Stdout, "pty") }()
	} else {
		pumps.Add(1)
		go func() { defer pumps.Done(); p.pump(p.p.Stdout, "stdout") }()
		go func() { defer pumps.Done(); p.pump(p.p.Stderr, "stderr") }()
	}
	pumpsDone := make(chan struct{})
	go func() { pumps.Wait(); close(pumpsDone) }()
	st, err := p.p.Wait()
	if err == nil {
		// The output the command wrote came before its exit: it is read
		// to the last byte; then a stream still open (a process left in
		// the background holds it) is not waited for past the grace.
		t := time.NewTimer(exitGrace)
	wait:
		for {
			select {
			case <-pumpsDone:
				break wait
			case <-t.C:
				if !p.p.OutputPending() {
					break wait
				}
				t.Reset(exitGrace / 10)
			}
		}
		t.Stop()
	}
	p.end = endOf(st, err)
	if errors.Is(err, agent.ErrClosed) {
		p.lost = err
	}
	reg.mu.Lock()
	if reg.byPID[p.pid] == p {
		delete(reg.byPID, p.pid)
	}
	reg.mu.Unlock()
	close(p.done)
	ev := Event{
		Time: p.start, Action: "exec", Command: p.args, Duration: time.Since(p.start),
		BytesIn: p.in.Load(), BytesOut: p.out.Load(),
	}
	if err == nil {
		code := st.Code
		ev.ExitCode = &code
	}
	b.record(ev)
}

// endOf is the end event of a command that ended with st, or whose end
// could not be learnt (err). As envd's, a command that did not exit with 0
// has an error, which the SDKs' CommandExitError carries as its message:
// its status ("exit status 3", "signal: killed").
func endOf(st agent.ExitStatus, err error) endEvent {
	if err != nil {
		msg := err.Error()
		return endEvent{ExitCode: -1, Status: "unknown", Error: &msg}
	}
	if st.Signal != 0 {
		status := "signal: " + syscall.Signal(st.Signal).String()
		msg := status
		if st.TimedOut {
			msg += " (the command timed out)"
		}
		return endEvent{ExitCode: -1, Status: status, Error: &msg}
	}
	e := endEvent{ExitCode: int32(st.Code), Exited: true, Status: "exit status " + strconv.Itoa(st.Code)}
	if st.Code != 0 {
		msg := e.Status
		e.Error = &msg
	}
	return e
}

// find returns the running command sel selects.
func (reg *registry) find(sel *selector) (*proc, error) {
	if sel == nil || (sel.PID == nil && sel.Tag == nil) {
		return nil, errorf(codeInvalidArgument, "no process selector (pid or tag)")
	}
	reg.mu.Lock()
	defer reg.mu.Unlock()
	if sel.PID != nil {
		if p := reg.byPID[int(*sel.PID)]; p != nil {
			return p, nil
		}
		return nil, errorf(codeNotFound, "process with pid %d not found", *sel.PID)
	}
	var found *proc
	for _, p := range reg.byPID {
		if p.tag != nil && *p.tag == *sel.Tag && (found == nil || p.pid > found.pid) {
			found = p
		}
	}
	if found == nil {
		return nil, errorf(codeNotFound, "process with tag %.64q not found", *sel.Tag)
	}
	return found, nil
}

func (h *handler) processStart(ctx context.Context, b *box, r *http.Request, body []byte, s *stream) (err error) {
	// A command that started is recorded in the audit log once it ended
	// (by run); one that did not start, here.
	start := time.Now()
	var args []string
	started := false
	defer func() {
		if err != nil && !started {
			b.record(Event{Time: start, Action: "exec", Command: args, Error: asError(err).Code})
		}
	}()
	var req struct {
		Process *processConfig `json:"process"`
		PTY     *ptyConfig     `json:"pty"`
		Tag     *string        `json:"tag"`
		Stdin   *bool          `json:"stdin"`
	}
	if err := decode(body, &req); err != nil {
		return err
	}
	if req.Process == nil || req.Process.Cmd == "" {
		return errorf(codeInvalidArgument, "start: no command")
	}
	args = append([]string{req.Process.Cmd}, req.Process.Args...)
	u, err := h.requestUser(r)
	if err != nil {
		return err
	}
	cfg := *req.Process
	dir := u.home
	if cfg.Cwd != nil && *cfg.Cwd != "" {
		if dir, err = resolvePath(u, *cfg.Cwd); err != nil {
			return fmt.Errorf("start %s: cwd: %w", cfg.Cmd, err)
		}
	}
	env := []string{"HOME=" + u.home, "USER=" + u.name, "LOGNAME=" + u.name}
	for _, k := range slices.Sorted(maps.Keys(cfg.Envs)) {
		if k == "" {
			return errorf(codeInvalidArgument, "start %s: environment variable with an empty name", cfg.Cmd)
		}
		env = append(env, k+"="+cfg.Envs[k])
	}
	xr := agent.ExecRequest{
		Args:  args,
		Env:   env,
		Dir:   dir,
		Stdin: req.Stdin == nil || *req.Stdin,
		User:  &agent.Credential{UID: u.uid, GID: u.gid},
	}
	// As envd does, the request's deadline (Connect-Timeout-Ms: the SDKs'
	// timeoutMs) bounds the command itself, not only this stream: the
	// command is killed when it passes, even if nobody is connected.
	if dl, ok := ctx.Deadline(); ok {
		xr.Timeout = max(time.Until(dl), time.Millisecond)
	}
	if req.PTY != nil {
		xr.TTY, xr.Stdin = true, true
		if sz := req.PTY.Size; sz != nil {
			xr.Rows, xr.Cols = uint16(min(sz.Rows, 1<<15)), uint16(min(sz.Cols, 1<<15))
		}
	}
	b.procs.mu.Lock()
	n := len(b.procs.byPID)
	b.procs.mu.Unlock()
	if n >= maxProcesses {
		return errorf(codeResourceExhausted, "start %s: %d commands are running", cfg.Cmd, n)
	}
	ap, err := b.agent.Exec(ctx, xr)
	if err != nil {
		return fmt.Errorf("start %s: %w", cfg.Cmd, err)
	}
	started = true
	cfg.Cwd = &dir
	p := &proc{
		pid: ap.PID, tag: req.Tag, cfg: cfg, tty: xr.TTY, p: ap, args: args, start: start,
		stdinClosed: !xr.Stdin, subs: make(map[*sub]struct{}), done: make(chan struct{}),
	}
	sub := p.subscribe() // before the output flows
	b.procs.mu.Lock()
	b.procs.byPID[p.pid] = p
	b.procs.mu.Unlock()
	go p.run(b)
	h.log.Debug("envd started a command", "sandbox", b.id, "pid", p.pid, "cmd", cfg.Cmd)
	return follow(ctx, s, p, sub, keepaliveInterval(r))
}

func (h *handler) processConnect(ctx context.Context, b *box, r *http.Request, body []byte, s *stream) error {
	var req struct {
		Process *selector `json:"process"`
	}
	if err := decode(body, &req); err != nil {
		return err
	}
	p, err := b.procs.find(req.Process)
	if err != nil {
		return err
	}
	return follow(ctx, s, p, p.subscribe(), keepaliveInterval(r))
}

// follow streams the events of p to s: its start, its output from now on,
// its end.
func follow(ctx context.Context, s *stream, p *proc, sb *sub, keepalive time.Duration) error {
	defer p.unsubscribe(sb)
	if err := s.send(eventResponse{&processEvent{Start: &startEvent{PID: uint32(p.pid)}}}); err != nil {
		return err
	}
	var tick <-chan time.Time
	if keepalive > 0 {
		t := time.NewTicker(keepalive)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case ev := <-sb.ch:
			if err := s.send(eventResponse{ev}); err != nil {
				return err
			}
		case <-p.done:
			for {
				select {
				case ev := <-sb.ch:
					if err := s.send(eventResponse{ev}); err != nil {
						return err
					}
				default:
					if p.lost != nil {
						// No end: the stream is cut (see streaming).
						return p.lost
					}
					end := p.end
					return s.send(eventResponse{&processEvent{End: &end}})
				}
			}
		case <-tick:
			if err := s.send(eventResponse{&processEvent{Keepalive: &struct{}{}}}); err != nil {
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// processInfo is process.ProcessInfo.
type processInfo struct {
	Config processConfig `json:"config"`
	PID    uint32        `json:"pid"`
	Tag    *string       `json:"tag,omitempty"`
}

func (h *handler) processList(_ context.Context, b *box, _ *http.Request, body []byte) (any, error) {
	if err := decode(body, &struct{}{}); err != nil {
		return nil, err
	}
	b.procs.mu.Lock()
	ps := slices.Collect(maps.Values(b.procs.byPID))
	b.procs.mu.Unlock()
	slices.SortFunc(ps, func(a, b *proc) int { return a.pid - b.pid })
	out := struct {
		Processes []processInfo `json:"processes"`
	}{Processes: []processInfo{}}
	for _, p := range ps {
		out.Processes = append(out.Processes, processInfo{Config: p.cfg, PID: uint32(p.pid), Tag: p.tag})
	}
	return out, nil
}

func (h *handler) processSendInput(_ context.Context, b *box, r *http.Request, body []byte) (any, error) {
	var req struct {
		Process *selector     `json:"process"`
		Input   *processInput `json:"input"`
	}
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	p, err := b.procs.find(req.Process)
	if err != nil {
		return nil, err
	}
	if req.Input == nil {
		return struct{}{}, nil
	}
	data := req.Input.Stdin
	if len(req.Input.PTY) > 0 {
		if !p.tty {
			return nil, errorf(codeInvalidArgument, "send input to process %d: it has no terminal", p.pid)
		}
		data = req.Input.PTY
	}
	p.inMu.Lock()
	defer p.inMu.Unlock()
	if p.stdinClosed || p.p.Stdin == nil {
		return nil, errorf(codeFailedPrecondition, "send input to process %d: its stdin is closed or was not enabled", p.pid)
	}
	if len(data) == 0 {
		return struct{}{}, nil
	}
	n, err := p.p.Stdin.Write(data)
	p.in.Add(int64(n))
	auditCommand(r, p.args, int64(n))
	if err != nil {
		return nil, fmt.Errorf("send input to process %d: %w", p.pid, err)
	}
	return struct{}{}, nil
}

func (h *handler) processCloseStdin(_ context.Context, b *box, r *http.Request, body []byte) (any, error) {
	var req struct {
		Process *selector `json:"process"`
	}
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	p, err := b.procs.find(req.Process)
	if err != nil {
		return nil, err
	}
	auditCommand(r, p.args, 0)
	p.inMu.Lock()
	defer p.inMu.Unlock()
	if p.stdinClosed || p.p.Stdin == nil {
		return struct{}{}, nil
	}
	p.stdinClosed = true
	if err := p.p.Stdin.Close(); err != nil {
		return nil, fmt.Errorf("close stdin of process %d: %w", p.pid, err)
	}
	return struct{}{}, nil
}

// signalNumber parses a process.Signal: its name or its number.
func signalNumber(raw json.RawMessage) (syscall.Signal, error) {
	var name string
	if json.Unmarshal(raw, &name) == nil {
		switch name {
		case "SIGNAL_SIGKILL":
			return syscall.SIGKILL, nil
		case "SIGNAL_SIGTERM":
			return syscall.SIGTERM, nil
		}
		return 0, errorf(codeInvalidArgument, "signal %.40q: not SIGNAL_SIGTERM or SIGNAL_SIGKILL", name)
	}
	var n int
	if err := json.Unmarshal(raw, &n); err != nil {
		return 0, errorf(codeInvalidArgument, "signal: %v", err)
	}
	switch n {
	case 9:
		return syscall.SIGKILL, nil
	case 15:
		return syscall.SIGTERM, nil
	}
	return 0, errorf(codeInvalidArgument, "signal %d: not SIGTERM (15) or SIGKILL (9)", n)
}

func (h *handler) processSendSignal(_ context.Context, b *box, r *http.Request, body []byte) (any, error) {
	var req struct {
		Process *selector       `json:"process"`
		Signal  json.RawMessage `json:"signal"`
	}
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	if len(req.Signal) == 0 {
		return nil, errorf(codeInvalidArgument, "send signal: no signal")
	}
	sig, err := signalNumber(req.Signal)
	if err != nil {
		return nil, err
	}
	p, err := b.procs.find(req.Process)
	if err != nil {
		return nil, err
	}
	auditCommand(r, p.args, 0)
	if err := p.p.Signal(sig); err != nil {
		if errors.Is(err, os.ErrProcessDone) {
			return nil, errorf(codeNotFound, "process with pid %d has exited", p.pid)
		}
		return nil, fmt.Errorf("signal process %d: %w", p.pid, err)
	}
	return struct{}{}, nil
}

func (h *handler) processUpdate(_ context.Context, b *box, r *http.Request, body []byte) (any, error) {
	var req struct {
		Process *selector  `json:"process"`
		PTY     *ptyConfig `json:"pty"`
	}
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	p, err := b.procs.find(req.Process)
	if err != nil {
		return nil, err
	}
	auditCommand(r, p.args, 0)
	if req.PTY == nil || req.PTY.Size == nil {
		return struct{}{}, nil
	}
	sz := req.PTY.Size
	if sz.Rows == 0 || sz.Cols == 0 || sz.Rows > 1<<15 || sz.Cols > 1<<15 {
		return nil, errorf(codeInvalidArgument, "resize process %d: size %dx%d out of range", p.pid, sz.Cols, sz.Rows)
	}
	if err := p.p.Resize(uint16(sz.Rows), uint16(sz.Cols)); err != nil {
		return nil, err
	}
	return struct{}{}, nil
}
