package mcp

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hutch-sandbox/hutch/internal/agent"
)

// Exec session bounds.
const (
	// MaxRunning is how many commands one owner may have running at once.
	MaxRunning = 64
	// MaxSessions is how many sessions, running or ended, one owner may
	// have: past it, the ended session polled least recently is dropped.
	MaxSessions = 2 * MaxRunning
	// IdleDrop is how long an ended session waits for a poll before it is
	// dropped with its output.
	IdleDrop = 10 * time.Minute
	// MaxKeptLogs bounds the bytes of full logs kept, after their
	// sessions were dropped, for the links that name them (for LinkTTL):
	// past it, the oldest are removed.
	MaxKeptLogs = 512 << 20
	// MaxLogBytes bounds the bytes of the logs a table holds on the host,
	// its sessions' and those kept for links together (hutch serve has a
	// table per tenant): what a command writes beyond it is left out of
	// its log, counted in log_dropped_bytes.
	MaxLogBytes = 2 * MaxKeptLogs
	// outputGrace is how long an ended command's output streams may stay
	// idle (a process left in the background holds them) before what
	// came is taken as all of it.
	outputGrace = 500 * time.Millisecond
	// sweepEvery is how often a table that holds something looks for
	// sessions and logs to drop.
	sweepEvery = time.Minute
)

// ErrNoSession is the error of a session id that names no session of the
// caller's.
var ErrNoSession = errors.New("no such exec session (it ended and its final output was delivered, it was killed, its sandbox was killed, or it was dropped after " + IdleDrop.String() + " without a poll)")

// ExecTable holds the commands exec left running, by session id, with
// their owners. Its methods may be called concurrently; an owner never
// reaches another owner's sessions.
type ExecTable struct {
	mu       sync.Mutex
	sessions map[string]*session
	logs     []*execLog // of dropped sessions, kept for their links
	closed   bool
	sweeping bool      // a sweeper goroutine runs
	budget   logBudget // of the bytes of all its logs, within its space's
	logDir   string    // its space's directory
	now      func() time.Time
}

// NewExecTable returns an empty table whose logs take at most MaxLogBytes
// of space (nil: a space of their own, of MaxLogBytes, in the host's
// temporary directory).
func NewExecTable(space *LogSpace) *ExecTable {
	t := &ExecTable{sessions: map[string]*session{}, budget: logBudget{max: MaxLogBytes}, now: time.Now}
	if space != nil {
		t.budget.parent, t.logDir = &space.budget, space.dir
	}
	return t
}

// session is one command started by exec.
type session struct {
	id, owner, sandbox string
	p                  *agent.Process
	started            time.Time
	log                *execLog // nil when no links are published

	mu        sync.Mutex
	out       *cutter // output not yet delivered
	total     int64   // bytes of output in all
	stdinBusy bool
	status    agent.ExitStatus
	err       error     // why the command's end is unknown (the agent went away)
	lastSeen  time.Time // of the last poll; the table's clock
	killed    bool

	ended chan struct{} // closed once the command ended and its output settled
}

// errLimit is the error of an owner with MaxRunning running commands.
var errLimit = fmt.Errorf("%d commands are running already, the most one may have: end one with exec_kill (or wait for one to end) first", MaxRunning)

// room checks that owner may start one more command.
func (t *ExecTable) room(owner string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return errors.New("the server is shutting down")
	}
	if t.running(owner) >= MaxRunning {
		return errLimit
	}
	return nil
}

// running counts owner's running commands; t.mu is held.
func (t *ExecTable) running(owner string) int {
	n := 0
	for _, s := range t.sessions {
		if s.owner == owner && !s.isEnded() {
			n++
		}
	}
	return n
}

// start runs p's session: the table holds it, and its output is read
// into out (and log, when not nil) until its end. p is killed when the
// table refuses it.
func (t *ExecTable) start(owner, sandbox string, p *agent.Process, maxOutput int, log *execLog) (*session, error) {
	s := &session{
		owner: owner, sandbox: sandbox, p: p, log: log,
		out: newCutter(maxOutput), ended: make(chan struct{}),
	}
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, err
	}
	s.id = hex.EncodeToString(b[:])
	if log != nil {
		log.budget, log.dir = &t.budget, t.logDir
	}
	s.run()
	if err := t.add(s); err != nil {
		s.kill()
		return nil, err
	}
	return s, nil
}

