package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hutch-sandbox/hutch/internal/execproto"
)

// Command describes a command to run in a sandbox.
type Command struct {
	// Args is the command and its arguments; Args[0] is looked up in the
	// sandbox's PATH unless it contains a slash.
	Args []string
	// Env is added to the command's environment.
	Env map[string]string
	// Dir is the working directory, absolute ("": the workspace).
	Dir string
	// Stdin, for Exec, makes Process.Stdin a pipe to the command's stdin;
	// without it the command reads nothing. Run refuses it: use Input.
	Stdin bool
	// Input, for Run, is the command's whole stdin. Exec refuses it: use
	// Stdin.
	Input []byte
	// TTY runs the command on a terminal: its stdout carries everything
	// the terminal shows, and its stderr is empty.
	TTY bool
	// Rows and Cols are the terminal's size (24×80 when zero).
	Rows, Cols uint16
	// Timeout, when positive, kills the command once it has run that
	// long (ExitStatus.TimedOut says so).
	Timeout time.Duration
}

// body is the command as the body of an exec request.
func (cmd Command) body() map[string]any {
	b := map[string]any{"args": cmd.Args}
	if len(cmd.Env) > 0 {
		b["env"] = cmd.Env
	}
	if cmd.Dir != "" {
		b["cwd"] = cmd.Dir
	}
	if cmd.Stdin {
		b["stdin"] = true
	}
	if cmd.TTY {
		b["tty"] = true
	}
	if cmd.Rows != 0 {
		b["rows"] = cmd.Rows
	}
	if cmd.Cols != 0 {
		b["cols"] = cmd.Cols
	}
	if cmd.Timeout != 0 {
		b["timeout"] = cmd.Timeout.String()
	}
	if len(cmd.Input) > 0 {
		b["input_b64"] = cmd.Input
	}
	return b
}

// ExitStatus is how a command ended.
type ExitStatus struct {
	// Code is the exit code, 128+Signal when a signal killed it.
	Code int
	// Signal is the signal that killed it, or 0.
	Signal int
	// TimedOut reports that Command.Timeout killed it.
	TimedOut bool
}

// Result is the outcome of Run.
type Result struct {
	ExitStatus
	// PID was the command's pid in the sandbox.
	PID int
	// Stdout and Stderr are its output, each at most the daemon's limit
	// (16 MiB by default).
	Stdout, Stderr []byte
	// Truncated reports that an output exceeded the limit and was cut.
	Truncated bool
}

// Run runs a command to completion and returns its output and exit
// status. A command that cannot be found is an error (ErrNotFound); one
// that exits non-zero is not.
func (c *Client) Run(ctx context.Context, id string, cmd Command) (*Result, error) {
	var out struct {
		PID       int    `json:"pid"`
		Stdout    string `json:"stdout"`
		Stderr    string `json:"stderr"`
		StdoutB64 []byte `json:"stdout_b64"`
		StderrB64 []byte `json:"stderr_b64"`
		ExitCode  int    `json:"exit_code"`
		Signal    int    `json:"signal"`
		TimedOut  bool   `json:"timed_out"`
		Truncated bool   `json:"truncated"`
	}
	if err := c.call(ctx, http.MethodPost, sandboxPath(id, "exec"), nil, cmd.body(), &out); err != nil {
		return nil, err
	}
	res := &Result{
		ExitStatus: ExitStatus{Code: out.ExitCode, Signal: out.Signal, TimedOut: out.TimedOut},
		PID:        out.PID, Stdout: []byte(out.Stdout), Stderr: []byte(out.Stderr), Truncated: out.Truncated,
	}
	if out.StdoutB64 != nil {
		res.Stdout = out.StdoutB64
	}
	if out.StderrB64 != nil {
		res.Stderr = out.StderrB64
	}
	return res, nil
}

