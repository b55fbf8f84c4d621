// Package kernel is hutch's client for one Jupyter kernel process (such as
// ipykernel), the engine behind code-interpreter contexts: Start launches
// the kernel, Execute runs code in it and streams what the code printed,
// returned, displayed or raised as typed values, and Interrupt, Restart and
// Close control it.
//
// It speaks the Jupyter messaging protocol (version 5.3) directly over
// ZeroMQ with github.com/go-zeromq/zmq4, a pure-Go ZeroMQ, so hutch stays
// one static binary (CGO_ENABLED=0). It does not go through jupyter-server:
// that would put a Python web server and one more long-lived process in
// every sandbox, with its own failure modes, for a protocol this small
// (a handful of message types on three sockets). Implementing ZMTP ourselves
// would be the larger risk, hence the library.
//
// # Protocol
//
// Start writes a connection file (mode 0600, in a private 0700 directory)
// naming unix sockets in that directory (ZeroMQ's ipc transport) and a
// random HMAC-SHA256 key, starts the kernel in its own process group with
// that file, connects shell and control (DEALER) and iopub (SUB, every
// topic), and waits until a kernel_info_request is answered on shell and
// its status is seen on iopub (so no output of the first execution is
// missed). Not TCP: libzmq looks a TCP address up among the network
// interfaces with a netlink socket, which a sandbox refuses (the kernel
// aborts), and a port could be taken between choosing and binding it.
// The stdin and heartbeat channels are not used: a process that exits is
// seen by waiting on it.
//
// Every message sent is signed and every message received is verified
// (HMAC over header, parent_header, metadata and content, in that order);
// one with a bad signature is discarded.
//
// Executions are sent with stop_on_error false. With true, ipykernel aborts
// every execute_request that reaches it shortly after one that raised (it
// is meant for a queue of cells, "Run all"); the client never queues, so
// that would only abort, at random, the execution right after an error.
//
// An execution is over when the kernel's iopub reports status "idle" for
// the request and the shell execute_reply has arrived. Neither alone is
// enough: the reply can come before the last display_data of the same
// request. A kernel whose iopub queue overflowed may have dropped the idle
// status: an iopub quiet for idleGrace after the reply ends the execution
// too, with a *Dropped saying so.
//
// # Concurrency and bounds
//
// A Kernel runs one execution at a time: Execute holds a lock for the whole
// execution, so concurrent calls wait their turn. Interrupt, Restart and
// Close may be called while an execution runs.
//
// Output is delivered to the caller's callback from a single reader, which
// does not read the next iopub message until the callback returns: a slow
// consumer slows the kernel (ZeroMQ's bounded queues, then the kernel's own
// high-water mark, which drops) rather than growing memory here. A message
// larger than Config.MaxMessageBytes (32 MiB by default) is not decoded: the
// execution sees a *Dropped in its place. The ZeroMQ library reads a frame
// whole before that check, so a single frame can still cost as much memory
// as the kernel declares; the kernel runs with the same confinement as the
// code it executes, so this bounds accidents (a huge plot, an endless
// print), not a hostile peer.
package kernel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-zeromq/zmq4"
)

// ConnectionFileArg is replaced in Config.Argv by the path of the
// connection file.
const ConnectionFileArg = "{connection_file}"

// DefaultMaxMessageBytes is the default Config.MaxMessageBytes.
const DefaultMaxMessageBytes = 32 << 20

// Config describes the kernel process to start.
type Config struct {
	// Argv is the kernel's command line; ConnectionFileArg in any argument
	// is replaced by the connection file's path. Default:
	// python3 -m ipykernel_launcher -f {connection_file}.
	Argv []string
	// Dir is the kernel's working directory ("" = the caller's).
	Dir string
	// Env is the kernel's environment (nil = the caller's).
	Env []string
	// MaxMessageBytes bounds one received message, all frames together
	// (0 = DefaultMaxMessageBytes).
	MaxMessageBytes int
	// Log, if set, receives what the kernel process writes to its own
	// stdout and stderr (not the code's output, which comes on iopub).
	Log io.Writer
	// OOMScoreAdj, when above 0, is set as the kernel process's OOM score
	// adjustment (and so its children's), up to 1000: a kernel that runs
	// out of memory is then what the kernel's OOM killer ends, not its
	// client or its neighbours.
	OOMScoreAdj int
}

