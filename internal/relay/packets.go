package relay

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// StreamPackets is a net.PacketConn over the connections of a stream
// listener: each length-prefixed message a connection sends is a packet
// from that connection, and a packet written to it goes back framed the
// same way. It lets the proxy's DNS server answer the relay's queries.
type StreamPackets struct {
	l       net.Listener
	packets chan packet
	done    chan struct{}
	once    sync.Once
	mu      sync.Mutex
	conns   map[net.Conn]struct{}
}

type packet struct {
	b    []byte
	from connAddr
}

// connAddr is the address of a packet: the connection it came on.
type connAddr struct{ c net.Conn }

func (connAddr) Network() string  { return "unix" }
func (a connAddr) String() string { return fmt.Sprintf("relay-%p", a.c) }

// NewStreamPackets serves the connections l accepts, at most max at once
// (the next waits for one to end).
func NewStreamPackets(l net.Listener, max int) *StreamPackets {
	s := &StreamPackets{l: l, packets: make(chan packet), done: make(chan struct{}), conns: make(map[net.Conn]struct{})}
	go s.accept(max)
	return s
}

func (s *StreamPackets) accept(max int) {
	slots := make(chan struct{}, max)
	for {
		c, err := s.l.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return
		}
		select {
		case slots <- struct{}{}:
		case <-s.done:
			c.Close()
			return
		}
		s.mu.Lock()
		s.conns[c] = struct{}{}
		s.mu.Unlock()
		go func() {
			defer func() {
				s.mu.Lock()
				delete(s.conns, c)
				s.mu.Unlock()
				c.Close()
				<-slots
			}()
			for {
				b, err := ReadFrame(c)
				if err != nil {
					return
				}
				select {
				case s.packets <- packet{b, connAddr{c}}:
				case <-s.done:
					return
				}
			}
		}()
	}
}

// ReadFrom returns the next message of any connection.
func (s *StreamPackets) ReadFrom(b []byte) (int, net.Addr, error) {
	select {
	case p := <-s.packets:
		return copy(b, p.b), p.from, nil
	case <-s.done:
		return 0, nil, net.ErrClosed
	}
}

// WriteTo sends b, framed, on the connection addr names.
func (s *StreamPackets) WriteTo(b []byte, addr net.Addr) (int, error) {
	a, ok := addr.(connAddr)
	if !ok || len(b) > 0xffff {
		return 0, errors.New("not a relay's connection")
	}
	f := make([]byte, 2+len(b))
	binary.BigEndian.PutUint16(f, uint16(len(b)))
	copy(f[2:], b)
	if _, err := a.c.Write(f); err != nil {
		return 0, err
	}
	return len(b), nil
}

// Close stops accepting and ends every connection.
func (s *StreamPackets) Close() error {
	s.once.Do(func() {
		close(s.done)
		s.l.Close()
		s.mu.Lock()
		for c := range s.conns {
			c.Close()
		}
		s.mu.Unlock()
	})
	return nil
}

func (s *StreamPackets) LocalAddr() net.Addr { return s.l.Addr() }

// The proxy's DNS server sets no deadlines on its socket; these exist for
// net.PacketConn.
func (s *StreamPackets) SetDeadline(t time.Time) error      { return nil }
func (s *StreamPackets) SetReadDeadline(t time.Time) error  { return nil }
func (s *StreamPackets) SetWriteDeadline(t time.Time) error { return nil }
