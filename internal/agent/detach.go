package agent

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"time"
)

// isDetached reports whether a detach holds the connection.
func (s *server) isDetached() bool {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	return s.detached
}

// detach answers the detach request id and hands the connection over:
// every request in flight ends for the client (an exec's command keeps
// running with its stdin closed and its output dropped; anything else is
// cancelled), and the agent sends nothing until an attach.
func (s *server) detach(id uint32) error {
	s.mu.Lock()
	s.maxID = max(s.maxID, id)
	reqs := s.reqs
	s.reqs = make(map[uint32]*areq)
	s.mu.Unlock()

	b, err := jsonFrame(frameResponse, id, response{})
	if err != nil {
		return err
	}
	s.wmu.Lock()
	if s.orphans == nil {
		s.orphans = make(map[uint32]bool)
	}
	for rid := range reqs {
		s.orphans[rid] = true
	}
	err = s.sendLocked(b)
	s.detached = true
	s.wmu.Unlock()
	if err != nil {
		return err
	}
	s.orphan(reqs)
	s.log.Info("agent connection detached", "running", len(reqs))
	return nil
}

// orphan ends, for their client, the requests a detach or a takeover
// took from it: an exec's command keeps running with its stdin closed and
// its output dropped; anything else is cancelled.
func (s *server) orphan(reqs map[uint32]*areq) {
	for _, r := range reqs {
		if r.op != opExec {
			r.cancel()
			continue
		}
		if r.in != nil {
			r.in.close()
		}
		for _, c := range r.out {
			if c != nil {
				c.open()
			}
		}
	}
}

// attach starts a new session on the connection after a detach: a hello
// whose first id is above every request id the agent saw.
func (s *server) attach() error {
	s.mu.Lock()
	first := s.maxID + 1
	s.mu.Unlock()
	if first == 0 {
		return fmt.Errorf("%w: request ids exhausted", ErrProtocol)
	}
	b, err := jsonFrame(frameHello, 0, hello{Version: protocolVersion, MaxFrame: s.maxFrame, FirstID: first})
	if err != nil {
		return err
	}
	s.wmu.Lock()
	s.detached = false
	err = s.sendLocked(b)
	s.wmu.Unlock()
	s.log.Info("agent connection attached", "first_id", first)
	return peerClosed(err)
}

// errDetached ends a client whose connection was detached (Detach).
var errDetached = fmt.Errorf("%w: the connection was detached (the sandbox is being paused)", ErrClosed)

// Detach hands the connection over (the sandbox is about to be saved to
// disk, see the package doc): the agent stops sending, the commands in
// flight keep running without their streams, and every call of c fails
// with an error wrapping ErrClosed. It returns the connection, open, for
// Attach once the sandbox goes on (with a connection on the same socket,
// or on the one the sandbox's restore gives); on error the connection is
// closed.
func (c *Client) Detach(ctx context.Context) (net.Conn, error) {
	if _, _, err := c.roundTrip(ctx, &request{Op: opDetach}, nil); err != nil {
		if !errors.Is(err, errDetached) {
			_ = c.Close()
			return nil, fmt.Errorf("detach: %w", err)
		}
	}
	<-c.done
	if !c.handover.Load() {
		return nil, fmt.Errorf("detach: %w", c.err)
	}
	// No write of c may follow: a frame cut in two would end the next
	// session. Writes check done once they hold wsem.
	c.wsem <- struct{}{}
	return c.conn, nil
}

// attachSeed is how many random bytes an attach carries.
const attachSeed = 32

// Attach returns a client of the agent on conn, a connection whose agent
// was detached (Detach): it asks the agent for a new session, whose hello
// the client reads first, telling it this host's clock (ServeOptions.
// SetClock) and attachSeed random bytes (ServeOptions.Reseed). The client
// owns conn.
func Attach(conn net.Conn) (*Client, error) {
	body := binary.BigEndian.AppendUint64(nil, uint64(time.Now().UnixNano()))
	body = append(body, make([]byte, attachSeed)...)
	if _, err := rand.Read(body[8:]); err != nil {
		conn.Close()
		return nil, fmt.Errorf("attach: %w", err)
	}
	if _, err := conn.Write(encodeFrame(frameAttach, 0, 0, body)); err != nil {
		conn.Close()
		return nil, fmt.Errorf("attach: %w", err)
	}
	return NewClient(conn), nil
}