// add puts s in the table, unless the table is closed or s's owner has
// MaxRunning running commands.
func (t *ExecTable) add(s *session) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case t.closed:
		return errors.New("the server is shutting down")
	case !s.isEnded() && t.running(s.owner) >= MaxRunning:
		return errLimit
	}
	s.started = t.now()
	s.lastSeen = s.started
	t.sessions[s.id] = s
	t.trim(s.owner)
	t.sweeper()
	return nil
}

// trim drops owner's ended sessions polled least recently while owner has
// more than MaxSessions; t.mu is held.
func (t *ExecTable) trim(owner string) {
	var ended []*session
	n := 0
	for _, s := range t.sessions {
		if s.owner != owner {
			continue
		}
		n++
		if s.isEnded() {
			ended = append(ended, s)
		}
	}
	slices.SortFunc(ended, func(a, b *session) int { return a.seen().Compare(b.seen()) })
	for _, s := range ended {
		if n <= MaxSessions {
			break
		}
		t.drop(s)
		n--
	}
}

// get returns owner's session id; another owner's is ErrNoSession.
func (t *ExecTable) get(owner, id string) (*session, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.sessions[id]
	if s == nil || s.owner != owner {
		return nil, fmt.Errorf("session %.64q: %w", id, ErrNoSession)
	}
	s.mu.Lock()
	s.lastSeen = t.now()
	s.mu.Unlock()
	return s, nil
}

// remove drops s from the table, if it is there.
func (t *ExecTable) remove(s *session) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.sessions[s.id] == s {
		t.drop(s)
	}
}

// drop removes s from the table; its log goes, unless a link names it:
// then it is kept for LinkTTL (at most MaxKeptLogs bytes of such logs in
// all). t.mu is held.
func (t *ExecTable) drop(s *session) {
	delete(t.sessions, s.id)
	if s.log == nil {
		return
	}
	s.log.mu.Lock()
	linked := s.log.linked
	s.log.expires = t.now().Add(LinkTTL)
	s.log.mu.Unlock()
	if !linked || t.closed {
		s.log.remove()
		return
	}
	t.logs = append(t.logs, s.log)
	var kept int64
	for i := len(t.logs) - 1; i >= 0; i-- {
		size, _ := t.logs[i].stat()
		if kept += size; kept > MaxKeptLogs {
			for _, l := range t.logs[:i+1] {
				l.remove()
			}
			t.logs = slices.Delete(t.logs, 0, i+1)
			break
		}
	}
}

// DropSandbox kills and drops owner's sessions in sandbox (which is
// being killed).
func (t *ExecTable) DropSandbox(owner, sandbox string) {
	t.mu.Lock()
	var gone []*session
	for _, s := range t.sessions {
		if s.owner == owner && s.sandbox == sandbox {
			gone = append(gone, s)
			t.drop(s)
		}
	}
	t.mu.Unlock()
	for _, s := range gone {
		s.kill()
	}
}

// sweeper starts the goroutine that drops idle sessions and expired logs,
// unless it runs; it ends once the table is empty. t.mu is held.
func (t *ExecTable) sweeper() {
	if t.sweeping || t.closed {
		return
	}
	t.sweeping = true
	go func() {
		tick := time.NewTicker(sweepEvery)
		defer tick.Stop()
		for range tick.C {
			if !t.sweep() {
				return
			}
		}
	}()
}

// sweep drops the ended sessions not polled for IdleDrop and the kept logs
// whose links expired. It reports whether the table still holds anything
// (else the sweeper ends).
func (t *ExecTable) sweep() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	for _, s := range t.sessions {
		if s.isEnded() && now.Sub(s.seen()) >= IdleDrop {
			t.drop(s)
		}
	}
	t.logs = slices.DeleteFunc(t.logs, func(l *execLog) bool {
		l.mu.Lock()
		expired := !now.Before(l.expires)
		l.mu.Unlock()
		if expired {
			l.remove()
		}
		return expired
	})
	if t.closed || (len(t.sessions) == 0 && len(t.logs) == 0) {
		t.sweeping = false
		return false
	}
	return true
}

// Close kills every session's command, waits (a few seconds at most) for
// them to end, and removes every log. Starting a command afterwards fails.
func (t *ExecTable) Close() error {
	t.mu.Lock()
	t.closed = true
	all := make([]*session, 0, len(t.sessions))
	for _, s := range t.sessions {
		all = append(all, s)
		t.drop(s)
	}
	for _, l := range t.logs {
		l.remove()
	}
	t.logs = nil
	t.mu.Unlock()
	for _, s := range all {
		s.kill()
	}
	timeout := time.NewTimer(5 * time.Second)
	defer timeout.Stop()
	var stuck int
	for _, s := range all {
		select {
		case <-s.ended:
		case <-timeout.C:
			stuck++
		}
	}
	if stuck > 0 {
		return fmt.Errorf("close exec sessions: %d commands did not end after SIGKILL", stuck)
	}
	return nil
}