// ExecuteOptions adjusts one execution.
type ExecuteOptions struct {
	// Silent runs the code without output, history or an execution count
	// (for setup code).
	Silent bool
}

// Reply is the kernel's execute_reply.
type Reply struct {
	Status         string // "ok", "error" or "aborted"
	ExecutionCount int
	Error          *Error // set when Status is "error"
}

// ErrClosed is returned by the methods of a closed Kernel.
var ErrClosed = errors.New("kernel: closed")

// ErrDied is wrapped by the error of an execution or a start during which
// the kernel process exited.
var ErrDied = errors.New("kernel: the kernel process exited")

// Kernel is a running kernel process and the client's connection to it.
type Kernel struct {
	cfg    Config
	execMu sync.Mutex // one execution at a time; held by Restart while relaunching

	mu     sync.Mutex
	cur    *proc
	closed bool
}

// Start launches a kernel as cfg says and returns once it answers, or an
// error when it does not before ctx ends.
func Start(ctx context.Context, cfg Config) (*Kernel, error) {
	if len(cfg.Argv) == 0 {
		cfg.Argv = []string{"python3", "-m", "ipykernel_launcher", "-f", ConnectionFileArg}
	}
	if cfg.MaxMessageBytes <= 0 {
		cfg.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if cfg.Env == nil {
		cfg.Env = os.Environ()
	}
	k := &Kernel{cfg: cfg}
	p, err := k.launch(ctx)
	if err != nil {
		return nil, err
	}
	k.cur = p
	return k, nil
}

// Pid returns the kernel process's id (also its process group's).
func (k *Kernel) Pid() int {
	p, err := k.current()
	if err != nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// ConnectionFile returns the path of the current connection file.
func (k *Kernel) ConnectionFile() string {
	p, err := k.current()
	if err != nil {
		return ""
	}
	return p.connFile
}

func (k *Kernel) current() (*proc, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed || k.cur == nil {
		return nil, ErrClosed
	}
	return k.cur, nil
}

// Execute runs code, calls fn (if not nil) with each output in the order
// the kernel sent it, and returns the kernel's reply once the execution is
// over. The error is ErrDied (wrapped) when the kernel exits before that,
// and ctx.Err() when ctx ends first, in which case the execution is
// interrupted. An exception in the code is not an error of Execute: it
// comes as an *Error output and in Reply.
func (k *Kernel) Execute(ctx context.Context, code string, opts ExecuteOptions, fn func(Output)) (Reply, error) {
	k.execMu.Lock()
	defer k.execMu.Unlock()
	p, err := k.current()
	if err != nil {
		return Reply{}, err
	}
	frames, id, err := p.sig.encode("execute_request", map[string]any{
		"code": code, "silent": opts.Silent, "store_history": !opts.Silent,
		"user_expressions": map[string]any{}, "allow_stdin": false, "stop_on_error": false,
	})
	if err != nil {
		return Reply{}, err
	}
	// An interrupt meant for the execution before, still unanswered,
	// is not to reach this one.
	p.interrupting.Lock()
	p.interrupting.Unlock() //lint:ignore SA2001 waiting for the interrupts under way is the point
	sink := p.subscribe(id)
	defer p.unsubscribe(id)
	p.mu.Lock()
	p.running = sink
	p.mu.Unlock()
	replies := p.expect(p.shellWait, id)
	defer p.forget(p.shellWait, id)
	if err := p.send(p.shell, frames); err != nil {
		return Reply{}, p.failure(err)
	}
	if fn == nil {
		fn = func(Output) {}
	}
	var reply *Reply
	idle := false
	// Once the reply is in, an iopub that stays quiet for idleGrace
	// ends the execution: the kernel dropped its idle status (its queue
	// toward a slow reader was full), which would otherwise never come.
	quiet := time.NewTimer(idleGrace)
	quiet.Stop()
	defer quiet.Stop()
	for !idle || reply == nil {
		select {
		case <-quiet.C:
			fn(&Dropped{MsgType: "status", Reason: fmt.Sprintf("no idle status within %v of the reply: the kernel dropped output toward a slow reader", idleGrace)})
			idle = true
		case it := <-sink.c:
			if reply != nil {
				quiet.Reset(idleGrace)
			}
			switch {
			case it.dropped != nil:
				fn(it.dropped)
			case it.m.Header.MsgType == "status":
				var c struct {
					State string `json:"execution_state"`
				}
				if json.Unmarshal(it.m.Content, &c) == nil && c.State == "idle" {
					idle = true
				}
			default:
				out, err := parseOutput(it.m)
				if err != nil {
					fn(&Dropped{MsgType: it.m.Header.MsgType, Size: it.m.size, Reason: err.Error()})
				} else if out != nil {
					fn(out)
				}
			}
		case m := <-replies:
			r, err := parseReply(m, k.cfg.MaxMessageBytes)
			if err != nil {
				return Reply{}, err
			}
			reply = &r
			quiet.Reset(idleGrace)
		case <-p.dead:
			return Reply{}, p.failure(nil)
		case <-ctx.Done():
			k.interrupt(p)
			return Reply{}, ctx.Err()
		}
	}
	return *reply, nil
}

func parseReply(m message, limit int) (Reply, error) {
	if m.Content == nil {
		return Reply{}, fmt.Errorf("kernel: execute_reply of %d bytes is over the %d-byte limit", m.size, limit)
	}
	var c struct {
		Status         string `json:"status"`
		ExecutionCount int    `json:"execution_count"`
		errorContent
	}
	if err := json.Unmarshal(m.Content, &c); err != nil {
		return Reply{}, fmt.Errorf("kernel: malformed execute_reply: %w", err)
	}
	r := Reply{Status: c.Status, ExecutionCount: c.ExecutionCount}
	if c.Status == "error" {
		r.Error = c.toError()
	}
	return r, nil
}

// interruptWait bounds the wait for an interrupt_reply before Interrupt
// falls back to a signal.
const interruptWait = 5 * time.Second

// idleGrace is how long Execute waits, once the reply is in, for an iopub
// that has gone quiet to report the execution idle (a display_data may
// follow the reply; a kernel short of CPU may take its time). A variable
// for the tests.
var idleGrace = 30 * time.Second

// Interrupt interrupts the running execution (in Python, a
// KeyboardInterrupt): an interrupt_request on the control channel, or
// SIGINT to the kernel's process group when that is not answered. It
// reaches only the execution under way when it is called: with none, it
// does nothing; the next execution is sent once the interrupt was answered
// (or given up), and the SIGINT is not sent once that execution is over.
func (k *Kernel) Interrupt() error {
	p, err := k.current()
	if err != nil {
		return err
	}
	return k.interrupt(p)
}

func (k *Kernel) interrupt(p *proc) error {
	p.interrupting.RLock()
	defer p.interrupting.RUnlock()
	p.mu.Lock()
	target := p.running
	p.mu.Unlock()
	if target == nil {
		return nil
	}
	frames, id, err := p.sig.encode("interrupt_request", map[string]any{})
	if err == nil {
		replies := p.expect(p.controlWait, id)
		defer p.forget(p.controlWait, id)
		if p.send(p.control, frames) == nil {
			t := time.NewTimer(interruptWait)
			defer t.Stop()
			select {
			case <-replies:
				return nil
			case <-p.dead:
				return p.failure(nil)
			case <-t.C:
			}
		}
	}
	// Under p.mu, which the execution's end takes: never after it.
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.running != target {
		return nil
	}
	if err := syscall.Kill(-p.cmd.Process.Pid, syscall.SIGINT); err != nil {
		return fmt.Errorf("kernel: interrupting: %w", err)
	}
	return nil
}

// Restart kills the kernel and starts a new one from the same Config, with
// a new connection file: everything the code defined is lost. An execution
// running meanwhile ends with ErrDied.
func (k *Kernel) Restart(ctx context.Context) error {
	old, err := k.current()
	if err != nil {
		return err
	}
	old.kill()
	k.execMu.Lock()
	defer k.execMu.Unlock()
	p, err := k.launch(ctx)
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		if p != nil {
			p.kill()
		}
		return ErrClosed
	}
	k.cur = p // nil on failure: the Kernel then acts closed
	if err != nil {
		k.closed = true
		return err
	}
	return nil
}

// shutdownWait bounds how long Close waits for the kernel's shutdown_reply,
// and exitWait how long it then lets the kernel exit on its own (ipykernel
// goes on to terminate its children, which takes it tens of seconds when
// one of them is a zombie it never reaped).
const (
	shutdownWait = 5 * time.Second
	exitWait     = time.Second
)

// Close asks the kernel to shut down, kills its process group (whatever is
// left of it) once the kernel has answered or after a few seconds, and
// removes the connection file. A running execution ends with ErrDied.
func (k *Kernel) Close() error {
	k.mu.Lock()
	p := k.cur
	already := k.closed
	k.closed, k.cur = true, nil
	k.mu.Unlock()
	if already || p == nil {
		return nil
	}
	if frames, id, err := p.sig.encode("shutdown_request", map[string]any{"restart": false}); err == nil {
		replies := p.expect(p.controlWait, id)
		if p.send(p.control, frames) == nil && waitFor(replies, p.dead, shutdownWait) {
			waitFor(nil, p.dead, exitWait)
		}
		p.forget(p.controlWait, id)
	}
	p.kill()
	return nil
}

// waitFor waits up to d for a message on c or for dead to close, and
// reports whether either came.
func waitFor(c <-chan message, dead <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-c:
	case <-dead:
	case <-t.C:
		return false
	}
	return true
}

