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
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// ServeOptions configures Serve.
type ServeOptions struct {
	// PID1 makes the agent reap every child that ends, its own commands and
	// the orphans the kernel hands to it as PID 1 of the sandbox (or as a
	// subreaper), so no zombie is left behind. It also keeps SIGTERM,
	// SIGINT and SIGHUP from ending the agent. Only one Serve per process
	// may set it, and nothing else in the process may wait for children.
	PID1 bool
	// Log receives the agent's own events; nil discards them.
	Log *slog.Logger
	// DefaultDir is the working directory of commands that name none; ""
	// means "/".
	DefaultDir string
	// DefaultEnv is the environment every command starts with; an exec's
	// own entries are added to it, replacing those with the same name.
	DefaultEnv []string
	// MaxFrame bounds every frame the agent reads; 0 means 1 MiB. It is at
	// least 64 KiB + 6 bytes, one full data chunk, and no frame the agent
	// sends is longer than that.
	MaxFrame int
	// Sudo serves sudo on SudoSocket: any process of the sandbox may have
	// the agent run a command as root (see SudoMain). Main sets it when
	// the sandbox's root holds SudoMarker.
	Sudo bool
	// SetClock, when set, is given the client's clock as it attaches
	// (Attach): a microVM's guest, restored from a save, sets its own to
	// it. The other tiers' agents share the host's clock and leave it.
	SetClock func(time.Time)
	// Reseed, when set, is given the random bytes the client sends as it
	// attaches (Attach): a microVM's guest mixes them into its kernel's
	// random pool, so that copies restored from one save, which start
	// with the same pool, draw different numbers from then on.
	Reseed func([]byte)
	// ExportLayer, when set, writes the sandbox's root layer — what it
	// wrote over its root, in overlayfs's form — as an OCI layer's tar
	// (Client.ExportLayer): a microVM's guest, whose layer is in its own
	// memory, serves it so that the host can snapshot it. Without it the
	// agent answers that it cannot.
	ExportLayer func(io.Writer) error
}

// Validate checks the options.
func (o ServeOptions) Validate() error {
	if o.MaxFrame != 0 && o.MaxFrame < minMaxFrame {
		return fmt.Errorf("agent: max frame %d is below the minimum of %d", o.MaxFrame, minMaxFrame)
	}
	if o.DefaultDir != "" {
		if e := checkPath("default dir", o.DefaultDir); e != nil {
			return fmt.Errorf("agent: %s", e.Message)
		}
	}
	return nil
}

// server is one Serve call.
type server struct {
	conn     net.Conn
	opts     ServeOptions
	log      *slog.Logger
	maxFrame int
	ctx      context.Context
	cancel   context.CancelFunc
	procs    *procTable

	// rmu, in ServeListener, orders a takeover with the dispatch of
	// frames: a connection's frames are dispatched only while it is
	// the daemon's.
	rmu sync.Mutex

	wmu  sync.Mutex // serializes writes to conn, and its changes
	werr error      // the first failed write, under wmu
	// detached is set by a detach until an attach (under wmu): the agent
	// sends nothing. orphans are the ids of the requests a detach left
	// running, whose frames are dropped (under wmu).
	detached bool
	orphans  map[uint32]bool
	// beforeDetach, when set, runs before a detach is answered
	// (ListenOptions.First).
	beforeDetach func()

	mu    sync.Mutex
	reqs  map[uint32]*areq
	maxID uint32 // the highest request id seen (mu)

	wg sync.WaitGroup // every goroutine the server started

	// maxWatches and eventRate bound each watch: the directories it
	// watches and the events it reports per second (and in a burst). Tests
	// lower them; 0 means defaultMaxWatches and defaultEventRate.
	maxWatches, eventRate int

	// outRead counts the bytes read from commands' output, for tests of
	// flow control.
	outRead atomic.Int64
}

// areq is a request in progress.
type areq struct {
	id     uint32
	op     string
	ctx    context.Context
	cancel context.CancelFunc
	in     *inbox     // stream 0, for exec with stdin and write
	out    [3]*credit // streams 1 and 2
	proc   *process   // for exec, once started
}

