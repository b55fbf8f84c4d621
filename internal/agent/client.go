package agent

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// maxPID bounds the pids the client accepts (PID_MAX_LIMIT).
const maxPID = 1 << 22

// Client is the daemon's end of an agent connection. Its methods may be
// called concurrently; they all fail once the connection ended (Close, the
// agent closed it, or the agent broke the protocol: see Err).
type Client struct {
	conn  net.Conn
	wsem  chan struct{} // held while a frame is written
	ready chan struct{} // closed once the agent's hello arrived
	done  chan struct{} // closed once the connection ended
	err   error         // why; set before done is closed

	// set before ready is closed
	maxOut int // the largest frame the agent accepts
	chunk  int // the largest data body the client sends

	mu     sync.Mutex
	nextID uint32
	calls  map[uint32]*call // nil once done

	closing  atomic.Bool
	failOnce sync.Once
	// handover is set once the agent answered a detach: the reader stops
	// there, and the connection is the caller's again (Detach).
	handover atomic.Bool

	// env is added under the environment of every Exec (see SetEnv).
	env atomic.Pointer[[]string]
	// user runs every Exec that names none (see SetUser).
	user atomic.Pointer[Credential]
	// log gets the agent's breaches of the protocol (see SetLog).
	log atomic.Pointer[slog.Logger]
	// check decides whether a command may start (see SetCheck).
	check atomic.Pointer[CheckFunc]
}

// CheckFunc decides whether a command may start: nil, or why not. It
// may wait (for a person's answer) as long as ctx lasts.
type CheckFunc func(ctx context.Context, args, env []string) error

// SetCheck makes every later Exec, but of a command of hutch's own
// (ExecRequest.Own), call check first: a command it refuses never
// starts, and Exec returns its error. nil removes the check.
func (c *Client) SetCheck(check CheckFunc) {
	if check == nil {
		c.check.Store(nil)
		return
	}
	c.check.Store(&check)
}

// call is a request in flight.
type call struct {
	id   uint32
	op   string
	resp chan *response // the answer, at most one
	out  [3]*inStream   // streams 1 and 2, if the op has them
	in   *outStream     // stream 0, if the op has it

	// list and ps, touched by the reader only until the response is
	// delivered
	entries   []FileInfo
	procs     []ProcessInfo
	listBytes int
	listCount int

	// exec
	proc *procState

	// watch
	watch *watchQueue

	// broken is closed once the agent broke the protocol in this request
	// alone (breach), which then failed with brokeErr.
	broken    chan struct{}
	brokeErr  error
	brokeOnce sync.Once
}

// procState is what the reader learns about a command.
type procState struct {
	exited  chan struct{} // closed once status is set
	status  ExitStatus
	gotExit bool // reader only
	eofs    int  // reader only: output streams ended
}

// NewClient returns a client of the agent on conn and starts its reader
// goroutine. The client owns conn.
func NewClient(conn net.Conn) *Client {
	c := &Client{
		conn:  conn,
		wsem:  make(chan struct{}, 1),
		ready: make(chan struct{}),
		done:  make(chan struct{}),
		calls: make(map[uint32]*call),
	}
	go c.readLoop()
	return c
}

// SetEnv sets NAME=VALUE entries that every later Exec sends before its
// own ExecRequest.Env, so that an entry of ExecRequest.Env wins over one of
// env with its name, and both win over the agent's own environment. The
// daemon uses it for a sandbox started before the environment asked for
// was known (a warm one).
func (c *Client) SetEnv(env []string) {
	env = slices.Clone(env)
	c.env.Store(&env)
}

// SetUser makes every later Exec whose request names no User run as u
// (the user of the image the sandbox started from) instead of the
// agent's own identity; nil goes back to the agent's.
func (c *Client) SetUser(u *Credential) {
	if u != nil {
		u = &Credential{UID: u.UID, GID: u.GID}
	}
	c.user.Store(u)
}

// SetLog makes the client log, as warnings, how the agent broke the
// protocol: in one request (which alone fails) or on the whole connection
// (which ends). Without it the client logs nothing.
func (c *Client) SetLog(l *slog.Logger) { c.log.Store(l) }

// warn logs msg with args, if the client has a log.
func (c *Client) warn(msg string, args ...any) {
	if l := c.log.Load(); l != nil {
		l.Warn(msg, args...)
	}
}

