package sandbox

import (
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// fakeProxy counts what it was asked to serve.
type fakeProxy struct{ http, socks, dns atomic.Int32 }

func (f *fakeProxy) ServeHTTP(l net.Listener) error {
	f.http.Add(1)
	c, err := l.Accept()
	if err == nil {
		c.Close()
	}
	return l.Close()
}
func (f *fakeProxy) ServeSOCKS(l net.Listener) error { f.socks.Add(1); return l.Close() }
func (f *fakeProxy) ServeDNS(c net.PacketConn) error { f.dns.Add(1); return c.Close() }
func (f *fakeProxy) Close() error                    { return nil }

// loopbackSockets makes what netSockets makes, on the host's loopback at
// any port: two listeners and a UDP socket.
func loopbackSockets(t *testing.T) ([]int, string) {
	t.Helper()
	var fds []int
	var addr string
	for _, typ := range []int{unix.SOCK_STREAM, unix.SOCK_STREAM, unix.SOCK_DGRAM} {
		fd, err := unix.Socket(unix.AF_INET, typ|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
			t.Fatal(err)
		}
		if typ == unix.SOCK_STREAM {
			if err := unix.Listen(fd, 8); err != nil {
				t.Fatal(err)
			}
		}
		if addr == "" {
			sa, _ := unix.Getsockname(fd)
			addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*unix.SockaddrInet4).Port))
		}
		fds = append(fds, fd)
	}
	return fds, addr
}

// TestServeLazily: the proxy serves nothing until a connection arrives
// (a sandbox that never touches the network runs none of its code), then
// it serves all three sockets; stopped before, the sockets are closed.
func TestServeLazily(t *testing.T) {
	fds, addr := loopbackSockets(t)
	p := &fakeProxy{}
	w, err := serveLazily(p, fds)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	if p.http.Load()+p.socks.Load()+p.dns.Load() != 0 {
		t.Fatal("the proxy was handed the sockets before anything arrived")
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if !testutil.Eventually(time.Minute, func() bool { return p.http.Load() == 1 && p.socks.Load() == 1 && p.dns.Load() == 1 }) {
		t.Fatalf("after a connection the proxy serves http %d, socks %d, dns %d; want each once", p.http.Load(), p.socks.Load(), p.dns.Load())
	}
	w.stop() // after the hand-over: nothing left to do

	fds, addr = loopbackSockets(t)
	p = &fakeProxy{}
	w, err = serveLazily(p, fds)
	if err != nil {
		t.Fatal(err)
	}
	w.stop()
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Error("the listener is still open after stop")
	}
	time.Sleep(50 * time.Millisecond)
	if p.http.Load()+p.socks.Load()+p.dns.Load() != 0 {
		t.Error("the proxy was handed sockets after stop")
	}
}
