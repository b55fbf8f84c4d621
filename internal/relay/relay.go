// Package relay is the inside end of hutch's egress proxy in a sandbox
// whose kernel has no route to the host's network, and the packet side of
// its outside end. Under gVisor hutch serves its proxy on unix sockets in
// a directory bound read-only into the view (SandboxDir), and Start, run
// by the sandbox's first process, listens on the sandbox's loopback proxy
// addresses (127.0.0.1:3128 for HTTP, :1080 for SOCKS5, :53 for DNS over
// UDP) and passes every connection, and every query, on to them; it holds
// nothing the sandbox's commands could use: the sockets it relays to are
// in their view too. A microVM's guest listens the same way (Listen) and
// dials streams of a connection multiplexed over a virtio-serial port
// instead. On the host, StreamPackets gives the proxy's DNS server the
// queries that arrive framed on streams.
package relay

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strconv"
	"sync"

	"github.com/hutch-sandbox/hutch/internal/proxyconnect"
)

// SandboxDir is the view's directory of the proxy's sockets, and
// HTTPSocket, SOCKSSocket and DNSSocket the sockets in it.
const (
	SandboxDir  = "/dev/hutch-proxy"
	HTTPSocket  = "http.sock"
	SOCKSSocket = "socks.sock"
	DNSSocket   = "dns.sock"
)

// SOCKSPort and DNSPort are the sandbox's SOCKS5 and DNS ports on its
// loopback (the HTTP proxy's is proxyconnect.Port).
const (
	SOCKSPort = 1080
	DNSPort   = 53
)

// MaxDNS bounds a DNS message the relay passes on (the proxy reads at
// most this much from a datagram too).
const MaxDNS = 4096

// Dial connects to the proxy's service named by one of the socket names
// (HTTPSocket, SOCKSSocket, DNSSocket).
type Dial func(service string) (net.Conn, error)

// Start listens on the sandbox's proxy addresses and relays to the
// sockets in dir.
func Start(dir string) error {
	return Listen(func(service string) (net.Conn, error) {
		return net.Dial("unix", filepath.Join(dir, service))
	})
}

// Listen listens on the sandbox's proxy addresses and relays each
// connection, and each DNS query, to what dial connects to.
func Listen(dial Dial) error {
	for _, r := range []struct {
		port    int
		service string
	}{{proxyconnect.Port, HTTPSocket}, {SOCKSPort, SOCKSSocket}} {
		l, err := net.Listen("tcp4", "127.0.0.1:"+strconv.Itoa(r.port))
		if err != nil {
			return fmt.Errorf("proxy relay: %w", err)
		}
		go Streams(l, func() (net.Conn, error) { return dial(r.service) })
	}
	pc, err := net.ListenPacket("udp4", "127.0.0.1:"+strconv.Itoa(DNSPort))
	if err != nil {
		return fmt.Errorf("DNS relay: %w", err)
	}
	go DNS(pc, func() (net.Conn, error) { return dial(DNSSocket) })
	return nil
}

// Streams passes each connection l accepts on to a connection of dial,
// both ways, until either side ends.
func Streams(l net.Listener, dial func() (net.Conn, error)) {
	for {
		c, err := l.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return
		}
		go func() {
			defer c.Close()
			u, err := dial()
			if err != nil {
				return
			}
			defer u.Close()
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, _ = io.Copy(u, c)
				closeWrite(u)
			}()
			_, _ = io.Copy(c, u)
			closeWrite(c)
			wg.Wait()
		}()
	}
}

// closeWrite ends c's writing half when it has one, else all of c.
func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
		return
	}
	_ = c.Close()
}

// DNS passes each datagram pc gets to a stream connection of dial,
// framed as DNS over TCP frames its messages (a two-byte length first), one
// connection a query, and sends the answer back.
func DNS(pc net.PacketConn, dial func() (net.Conn, error)) {
	buf := make([]byte, MaxDNS)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return
		}
		q := make([]byte, 2+n)
		binary.BigEndian.PutUint16(q, uint16(n))
		copy(q[2:], buf[:n])
		go func() {
			u, err := dial()
			if err != nil {
				return
			}
			defer u.Close()
			if _, err := u.Write(q); err != nil {
				return
			}
			a, err := ReadFrame(u)
			if err != nil {
				return
			}
			_, _ = pc.WriteTo(a, from)
		}()
	}
}

// ReadFrame reads one length-prefixed DNS message (two bytes of length
// first, as DNS over TCP frames it) of at most MaxDNS bytes.
func ReadFrame(r io.Reader) ([]byte, error) {
	var l [2]byte
	if _, err := io.ReadFull(r, l[:]); err != nil {
		return nil, err
	}
	n := int(binary.BigEndian.Uint16(l[:]))
	if n > MaxDNS {
		return nil, fmt.Errorf("DNS message of %d bytes", n)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, err
	}
	return b, nil
}
