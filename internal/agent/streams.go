package agent

import (
	"context"
	"fmt"
	"io"
	"sync"
)

var (
	// errStdinClosed is the error of writes to the stdin of a command that
	// closed it or exited.
	errStdinClosed = fmt.Errorf("agent: the command's stdin is closed: %w", io.ErrClosedPipe)
	// errWriteClosed is the error of writes after Close.
	errWriteClosed = fmt.Errorf("agent: write after close: %w", io.ErrClosedPipe)
	// errEnded is the error of a request's writes once the agent answered
	// it.
	errEnded = fmt.Errorf("agent: request already answered: %w", io.ErrClosedPipe)
)

// notifier wakes every goroutine waiting for a change.
type notifier struct{ ch chan struct{} }

// wait returns a channel closed by the next notify; call it under the lock
// that guards the state waited for.
func (n *notifier) wait() <-chan struct{} {
	if n.ch == nil {
		n.ch = make(chan struct{})
	}
	return n.ch
}

// notify wakes the waiters; call it under the same lock.
func (n *notifier) notify() {
	if n.ch != nil {
		close(n.ch)
		n.ch = nil
	}
}

// inStream is the client's end of a stream from the agent (a command's
// stdout or stderr, a read's content). It buffers what the agent sent and
// its caller has not read, never more than a window: it grants the agent
// more only once its caller read a quarter of a window, and ends the
// connection if the agent sends more than it was granted (S7).
type inStream struct {
	c      *Client
	id     uint32
	stream byte

	mu        sync.Mutex
	chunks    [][]byte
	allowance int // bytes the agent may still send
	ungranted int // bytes read and not yet granted again
	ended     bool
	err       error // why the stream ended, if not by its eof; after the data
	inHand    bool  // the last Read returned data, and no Read has come since
	changed   notifier
}

func newInStream(c *Client, id uint32, stream byte) *inStream {
	return &inStream{c: c, id: id, stream: stream, allowance: window}
}

// push adds data from the agent.
func (s *inStream) push(b []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		if s.err != nil {
			return nil // the caller gave up on the stream
		}
		return fmt.Errorf("data after the end of stream %d of request %d", s.stream, s.id)
	}
	if len(b) > s.allowance {
		return fmt.Errorf("%d bytes on stream %d of request %d exceed the window (%d left)", len(b), s.stream, s.id, s.allowance)
	}
	s.allowance -= len(b)
	if len(b) == 0 {
		return nil
	}
	// Small chunks are merged, so that many tiny frames cost no more memory
	// than their bytes.
	if n := len(s.chunks); n > 0 && len(b) <= 1<<10 && len(s.chunks[n-1])+len(b) <= 16<<10 {
		s.chunks[n-1] = append(s.chunks[n-1], b...)
	} else {
		s.chunks = append(s.chunks, b)
	}
	s.changed.notify()
	return nil
}

// end ends the stream: by its end (err nil), or abnormally, in which case
// the data not yet read is dropped and reads fail with err.
func (s *inStream) end(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended && (err == nil || s.err != nil) {
		return
	}
	s.ended = true
	if err != nil {
		s.err = err
		s.chunks = nil
	}
	s.changed.notify()
}

// Pending reports whether the stream's reader has work: data the agent
// sent is waiting, the stream has ended (a Read returns at once), or the
// reader has not come back for more since its last Read returned data
// (it is still handling it).
func (s *inStream) Pending() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.chunks) > 0 || s.ended || s.inHand
}

// Read reads what the agent sent; io.EOF after the stream's end.
func (s *inStream) Read(p []byte) (int, error) { return s.read(context.Background(), p) }

func (s *inStream) read(ctx context.Context, p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	s.mu.Lock()
	s.inHand = false
	s.mu.Unlock()
	for {
		s.mu.Lock()
		if len(s.chunks) > 0 {
			s.inHand = true
			n := copy(p, s.chunks[0])
			if n == len(s.chunks[0]) {
				s.chunks[0] = nil
				s.chunks = s.chunks[1:]
			} else {
				s.chunks[0] = s.chunks[0][n:]
			}
			s.ungranted += n
			grant := 0
			if !s.ended && s.ungranted >= window/4 {
				grant, s.ungranted = s.ungranted, 0
				s.allowance += grant
			}
			s.mu.Unlock()
			if grant > 0 {
				_ = s.c.write(context.Background(), creditFrame(s.stream, s.id, grant))
			}
			return n, nil
		}
		if s.ended {
			err := s.err
			s.mu.Unlock()
			if err == nil {
				err = io.EOF
			}
			return 0, err
		}
		ch := s.changed.wait()
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// outStream is the client's end of a stream to the agent (a command's
// stdin, a write's content): it sends no more than the agent granted.
type outStream struct {
	c  *Client
	id uint32

	wmu sync.Mutex // one Write at a time; guards buf
	buf []byte

	mu      sync.Mutex
	credit  int
	err     error // set once no more data can be sent
	closed  bool  // Close was called
	changed notifier
}

func newOutStream(c *Client, id uint32) *outStream {
	return &outStream{c: c, id: id, credit: window}
}

// grant allows n more bytes.
func (s *outStream) grant(n int) {
	s.mu.Lock()
	s.credit = min(s.credit+n, 1<<30)
	s.changed.notify()
	s.mu.Unlock()
}

// fail makes sending impossible from now on.
func (s *outStream) fail(err error) {
	s.mu.Lock()
	if s.err == nil {
		s.err = err
	}
	s.changed.notify()
	s.mu.Unlock()
}

// acquire waits for credit and takes up to want bytes of it.
func (s *outStream) acquire(ctx context.Context, want int) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		switch {
		case s.closed:
			return 0, errWriteClosed
		case s.err != nil:
			return 0, s.err
		case s.credit > 0:
			n := min(s.credit, want)
			s.credit -= n
			return n, nil
		}
		ch := s.changed.wait()
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			s.mu.Lock()
			return 0, ctx.Err()
		}
		s.mu.Lock()
	}
}

// Write sends p to the agent, waiting for credit as needed.
func (s *outStream) Write(p []byte) (int, error) { return s.write(context.Background(), p) }

func (s *outStream) write(ctx context.Context, p []byte) (int, error) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.buf == nil {
		s.buf = make([]byte, prefixSize+s.c.chunk)
	}
	written := 0
	for len(p) > 0 {
		n, err := s.acquire(ctx, min(len(p), s.c.chunk))
		if err != nil {
			return written, err
		}
		putPrefix(s.buf, frameData, streamIn, s.id, n)
		copy(s.buf[prefixSize:], p[:n])
		if err := s.c.write(ctx, s.buf[:prefixSize+n]); err != nil {
			return written, err
		}
		written += n
		p = p[n:]
	}
	return written, nil
}

// Close ends the stream: the agent sees its end (a command, end of file on
// its stdin). A Write blocked for credit fails.
func (s *outStream) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	failed := s.err != nil
	s.changed.notify()
	s.mu.Unlock()
	if failed {
		return nil
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	return s.c.write(context.Background(), encodeFrame(frameEOF, streamIn, s.id, nil))
}