// launch starts a kernel process.
func (k *Kernel) launch(ctx context.Context) (*proc, error) { return k.launchOnce(ctx) }

func (k *Kernel) launchOnce(ctx context.Context) (_ *proc, err error) {
	dir, err := os.MkdirTemp("", "hutch-kernel-")
	if err != nil {
		return nil, fmt.Errorf("kernel: %w", err)
	}
	sig := &signer{key: []byte(randomHex(32)), session: randomHex(16)}
	// The channels are unix sockets in the private directory (ZeroMQ's
	// ipc transport): no port to race for, nothing on the network, and
	// no interface lookup, which libzmq makes with a netlink socket for a
	// TCP address and which a sandbox refuses.
	ports := []int{1, 2, 3, 4, 5}
	base := filepath.Join(dir, "k")
	connFile := filepath.Join(dir, "connection.json")
	cf, err := json.Marshal(map[string]any{
		"transport": "ipc", "ip": base, "shell_port": ports[0], "iopub_port": ports[1],
		"stdin_port": ports[2], "control_port": ports[3], "hb_port": ports[4],
		"key": string(sig.key), "signature_scheme": "hmac-sha256",
	})
	if err == nil {
		err = os.WriteFile(connFile, cf, 0o600)
	}
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("kernel: writing the connection file: %w", err)
	}

	argv := make([]string, len(k.cfg.Argv))
	for i, a := range k.cfg.Argv {
		argv[i] = strings.ReplaceAll(a, ConnectionFileArg, connFile)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = k.cfg.Dir
	cmd.Env = withDefault(k.cfg.Env, "PYDEVD_DISABLE_FILE_VALIDATION", "1")
	tail := &Tail{Max: 4 << 10}
	var w io.Writer = tail
	if k.cfg.Log != nil {
		w = io.MultiWriter(tail, k.cfg.Log)
	}
	// The kernel writes into a pipe of our own rather than one exec.Cmd
	// copies from, so that waiting for the kernel is not waiting for every
	// process that inherited its stdout too.
	logR, logW, err := os.Pipe()
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("kernel: %w", err)
	}
	cmd.Stdout, cmd.Stderr = logW, logW
	// Its own group, so that an interrupt or a kill reaches the processes
	// the code started too. Pdeathsig ends the kernel should hutch die
	// without closing it (it fires when the thread that started the kernel
	// exits, which in Go is when the process does, unless that thread was
	// locked by a goroutine that ended without unlocking it).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	err = cmd.Start()
	logW.Close()
	if err != nil {
		logR.Close()
		os.RemoveAll(dir)
		return nil, fmt.Errorf("kernel: starting %s: %w", argv[0], err)
	}
	RaiseOOMScore(cmd.Process.Pid, k.cfg.OOMScoreAdj)
	logged := make(chan struct{})
	go func() {
		io.Copy(w, logR)
		close(logged)
	}()

	pctx, cancel := context.WithCancel(context.Background())
	p := &proc{
		cmd: cmd, dir: dir, connFile: connFile, sig: sig, limit: k.cfg.MaxMessageBytes,
		ctx: pctx, cancel: cancel, dead: make(chan struct{}), tail: tail, log: logR,
		shellWait: map[string]chan message{}, controlWait: map[string]chan message{},
		sinks: map[string]*sink{},
	}
	go func() {
		p.waitErr = cmd.Wait()
		// Let the last words of a kernel that failed reach tail, unless
		// processes it left behind keep the pipe open.
		t := time.NewTimer(time.Second)
		select {
		case <-logged:
		case <-t.C:
		}
		t.Stop()
		close(p.dead)
		cancel()
	}()
	defer func() {
		if err != nil {
			p.kill()
		}
	}()
	stop := context.AfterFunc(ctx, cancel)
	defer stop()

	dial := func(s zmq4.Socket, port int) error {
		if err := s.Dial(fmt.Sprintf("ipc://%s-%d", base, port)); err != nil {
			return p.startFailure(ctx, err)
		}
		return nil
	}
	opts := []zmq4.Option{zmq4.WithDialerRetry(50 * time.Millisecond), zmq4.WithDialerMaxRetries(-1)}
	p.shell = zmq4.NewDealer(pctx, append(opts, zmq4.WithID(zmq4.SocketIdentity(sig.session)))...)
	p.control = zmq4.NewDealer(pctx, opts...)
	p.iopub = zmq4.NewSub(pctx, opts...)
	if err := dial(p.shell, ports[0]); err != nil {
		return nil, err
	}
	if err := dial(p.control, ports[3]); err != nil {
		return nil, err
	}
	if err := dial(p.iopub, ports[1]); err != nil {
		return nil, err
	}
	if err := p.iopub.SetOption(zmq4.OptionSubscribe, ""); err != nil {
		return nil, fmt.Errorf("kernel: subscribing to iopub: %w", err)
	}
	go p.readReplies(p.shell, p.shellWait)
	go p.readReplies(p.control, p.controlWait)
	go p.readIOPub()
	if err := p.waitReady(ctx); err != nil {
		return nil, err
	}
	if !stop() { // ctx ended just now and took the sockets with it
		return nil, fmt.Errorf("kernel: waiting for the kernel to start: %w", ctx.Err())
	}
	return p, nil
}

