package envd

import (
	"context"
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

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/hutch-sandbox/hutch/internal/agent"
	pb "github.com/hutch-sandbox/hutch/internal/envd/envdpb/process"
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
	cfg *pb.ProcessConfig // its cwd resolved
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
	end  *pb.ProcessEvent_EndEvent
	// timedOut is set (before done is closed) when the command was
	// killed for its timeout: its start request's deadline.
	timedOut bool
	// lost is set (before done is closed) when the sandbox's agent
	// connection ended before the command did: the sandbox was killed,
	// or paused, under it.
	lost error
}

// sub is a stream connected to a command.
type sub struct {
	ch   chan *pb.ProcessEvent
	gone chan struct{} // closed when the stream no longer reads ch
}

func (p *proc) subscribe() *sub {
	s := &sub{ch: make(chan *pb.ProcessEvent, subscriberBuffer), gone: make(chan struct{})}
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
func (p *proc) fanout(ev *pb.ProcessEvent) {
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
			d := &pb.ProcessEvent_DataEvent{}
			switch kind {
			case "stdout":
				d.Output = &pb.ProcessEvent_DataEvent_Stdout{Stdout: data}
			case "stderr":
				d.Output = &pb.ProcessEvent_DataEvent_Stderr{Stderr: data}
			default:
				d.Output = &pb.ProcessEvent_DataEvent_Pty{Pty: data}
			}
			p.fanout(&pb.ProcessEvent{Event: &pb.ProcessEvent_Data{Data: d}})
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
	p.timedOut = err == nil && st.TimedOut
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
func endOf(st agent.ExitStatus, err error) *pb.ProcessEvent_EndEvent {
	if err != nil {
		msg := err.Error()
		return &pb.ProcessEvent_EndEvent{ExitCode: -1, Status: "unknown", Error: &msg}
	}
	if st.Signal != 0 {
		status := "signal: " + syscall.Signal(st.Signal).String()
		msg := status
		if st.TimedOut {
			msg += " (the command timed out)"
		}
		return &pb.ProcessEvent_EndEvent{ExitCode: -1, Status: status, Error: &msg}
	}
	e := &pb.ProcessEvent_EndEvent{ExitCode: int32(st.Code), Exited: true, Status: "exit status " + strconv.Itoa(st.Code)}
	if st.Code != 0 {
		msg := e.Status
		e.Error = &msg
	}
	return e
}

// find returns the running command sel selects.
func (reg *registry) find(sel *pb.ProcessSelector) (*proc, error) {
	reg.mu.Lock()
	defer reg.mu.Unlock()
	switch s := sel.GetSelector().(type) {
	case *pb.ProcessSelector_Pid:
		if p := reg.byPID[int(s.Pid)]; p != nil {
			return p, nil
		}
		return nil, errorf(codeNotFound, "process with pid %d not found", s.Pid)
	case *pb.ProcessSelector_Tag:
		var found *proc
		for _, p := range reg.byPID {
			if p.tag != nil && *p.tag == s.Tag && (found == nil || p.pid > found.pid) {
				found = p
			}
		}
		if found == nil {
			return nil, errorf(codeNotFound, "process with tag %.64q not found", s.Tag)
		}
		return found, nil
	}
	return nil, errorf(codeInvalidArgument, "no process selector (pid or tag)")
}

func (h *handler) processStart(ctx context.Context, b *box, hdr http.Header, req *pb.StartRequest, send func(*pb.StartResponse) error) (err error) {
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
	if req.Process.GetCmd() == "" {
		return errorf(codeInvalidArgument, "start: no command")
	}
	args = append([]string{req.Process.Cmd}, req.Process.Args...)
	u, err := h.requestUser(ctx, b, hdr)
	if err != nil {
		return err
	}
	cfg := proto.CloneOf(req.Process)
	dir := u.home
	if b.workdir != "" {
		dir = b.workdir
	}
	if cfg.GetCwd() != "" {
		if dir, err = resolvePath(u, cfg.GetCwd()); err != nil {
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
	// As envd does, the request's deadline (Connect-Timeout-Ms, or
	// grpc-timeout: the SDKs' timeoutMs, which connect-go gives ctx)
	// bounds the command itself, not only this stream: the command is
	// killed when it passes, even if nobody is connected.
	if dl, ok := ctx.Deadline(); ok {
		xr.Timeout = max(time.Until(dl), time.Millisecond)
	}
	if req.Pty != nil {
		xr.TTY, xr.Stdin = true, true
		if sz := req.Pty.Size; sz != nil {
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
	// The command's timeout is this stream's deadline: its end for it is
	// the deadline's error, as envd's (the SDKs' TimeoutError), whichever
	// comes first, the agent's kill or the stream's own deadline.
	return follow(ctx, p, sub, keepaliveInterval(hdr), xr.Timeout > 0, func(ev *pb.ProcessEvent) error { return send(&pb.StartResponse{Event: ev}) })
}

func (h *handler) processConnect(ctx context.Context, b *box, hdr http.Header, req *pb.ConnectRequest, send func(*pb.ConnectResponse) error) error {
	p, err := b.procs.find(req.Process)
	if err != nil {
		return err
	}
	return follow(ctx, p, p.subscribe(), keepaliveInterval(hdr), false, func(ev *pb.ProcessEvent) error { return send(&pb.ConnectResponse{Event: ev}) })
}

// follow sends the events of p: its start, its output from now on, its
// end; with deadline (the command's timeout is ctx's deadline), a command
// killed for its timeout ends the stream with ctx's deadline error.
func follow(ctx context.Context, p *proc, sb *sub, keepalive time.Duration, deadline bool, send func(*pb.ProcessEvent) error) error {
	defer p.unsubscribe(sb)
	if err := send(&pb.ProcessEvent{Event: &pb.ProcessEvent_Start{Start: &pb.ProcessEvent_StartEvent{Pid: uint32(p.pid)}}}); err != nil {
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
			if err := send(ev); err != nil {
				return err
			}
		case <-p.done:
			for {
				select {
				case ev := <-sb.ch:
					if err := send(ev); err != nil {
						return err
					}
				default:
					if p.lost != nil {
						// No end: the stream is cut (see streamCall).
						return p.lost
					}
					if deadline && p.timedOut {
						return context.DeadlineExceeded
					}
					return send(&pb.ProcessEvent{Event: &pb.ProcessEvent_End{End: p.end}})
				}
			}
		case <-tick:
			if err := send(&pb.ProcessEvent{Event: &pb.ProcessEvent_Keepalive{Keepalive: &pb.ProcessEvent_KeepAlive{}}}); err != nil {
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (h *handler) processList(_ context.Context, b *box, _ http.Header, _ *pb.ListRequest) (*pb.ListResponse, error) {
	b.procs.mu.Lock()
	ps := slices.Collect(maps.Values(b.procs.byPID))
	b.procs.mu.Unlock()
	slices.SortFunc(ps, func(a, b *proc) int { return a.pid - b.pid })
	out := &pb.ListResponse{}
	for _, p := range ps {
		out.Processes = append(out.Processes, &pb.ProcessInfo{Config: p.cfg, Pid: uint32(p.pid), Tag: p.tag})
	}
	return out, nil
}

// input writes in to the stdin (or terminal) of p and returns how many
// bytes it wrote.
func (p *proc) input(in *pb.ProcessInput) (int, error) {
	data := in.GetStdin()
	if pty := in.GetPty(); len(pty) > 0 {
		if !p.tty {
			return 0, errorf(codeInvalidArgument, "send input to process %d: it has no terminal", p.pid)
		}
		data = pty
	}
	p.inMu.Lock()
	defer p.inMu.Unlock()
	if p.stdinClosed || p.p.Stdin == nil {
		return 0, errorf(codeFailedPrecondition, "send input to process %d: its stdin is closed or was not enabled", p.pid)
	}
	if len(data) == 0 {
		return 0, nil
	}
	n, err := p.p.Stdin.Write(data)
	p.in.Add(int64(n))
	if err != nil {
		return n, fmt.Errorf("send input to process %d: %w", p.pid, err)
	}
	return n, nil
}

func (h *handler) processSendInput(ctx context.Context, b *box, _ http.Header, req *pb.SendInputRequest) (*pb.SendInputResponse, error) {
	p, err := b.procs.find(req.Process)
	if err != nil {
		return nil, err
	}
	if req.Input == nil {
		return &pb.SendInputResponse{}, nil
	}
	n, err := p.input(req.Input)
	auditCommand(ctx, p.args, int64(n))
	if err != nil {
		return nil, err
	}
	return &pb.SendInputResponse{}, nil
}

// processStreamInput writes the input of a client stream to a command:
// its first message names the command (a start event), the next ones
// carry its input (data events), written in order; keepalives are
// ignored.
func (h *handler) processStreamInput(ctx context.Context, st *connect.ClientStream[pb.StreamInputRequest]) (*connect.Response[pb.StreamInputResponse], error) {
	c := callOf(ctx)
	if c.b == nil {
		return nil, errorf(codeInternal, "%s: no sandbox", st.Spec().Procedure).connect()
	}
	var p *proc
	var sent int64
	err := func() error {
		for st.Receive() {
			switch ev := st.Msg().GetEvent().(type) {
			case *pb.StreamInputRequest_Start:
				if p != nil {
					return errorf(codeInvalidArgument, "stream input: a second start event")
				}
				var err error
				if p, err = c.b.procs.find(ev.Start.GetProcess()); err != nil {
					return err
				}
				auditCommand(ctx, p.args, 0)
			case *pb.StreamInputRequest_Data:
				if p == nil {
					return errorf(codeInvalidArgument, "stream input: data before the start event naming the process")
				}
				n, err := p.input(ev.Data.GetInput())
				sent += int64(n)
				auditCommand(ctx, p.args, sent)
				if err != nil {
					return err
				}
			case *pb.StreamInputRequest_Keepalive:
			default:
				return errorf(codeInvalidArgument, "stream input: a message without an event")
			}
		}
		if err := st.Err(); err != nil {
			return err
		}
		if p == nil {
			return errorf(codeInvalidArgument, "stream input: no start event naming the process")
		}
		return nil
	}()
	if err != nil {
		return nil, h.failed(c, st.Spec().Procedure, err)
	}
	return connect.NewResponse(&pb.StreamInputResponse{}), nil
}

func (h *handler) processCloseStdin(ctx context.Context, b *box, _ http.Header, req *pb.CloseStdinRequest) (*pb.CloseStdinResponse, error) {
	p, err := b.procs.find(req.Process)
	if err != nil {
		return nil, err
	}
	auditCommand(ctx, p.args, 0)
	p.inMu.Lock()
	defer p.inMu.Unlock()
	if p.stdinClosed || p.p.Stdin == nil {
		return &pb.CloseStdinResponse{}, nil
	}
	p.stdinClosed = true
	if err := p.p.Stdin.Close(); err != nil {
		return nil, fmt.Errorf("close stdin of process %d: %w", p.pid, err)
	}
	return &pb.CloseStdinResponse{}, nil
}

func (h *handler) processSendSignal(ctx context.Context, b *box, _ http.Header, req *pb.SendSignalRequest) (*pb.SendSignalResponse, error) {
	var sig syscall.Signal
	switch req.Signal {
	case pb.Signal_SIGNAL_SIGKILL:
		sig = syscall.SIGKILL
	case pb.Signal_SIGNAL_SIGTERM:
		sig = syscall.SIGTERM
	case pb.Signal_SIGNAL_UNSPECIFIED:
		return nil, errorf(codeInvalidArgument, "send signal: no signal")
	default:
		return nil, errorf(codeInvalidArgument, "signal %d: not SIGTERM (15) or SIGKILL (9)", req.Signal)
	}
	p, err := b.procs.find(req.Process)
	if err != nil {
		return nil, err
	}
	auditCommand(ctx, p.args, 0)
	if err := p.p.Signal(sig); err != nil {
		if errors.Is(err, os.ErrProcessDone) {
			return nil, errorf(codeNotFound, "process with pid %d has exited", p.pid)
		}
		return nil, fmt.Errorf("signal process %d: %w", p.pid, err)
	}
	return &pb.SendSignalResponse{}, nil
}

func (h *handler) processUpdate(ctx context.Context, b *box, _ http.Header, req *pb.UpdateRequest) (*pb.UpdateResponse, error) {
	p, err := b.procs.find(req.Process)
	if err != nil {
		return nil, err
	}
	auditCommand(ctx, p.args, 0)
	sz := req.Pty.GetSize()
	if sz == nil {
		return &pb.UpdateResponse{}, nil
	}
	if sz.Rows == 0 || sz.Cols == 0 || sz.Rows > 1<<15 || sz.Cols > 1<<15 {
		return nil, errorf(codeInvalidArgument, "resize process %d: size %dx%d out of range", p.pid, sz.Cols, sz.Rows)
	}
	if err := p.p.Resize(uint16(sz.Rows), uint16(sz.Cols)); err != nil {
		return nil, err
	}
	return &pb.UpdateResponse{}, nil
}

// processServer is process.Process, served by connect-go.
type processServer struct{ h *handler }

func (s processServer) List(ctx context.Context, req *connect.Request[pb.ListRequest]) (*connect.Response[pb.ListResponse], error) {
	return unaryCall(s.h, ctx, req, s.h.processList)
}

func (s processServer) Start(ctx context.Context, req *connect.Request[pb.StartRequest], st *connect.ServerStream[pb.StartResponse]) error {
	return streamCall(s.h, ctx, req, st, s.h.processStart)
}

func (s processServer) Connect(ctx context.Context, req *connect.Request[pb.ConnectRequest], st *connect.ServerStream[pb.ConnectResponse]) error {
	return streamCall(s.h, ctx, req, st, s.h.processConnect)
}

func (s processServer) Update(ctx context.Context, req *connect.Request[pb.UpdateRequest]) (*connect.Response[pb.UpdateResponse], error) {
	return unaryCall(s.h, ctx, req, s.h.processUpdate)
}

func (s processServer) StreamInput(ctx context.Context, st *connect.ClientStream[pb.StreamInputRequest]) (*connect.Response[pb.StreamInputResponse], error) {
	return s.h.processStreamInput(ctx, st)
}

func (s processServer) SendInput(ctx context.Context, req *connect.Request[pb.SendInputRequest]) (*connect.Response[pb.SendInputResponse], error) {
	return unaryCall(s.h, ctx, req, s.h.processSendInput)
}

func (s processServer) SendSignal(ctx context.Context, req *connect.Request[pb.SendSignalRequest]) (*connect.Response[pb.SendSignalResponse], error) {
	return unaryCall(s.h, ctx, req, s.h.processSendSignal)
}

func (s processServer) CloseStdin(ctx context.Context, req *connect.Request[pb.CloseStdinRequest]) (*connect.Response[pb.CloseStdinResponse], error) {
	return unaryCall(s.h, ctx, req, s.h.processCloseStdin)
}