func (s *session) isEnded() bool {
	select {
	case <-s.ended:
		return true
	default:
		return false
	}
}

func (s *session) seen() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastSeen
}

// run reads the command's output until its end and waits for it.
func (s *session) run() {
	var wg sync.WaitGroup
	var readers []*reader
	for _, r := range []io.Reader{s.p.Stdout, s.p.Stderr} {
		rd := &reader{src: r}
		readers = append(readers, rd)
		wg.Add(1)
		go func() {
			defer wg.Done()
			rd.copy(s.add)
		}()
	}
	go func() {
		status, err := s.p.Wait()
		settle(&wg, readers, s.p)
		s.mu.Lock()
		s.status, s.err = status, err
		s.mu.Unlock()
		close(s.ended)
	}()
}

// add takes output, in the order it arrived.
func (s *session) add(b []byte) {
	s.mu.Lock()
	_, _ = s.out.Write(b)
	s.total += int64(len(b))
	s.mu.Unlock()
	if s.log != nil {
		s.log.write(b)
	}
}

// kill sends SIGKILL to the command's process group, unless it ended.
// When the signal cannot be sent, the agent is gone, and the command
// with it.
func (s *session) kill() {
	if s.isEnded() {
		return
	}
	s.mu.Lock()
	s.killed = true
	s.mu.Unlock()
	_ = s.p.Signal(syscall.SIGKILL)
}

// reader copies one output stream of a command.
type reader struct {
	idleSince atomic.Int64 // when it began waiting for data, 0 while it handles some
	finished  atomic.Bool
	src       io.Reader
}

// copy reads src to its end, handing what it reads to sink.
func (r *reader) copy(sink func([]byte)) {
	defer r.finished.Store(true)
	buf := make([]byte, 32<<10)
	for {
		r.idleSince.Store(time.Now().UnixNano())
		n, err := r.src.Read(buf)
		r.idleSince.Store(0)
		if n > 0 {
			sink(buf[:n])
		}
		if err != nil {
			return
		}
	}
}

// settle waits, once the command ended, until its output streams ended or
// those still open have been idle for outputGrace with nothing pending
// (a process left in the background holds them; they are still read).
func settle(wg *sync.WaitGroup, readers []*reader, p *agent.Process) {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	tick := time.NewTicker(outputGrace / 5)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return
		case <-tick.C:
			if idle(readers, p) {
				return
			}
		}
	}
}

func idle(readers []*reader, p *agent.Process) bool {
	now := time.Now().UnixNano()
	for _, r := range readers {
		if r.finished.Load() {
			continue
		}
		since := r.idleSince.Load()
		if since == 0 || time.Duration(now-since) < outputGrace {
			return false
		}
	}
	// The agent sends everything a command wrote before its exit.
	return !p.OutputPending()
}

// wait waits until the command ended, d passed or ctx ended; every tick
// (if not nil) it calls progress with the output's size so far.
func (s *session) wait(ctx context.Context, d time.Duration, tick time.Duration, progress func(total int64)) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	var ticks <-chan time.Time
	if progress != nil && tick > 0 {
		t := time.NewTicker(tick)
		defer t.Stop()
		ticks = t.C
	}
	for {
		select {
		case <-s.ended:
			return
		case <-timer.C:
			return
		case <-ctx.Done():
			return
		case <-ticks:
			s.mu.Lock()
			total := s.total
			s.mu.Unlock()
			progress(total)
		}
	}
}

// result is what a session has to report: the output not yet delivered,
// and the command's end once it ended.
type result struct {
	head, tail []byte
	cut        int64
	total      int64
	ended      bool
	status     agent.ExitStatus
	err        error
	killed     bool
}

// take takes the output not yet delivered (all of it once the command
// ended).
func (s *session) take() result {
	ended := s.isEnded()
	s.mu.Lock()
	defer s.mu.Unlock()
	var r result
	r.head, r.tail, r.cut = s.out.take(ended)
	r.total, r.ended, r.status, r.err, r.killed = s.total, ended, s.status, s.err, s.killed
	return r
}
