package agent

import (
	"context"
	"fmt"
	"sync"
)

// credit is the agent's side of an outgoing stream's window: the bytes the
// client allows it to send.
type credit struct {
	mu        sync.Mutex
	avail     int
	unlimited bool // no limit (open)
	wake      chan struct{}
}

func newCredit() *credit { return &credit{avail: window, wake: make(chan struct{}, 1)} }

// add grants n more bytes.
func (c *credit) add(n int) {
	c.mu.Lock()
	c.avail = min(c.avail+n, 1<<30)
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// open lifts the limit: what the stream sends is dropped (a detach left
// its request running).
func (c *credit) open() {
	c.mu.Lock()
	c.unlimited, c.avail = true, 1<<30
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// wait blocks until some bytes may be sent and returns how many.
func (c *credit) wait(ctx context.Context) (int, error) { return c.waitFor(ctx, 1) }

// waitFor blocks until n bytes may be sent and returns how many may.
func (c *credit) waitFor(ctx context.Context, n int) (int, error) {
	for {
		c.mu.Lock()
		avail := c.avail
		c.mu.Unlock()
		if avail >= n {
			return avail, nil
		}
		select {
		case <-c.wake:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// spend records n bytes sent.
func (c *credit) spend(n int) {
	c.mu.Lock()
	if !c.unlimited {
		c.avail -= n
	}
	c.mu.Unlock()
}

// inbox queues the chunks of an incoming stream (a command's stdin, a
// write's content) between the connection's reader and the goroutine that
// consumes them. It never holds more than a window: the client sends no
// more than it was granted, and the consumer grants bytes only once it took
// them out.
type inbox struct {
	mu      sync.Mutex
	chunks  [][]byte
	size    int
	eof     bool
	discard bool
	wake    chan struct{}
}

func newInbox() *inbox { return &inbox{wake: make(chan struct{}, 1)} }

func (q *inbox) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// push queues b; it fails if the client broke the protocol.
func (q *inbox) push(b []byte) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	switch {
	case q.discard:
		return nil
	case q.eof:
		return fmt.Errorf("%w: data after the end of the stream", ErrProtocol)
	case q.size+len(b) > window:
		return fmt.Errorf("%w: %d bytes queued exceed the window", ErrProtocol, q.size+len(b))
	}
	q.chunks = append(q.chunks, b)
	q.size += len(b)
	q.signal()
	return nil
}

// close marks the end of the stream.
func (q *inbox) close() {
	q.mu.Lock()
	q.eof = true
	q.mu.Unlock()
	q.signal()
}

// drop discards what is queued and everything that arrives later.
func (q *inbox) drop() {
	q.mu.Lock()
	q.discard = true
	q.chunks, q.size = nil, 0
	q.mu.Unlock()
}

// pop returns the next chunk, or eof once the stream ended and is empty.
// It gives up when ctx is done or stop is closed.
func (q *inbox) pop(ctx context.Context, stop <-chan struct{}) (b []byte, eof bool, err error) {
	for {
		q.mu.Lock()
		if len(q.chunks) > 0 {
			b = q.chunks[0]
			q.chunks[0] = nil
			q.chunks = q.chunks[1:]
			q.size -= len(b)
			q.mu.Unlock()
			return b, false, nil
		}
		eof = q.eof
		q.mu.Unlock()
		if eof {
			return nil, true, nil
		}
		select {
		case <-q.wake:
		case <-stop:
			return nil, false, context.Canceled
		case <-ctx.Done():
			return nil, false, ctx.Err()
		}
	}
}
