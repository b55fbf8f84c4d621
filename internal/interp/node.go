package interp

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hutch-sandbox/hutch/internal/kernel"
)

// driver is the JavaScript program node runs for a context.
//
//go:embed node/driver.js
var driver []byte

// NodeConfig describes a JavaScript or TypeScript context.
type NodeConfig struct {
	// Node is the node binary (default "node", from PATH).
	Node string
	// Dir is the working directory, from which require and import resolve
	// ("" = the caller's).
	Dir string
	// Env is node's environment (nil = the caller's).
	Env []string
	// TypeScript makes the context's language TypeScript: types are
	// stripped (never checked) before a cell runs.
	TypeScript bool
	// TypeScriptModule is the directory of the typescript module, which
	// parses every cell (default: Debian's node-typescript,
	// DefaultTypeScriptModule, else one node finds as "typescript").
	TypeScriptModule string
	// Log, if set, receives the engine's own diagnostics: what node and
	// the processes the code started write to node's stdout and stderr,
	// and the output of a cell that arrives after its execution ended.
	Log io.Writer
	// MaxMessageBytes bounds one message from node (0 =
	// kernel.DefaultMaxMessageBytes); a larger output is a *kernel.Dropped.
	MaxMessageBytes int
	// OOMScoreAdj is kernel.Config's: node's OOM score adjustment.
	OOMScoreAdj int
}

// DefaultTypeScriptModule is where Debian's node-typescript installs
// TypeScript.
const DefaultTypeScriptModule = "/usr/share/nodejs/typescript"

// Node is a JavaScript or TypeScript context: a node process running
// hutch's driver. It implements Engine.
type Node struct {
	cfg NodeConfig
	log io.Writer

	execMu sync.Mutex // one execution at a time; held by Restart while relaunching
	count  int        // non-silent executions so far, under execMu

	mu     sync.Mutex
	cur    *nodeProc
	closed bool
	seq    int64 // the last execution id sent
}

var _ Engine = (*Node)(nil)

// StartNode starts node with the driver and returns once it is ready, or
// an error when it is not before ctx ends.
func StartNode(ctx context.Context, cfg NodeConfig) (*Node, error) {
	if cfg.Node == "" {
		cfg.Node = "node"
	}
	if cfg.MaxMessageBytes <= 0 {
		cfg.MaxMessageBytes = kernel.DefaultMaxMessageBytes
	}
	if cfg.Env == nil {
		cfg.Env = os.Environ()
	}
	n := &Node{cfg: cfg, log: io.Discard}
	if cfg.Log != nil {
		n.log = &lockedWriter{w: cfg.Log}
	}
	p, err := n.launch(ctx)
	if err != nil {
		return nil, err
	}
	n.cur = p
	return n, nil
}

// Pid returns node's process id (also its process group's), 0 if none.
func (n *Node) Pid() int {
	p, err := n.current()
	if err != nil {
		return 0
	}
	return p.cmd.Process.Pid
}

func (n *Node) current() (*nodeProc, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed || n.cur == nil {
		return nil, kernel.ErrClosed
	}
	return n.cur, nil
}

