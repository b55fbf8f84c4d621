package kernel

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"

	"github.com/go-zeromq/zmq4"
)

// proc is one kernel process and its sockets; Restart replaces it.
type proc struct {
	cmd      *exec.Cmd
	dir      string
	connFile string
	sig      *signer
	limit    int

	ctx    context.Context // the sockets' lifetime
	cancel context.CancelFunc
	dead   chan struct{} // closed once the process exited and was reaped
	// waitErr is the process's exit status, set before dead is closed.
	waitErr error
	tail    *Tail
	log     *os.File // the read end of the kernel's stdout and stderr

	shell, control, iopub zmq4.Socket
	sendMu                sync.Mutex

	mu          sync.Mutex
	shellWait   map[string]chan message // replies awaited, by request msg_id
	controlWait map[string]chan message
	sinks       map[string]*sink // iopub messages awaited, by request msg_id
	running     *sink            // the execution under way (Execute's), nil if none

	// interrupting is held (read) by each interrupt until it was answered
	// or given up; Execute takes it before sending its request, so that no
	// interrupt meant for an execution reaches the next.
	interrupting sync.RWMutex

	killOnce sync.Once
}

// sink receives the iopub messages of one request.
type sink struct {
	c    chan item
	done chan struct{}
}

type item struct {
	m       message
	dropped *Dropped
}

func (p *proc) send(s zmq4.Socket, frames [][]byte) error {
	p.sendMu.Lock()
	defer p.sendMu.Unlock()
	return s.Send(zmq4.NewMsgFrom(frames...))
}

func (p *proc) expect(waits map[string]chan message, id string) chan message {
	c := make(chan message, 1)
	p.mu.Lock()
	waits[id] = c
	p.mu.Unlock()
	return c
}

func (p *proc) forget(waits map[string]chan message, id string) {
	p.mu.Lock()
	delete(waits, id)
	p.mu.Unlock()
}

func (p *proc) subscribe(id string) *sink {
	s := &sink{c: make(chan item), done: make(chan struct{})}
	p.mu.Lock()
	p.sinks[id] = s
	p.mu.Unlock()
	return s
}

func (p *proc) unsubscribe(id string) {
	p.mu.Lock()
	if s := p.sinks[id]; s != nil {
		close(s.done)
		delete(p.sinks, id)
		if p.running == s {
			p.running = nil
		}
	}
	p.mu.Unlock()
}

// readReplies delivers the replies on a DEALER socket to whoever awaits
// them; others (and unverifiable ones) are discarded.
func (p *proc) readReplies(s zmq4.Socket, waits map[string]chan message) {
	for {
		msg, err := s.Recv()
		if err != nil {
			return
		}
		var m message
		if n := frameSize(msg.Frames); n > p.limit {
			m = message{Parent: header{MsgID: parentID(msg.Frames)}, size: n}
		} else if m, err = p.sig.decode(msg.Frames); err != nil {
			continue
		}
		p.mu.Lock()
		c := waits[m.Parent.MsgID]
		p.mu.Unlock()
		if c != nil {
			select {
			case c <- m:
			default:
			}
		}
	}
}

// readIOPub delivers each iopub message to the request it answers, one at
// a time: it waits for the consumer before reading the next.
func (p *proc) readIOPub() {
	for {
		msg, err := p.iopub.Recv()
		if err != nil {
			return
		}
		var it item
		var id string
		if n := frameSize(msg.Frames); n > p.limit {
			id = parentID(msg.Frames)
			it.dropped = &Dropped{Size: n, Reason: fmt.Sprintf("message of %d bytes is over the %d-byte limit", n, p.limit)}
		} else {
			m, err := p.sig.decode(msg.Frames)
			if err != nil {
				continue
			}
			m.size = n
			id, it.m = m.Parent.MsgID, m
		}
		p.mu.Lock()
		s := p.sinks[id]
		p.mu.Unlock()
		if s == nil {
			continue
		}
		select {
		case s.c <- it:
		case <-s.done:
		case <-p.ctx.Done():
			return
		}
	}
}

// kill ends the process group, reaps the process, closes the sockets and
// removes the connection file. It is safe to call more than once.
func (p *proc) kill() {
	p.killOnce.Do(func() {
		// The group outlives its leader while any member lives; kill it
		// whether or not the leader already exited.
		syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.dead
		p.cancel()
		for _, s := range []zmq4.Socket{p.shell, p.control, p.iopub} {
			if s != nil {
				s.Close()
			}
		}
		p.log.Close()
		os.RemoveAll(p.dir)
	})
}

// failure describes why an operation on p failed: the process's exit when
// it exited (wrapping ErrDied, with the end of its output), else err.
func (p *proc) failure(err error) error {
	select {
	case <-p.dead:
		wrote := ""
		if t := strings.TrimSpace(p.tail.String()); t != "" {
			wrote = "; it wrote: " + t
		}
		return fmt.Errorf("%w (%v%s)", ErrDied, p.waitErr, wrote)
	default:
		return fmt.Errorf("kernel: %w", err)
	}
}

// startFailure is failure for an error while starting, which may also be
// the end of the caller's context.
func (p *proc) startFailure(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("kernel: waiting for the kernel to start: %w", ctx.Err())
	}
	return p.failure(err)
}

// Tail keeps the last Max bytes written to it: the end of what a process
// wrote, for the error that reports its exit. It is safe for concurrent
// use.
type Tail struct {
	Max int

	mu sync.Mutex
	b  []byte
}

func (t *Tail) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, b...)
	if len(t.b) > t.Max {
		t.b = append(t.b[:0], t.b[len(t.b)-t.Max:]...)
	}
	return len(b), nil
}

// String returns what is kept.
func (t *Tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}