// Serve runs the agent on conn until conn is closed or fails: it answers
// the daemon's requests, runs commands, and — when opts.PID1 is true —
// reaps every orphan (it is PID 1 of the sandbox). It returns nil when the
// daemon closed the connection. Before it returns it kills the process
// group of every command it started, waits for its own goroutines and
// closes conn.
func Serve(conn net.Conn, opts ServeOptions) error {
	return serve(conn, opts, nil)
}

// serve is Serve; hook, if not nil, sees the server before it starts (for
// tests).
func serve(conn net.Conn, opts ServeOptions, hook func(*server)) error {
	defer conn.Close()
	s, err := newServer(conn, opts)
	if err != nil {
		return err
	}
	defer s.cancel()
	if hook != nil {
		hook(s)
	}
	err = s.run()
	s.cancel()
	s.wg.Wait()
	s.procs.close()
	if err != nil {
		s.log.Warn("agent connection ended", "err", err)
	}
	return err
}

// newServer makes the server of one Serve (conn) or ServeListener (nil:
// each connection it takes): its process table and, if asked for, sudo.
func newServer(conn net.Conn, opts ServeOptions) (*server, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	s := &server{
		conn:     conn,
		opts:     opts,
		log:      opts.Log,
		maxFrame: opts.MaxFrame,
		reqs:     make(map[uint32]*areq),
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.maxFrame == 0 {
		s.maxFrame = defaultMaxFrame
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	procs, err := newProcTable(opts.PID1, s.log)
	if err != nil {
		s.cancel()
		return nil, err
	}
	s.procs = procs
	if opts.Sudo {
		if err := s.serveSudo(); err != nil {
			s.log.Warn("agent serves no sudo", "err", err)
		}
	}
	return s, nil
}

// run sends the hello and reads frames until the connection ends.
func (s *server) run() error {
	if err := s.sendJSON(frameHello, 0, hello{Version: protocolVersion, MaxFrame: s.maxFrame}); err != nil {
		return peerClosed(err)
	}
	br := bufio.NewReaderSize(s.conn, 64<<10)
	for {
		f, err := readFrame(br, s.maxFrame)
		if err != nil {
			if werr := s.writeErr(); werr != nil {
				return peerClosed(werr)
			}
			if err == io.EOF || errors.Is(err, syscall.ECONNRESET) {
				return nil // the daemon closed the connection (with data unread: reset)
			}
			if errors.Is(err, ErrProtocol) {
				return err
			}
			return fmt.Errorf("read from daemon: %w", err)
		}
		if err := s.dispatch(f); err != nil {
			return err
		}
	}
}

// peerClosed returns nil for the error of a write to a connection the
// daemon closed, err for anything else.
func peerClosed(err error) error {
	if errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.ErrClosedPipe) {
		return nil
	}
	return err
}

// dispatch handles one frame. It never blocks: requests run in goroutines
// of their own, data is queued within its window.
func (s *server) dispatch(f frame) error {
	if s.isDetached() {
		if f.typ == frameAttach {
			if len(f.body) >= 8 && s.opts.SetClock != nil {
				s.opts.SetClock(time.Unix(0, int64(binary.BigEndian.Uint64(f.body))))
			}
			if len(f.body) > 8 && s.opts.Reseed != nil {
				s.opts.Reseed(f.body[8:])
			}
			return s.attach()
		}
		return nil // the detached client's last words
	}
	switch f.typ {
	case frameRequest:
		var m request
		if err := json.Unmarshal(f.body, &m); err != nil {
			s.spawn(func() { s.replyErr(f.id, errorf(CodeInvalid, "decode request: %v", err)) })
			return nil
		}
		if m.Op == opDetach {
			// Here, in the reader: no frame after it is served.
			if s.beforeDetach != nil {
				s.beforeDetach()
			}
			return s.detach(f.id)
		}
		s.begin(f.id, &m)
		return nil
	case frameData, frameEOF:
		if f.stream != streamIn {
			return fmt.Errorf("%w: %s frame on stream %d", ErrProtocol, frameName(f.typ), f.stream)
		}
		r := s.lookup(f.id)
		if r == nil || r.in == nil {
			return nil
		}
		if f.typ == frameEOF {
			r.in.close()
			return nil
		}
		return r.in.push(f.body)
	case frameCredit:
		if (f.stream != streamOut && f.stream != streamErr) || len(f.body) != 4 {
			return fmt.Errorf("%w: credit frame on stream %d with %d bytes", ErrProtocol, f.stream, len(f.body))
		}
		if r := s.lookup(f.id); r != nil && r.out[f.stream] != nil {
			r.out[f.stream].add(int(min(binary.BigEndian.Uint32(f.body), 1<<30)))
		}
		return nil
	case frameCancel:
		if r := s.lookup(f.id); r != nil {
			r.cancel()
		}
		return nil
	}
	return fmt.Errorf("%w: unexpected frame type %d from the daemon", ErrProtocol, f.typ)
}

func frameName(t byte) string {
	switch t {
	case frameData:
		return "data"
	case frameEOF:
		return "eof"
	}
	return fmt.Sprintf("type %d", t)
}

func (s *server) lookup(id uint32) *areq {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reqs[id]
}

// spawn runs f in a goroutine the server waits for.
func (s *server) spawn(f func()) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		f()
	}()
}