// Execute runs code as the next cell and calls fn (if not nil) with its
// outputs in order: an *kernel.Input first unless opts.Silent, then
// *kernel.Stream, *kernel.Result (the value of the last expression, as
// node's util.inspect shows it), *kernel.Error and *kernel.Dropped. When
// node exits, the error wraps kernel.ErrDied, and so does every later
// Execute until Restart. When ctx ends first, the cell is interrupted (see
// Interrupt) and Execute returns ctx.Err() once it has stopped.
func (n *Node) Execute(ctx context.Context, code string, opts kernel.ExecuteOptions, fn func(kernel.Output)) (kernel.Reply, error) {
	n.execMu.Lock()
	defer n.execMu.Unlock()
	p, err := n.current()
	if err != nil {
		return kernel.Reply{}, err
	}
	select {
	case <-p.dead:
		return kernel.Reply{}, p.failure()
	default:
	}
	if err := ctx.Err(); err != nil {
		return kernel.Reply{}, err
	}
	if fn == nil {
		fn = func(kernel.Output) {}
	}
	n.mu.Lock()
	n.seq++
	id := n.seq
	n.mu.Unlock()
	if !opts.Silent {
		n.count++
		fn(&kernel.Input{ExecutionCount: n.count})
	}
	count := n.count
	s := p.subscribe(id)
	defer p.unsubscribe(s)
	written := make(chan error, 1)
	go func() {
		written <- p.send(map[string]any{"t": "execute", "id": id, "code": code, "silent": opts.Silent, "count": count})
	}()
	select {
	case err := <-written:
		if err != nil {
			p.kill()
			return kernel.Reply{}, p.failure()
		}
	case <-p.dead:
		return kernel.Reply{}, p.failure()
	case <-ctx.Done():
		select {
		case err := <-written:
			if err == nil {
				break // sent: stopped below like any cell
			}
			p.kill()
			return kernel.Reply{}, p.failure()
		default:
			// A command half written would garble every later one.
			p.kill()
			return kernel.Reply{}, ctx.Err()
		}
	}

	reply := kernel.Reply{Status: "ok", ExecutionCount: count}
	cancelled := ctx.Done()
	stopping := false // ctx ended: the cell is being stopped
	for {
		select {
		case ev := <-s.c:
			if ev.dropped != nil {
				fn(ev.dropped)
				continue
			}
			switch ev.T {
			case "stream":
				fn(&kernel.Stream{Name: ev.Name, Text: ev.Text, Time: ev.at})
			case "result":
				fn(&kernel.Result{Main: true, Data: ev.Data, Metadata: map[string]any{}, ExecutionCount: count})
			case "error":
				e := &kernel.Error{Name: ev.Name, Value: ev.Value, Traceback: ev.Traceback}
				reply.Error = e
				fn(e)
			case "done":
				if stopping {
					return kernel.Reply{}, ctx.Err()
				}
				reply.Status = ev.Status
				if reply.Status == "error" && reply.Error == nil {
					reply.Error = &kernel.Error{Name: "Error", Value: "the error's report was dropped"}
				}
				return reply, nil
			}
		case <-p.dead:
			if stopping {
				return kernel.Reply{}, ctx.Err()
			}
			return kernel.Reply{}, p.failure()
		case <-cancelled:
			// Stop the cell and wait until it has, so that the next
			// execution finds node idle; what it still outputs is not
			// the caller's any more.
			cancelled, stopping = nil, true
			fn = func(o kernel.Output) {
				if s, ok := o.(*kernel.Stream); ok {
					io.WriteString(p.log, s.Text)
				}
			}
			go p.stop(s)
		}
	}
}

// Interrupt stops the running cell, if any, and returns once it stopped.
// A cell running synchronously gets an exception where it is (vm's
// breakOnSigint, on SIGINT to node's process group, which also reaches the
// processes the cell started); one waiting on a promise is abandoned (the
// promise may still settle later, unseen). Either way the execution ends
// with an error named "Interrupted" and the context keeps its state. A
// cell that does not stop within interruptWait (a busy loop after an
// await, which node cannot break) is ended by killing node: its execution
// fails with kernel.ErrDied and the context needs Restart.
func (n *Node) Interrupt() error {
	p, err := n.current()
	if err != nil {
		return err
	}
	p.mu.Lock()
	s := p.sink
	p.mu.Unlock()
	if s != nil {
		p.stop(s)
	}
	return nil
}

// Restart kills node and starts it again: the context's state is gone and
// the execution count starts again from 1. A running execution ends with
// kernel.ErrDied.
func (n *Node) Restart(ctx context.Context) error {
	old, err := n.current()
	if err != nil {
		return err
	}
	old.kill()
	n.execMu.Lock()
	defer n.execMu.Unlock()
	p, err := n.launch(ctx)
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		if p != nil {
			p.kill()
		}
		return kernel.ErrClosed
	}
	n.cur = p // nil on failure: the Node then acts closed
	n.count = 0
	if err != nil {
		n.closed = true
		return err
	}
	return nil
}

// Close kills node's process group and removes the driver's directory. A
// running execution ends with kernel.ErrDied.
func (n *Node) Close() error {
	n.mu.Lock()
	p := n.cur
	n.closed, n.cur = true, nil
	n.mu.Unlock()
	if p != nil {
		p.kill()
	}
	return nil
}

