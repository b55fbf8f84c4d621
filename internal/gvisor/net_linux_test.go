package gvisor

import (
	"bytes"
	"io"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/relay"
)

// TestRelays: what the relay inside gVisor (relay.Streams, relay.DNS) sends
// over the unix sockets reaches the host side, and the answers come back:
// a stream both ways, and DNS datagrams through relay.StreamPackets, the
// net.PacketConn the proxy's DNS server reads (here an echo).
func TestRelays(t *testing.T) {
	dir := t.TempDir()
	// A stream: the host side echoes.
	sl, err := net.Listen("unix", filepath.Join(dir, "s.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer sl.Close()
	go func() {
		for {
			c, err := sl.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); c.Close() }()
		}
	}()
	tl, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tl.Close()
	go relay.Streams(tl, func() (net.Conn, error) { return net.Dial("unix", filepath.Join(dir, "s.sock")) })
	c, err := net.Dial("tcp4", tl.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(time.Minute)) // a guard against hanging, not a threshold
	if _, err := c.Write([]byte("stream")); err != nil {
		t.Fatal(err)
	}
	_ = c.(*net.TCPConn).CloseWrite()
	if got, err := io.ReadAll(c); err != nil || string(got) != "stream" {
		t.Errorf("the stream relay answered %q, %v", got, err)
	}
	c.Close()

	// DNS: datagrams framed over a stream socket, answered per connection.
	dl, err := net.Listen("unix", filepath.Join(dir, "d.sock"))
	if err != nil {
		t.Fatal(err)
	}
	sp := relay.NewStreamPackets(dl, maxDNSConns)
	defer sp.Close()
	go func() {
		buf := make([]byte, relay.MaxDNS)
		for {
			n, from, err := sp.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = sp.WriteTo(append([]byte("re:"), buf[:n]...), from)
		}
	}()
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	go relay.DNS(pc, func() (net.Conn, error) { return net.Dial("unix", filepath.Join(dir, "d.sock")) })
	u, err := net.Dial("udp4", pc.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	_ = u.SetDeadline(time.Now().Add(time.Minute)) // a guard against hanging, not a threshold
	for _, q := range []string{"query one", "query two"} {
		if _, err := u.Write([]byte(q)); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 512)
		n, err := u.Read(buf)
		if err != nil || !bytes.Equal(buf[:n], []byte("re:"+q)) {
			t.Errorf("the DNS relay answered %q, %v; want %q", buf[:n], err, "re:"+q)
		}
	}
	if _, err := sp.WriteTo([]byte("x"), &net.UDPAddr{}); err == nil {
		t.Error("StreamPackets wrote to an address that is not one of its connections")
	}
}