// begin registers a request, with the streams its op uses, and runs it.
func (s *server) begin(id uint32, m *request) {
	s.mu.Lock()
	s.maxID = max(s.maxID, id)
	if _, dup := s.reqs[id]; dup {
		s.mu.Unlock()
		s.log.Warn("duplicate request id", "id", id, "op", m.Op)
		return
	}
	ctx, cancel := context.WithCancel(s.ctx)
	r := &areq{id: id, op: m.Op, ctx: ctx, cancel: cancel}
	switch m.Op {
	case opExec:
		r.out[streamOut] = newCredit()
		if !m.TTY {
			r.out[streamErr] = newCredit()
		}
		if m.Stdin {
			r.in = newInbox()
		}
	case opRead, opWatch, opLayer:
		r.out[streamOut] = newCredit()
	case opWrite:
		r.in = newInbox()
	}
	s.reqs[id] = r
	s.mu.Unlock()
	s.spawn(func() {
		defer s.end(r)
		s.handle(r, m)
	})
}

// end forgets a request.
func (s *server) end(r *areq) {
	s.mu.Lock()
	if s.reqs[r.id] == r {
		delete(s.reqs, r.id)
	}
	s.mu.Unlock()
	r.cancel()
}

func (s *server) handle(r *areq, m *request) {
	switch m.Op {
	case opExec:
		s.exec(r, m)
	case opSignal:
		s.reply(r.id, response{}, s.signal(m.Target, m.Signal))
	case opResize:
		s.reply(r.id, response{}, s.resize(m.Target, m.Rows, m.Cols))
	case opPS:
		s.sendPS(r)
	case opKillAll:
		s.reply(r.id, response{}, s.killAll(r.ctx))
	case opUsage:
		u, err := ownUsage()
		s.reply(r.id, response{Usage: &u}, err)
	case opRead:
		s.readFile(r, string(m.Path))
	case opLayer:
		s.exportLayer(r)
	case opWrite:
		s.writeFile(r, m)
	case opStat:
		info, err := stat(string(m.Path), string(m.XattrPrefix))
		s.reply(r.id, response{Info: info}, err)
	case opList:
		s.list(r, string(m.Path), string(m.XattrPrefix))
	case opMkdir:
		s.reply(r.id, response{}, mkdir(string(m.Path), m.Parents))
	case opRemove:
		s.reply(r.id, response{}, remove(string(m.Path), m.Recursive))
	case opRename:
		s.reply(r.id, response{}, rename(string(m.Path), string(m.To)))
	case opChown:
		s.reply(r.id, response{}, chown(string(m.Path), m.UID, m.GID))
	case opWatch:
		s.watch(r, string(m.Path), m.Recursive)
	default:
		s.replyErr(r.id, errorf(CodeInvalid, "unknown operation %q", m.Op))
	}
}

// send writes one whole frame; while detached, and for the requests a
// detach left running, it drops it.
func (s *server) send(b []byte) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	return s.sendLocked(b)
}