// nodeProc is one node process; Restart replaces it.
type nodeProc struct {
	cmd      *exec.Cmd
	dir      string
	commands *os.File // fd 3 of node: commands, one JSON object a line
	sendMu   sync.Mutex
	events   *os.File // fd 4 of node: events
	output   *os.File // node's stdout and stderr
	limit    int
	log      io.Writer

	ready chan readyEvent
	dead  chan struct{} // closed once node exited and its events were read
	// waitErr is node's exit status, set before dead is closed.
	waitErr error
	tail    *kernel.Tail

	mu   sync.Mutex
	sink *nodeSink // the execution under way

	killOnce sync.Once
}

// nodeSink receives the events of one execution.
type nodeSink struct {
	id       int64
	c        chan nodeEvent
	finished chan struct{} // closed when its execution ended (done, or gone)
	once     sync.Once

	mu    sync.Mutex
	ended bool // its done was read, or its Execute returned
}

// nodeEvent is one line from the driver.
type nodeEvent struct {
	ID        int64          `json:"id"`
	T         string         `json:"t"`
	Name      string         `json:"name"`
	Text      string         `json:"text"`
	Value     string         `json:"value"`
	Traceback []string       `json:"traceback"`
	Data      map[string]any `json:"data"`
	Status    string         `json:"status"`

	at      time.Time
	dropped *kernel.Dropped
}

type readyEvent struct {
	TypeScript string `json:"typescript"`
	Missing    string `json:"missing"`
}

func (n *Node) launch(ctx context.Context) (_ *nodeProc, err error) {
	dir, err := os.MkdirTemp("", "hutch-node-")
	if err != nil {
		return nil, fmt.Errorf("interp: %w", err)
	}
	script := filepath.Join(dir, "driver.js")
	if err := os.WriteFile(script, driver, 0o600); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("interp: writing the driver: %w", err)
	}
	var files []*os.File // closed on failure
	pipe := func() (r, w *os.File) {
		if err != nil {
			return nil, nil
		}
		r, w, err = os.Pipe()
		files = append(files, r, w)
		return r, w
	}
	cmdR, cmdW := pipe()
	evR, evW := pipe()
	outR, outW := pipe()
	if err != nil {
		for _, f := range files {
			f.Close()
		}
		os.RemoveAll(dir)
		return nil, fmt.Errorf("interp: %w", err)
	}
	conf, _ := json.Marshal(map[string]any{"typescript": n.cfg.TypeScript, "typescriptModule": n.cfg.TypeScriptModule})
	cmd := exec.Command(n.cfg.Node, script, string(conf))
	cmd.Dir = n.cfg.Dir
	cmd.Env = n.cfg.Env
	cmd.Stdout, cmd.Stderr = outW, outW
	cmd.ExtraFiles = []*os.File{cmdR, evW}
	// Its own group, so that an interrupt or a kill reaches the processes
	// the code started too; Pdeathsig ends node should hutch die without
	// closing it (as the kernel package does).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	err = cmd.Start()
	cmdR.Close()
	evW.Close()
	outW.Close()
	if err != nil {
		cmdW.Close()
		evR.Close()
		outR.Close()
		os.RemoveAll(dir)
		return nil, fmt.Errorf("interp: starting %s: %w", n.cfg.Node, err)
	}
	kernel.RaiseOOMScore(cmd.Process.Pid, n.cfg.OOMScoreAdj)
	p := &nodeProc{
		cmd: cmd, dir: dir, commands: cmdW, events: evR, output: outR,
		limit: n.cfg.MaxMessageBytes, log: n.log,
		ready: make(chan readyEvent, 1), dead: make(chan struct{}), tail: &kernel.Tail{Max: 4 << 10},
	}
	logged := make(chan struct{})
	go func() {
		io.Copy(io.MultiWriter(p.tail, n.log), outR)
		close(logged)
	}()
	read := make(chan struct{})
	go func() {
		p.readEvents()
		close(read)
	}()
	go func() {
		p.waitErr = cmd.Wait()
		// Let the last events and words of node reach us, unless
		// processes it left behind keep its stdout open.
		expired := make(chan struct{})
		t := time.AfterFunc(time.Second, func() { close(expired) })
		for _, c := range []chan struct{}{read, logged} {
			select {
			case <-c:
			case <-expired:
			}
		}
		t.Stop()
		close(p.dead)
	}()
	defer func() {
		if err != nil {
			p.kill()
		}
	}()
	select {
	case r := <-p.ready:
		if r.TypeScript == "" {
			fmt.Fprintf(n.log, "node: no TypeScript (%s): imports and top-level await need node-typescript\n", r.Missing)
		}
		return p, nil
	case <-p.dead:
		return nil, p.failure()
	case <-ctx.Done():
		return nil, fmt.Errorf("interp: waiting for node to start: %w", ctx.Err())
	}
}