// Process is a command started by Exec, streaming over its own
// connection. Its Stdout and Stderr must be read (concurrently, until
// io.EOF) for the command to make progress, as with pipes: Wait returns
// only once all its output has been delivered.
type Process struct {
	// PID is the command's pid in the sandbox.
	PID int
	// Stdin is the command's stdin; nil unless Command.Stdin. Closing it
	// ends the command's input (with a terminal: types ^D).
	Stdin io.WriteCloser
	// Stdout is the command's stdout (with a terminal, everything it
	// shows); Stderr its stderr (empty with a terminal).
	Stdout, Stderr io.Reader

	conn    net.Conn
	wmu     sync.Mutex
	stdout  *io.PipeWriter
	stderr  *io.PipeWriter
	done    chan struct{} // closed once status or err is set
	status  ExitStatus
	err     error
	closing sync.Once
}

// Exec starts a command and streams its input and output over an upgraded
// connection. ctx bounds the start only; end the command with Signal,
// Command.Timeout or Close. Errors before the command runs (no such
// sandbox or command) are *Error.
func (c *Client) Exec(ctx context.Context, id string, cmd Command) (*Process, error) {
	body, err := json.Marshal(cmd.body())
	if err != nil {
		return nil, err
	}
	req, err := c.newRequest(ctx, http.MethodPost, sandboxPath(id, "exec"), nil, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Host = c.reqHost
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", execproto.Protocol)
	conn, err := c.dialStream(ctx)
	if err != nil {
		return nil, fmt.Errorf("hutch client: exec: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	p, err := handshake(conn, req, cmd.Stdin)
	if !stop() && err == nil {
		err = ctx.Err()
	}
	if err != nil {
		conn.Close()
		return nil, err
	}
	_ = conn.SetDeadline(time.Time{})
	return p, nil
}

// handshake sends the upgrade request and reads the answer.
func handshake(conn net.Conn, req *http.Request, stdin bool) (*Process, error) {
	if err := req.Write(conn); err != nil {
		return nil, fmt.Errorf("hutch client: exec: %w", err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		return nil, fmt.Errorf("hutch client: exec: %w", err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		defer resp.Body.Close()
		if resp.StatusCode < 300 {
			return nil, fmt.Errorf("hutch client: exec: the daemon answered %s, not 101", resp.Status)
		}
		return nil, readError(resp)
	}
	if !strings.EqualFold(resp.Header.Get("Upgrade"), execproto.Protocol) {
		return nil, fmt.Errorf("hutch client: exec: the daemon switched to %q, not %s", resp.Header.Get("Upgrade"), execproto.Protocol)
	}
	pid, err := strconv.Atoi(resp.Header.Get(execproto.PIDHeader))
	if err != nil || pid <= 0 {
		return nil, fmt.Errorf("hutch client: exec: bad %s header %q", execproto.PIDHeader, resp.Header.Get(execproto.PIDHeader))
	}
	p := &Process{PID: pid, conn: conn, done: make(chan struct{})}
	var outR, errR *io.PipeReader
	outR, p.stdout = io.Pipe()
	errR, p.stderr = io.Pipe()
	p.Stdout, p.Stderr = outR, errR
	if stdin {
		p.Stdin = &stdinWriter{p: p}
	}
	go p.read(br)
	return p, nil
}

// read handles the daemon's frames until the last one.
func (p *Process) read(br *bufio.Reader) {
	err := p.readFrames(br)
	p.stdout.CloseWithError(err)
	p.stderr.CloseWithError(err)
	p.err = err
	close(p.done)
	p.conn.Close()
}

// readFrames returns nil after an exit frame, else the error.
func (p *Process) readFrames(br *bufio.Reader) error {
	for {
		f, err := execproto.Read(br, execproto.MaxPayload)
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return fmt.Errorf("hutch client: exec stream of process %d: %w", p.PID, err)
		}
		switch f.Type {
		case execproto.TypeStdout:
			_, _ = p.stdout.Write(f.Payload) // a reader that closed drops the rest
		case execproto.TypeStderr:
			_, _ = p.stderr.Write(f.Payload)
		case execproto.TypeExit:
			var x execproto.Exit
			if err := json.Unmarshal(f.Payload, &x); err != nil {
				return fmt.Errorf("hutch client: exec stream of process %d: exit: %w", p.PID, err)
			}
			p.status = ExitStatus{Code: x.ExitCode, Signal: x.Signal, TimedOut: x.TimedOut}
			return nil
		case execproto.TypeError:
			var x execproto.Error
			if err := json.Unmarshal(f.Payload, &x); err != nil {
				return fmt.Errorf("hutch client: exec stream of process %d: error: %w", p.PID, err)
			}
			return &Error{Code: x.Code, Message: x.Message}
		default:
			return fmt.Errorf("hutch client: exec stream of process %d: %w: type %d from the daemon", p.PID, execproto.ErrFrame, f.Type)
		}
	}
}

// Wait waits for the command to end and returns its status. It needs
// Stdout and Stderr read to their end (see Process).
func (p *Process) Wait() (ExitStatus, error) {
	<-p.done
	return p.status, p.err
}

// Done is closed once the command ended (or the stream failed).
func (p *Process) Done() <-chan struct{} { return p.done }

// send sends a frame.
func (p *Process) send(typ byte, payload []byte) error {
	select {
	case <-p.done:
		return fmt.Errorf("hutch client: process %d: the stream has ended", p.PID)
	default:
	}
	p.wmu.Lock()
	defer p.wmu.Unlock()
	if err := execproto.Write(p.conn, typ, payload); err != nil {
		return fmt.Errorf("hutch client: process %d: %w", p.PID, err)
	}
	return nil
}

// Signal sends sig to the command's process group.
func (p *Process) Signal(sig syscall.Signal) error {
	return p.send(execproto.TypeSignal, execproto.Signal(int(sig)))
}

// Resize sets the size of the command's terminal (it gets SIGWINCH); a
// command without a terminal ignores it.
func (p *Process) Resize(rows, cols uint16) error {
	return p.send(execproto.TypeResize, execproto.Resize(rows, cols))
}

// Close closes the stream; a command still running is killed.
func (p *Process) Close() error {
	p.closing.Do(func() { p.conn.Close() })
	<-p.done
	return nil
}

// stdinWriter sends stdin frames.
type stdinWriter struct {
	p      *Process
	mu     sync.Mutex
	closed bool
}

// Write sends b as stdin frames.
func (w *stdinWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return 0, errors.New("hutch client: write to a closed stdin")
	}
	n := 0
	for len(b) > 0 {
		k := min(len(b), execproto.Chunk)
		if err := w.p.send(execproto.TypeStdin, b[:k]); err != nil {
			return n, err
		}
		n += k
		b = b[k:]
	}
	return n, nil
}

// Close ends the command's stdin.
func (w *stdinWriter) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil
	}
	w.closed = true
	return w.p.send(execproto.TypeStdinEOF, nil)
}

// ProcessInfo describes a command started by Exec or Run that still runs.
type ProcessInfo struct {
	// PID is its pid in the sandbox.
	PID int `json:"pid"`
	// Args are its arguments (the first 4 KiB of them).
	Args []string `json:"args"`
	// Started is when it started.
	Started time.Time `json:"started"`
}

// Processes lists the commands started by Exec or Run that still run in
// the sandbox.
func (c *Client) Processes(ctx context.Context, id string) ([]ProcessInfo, error) {
	var out []ProcessInfo
	if err := c.call(ctx, http.MethodGet, sandboxPath(id, "processes"), nil, nil, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// SignalProcess sends sig to the process group of a command started by
// Exec or Run, by its pid (ErrNotFound for any other pid).
func (c *Client) SignalProcess(ctx context.Context, id string, pid int, sig syscall.Signal) error {
	in := struct {
		Signal int `json:"signal"`
	}{int(sig)}
	return c.call(ctx, http.MethodPost, sandboxPath(id, "processes", strconv.Itoa(pid), "signal"), nil, in, nil)
}