// sendLocked is send, under wmu.
func (s *server) sendLocked(b []byte) error {
	if s.werr != nil {
		return s.werr
	}
	if s.detached || s.orphans[binary.BigEndian.Uint32(b[lenSize+2:prefixSize])] {
		return nil
	}
	if s.conn == nil {
		return ErrClosed
	}
	if _, err := s.conn.Write(b); err != nil {
		s.werr = fmt.Errorf("write to daemon: %w", err)
		s.conn.Close() // ends the reader too
		return s.werr
	}
	return nil
}

func (s *server) writeErr() error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	return s.werr
}

func (s *server) sendJSON(typ byte, id uint32, v any) error {
	b, err := jsonFrame(typ, id, v)
	if err != nil {
		return err
	}
	return s.send(b)
}

// reply sends the response to request id: resp, or err if it is not nil.
func (s *server) reply(id uint32, resp response, err error) {
	if err != nil {
		s.replyErr(id, err)
		return
	}
	_ = s.sendJSON(frameResponse, id, resp)
}

func (s *server) replyErr(id uint32, err error) {
	e := toError(err)
	_ = s.sendJSON(frameResponse, id, response{Error: &Error{Code: e.Code, Message: truncMessage(e.Message)}})
}

// batcher sends the items of a list or ps result in entries frames.
type batcher struct {
	s            *server
	id           uint32
	buf          []byte
	bytes, count int
}

func newBatcher(s *server, id uint32) *batcher {
	return &batcher{s: s, id: id, buf: []byte{'['}}
}

// add queues v, sending a frame when it is full. It fails with CodeTooLarge
// once the result exceeds its bounds, or when a write failed.
func (b *batcher) add(v any) error {
	enc, err := json.Marshal(v)
	if err != nil {
		return err
	}
	b.bytes += len(enc) + 1
	b.count++
	if b.bytes > maxListBytes || b.count > maxListEntries {
		return errorf(CodeTooLarge, "more than %d entries or %d bytes", maxListEntries, maxListBytes)
	}
	if len(b.buf)+len(enc)+2 > entriesBatch {
		if err := b.flush(); err != nil {
			return err
		}
	}
	if len(b.buf) > 1 {
		b.buf = append(b.buf, ',')
	}
	b.buf = append(b.buf, enc...)
	return nil
}

// flush sends what is queued.
func (b *batcher) flush() error {
	if len(b.buf) == 1 {
		return nil
	}
	b.buf = append(b.buf, ']')
	err := b.s.send(encodeFrame(frameEntries, 0, b.id, b.buf))
	b.buf = b.buf[:1]
	return err
}

// sendPS answers a ps request.
func (s *server) sendPS(r *areq) {
	b := newBatcher(s, r.id)
	for _, p := range s.ps() {
		if err := b.add(p); err != nil {
			s.replyErr(r.id, within("ps", err))
			return
		}
	}
	s.reply(r.id, response{}, b.flush())
}

// bufPool holds the buffers of pumps: a frame's prefix and a full chunk.
var bufPool = sync.Pool{New: func() any {
	b := make([]byte, prefixSize+maxChunk)
	return &b
}}

// pump sends what it reads from src as data frames on stream of r, never
// more than the client granted, until src ends (EOF, or EIO from a pty
// whose other end is gone), ctx is done or a write fails. It returns the
// number of bytes sent.
func (s *server) pump(r *areq, stream byte, src io.Reader, output bool) (int64, error) {
	cr := r.out[stream]
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	buf := *bp
	var total int64
	for {
		avail, err := cr.wait(r.ctx)
		if err != nil {
			return total, err
		}
		n, rerr := src.Read(buf[prefixSize : prefixSize+min(avail, maxChunk)])
		if n > 0 {
			cr.spend(n)
			if output {
				s.outRead.Add(int64(n))
			}
			putPrefix(buf, frameData, stream, r.id, n)
			if err := s.send(buf[:prefixSize+n]); err != nil {
				return total, err
			}
			total += int64(n)
		}
		if rerr != nil {
			if rerr == io.EOF || errors.Is(rerr, syscall.EIO) {
				return total, nil
			}
			return total, rerr
		}
	}
}
