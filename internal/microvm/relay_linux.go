package microvm

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/yamux"

	"github.com/hutch-sandbox/hutch/internal/microvm/guest"
	"github.com/hutch-sandbox/hutch/internal/relay"
	"github.com/hutch-sandbox/hutch/internal/sandbox"
)

// kindWait bounds how long a new stream has to name its service.
const kindWait = 30 * time.Second

// proxyRelay is the host's end of a guest's relayed connections (package
// guest's startRelay): it serves hutch's egress proxy on the streams of a
// yamux session over the relay port, each to the proxy's service its
// first byte names — the same proxy, on the same services, as the gVisor
// tier serves on its unix sockets. The guest is not trusted: a stream
// beyond guest.MaxStreams open at once, or of no known service, is closed;
// a guest that keeps streams open past twice that, or sends what the
// guest's side never sends (a ping), loses its relay.
type proxyRelay struct {
	sess   *yamux.Session
	proxy  sandbox.Proxy
	log    *slog.Logger
	ls     map[byte]*streamListener
	active atomic.Int32
	warned atomic.Bool // a refusal was logged: a guest may not flood the log
	done   chan struct{}
	once   sync.Once
}

// serveProxyRelay serves p on conn, the relay port's connection (or a
// markedConn of it), until Close or until conn ends. It does not close p.
func serveProxyRelay(conn net.Conn, p sandbox.Proxy, log *slog.Logger) (*proxyRelay, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	mc, ok := conn.(*markedConn)
	if !ok {
		mc = &markedConn{Conn: conn}
	}
	sess, err := yamux.Server(&noPings{Conn: mc}, guest.MuxConfig())
	if err != nil {
		return nil, err
	}
	r := &proxyRelay{sess: sess, proxy: p, log: log, done: make(chan struct{}), ls: map[byte]*streamListener{}}
	for _, k := range []byte{guest.StreamHTTP, guest.StreamSOCKS, guest.StreamDNS} {
		r.ls[k] = &streamListener{conns: make(chan net.Conn), done: r.done, addr: relayAddr(k)}
	}
	go func() { _ = p.ServeHTTP(r.ls[guest.StreamHTTP]) }()
	go func() { _ = p.ServeSOCKS(r.ls[guest.StreamSOCKS]) }()
	go func() { _ = p.ServeDNS(relay.NewStreamPackets(r.ls[guest.StreamDNS], guest.MaxStreams)) }()
	go r.accept()
	return r, nil
}

// accept hands each stream the guest opens to its service's listener.
func (r *proxyRelay) accept() {
	defer r.Close()
	for {
		st, err := r.sess.AcceptStream()
		if err != nil {
			if !errors.Is(err, yamux.ErrSessionShutdown) && !errors.Is(err, io.EOF) {
				r.log.Warn("microvm: the guest's relay ended", "err", err)
			}
			return
		}
		if n := r.sess.NumStreams(); n > 2*guest.MaxStreams {
			r.log.Warn("microvm: the guest keeps more relayed streams open than it may; its relay ends", "streams", n)
			return
		}
		if r.active.Add(1) > guest.MaxStreams {
			r.active.Add(-1)
			r.warnOnce("microvm: a relayed stream beyond the guest's bound refused (and any later)", "bound", guest.MaxStreams)
			st.Close()
			continue
		}
		go r.hand(&slotConn{Stream: st, release: func() { r.active.Add(-1) }})
	}
}

// hand reads the stream's service and passes it to its listener.
func (r *proxyRelay) hand(c *slotConn) {
	var kind [1]byte
	_ = c.SetReadDeadline(time.Now().Add(kindWait))
	_, err := io.ReadFull(c, kind[:])
	_ = c.SetReadDeadline(time.Time{})
	l := r.ls[kind[0]]
	if err != nil || l == nil {
		r.warnOnce("microvm: a relayed stream of no known service refused (and any later)", "err", err)
		c.Close()
		return
	}
	select {
	case l.conns <- c:
	case <-r.done:
		c.Close()
	}
}

// warnOnce logs the relay's first refusal only.
func (r *proxyRelay) warnOnce(msg string, args ...any) {
	if r.warned.CompareAndSwap(false, true) {
		r.log.Warn(msg, args...)
	}
}

// Done is closed once the relay has ended.
func (r *proxyRelay) Done() <-chan struct{} { return r.done }