// waitReady sends kernel_info_request until one is answered on shell and
// its busy/idle status arrives on iopub, which proves the subscription is
// live (ZeroMQ drops what a publisher sends before it).
func (p *proc) waitReady(ctx context.Context) error {
	for {
		frames, id, err := p.sig.encode("kernel_info_request", map[string]any{})
		if err != nil {
			return err
		}
		s := p.subscribe(id)
		replies := p.expect(p.shellWait, id)
		err = p.send(p.shell, frames)
		answered, seen := false, false
		t := time.NewTimer(time.Second)
		for err == nil && !(answered && seen) {
			select {
			case <-replies:
				answered = true
			case <-s.c:
				seen = true
			case <-t.C:
				if answered { // iopub not live yet: ask again
					err = errRetry
				}
			case <-p.dead:
				err = p.failure(nil)
			case <-ctx.Done():
				err = fmt.Errorf("kernel: waiting for the kernel to answer: %w", ctx.Err())
			}
		}
		t.Stop()
		p.unsubscribe(id)
		p.forget(p.shellWait, id)
		if err != errRetry {
			return err
		}
	}
}

var errRetry = errors.New("retry")

// RaiseOOMScore sets process pid's OOM score adjustment to adj (at most
// 1000) when adj is above 0. Raising it needs no privilege; a failure
// leaves the process as likely a victim of the OOM killer as before.
func RaiseOOMScore(pid, adj int) {
	if adj = min(adj, 1000); adj > 0 {
		_ = os.WriteFile(fmt.Sprintf("/proc/%d/oom_score_adj", pid), []byte(strconv.Itoa(adj)), 0)
	}
}

// withDefault returns env with name=value added when env does not set name.
func withDefault(env []string, name, value string) []string {
	for _, kv := range env {
		if strings.HasPrefix(kv, name+"=") {
			return env
		}
	}
	return append(env[:len(env):len(env)], name+"="+value)
}