func (p *nodeProc) subscribe(id int64) *nodeSink {
	s := &nodeSink{id: id, c: make(chan nodeEvent), finished: make(chan struct{})}
	p.mu.Lock()
	p.sink = s
	p.mu.Unlock()
	return s
}

func (p *nodeProc) unsubscribe(s *nodeSink) {
	s.end()
	s.once.Do(func() { close(s.finished) })
	p.mu.Lock()
	if p.sink == s {
		p.sink = nil
	}
	p.mu.Unlock()
}

// interruptWait bounds how long an interrupted cell may take to stop
// before node is killed; interruptAgain is how long stop waits for the
// driver to heed an interrupt before sending (again) SIGINT.
const (
	interruptWait  = 5 * time.Second
	interruptAgain = 250 * time.Millisecond
)

// stop interrupts the execution of s and waits until it ended, killing
// node when it does not within interruptWait.
//
// The driver hears of it on fd 3 first, which stops a cell that awaits,
// or one that has not started yet. One that runs synchronously cannot
// read it: it gets SIGINT (vm's breakOnSigint), and again later, since
// one that comes before the cell's synchronous part starts is lost, and a
// process the cell waits for may have started after the first. SIGINT is
// not sent at once, so that a cell that heeds the command is not also
// signalled.
//
// A SIGINT names no execution, so that it reaches no other: it is sent
// only once the command is written (the driver, reading that command
// before the next execution's, waits until node took every SIGINT before
// running it), and never once the execution's end was read (the next
// execution is sent only after that).
func (p *nodeProc) stop(s *nodeSink) {
	told := make(chan error, 1)
	go func() { told <- p.send(map[string]any{"t": "interrupt", "id": s.id}) }() // not behind a command the driver does not read
	written := false
	deadline := time.NewTimer(interruptWait)
	defer deadline.Stop()
	again := time.NewTicker(interruptAgain)
	defer again.Stop()
	for {
		select {
		case <-s.finished:
			return
		case <-p.dead:
			return
		case err := <-told:
			written = err == nil
		case <-again.C:
			if !written {
				continue
			}
			if s.signal(p.cmd.Process.Pid) != nil {
				return // node is gone
			}
		case <-deadline.C:
			fmt.Fprintf(p.log, "node: the interrupted execution did not stop in %v: killing node\n", interruptWait)
			p.kill()
			return
		}
	}
}

// signal sends SIGINT to node's process group unless the execution's end
// was read.
func (s *nodeSink) signal(pid int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return nil
	}
	return syscall.Kill(-pid, syscall.SIGINT)
}

// end records that the execution is over for hutch: no SIGINT is sent for
// it any more.
func (s *nodeSink) end() {
	s.mu.Lock()
	s.ended = true
	s.mu.Unlock()
}

// send writes a command to the driver. A write that blocks (the driver
// reads no more) is abandoned when node dies.
func (p *nodeProc) send(cmd map[string]any) error {
	line, err := json.Marshal(cmd)
	if err != nil {
		return err
	}
	p.sendMu.Lock()
	defer p.sendMu.Unlock()
	_, err = p.commands.Write(append(line, '\n'))
	return err
}

// idPrefix reads the id and type of an event too large to decode: the
// driver writes them first.
var idPrefix = regexp.MustCompile(`^\{"id":(\d+),"t":"(\w+)"`)