// Close ends the relay and its streams (not the proxy).
func (r *proxyRelay) Close() error {
	r.once.Do(func() {
		close(r.done)
		r.sess.Close()
	})
	return nil
}

// streamListener is a net.Listener of the streams of one service.
type streamListener struct {
	conns chan net.Conn
	done  chan struct{}
	addr  relayAddr
}

func (l *streamListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close does nothing: the relay's Close ends all its listeners.
func (l *streamListener) Close() error   { return nil }
func (l *streamListener) Addr() net.Addr { return l.addr }

// relayAddr names a service of the relay.
type relayAddr byte

func (a relayAddr) Network() string { return "microvm-relay" }
func (a relayAddr) String() string  { return "guest-" + string(rune(a)) }

// slotConn is an accepted stream that gives its slot back once closed.
type slotConn struct {
	*yamux.Stream
	release func()
	once    sync.Once
}

// CloseWrite ends the host's side of the stream (yamux's Close is a
// half-close: the guest's data still comes).
func (c *slotConn) CloseWrite() error { return c.Stream.Close() }

func (c *slotConn) Close() error {
	err := c.Stream.Close()
	c.once.Do(c.release)
	return err
}

// noPings is the relay port's connection as the host's yamux session
// reads it: it follows yamux's frame headers and fails the read that
// brings a ping, which the guest's side never sends (keep-alive is off)
// and to each of which yamux would answer from a goroutine of its own.
type noPings struct {
	net.Conn
	hdr  [12]byte // yamux's header: version, type, flags(2), stream(4), length(4)
	have int      // bytes of hdr read
	skip uint32   // bytes of a data frame's payload still to come
}

// yamux's frame types: data (0) has a payload of its length, window
// update (1) and go-away (3) none; ping is 2.
const (
	yamuxData = 0
	yamuxPing = 2
)

// errPing is the read error of a connection that brought a ping.
var errPing = errors.New("microvm: the guest's relay sent a ping, which its side never does")

func (c *noPings) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	for p := b[:n]; len(p) > 0; {
		if c.skip > 0 {
			k := min(uint32(len(p)), c.skip)
			c.skip -= k
			p = p[k:]
			continue
		}
		k := copy(c.hdr[c.have:], p)
		c.have += k
		p = p[k:]
		if c.have < len(c.hdr) {
			break
		}
		c.have = 0
		switch c.hdr[1] {
		case yamuxPing:
			return 0, errPing
		case yamuxData:
			c.skip = uint32(c.hdr[8])<<24 | uint32(c.hdr[9])<<16 | uint32(c.hdr[10])<<8 | uint32(c.hdr[11])
		}
	}
	return n, err
}

// markedConn is the relay port's connection read from the guest's
// RelayMark on: what precedes it, left in the port's queues by a session
// of the guest's that ended with its host (a save), is skipped, up to
// guest.MaxRelaySkip bytes.
type markedConn struct {
	net.Conn
	r      *bufio.Reader
	marked bool
}

func (c *markedConn) Read(b []byte) (int, error) {
	if err := c.seek(); err != nil {
		return 0, err
	}
	return c.r.Read(b)
}

// seek reads up to the guest's RelayMark, once.
func (c *markedConn) seek() error {
	if c.r == nil {
		c.r = bufio.NewReader(c.Conn)
	}
	if c.marked {
		return nil
	}
	mark := guest.RelayMark
	window := make([]byte, 0, len(mark))
	for skipped := 0; !bytes.Equal(window, mark); skipped++ {
		if skipped > guest.MaxRelaySkip+len(mark) {
			return fmt.Errorf("the guest's relay: no session mark in its first %d bytes", guest.MaxRelaySkip)
		}
		ch, err := c.r.ReadByte()
		if err != nil {
			return err
		}
		if len(window) == len(mark) {
			window = window[1:]
		}
		window = append(window, ch)
	}
	c.marked = true
	return nil
}

// awaitMark waits up to d for the guest's RelayMark; an error that is a
// timeout (os.ErrDeadlineExceeded) says none came.
func (c *markedConn) awaitMark(d time.Duration) error {
	if err := c.SetReadDeadline(time.Now().Add(d)); err != nil {
		return err
	}
	err := c.seek()
	if derr := c.SetReadDeadline(time.Time{}); err == nil {
		err = derr
	}
	return err
}