// Close closes the connection: every call in progress fails with an error
// wrapping ErrClosed, and the agent (seeing its connection end) kills the
// commands it runs. Close waits for the reader goroutine to end.
func (c *Client) Close() error {
	if c.handover.Load() {
		<-c.done
		return nil // the connection is Detach's caller's
	}
	c.closing.Store(true)
	err := c.conn.Close()
	<-c.done
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

// Done is closed when the connection has ended.
func (c *Client) Done() <-chan struct{} { return c.done }

// Err reports why the connection ended, nil while it is up. It wraps
// ErrClosed, and ErrProtocol too when the agent broke the protocol of the
// connection itself (its framing, its handshake); a breach in one request
// ends only that request (see SetLog).
func (c *Client) Err() error {
	select {
	case <-c.done:
		return c.err
	default:
		return nil
	}
}

// readLoop reads frames until the connection ends.
func (c *Client) readLoop() {
	br := bufio.NewReaderSize(c.conn, 64<<10)
	err := c.readHello(br)
	for err == nil {
		var f frame
		if f, err = readFrame(br, defaultMaxFrame); err == nil {
			err = c.dispatch(f)
		}
	}
	switch {
	case c.handover.Load():
		err = errDetached
	case c.closing.Load():
		err = ErrClosed
	case err == io.EOF:
		err = fmt.Errorf("%w: the agent closed the connection", ErrClosed)
	case errors.Is(err, ErrProtocol):
		// The connection is closed too: every call of it ends.
		err = fmt.Errorf("%w (%w)", ErrClosed, err)
	case errors.Is(err, ErrClosed):
	default:
		err = fmt.Errorf("%w: read from agent: %w", ErrClosed, err)
	}
	c.fail(err)
}

// fail ends the connection with err.
func (c *Client) fail(err error) {
	c.failOnce.Do(func() {
		if errors.Is(err, ErrProtocol) {
			c.warn("the agent broke the protocol: its connection ends", "err", err)
		}
		if !c.handover.Load() {
			c.conn.Close()
		}
		c.mu.Lock()
		c.err = err
		calls := c.calls
		c.calls = nil
		c.mu.Unlock()
		for _, k := range calls {
			k.fail(err)
		}
		close(c.done)
	})
}

// breach ends call k alone because the agent broke the protocol in it (a
// malformed or unexpected frame of that request, a result out of bounds)
// and returns the error, which wraps ErrProtocol: the call fails with it,
// the agent is told to cancel the request (a command of it is killed, a
// watch stops), and it is logged. The connection and its other calls go
// on: every frame is length-delimited and checked before it is used, so
// one request's bad frame leaves the others' state as it was.
func (c *Client) breach(k *call, format string, args ...any) error {
	err := fmt.Errorf("%w: %s", ErrProtocol, fmt.Sprintf(format, args...))
	k.brokeOnce.Do(func() {
		c.warn("the agent broke the protocol in one request, which ends", "op", k.op, "request", k.id, "err", err)
		k.brokeErr = err
		close(k.broken)
		c.abandon(k, err)
	})
	return err
}

func (k *call) fail(err error) {
	for _, s := range k.out {
		if s != nil {
			s.end(err)
		}
	}
	if k.in != nil {
		k.in.fail(err)
	}
	if k.watch != nil {
		k.watch.end(err)
	}
}

// readHello reads the agent's hello: its first frame, or its answer to an
// attach.
func (c *Client) readHello(br *bufio.Reader) error {
	f, err := readFrame(br, defaultMaxFrame)
	if err != nil {
		return err
	}
	if f.typ != frameHello || f.id != 0 {
		return fmt.Errorf("%w: the first frame is of type %d, not a hello", ErrProtocol, f.typ)
	}
	var h hello
	if err := json.Unmarshal(f.body, &h); err != nil {
		return fmt.Errorf("%w: hello: %v", ErrProtocol, err)
	}
	if h.Version != protocolVersion {
		return fmt.Errorf("%w: the agent speaks version %d, not %d", ErrProtocol, h.Version, protocolVersion)
	}
	if h.MaxFrame < minMaxFrame || h.MaxFrame > maxMaxFrame {
		return fmt.Errorf("%w: hello: frame limit %d out of range", ErrProtocol, h.MaxFrame)
	}
	c.maxOut = h.MaxFrame
	c.chunk = min(maxChunk, h.MaxFrame-headerSize)
	if h.FirstID > 0 {
		c.nextID = h.FirstID - 1 // newCall adds one first
	}
	close(c.ready)
	return nil
}

func (c *Client) lookup(id uint32) *call {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls[id]
}

func (c *Client) remove(k *call) {
	c.mu.Lock()
	if c.calls[k.id] == k {
		delete(c.calls, k.id)
	}
	c.mu.Unlock()
}

// dispatch handles one frame from the agent; an error ends the connection.
// It never blocks: buffers are bounded by the windows.
func (c *Client) dispatch(f frame) error {
	switch f.typ {
	case frameResponse:
		k := c.lookup(f.id)
		if k == nil {
			return nil
		}
		var r response
		if err := json.Unmarshal(f.body, &r); err != nil {
			c.breach(k, "response to %s request %d: %v", k.op, f.id, err)
			return nil
		}
		if r.Error != nil {
			if !knownCode(r.Error.Code) {
				c.breach(k, "response to %s request %d: unknown error code %.40q", k.op, f.id, r.Error.Code)
				return nil
			}
			r.Error.Message = truncMessage(r.Error.Message)
		}
		if k.op == opDetach && r.Error == nil {
			// The agent sends nothing more: stop reading here, so that
			// the next client reads its hello first.
			c.handover.Store(true)
			k.resp <- &r
			return errDetached
		}
		select {
		case k.resp <- &r:
		default:
			return nil // a second answer
		}
		if (k.proc == nil && k.watch == nil) || r.Error != nil {
			// The answer ends the request; data already received stays
			// readable.
			c.remove(k)
			for _, s := range k.out {
				if s != nil {
					s.end(nil)
				}
			}
			if k.in != nil {
				k.in.fail(errEnded)
			}
			if k.watch != nil {
				k.watch.end(nil)
			}
		}
		return nil
	case frameData, frameEOF:
		k := c.lookup(f.id)
		if k == nil {
			return nil
		}
		if f.stream > streamErr || (f.typ == frameData && f.stream == streamIn) || (f.typ == frameEOF && len(f.body) != 0) {
			c.breach(k, "%s frame on stream %d with %d bytes", frameName(f.typ), f.stream, len(f.body))
			return nil
		}
		if f.stream == streamIn { // eof: the agent no longer takes stdin
			if k.in == nil {
				c.breach(k, "eof on stream 0 of a %s request", k.op)
				return nil
			}
			k.in.fail(errStdinClosed)
			return nil
		}
		if k.watch != nil && f.stream == streamOut && f.typ == frameEOF {
			k.watch.end(nil)
			c.remove(k)
			return nil
		}
		s := k.out[f.stream]
		if s == nil {
			c.breach(k, "%s on stream %d of a %s request", frameName(f.typ), f.stream, k.op)
			return nil
		}
		if f.typ == frameData {
			if err := s.push(f.body); err != nil {
				c.breach(k, "%v", err)
			}
			return nil
		}
		s.end(nil)
		if k.proc != nil {
			k.proc.eofs++
			c.settle(k)
		}
		return nil
	case frameCredit:
		k := c.lookup(f.id)
		if k == nil {
			return nil
		}
		if f.stream != streamIn || len(f.body) != 4 {
			c.breach(k, "credit frame on stream %d with %d bytes", f.stream, len(f.body))
			return nil
		}
		if k.in == nil {
			c.breach(k, "credit for a %s request", k.op)
			return nil
		}
		k.in.grant(int(min(binary.BigEndian.Uint32(f.body), 1<<30)))
		return nil
	case frameExit:
		k := c.lookup(f.id)
		if k == nil {
			return nil
		}
		var m exitMsg
		if err := json.Unmarshal(f.body, &m); err != nil {
			c.breach(k, "exit of request %d: %v", f.id, err)
			return nil
		}
		if m.Code < 0 || m.Code > 255 || m.Signal < 0 || m.Signal > 64 {
			c.breach(k, "exit of request %d: code %d, signal %d out of range", f.id, m.Code, m.Signal)
			return nil
		}
		if k.proc == nil {
			c.breach(k, "exit for a %s request", k.op)
			return nil
		}
		if k.proc.gotExit {
			return nil
		}
		k.proc.gotExit = true
		k.proc.status = ExitStatus(m)
		close(k.proc.exited)
		if k.in != nil {
			k.in.fail(errStdinClosed)
		}
		c.settle(k)
		return nil
	case frameEvents:
		k := c.lookup(f.id)
		if k == nil {
			return nil
		}
		if f.stream != streamOut {
			c.breach(k, "events frame on stream %d", f.stream)
			return nil
		}
		if k.watch == nil {
			c.breach(k, "events for a %s request", k.op)
			return nil
		}
		if err := k.watch.push(f.body); err != nil {
			c.breach(k, "watch %d: %v", f.id, err)
		}
		return nil
	case frameEntries:
		k := c.lookup(f.id)
		if k == nil {
			return nil
		}
		if err := k.addEntries(f.body); err != nil {
			c.breach(k, "entries of %s request %d: %v", k.op, f.id, err)
		}
		return nil
	}
	return fmt.Errorf("%w: unexpected frame type %d from the agent", ErrProtocol, f.typ)
}

// addEntries adds a part of a list or ps result.
func (k *call) addEntries(body []byte) error {
	k.listBytes += len(body)
	if k.listBytes > maxListBytes {
		return fmt.Errorf("more than %d bytes", maxListBytes)
	}
	switch k.op {
	case opList:
		var ws []wireInfo
		if err := json.Unmarshal(body, &ws); err != nil {
			return err
		}
		if k.listCount += len(ws); k.listCount > maxListEntries {
			return fmt.Errorf("more than %d entries", maxListEntries)
		}
		for _, w := range ws {
			fi, err := fileInfo(w)
			if err != nil {
				return err
			}
			k.entries = append(k.entries, fi)
		}
	case opPS:
		var ws []wireProc
		if err := json.Unmarshal(body, &ws); err != nil {
			return err
		}
		if k.listCount += len(ws); k.listCount > maxListEntries {
			return fmt.Errorf("more than %d entries", maxListEntries)
		}
		for _, w := range ws {
			n := 0
			for _, a := range w.Args {
				n += len(a)
			}
			if w.PID <= 0 || w.PID > maxPID || len(w.Args) == 0 || n > maxPSArgs {
				return fmt.Errorf("process %d with %d arguments of %d bytes", w.PID, len(w.Args), n)
			}
			k.procs = append(k.procs, ProcessInfo{PID: w.PID, Args: fromWire(w.Args), Started: time.Unix(0, w.Started)})
		}
	default:
		return errors.New("unexpected entries")
	}
	return nil
}

// settle forgets an exec once it exited and its output ended.
func (c *Client) settle(k *call) {
	want := 1
	if k.out[streamErr] != nil {
		want = 2
	}
	if k.proc.gotExit && k.proc.eofs >= want {
		c.remove(k)
	}
}

// waitReady waits for the agent's hello.
func (c *Client) waitReady(ctx context.Context) error {
	select {
	case <-c.ready:
		return nil
	case <-c.done:
		return c.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// write writes one whole frame.
func (c *Client) write(ctx context.Context, b []byte) error {
	select {
	case c.wsem <- struct{}{}:
	case <-c.done:
		return c.err
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-c.wsem }()
	select {
	case <-c.done:
		return c.err
	default:
	}
	if _, err := c.conn.Write(b); err != nil {
		c.fail(fmt.Errorf("%w: write to agent: %w", ErrClosed, err))
		<-c.done
		return c.err
	}
	return nil
}

// newCall registers a request of op; setup adds its streams.
func (c *Client) newCall(ctx context.Context, op string, setup func(*call)) (*call, error) {
	if err := c.waitReady(ctx); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.calls == nil {
		return nil, c.err // fail set it with the calls
	}
	for {
		c.nextID++
		if _, busy := c.calls[c.nextID]; c.nextID != 0 && !busy {
			break
		}
	}
	k := &call{id: c.nextID, op: op, resp: make(chan *response, 1), broken: make(chan struct{})}
	if setup != nil {
		setup(k)
	}
	c.calls[k.id] = k
	return k, nil
}

// send sends request m of call k.
func (c *Client) send(ctx context.Context, k *call, m *request) error {
	b, err := jsonFrame(frameRequest, k.id, m)
	if err == nil && len(b)-lenSize > c.maxOut {
		err = errorf(CodeTooLarge, "%s request of %d bytes exceeds the agent's limit of %d", m.Op, len(b)-lenSize, c.maxOut)
	}
	if err == nil {
		err = c.write(ctx, b)
	}
	if err != nil {
		c.remove(k)
		k.fail(err)
	}
	return err
}

// abandon gives up on call k: the agent is told to cancel it.
func (c *Client) abandon(k *call, err error) {
	c.remove(k)
	k.fail(err)
	go func() { _ = c.write(context.Background(), encodeFrame(frameCancel, 0, k.id, nil)) }()
}

// retract cancels call k, whose caller's side failed with err, and waits
// (as long as ctx allows) for the agent's answer to it: once it returns,
// the agent is done with the request (a write's new file is gone again).
// It returns err.
func (c *Client) retract(ctx context.Context, k *call, err error) error {
	if werr := c.write(ctx, encodeFrame(frameCancel, 0, k.id, nil)); werr != nil {
		c.abandon(k, err)
		return err
	}
	if _, werr := c.await(ctx, k); werr != nil && ctx.Err() != nil {
		c.abandon(k, err)
		return err
	}
	c.remove(k)
	k.fail(err)
	return err
}

// await waits for the response to k.
func (c *Client) await(ctx context.Context, k *call) (*response, error) {
	// An answer that came is taken, even if the request broke after it
	// (a watch's events, say): that is the answer's reader's to see.
	select {
	case r := <-k.resp:
		return r, nil
	default:
	}
	select {
	case r := <-k.resp:
		return r, nil
	case <-k.broken:
		select {
		case r := <-k.resp:
			return r, nil
		default:
			return nil, k.brokeErr
		}
	case <-c.done:
		select {
		case r := <-k.resp:
			return r, nil
		default:
			return nil, c.err
		}
	case <-ctx.Done():
		c.abandon(k, ctx.Err())
		return nil, ctx.Err()
	}
}

// roundTrip sends m and waits for its answer; an error the agent reported
// is returned as an *Error.
func (c *Client) roundTrip(ctx context.Context, m *request, setup func(*call)) (*call, *response, error) {
	k, err := c.newCall(ctx, m.Op, setup)
	if err != nil {
		return nil, nil, err
	}
	if err := c.send(ctx, k, m); err != nil {
		return nil, nil, err
	}
	r, err := c.await(ctx, k)
	if err != nil {
		return nil, nil, err
	}
	if r.Error != nil {
		return nil, nil, r.Error
	}
	return k, r, nil
}

// ExecRequest describes a command to run.
type ExecRequest struct {
	// Args is the command and its arguments; Args[0] is looked up in the
	// PATH of the command's environment unless it contains a slash.
	Args []string
	// Env is added to the agent's default environment, replacing entries
	// with the same name.
	Env []string
	// Dir is the working directory, absolute; "" means the agent's default.
	Dir string
	// Stdin makes Process.Stdin a pipe to the command's stdin; without it
	// the command reads /dev/null (or, with TTY, a terminal nobody types
	// into).
	Stdin bool
	// TTY runs the command on a new terminal, as its controlling terminal:
	// Stdout carries everything it writes, Stderr is empty, and closing
	// Stdin types ^D.
	TTY bool
	// Rows and Cols are the terminal's size; 0 means 24×80.
	Rows, Cols uint16
	// Timeout, when positive, kills the command's process group with
	// SIGKILL once it has run that long; ExitStatus.TimedOut reports it.
	Timeout time.Duration
	// User, when not nil, runs the command with that uid and gid (and no
	// supplementary groups) instead of the agent's own.
	User *Credential
	// Own marks a command of hutch's own that does a file or port
	// operation for the daemon (ln for an archive, port-connect), which
	// the client's check (SetCheck) does not see. Never set for a command
	// a client of the daemon asked for.
	Own bool
}

// Credential is a user and group id in the sandbox.
type Credential struct {
	// UID is the user id.
	UID uint32
	// GID is the group id.
	GID uint32
}

// Process is a command started by Exec. Its output must be read (or
// drained): a command whose output nobody reads blocks once a window of it
// is buffered, as with a pipe.
type Process struct {
	// PID is the command's pid in the sandbox.
	PID int
	// Stdin is the command's stdin; nil unless ExecRequest.Stdin.
	Stdin io.WriteCloser
	// Stdout is the command's stdout (with TTY, everything the terminal
	// shows); Stderr its stderr (with TTY, empty). They end with io.EOF
	// once every process that held them closed them, which may be after
	// Wait returned.
	Stdout, Stderr io.Reader

	c   *Client
	k   *call
	tty bool
}

// ExitStatus is how a command ended.
type ExitStatus struct {
	// Code is the exit code, or 128+Signal when a signal killed it.
	Code int
	// Signal is the signal that killed it, or 0.
	Signal int
	// TimedOut reports that ExecRequest.Timeout killed it.
	TimedOut bool
}

// ProcessInfo describes a command started by Exec that is still running.
type ProcessInfo struct {
	// PID is its pid in the sandbox.
	PID int
	// Args are the arguments it was started with, the first 4 KiB of
	// them.
	Args []string
	// Started is when the agent started it.
	Started time.Time
}

// FileInfo describes a file in the sandbox, as lstat sees it.
type FileInfo struct {
	// Name is the last element of the path ("/" for the root).
	Name string
	// Size is the size in bytes.
	Size int64
	// Mode holds the type and permission bits.
	Mode os.FileMode
	// ModTime is the modification time.
	ModTime time.Time
	// IsDir reports whether it is a directory.
	IsDir bool
	// Link is the target of a symlink, "" for anything else.
	Link string
	// UID and GID are the ids of its owner and group.
	UID, GID uint32
	// Xattrs are the extended attributes StatXattrs and ListXattrs
	// asked for, keyed by their names without the prefix; nil if none.
	Xattrs map[string]string
}

// WriteOptions are the options of WriteFileWith.
type WriteOptions struct {
	// Mode's permission bits (and setuid, setgid, sticky) are set
	// exactly; 0 keeps those of the file replaced, or makes 0644.
	Mode os.FileMode
	// InPlace writes the content into the file at the path (made if
	// missing) instead of renaming a new file over it: the file keeps
	// its inode, and a watch sees it written rather than created. The
	// content is still staged in a temporary file first, so a write
	// that fails on the way leaves the file as it was. A symlink at the
	// path is replaced, as without InPlace.
	InPlace bool
	// XattrPrefix, if set (it must start with "user."), has the file's
	// extended attributes of that prefix replaced by Xattrs (keys
	// without the prefix; at most 64, of 8 KiB in all).
	XattrPrefix string
	Xattrs      map[string]string
}

// Exec starts a command and returns once it runs. A command that cannot be
// found fails with an *Error of code CodeNotFound and message
// "<cmd>: command not found" (a shell's exit code 127), one that may not be
// executed with CodePermissionDenied (126). ctx bounds the start only: if it
// ends first, the agent kills the command. Use Timeout or Signal to end a
// running command.
func (c *Client) Exec(ctx context.Context, r ExecRequest) (*Process, error) {
	if len(r.Args) == 0 || r.Args[0] == "" {
		return nil, errorf(CodeInvalid, "exec: no command")
	}
	if r.Timeout < 0 {
		return nil, errorf(CodeInvalid, "exec %s: negative timeout", r.Args[0])
	}
	if r.Dir != "" {
		if e := checkPath("exec dir", r.Dir); e != nil {
			return nil, e
		}
	}
	if check := c.check.Load(); check != nil && !r.Own {
		if err := (*check)(ctx, r.Args, r.Env); err != nil {
			return nil, err
		}
	}
	m := &request{
		Op: opExec, Args: toWire(r.Args), Env: toWire(c.execEnv(r.Env)), Dir: wstr(r.Dir),
		Stdin: r.Stdin, TTY: r.TTY, Rows: r.Rows, Cols: r.Cols, Timeout: int64(r.Timeout),
	}
	if r.User == nil {
		r.User = c.user.Load()
	}
	if r.User != nil {
		m.UID, m.GID = &r.User.UID, &r.User.GID
	}
	k, resp, err := c.roundTrip(ctx, m, func(k *call) {
		k.proc = &procState{exited: make(chan struct{})}
		k.out[streamOut] = newInStream(c, k.id, streamOut)
		if !r.TTY {
			k.out[streamErr] = newInStream(c, k.id, streamErr)
		}
		if r.Stdin {
			k.in = newOutStream(c, k.id)
		}
	})
	if err != nil {
		return nil, err
	}
	if resp.PID <= 0 || resp.PID > maxPID {
		return nil, c.breach(k, "exec: pid %d out of range", resp.PID)
	}
	p := &Process{PID: resp.PID, Stdout: k.out[streamOut], Stderr: eofReader{}, c: c, k: k, tty: r.TTY}
	if !r.TTY {
		p.Stderr = k.out[streamErr]
	}
	if r.Stdin {
		p.Stdin = k.in
	}
	return p, nil
}

// execEnv is env after the entries SetEnv set; the agent lets a later
// entry replace an earlier one with its name.
func (c *Client) execEnv(env []string) []string {
	base := c.env.Load()
	if base == nil || len(*base) == 0 {
		return env
	}
	return slices.Concat(*base, env)
}

type eofReader struct{}

func (eofReader) Read([]byte) (int, error) { return 0, io.EOF }

// OutputPending reports whether output the agent sent is still to be read
// or handled: the agent sends everything a command wrote before its exit,
// so a caller that saw the exit may wait while this is true, and then
// stop waiting for the streams' ends (which a process left in the
// background may hold off).
func (p *Process) OutputPending() bool {
	for _, r := range []io.Reader{p.Stdout, p.Stderr} {
		if s, ok := r.(*inStream); ok && s.Pending() {
			return true
		}
	}
	return false
}

// Wait waits for the command to end. It does not read its output.
func (p *Process) Wait() (ExitStatus, error) {
	select {
	case <-p.k.proc.exited:
		return p.k.proc.status, nil
	case <-p.k.broken:
		select {
		case <-p.k.proc.exited:
			return p.k.proc.status, nil
		default:
			return ExitStatus{}, fmt.Errorf("wait for process %d: %w", p.PID, p.k.brokeErr)
		}
	case <-p.c.done:
		select {
		case <-p.k.proc.exited:
			return p.k.proc.status, nil
		default:
			return ExitStatus{}, fmt.Errorf("wait for process %d: %w", p.PID, p.c.err)
		}
	}
}

// Signal sends sig to the command's process group. It fails with
// os.ErrProcessDone once the command ended.
func (p *Process) Signal(sig syscall.Signal) error {
	select {
	case <-p.k.proc.exited:
		return os.ErrProcessDone
	default:
	}
	_, _, err := p.c.roundTrip(context.Background(), &request{Op: opSignal, Target: p.k.id, Signal: int(sig)}, nil)
	return err
}

// Resize sets the size of the command's terminal (the command gets
// SIGWINCH).
func (p *Process) Resize(rows, cols uint16) error {
	if !p.tty {
		return errorf(CodeInvalid, "resize process %d: it has no terminal", p.PID)
	}
	_, _, err := p.c.roundTrip(context.Background(), &request{Op: opResize, Target: p.k.id, Rows: rows, Cols: cols}, nil)
	return err
}

// ListProcesses lists the commands started by Exec that are still running,
// oldest first.
func (c *Client) ListProcesses(ctx context.Context) ([]ProcessInfo, error) {
	k, _, err := c.roundTrip(ctx, &request{Op: opPS}, nil)
	if err != nil {
		return nil, err
	}
	return k.procs, nil
}

// KillAll kills every process of the sandbox but the agent, PID 1, and
// returns once none is left; commands started by Exec end with SIGKILL.
// The agent goes on killing what a round left (a process forking as fast
// as it can) until ctx ends: then it fails, with processes left. An agent
// that is not PID 1 of a sandbox refuses (CodeInvalid).
func (c *Client) KillAll(ctx context.Context) error {
	_, _, err := c.roundTrip(ctx, &request{Op: opKillAll}, nil)
	return err
}

// Usage reads what the agent's cgroup has used: the sandbox's, where the
// agent is PID 1 of a container with a cgroup namespace of its own (a
// cluster's pod), which the daemon cannot read from its own machine.
func (c *Client) Usage(ctx context.Context) (Usage, error) {
	k, r, err := c.roundTrip(ctx, &request{Op: opUsage}, nil)
	if err != nil {
		return Usage{}, err
	}
	if r.Usage == nil || r.Usage.CPU < 0 || r.Usage.Memory < 0 || r.Usage.MemoryCache < 0 {
		return Usage{}, c.breach(k, "usage: none, or negative: %+v", r.Usage)
	}
	return *r.Usage, nil
}

// ReadFile copies the content of the regular file at path into w and
// returns the number of bytes copied.
func (c *Client) ReadFile(ctx context.Context, path string, w io.Writer) (int64, error) {
	if e := checkPath("read", path); e != nil {
		return 0, e
	}
	return c.readStream(ctx, &request{Op: opRead, Path: wstr(path)}, "read "+path, w)
}

// ExportLayer copies the sandbox's root layer, as an OCI layer's tar (the
// agent's ServeOptions.ExportLayer), into w and returns the number of
// bytes copied. The agent of a tier that keeps the layer on the host
// answers with an error. What it sends is the sandbox's: the caller
// bounds it and parses it as hostile.
func (c *Client) ExportLayer(ctx context.Context, w io.Writer) (int64, error) {
	return c.readStream(ctx, &request{Op: opLayer}, "export the root layer", w)
}

// readStream sends m, an op whose answer is a stream of data (read,
// layer), copies the stream into w and returns the number of bytes
// copied; what names the call in errors.
func (c *Client) readStream(ctx context.Context, m *request, what string, w io.Writer) (int64, error) {
	k, err := c.newCall(ctx, m.Op, func(k *call) { k.out[streamOut] = newInStream(c, k.id, streamOut) })
	if err != nil {
		return 0, err
	}
	if err := c.send(ctx, k, m); err != nil {
		return 0, err
	}
	buf := make([]byte, maxChunk)
	var n int64
	for {
		got, err := k.out[streamOut].read(ctx, buf)
		if got > 0 {
			if _, werr := w.Write(buf[:got]); werr != nil {
				c.abandon(k, werr)
				return n, fmt.Errorf("%s: %w", what, werr)
			}
			n += int64(got)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			if ctx.Err() != nil {
				c.abandon(k, err)
			}
			return n, err
		}
	}
	r, err := c.await(ctx, k)
	if err != nil {
		return n, err
	}
	if r.Error != nil {
		return n, r.Error
	}
	if r.Size != n {
		return n, c.breach(k, "%s: the agent sent %d bytes and reported %d", what, n, r.Size)
	}
	return n, nil
}

// WriteFile replaces the file at path with the content of r, atomically: a
// temporary file in the same directory is written, synced and renamed over
// path, so no reader ever sees a part of it. The parent directory must
// exist. A symlink at path is replaced, not followed. mode's permission
// bits (and setuid, setgid, sticky) are set exactly; mode 0 keeps those of
// the file it replaces, or makes 0644. It returns the number of bytes
// written. When r fails, the write is canceled, and WriteFile returns once
// the agent is done with it: the file at path is as it was before.
func (c *Client) WriteFile(ctx context.Context, path string, r io.Reader, mode os.FileMode) (int64, error) {
	return c.WriteFileWith(ctx, path, r, WriteOptions{Mode: mode})
}

// WriteFileWith is WriteFile with options: see WriteOptions.
func (c *Client) WriteFileWith(ctx context.Context, path string, r io.Reader, o WriteOptions) (int64, error) {
	m := &request{Op: opWrite, Path: wstr(path), Mode: uint32(o.Mode), InPlace: o.InPlace, XattrPrefix: wstr(o.XattrPrefix)}
	if len(o.Xattrs) > 0 {
		m.Xattrs = make(map[string]wstr, len(o.Xattrs))
		for k, v := range o.Xattrs {
			m.Xattrs[k] = wstr(v)
		}
	}
	if e := checkPath("write", path); e != nil {
		return 0, e
	}
	if e := checkXattrs(path, m); e != nil {
		return 0, e
	}
	k, err := c.newCall(ctx, opWrite, func(k *call) { k.in = newOutStream(c, k.id) })
	if err != nil {
		return 0, err
	}
	if err := c.send(ctx, k, m); err != nil {
		return 0, err
	}
	buf := make([]byte, c.chunk)
	var n int64
	answered := false
	for !answered {
		m, rerr := r.Read(buf)
		if m > 0 {
			wrote, err := k.in.write(ctx, buf[:m])
			n += int64(wrote)
			if err != nil {
				if !errors.Is(err, errEnded) {
					if ctx.Err() != nil {
						c.abandon(k, err)
					}
					return n, err
				}
				answered = true // early, with an error
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return n, c.retract(ctx, k, fmt.Errorf("write %s: read content: %w", path, rerr))
		}
	}
	if !answered {
		_ = k.in.Close()
	}
	resp, err := c.await(ctx, k)
	if err != nil {
		return n, err
	}
	if resp.Error != nil {
		return n, resp.Error
	}
	if resp.Size != n {
		return n, c.breach(k, "write %s: sent %d bytes, the agent wrote %d", path, n, resp.Size)
	}
	return n, nil
}

// Stat describes the file at path; a symlink is described itself, with its
// target in Link.
func (c *Client) Stat(ctx context.Context, path string) (FileInfo, error) {
	return c.StatXattrs(ctx, path, "")
}

// StatXattrs is Stat that also returns, in Xattrs, the file's extended
// attributes whose names start with prefix (which must start with "user.";
// "" asks for none). At most 64 of them, of 8 KiB in all, are returned.
func (c *Client) StatXattrs(ctx context.Context, path, prefix string) (FileInfo, error) {
	if e := checkPath("stat", path); e != nil {
		return FileInfo{}, e
	}
	if e := checkPrefix("stat", path, prefix); e != nil {
		return FileInfo{}, e
	}
	k, r, err := c.roundTrip(ctx, &request{Op: opStat, Path: wstr(path), XattrPrefix: wstr(prefix)}, nil)
	if err != nil {
		return FileInfo{}, err
	}
	if r.Info == nil {
		return FileInfo{}, c.breach(k, "stat %s: no file info", path)
	}
	fi, err := fileInfo(*r.Info)
	if err != nil {
		return FileInfo{}, c.breach(k, "stat %s: %v", path, err)
	}
	return fi, nil
}

// List describes the entries of the directory at path, sorted by name.
func (c *Client) List(ctx context.Context, path string) ([]FileInfo, error) {
	return c.ListXattrs(ctx, path, "")
}

// ListXattrs is List that also returns the entries' extended attributes
// whose names start with prefix, as StatXattrs does.
func (c *Client) ListXattrs(ctx context.Context, path, prefix string) ([]FileInfo, error) {
	if e := checkPath("list", path); e != nil {
		return nil, e
	}
	if e := checkPrefix("list", path, prefix); e != nil {
		return nil, e
	}
	k, _, err := c.roundTrip(ctx, &request{Op: opList, Path: wstr(path), XattrPrefix: wstr(prefix)}, nil)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(k.entries, func(a, b FileInfo) int { return strings.Compare(a.Name, b.Name) })
	return k.entries, nil
}

// Mkdir makes the directory path (mode 0755 before the umask); with
// parents, also its missing parents, and an existing directory is no
// error.
func (c *Client) Mkdir(ctx context.Context, path string, parents bool) error {
	if e := checkPath("mkdir", path); e != nil {
		return e
	}
	_, _, err := c.roundTrip(ctx, &request{Op: opMkdir, Path: wstr(path), Parents: parents}, nil)
	return err
}

// Remove removes the file or empty directory at path; with recursive, a
// directory and everything in it. A missing path is CodeNotFound, the root
// CodeInvalid.
func (c *Client) Remove(ctx context.Context, path string, recursive bool) error {
	if e := checkPath("remove", path); e != nil {
		return e
	}
	_, _, err := c.roundTrip(ctx, &request{Op: opRemove, Path: wstr(path), Recursive: recursive}, nil)
	return err
}

// Rename renames from to to, replacing a file at to.
func (c *Client) Rename(ctx context.Context, from, to string) error {
	if e := checkPath("rename", from); e != nil {
		return e
	}
	if e := checkPath("rename", to); e != nil {
		return e
	}
	_, _, err := c.roundTrip(ctx, &request{Op: opRename, Path: wstr(from), To: wstr(to)}, nil)
	return err
}

// Chown sets the owner and group of the file at path (a symlink itself,
// not what it points to).
func (c *Client) Chown(ctx context.Context, path string, uid, gid uint32) error {
	if e := checkPath("chown", path); e != nil {
		return e
	}
	_, _, err := c.roundTrip(ctx, &request{Op: opChown, Path: wstr(path), UID: &uid, GID: &gid}, nil)
	return err
}

// fileInfo checks and converts a file info from the agent.
func fileInfo(w wireInfo) (FileInfo, error) {
	name, link := string(w.Name), string(w.Link)
	switch {
	case name == "" || len(name) > maxName || (name != "/" && strings.IndexByte(name, '/') >= 0) || strings.IndexByte(name, 0) >= 0:
		return FileInfo{}, fmt.Errorf("bad file name %.64q", name)
	case w.Size < 0:
		return FileInfo{}, fmt.Errorf("file %q: negative size", name)
	case len(link) > maxLink || strings.IndexByte(link, 0) >= 0:
		return FileInfo{}, fmt.Errorf("file %q: bad link target", name)
	}
	var xattrs map[string]string
	if len(w.Xattrs) > maxXattrs {
		return FileInfo{}, fmt.Errorf("file %q: more than %d extended attributes", name, maxXattrs)
	}
	n := 0
	for k, v := range w.Xattrs {
		if n += len(k) + len(v); n > maxXattrBytes || k == "" {
			return FileInfo{}, fmt.Errorf("file %q: bad extended attributes", name)
		}
		if xattrs == nil {
			xattrs = make(map[string]string, len(w.Xattrs))
		}
		xattrs[k] = string(v)
	}
	mode := os.FileMode(w.Mode)
	return FileInfo{
		Name:    name,
		Size:    w.Size,
		Mode:    mode,
		ModTime: time.Unix(0, w.ModTime),
		IsDir:   mode.IsDir(),
		Link:    link,
		UID:     w.UID,
		GID:     w.GID,
		Xattrs:  xattrs,
	}, nil
}