// readEvents reads the driver's events until node closes fd 4 and hands
// each to the execution it belongs to; the others go to the log.
func (p *nodeProc) readEvents() {
	br := bufio.NewReaderSize(p.events, 64<<10)
	for {
		line, head, size, err := readLine(br, p.limit)
		if err != nil {
			return
		}
		ev := nodeEvent{at: time.Now()}
		if line == nil {
			m := idPrefix.FindSubmatch(head)
			if m != nil {
				ev.ID, _ = strconv.ParseInt(string(m[1]), 10, 64)
				ev.T = string(m[2])
			}
			ev.dropped = &kernel.Dropped{MsgType: ev.T, Size: size,
				Reason: fmt.Sprintf("message of %d bytes is over the %d-byte limit", size, p.limit)}
		} else if err := json.Unmarshal(line, &ev); err != nil {
			fmt.Fprintf(p.log, "node: a malformed event: %v\n", err)
			continue
		}
		switch ev.T {
		case "ready":
			var r readyEvent
			json.Unmarshal(line, &r)
			select {
			case p.ready <- r:
			default:
			}
			continue
		case "log":
			fmt.Fprintf(p.log, "node: %s\n", strings.TrimRight(ev.Text, "\n"))
			continue
		}
		p.deliver(ev)
	}
}

// deliver hands ev to its execution, waiting for it to be taken.
func (p *nodeProc) deliver(ev nodeEvent) {
	p.mu.Lock()
	s := p.sink
	p.mu.Unlock()
	if s == nil || s.id != ev.ID {
		p.logEvent(ev)
		return
	}
	if ev.T == "done" {
		s.end() // before its Execute returns and the next is sent
	}
	select {
	case s.c <- ev:
	case <-s.finished:
		p.logEvent(ev)
		return
	}
	if ev.T == "done" {
		s.once.Do(func() { close(s.finished) })
	}
}

// logEvent writes an event no execution takes (the output of a cell after
// its end) to the log.
func (p *nodeProc) logEvent(ev nodeEvent) {
	switch {
	case ev.dropped != nil:
		fmt.Fprintf(p.log, "node: an output of execution %d dropped: %s\n", ev.ID, ev.dropped.Reason)
	case ev.T == "stream":
		io.WriteString(p.log, ev.Text)
	case ev.T == "error":
		fmt.Fprintf(p.log, "node: execution %d: %s: %s\n", ev.ID, ev.Name, ev.Value)
	}
}

// headSize is how much of a line too long to decode is kept, to read its
// id and type.
const headSize = 128

// readLine returns the next line of br without its newline and its size.
// A line longer than limit is not kept: line is nil and head holds its
// first headSize bytes.
func readLine(br *bufio.Reader, limit int) (line, head []byte, size int, err error) {
	var buf []byte
	long := false
	for {
		frag, err := br.ReadSlice('\n')
		size += len(frag)
		switch {
		case long:
		case size > limit+1:
			long = true
			head = append(buf, frag...)
			head = head[:min(len(head), headSize)]
			buf = nil
		default:
			buf = append(buf, frag...)
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if err != nil {
			return nil, nil, 0, err
		}
		if long {
			return nil, head, size - 1, nil
		}
		return bytes.TrimSuffix(buf, []byte("\n")), nil, size - 1, nil
	}
}

// kill ends node's process group, waits for node to be reaped, and removes
// the driver's directory. It is safe to call more than once.
func (p *nodeProc) kill() {
	p.killOnce.Do(func() {
		// The group outlives its leader while any member lives; kill it
		// whether or not node already exited.
		syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		p.commands.Close()
		<-p.dead
		p.events.Close()
		p.output.Close()
		os.RemoveAll(p.dir)
	})
}

// failure describes node's exit, wrapping kernel.ErrDied, with the end of
// what it wrote to stderr.
func (p *nodeProc) failure() error {
	wrote := ""
	if t := strings.TrimSpace(p.tail.String()); t != "" {
		wrote = "; it wrote: " + t
	}
	return fmt.Errorf("interp: node: %w (%v%s)", kernel.ErrDied, p.waitErr, wrote)
}

// lockedWriter serializes the writes of several goroutines to w.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}
