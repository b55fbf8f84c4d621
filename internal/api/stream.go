package api

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hutch-sandbox/hutch/internal/agent"
	"github.com/hutch-sandbox/hutch/internal/daemon"
	"github.com/hutch-sandbox/hutch/internal/execproto"
)

const (
	// stdinQueue is how many stdin frames wait for the command at most;
	// while they do, the stream's reader waits too.
	stdinQueue = 8
	// touchEvery is how often stdin counts as activity of the sandbox.
	touchEvery = 5 * time.Second
)

// execStream starts a command and relays the framed stream of package
// execproto over the hijacked connection until the command ends. It
// returns an error only before the connection was hijacked; a later
// failure goes to the client on the stream.
func (h *handler) execStream(w http.ResponseWriter, r *http.Request, ac *agent.Client, req agent.ExecRequest) error {
	ctx := r.Context()
	start := time.Now()
	p, err := ac.Exec(ctx, req)
	if err != nil {
		return err
	}
	defer func() { h.met.ran(tenantOf(r), "stream", time.Since(start)) }()
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		_ = p.Signal(syscall.SIGKILL)
		return fmt.Errorf("exec stream: %w", err)
	}
	defer conn.Close()
	h.emitExec(r, p, req.Args)
	id, tenant := r.PathValue("id"), tenantOf(r)
	h.procs.add(id, p)
	defer h.procs.remove(id, p)
	_ = conn.SetDeadline(time.Time{})
	head := fmt.Sprintf("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: %s\r\n%s: %d\r\n\r\n",
		execproto.Protocol, execproto.PIDHeader, p.PID)
	if _, err := conn.Write([]byte(head)); err != nil {
		_ = p.Signal(syscall.SIGKILL)
		st, err := p.Wait()
		h.emitExit(r, p, st, err)
		return nil
	}

	s := &stream{conn: conn, gone: make(chan struct{})}
	var rl relay
	var out atomic.Int64
	rl.start(p.Stdout, counted(&out, s.sender(execproto.TypeStdout)))
	if !req.TTY {
		rl.start(p.Stderr, counted(&out, s.sender(execproto.TypeStderr)))
	}
	touch := func() { _, _ = h.m.Agent(ctx, tenant, id) }
	go s.read(brw.Reader, p, touch)

	type waited struct {
		status agent.ExitStatus
		err    error
	}
	ch := make(chan waited, 1)
	go func() {
		st, err := p.Wait()
		ch <- waited{st, err}
	}()
	var res waited
	select {
	case res = <-ch:
	case <-s.gone:
		_ = p.Signal(syscall.SIGKILL)
		res = <-ch
	case <-ctx.Done():
		_ = p.Signal(syscall.SIGKILL)
		res = <-ch
	}
	h.emitExit(r, p, res.status, res.err)
	rl.settle()
	var code *int
	if res.err == nil {
		code = &res.status.Code
	} else {
		_, auditEntry(r).Error = classify(res.err)
	}
	auditExec(r, req.Args, start, code, s.in.Load(), out.Load())
	var protoErr error
	select {
	case <-s.gone:
		protoErr = s.protoErr
	default:
	}
	switch {
	case protoErr != nil:
		s.finish(execproto.TypeError, execproto.Error{Code: CodeInvalid, Message: protoErr.Error()})
	case res.err != nil:
		_, body := errorBody(res.err)
		s.finish(execproto.TypeError, execproto.Error{Code: body.Code, Message: body.Message})
	default:
		s.finish(execproto.TypeExit, execproto.Exit{ExitCode: res.status.Code, Signal: res.status.Signal, TimedOut: res.status.TimedOut})
	}
	return nil
}

// stream is the daemon's end of an exec stream.
type stream struct {
	conn net.Conn

	wmu    sync.Mutex // serializes frames
	closed bool       // the last frame was sent; under wmu
	failed bool       // a write failed; under wmu

	in atomic.Int64 // bytes of stdin the client sent

	gone     chan struct{} // closed when the client went away or broke the protocol
	protoErr error         // why, if it broke the protocol; set before gone is closed
}

// sender returns a sink that sends data as frames of type typ.
func (s *stream) sender(typ byte) func([]byte) error {
	return func(b []byte) error {
		s.wmu.Lock()
		defer s.wmu.Unlock()
		if s.closed || s.failed {
			return net.ErrClosed
		}
		if err := execproto.Write(s.conn, typ, b); err != nil {
			s.failed = true
			return err
		}
		return nil
	}
}

// finish sends the last frame.
func (s *stream) finish(typ byte, v any) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if !s.closed && !s.failed {
		_ = execproto.WriteJSON(s.conn, typ, v)
	}
	s.closed = true
}

// read handles the client's frames until the connection ends.
func (s *stream) read(br *bufio.Reader, p *agent.Process, touch func()) {
	stdin := make(chan []byte, stdinQueue) // nil: the end of stdin
	stdinDone := make(chan struct{})
	go func() {
		defer close(stdinDone)
		failed := false
		for b := range stdin {
			switch {
			case failed || p.Stdin == nil:
			case b == nil:
				_ = p.Stdin.Close()
				failed = true
			default:
				if _, err := p.Stdin.Write(b); err != nil {
					failed = true
				}
			}
		}
	}()
	defer func() {
		close(stdin)
		<-stdinDone
	}()
	var lastTouch time.Time
	stdinClosed := false
	for {
		f, err := execproto.Read(br, execproto.MaxPayload)
		if err != nil {
			if errors.Is(err, execproto.ErrFrame) {
				s.protoErr = err
			}
			close(s.gone)
			return
		}
		switch f.Type {
		case execproto.TypeStdin, execproto.TypeStdinEOF:
			switch {
			case p.Stdin == nil:
				err = errorf(daemon.ErrInvalid, "stdin frame, but the exec did not ask for stdin")
			case stdinClosed:
				err = errorf(daemon.ErrInvalid, "stdin frame after the end of stdin")
			case f.Type == execproto.TypeStdinEOF:
				stdinClosed = true
				stdin <- nil
			case len(f.Payload) > 0:
				s.in.Add(int64(len(f.Payload)))
				stdin <- f.Payload
				if time.Since(lastTouch) > touchEvery {
					lastTouch = time.Now()
					touch()
				}
			}
		case execproto.TypeResize:
			var rows, cols uint16
			if rows, cols, err = execproto.ParseResize(f.Payload); err == nil {
				_ = p.Resize(rows, cols) // a command without a terminal ignores it
			}
		case execproto.TypeSignal:
			var n int
			if n, err = execproto.ParseSignal(f.Payload); err == nil {
				_ = p.Signal(syscall.Signal(n)) // it may have ended
			}
		default:
			err = fmt.Errorf("%w: type %d is not sent by clients", execproto.ErrFrame, f.Type)
		}
		if err != nil {
			s.protoErr = err
			close(s.gone)
			_, _ = io.Copy(io.Discard, br) // until finish closes the connection
			return
		}
	}
}
