// Package relay is the inside end of hutch's egress proxy in a sandbox
// whose kernel has no route to the host's network (gVisor): hutch serves
// its proxy on unix sockets in a directory bound read-only into the view
// (SandboxDir), and Start, run by the sandbox's first process, listens on
// the sandbox's loopback proxy addresses (127.0.0.1:3128 for HTTP, :1080
// for SOCKS5, :53 for DNS over UDP) and passes every connection, and every
// query, on to them. It holds nothing the sandbox's commands could use:
// the sockets it relays to are in their view too.
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

// Start listens on the sandbox's proxy addresses and relays to the
// sockets in dir.
func Start(dir string) error {
	for _, r := range []struct {
		port   int
		socket string
	}{{proxyconnect.Port, HTTPSocket}, {SOCKSPort, SOCKSSocket}} {
		l, err := net.Listen("tcp4", "127.0.0.1:"+strconv.Itoa(r.port))
		if err != nil {
			return fmt.Errorf("proxy relay: %w", err)
		}
		go Streams(l, filepath.Join(dir, r.socket))
	}
	pc, err := net.ListenPacket("udp4", "127.0.0.1:"+strconv.Itoa(DNSPort))
	if err != nil {
		return fmt.Errorf("DNS relay: %w", err)
	}
	go DNS(pc, filepath.Join(dir, DNSSocket))
	return nil
}

// Streams passes each connection l accepts on to the unix socket at
// path, both ways, until either side ends.
func Streams(l net.Listener, path string) {
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
			u, err := net.Dial("unix", path)
			if err != nil {
				return
			}
			defer u.Close()
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, _ = io.Copy(u, c)
				_ = u.(*net.UnixConn).CloseWrite()
			}()
			_, _ = io.Copy(c, u)
			_ = c.(*net.TCPConn).CloseWrite()
			wg.Wait()
		}()
	}
}

// DNS passes each datagram pc gets to the unix stream socket at path,
// framed as DNS over TCP frames its messages (a two-byte length first), one
// connection a query, and sends the answer back.
func DNS(pc net.PacketConn, path string) {
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
			u, err := net.Dial("unix", path)
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
