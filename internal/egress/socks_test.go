package egress

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/netip"
	"syscall"
	"testing"
)

// socksDomain is a SOCKS5 CONNECT request for name:port.
func socksDomain(name string, port int) []byte {
	b := []byte{socks5Version, socksConnect, 0, atypDomain, byte(len(name))}
	b = append(b, name...)
	return binary.BigEndian.AppendUint16(b, uint16(port))
}

// socksIP is a SOCKS5 request cmd for addr:port.
func socksIP(cmd byte, addr netip.Addr, port int) []byte {
	b := []byte{socks5Version, cmd, 0, atypIPv4}
	if addr.Is6() {
		b[3] = atypIPv6
	}
	b = append(b, addr.AsSlice()...)
	return binary.BigEndian.AppendUint16(b, uint16(port))
}

// socks5Connect greets the SOCKS5 server, sends request and checks that
// the reply is rep; it returns the connection.
func socks5Connect(t *testing.T, env *testEnv, request []byte, rep byte) *net.TCPConn {
	t.Helper()
	c := env.dial(env.socksAddr)
	c.Write([]byte{socks5Version, 2, 0x02, socksNoAuth}) // offers user/password and none
	var choice [2]byte
	if _, err := io.ReadFull(c, choice[:]); err != nil || choice != [2]byte{socks5Version, socksNoAuth} {
		t.Fatalf("method choice %x, %v; want 05 00", choice, err)
	}
	c.Write(request)
	reply := readSOCKS5Reply(t, c)
	if reply.rep != rep {
		t.Fatalf("reply %#02x, want %#02x", reply.rep, rep)
	}
	if rep == repSucceeded && (reply.bound.Addr() != netip.IPv4Unspecified() || reply.bound.Port() != 0) {
		t.Errorf("bound address %v, want 0.0.0.0:0 (the proxy's own address is not the sandbox's business)", reply.bound)
	}
	return c
}

// socksAnswer is a SOCKS5 reply.
type socksAnswer struct {
	rep   byte
	bound netip.AddrPort
}

func readSOCKS5Reply(t *testing.T, c net.Conn) socksAnswer {
	t.Helper()
	var hdr [4]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		t.Fatalf("reading the reply: %v", err)
	}
	if hdr[0] != socks5Version || hdr[2] != 0 {
		t.Fatalf("reply header %x", hdr)
	}
	n := 4
	if hdr[3] == atypIPv6 {
		n = 16
	} else if hdr[3] != atypIPv4 {
		t.Fatalf("reply address type %#02x", hdr[3])
	}
	b := make([]byte, n+2)
	if _, err := io.ReadFull(c, b); err != nil {
		t.Fatalf("reading the reply: %v", err)
	}
	a, _ := netip.AddrFromSlice(b[:n])
	return socksAnswer{hdr[1], netip.AddrPortFrom(a, binary.BigEndian.Uint16(b[n:]))}
}

// checkEcho sends data through c to the echo server and checks its answer.
func checkEcho(t *testing.T, c *net.TCPConn, data string) {
	t.Helper()
	io.WriteString(c, data)
	c.CloseWrite()
	got, err := io.ReadAll(c)
	if err != nil || string(got) != data+"bye" {
		t.Errorf("echo: %q, %v; want %q", got, err, data+"bye")
	}
}

func TestSOCKS5Connect(t *testing.T) {
	echo := startEchoServer(t)
	env := startProxy(t, testConfig(fmt.Sprintf("allowed.test:%d", echo), fmt.Sprintf("127.0.0.1:%d", echo)))
	t.Run("domain", func(t *testing.T) {
		checkEcho(t, socks5Connect(t, env, socksDomain("Allowed.Test", echo), repSucceeded), "by name")
	})
	t.Run("IPv4", func(t *testing.T) {
		checkEcho(t, socks5Connect(t, env, socksIP(socksConnect, loopback4, echo), repSucceeded), "by address")
	})
	t.Run("IPv4-mapped IPv6", func(t *testing.T) {
		mapped := netip.AddrFrom16(loopback4.As16())
		checkEcho(t, socks5Connect(t, env, socksIP(socksConnect, mapped, echo), repSucceeded), "by mapped address")
	})
	if len(env.blocked()) != 0 {
		t.Errorf("refusals recorded: %+v", env.blocked())
	}
	env.close()
	tr := env.p.Traffic()
	if len(tr) != 2 || tr[0].Host != "allowed.test" || tr[1].Host != "127.0.0.1" || tr[1].Connections != 2 || tr[0].Protocol != "socks5" {
		t.Errorf("Traffic = %+v", tr)
	}
}

func TestSOCKS5Refusals(t *testing.T) {
	echo := startEchoServer(t)
	env := startProxy(t, testConfig(fmt.Sprintf("allowed.test:%d", echo)))

	c := socks5Connect(t, env, socksDomain("allowed.test", 22), repNotAllowed)
	if _, err := io.ReadAll(c); err != nil {
		t.Errorf("after the refusal: %v, want EOF", err)
	}
	e := env.nthBlocked(1)
	checkBlocked(t, e, "socks5", "allowed.test", 22, "")
	if e.Rule == "" || e.Reason == "" {
		t.Errorf("event %+v: want the rule and reason", e)
	}

	socks5Connect(t, env, socksDomain("denied.test", echo), repNotAllowed)
	checkBlocked(t, env.nthBlocked(2), "socks5", "denied.test", echo, "not in allowedDomains")

	socks5Connect(t, env, socksIP(socksBind, loopback4, echo), repCmdNotSupported)
	checkBlocked(t, env.nthBlocked(3), "socks5", "127.0.0.1", echo, "SOCKS5 BIND is not supported")

	socks5Connect(t, env, socksIP(socksUDPAssociate, netip.IPv4Unspecified(), 0), repCmdNotSupported)
	checkBlocked(t, env.nthBlocked(4), "socks5", "0.0.0.0", 0, "SOCKS5 UDP ASSOCIATE is not supported")

	socks5Connect(t, env, []byte{socks5Version, socksConnect, 0, 0x09}, repAddrNotSupported)

	// No method without authentication offered.
	c = env.dial(env.socksAddr)
	c.Write([]byte{socks5Version, 1, 0x02})
	if got, err := io.ReadAll(c); err != nil || !bytes.Equal(got, []byte{socks5Version, socksNoAcceptable}) {
		t.Errorf("greeting without method 0: %x, %v; want 05 ff", got, err)
	}
	if n := len(env.blocked()); n != 4 {
		t.Errorf("%d refusals recorded, want 4", n)
	}
}

func TestSOCKS5DialFailure(t *testing.T) {
	port := freePort(t)
	env := startProxy(t, testConfig(fmt.Sprintf("allowed.test:%d", port)))
	socks5Connect(t, env, socksDomain("allowed.test", port), repConnRefused)
	if len(env.blocked()) != 0 {
		t.Errorf("a failed dial was recorded as a refusal: %+v", env.blocked())
	}
}

func TestSOCKS4(t *testing.T) {
	env := startProxy(t, testConfig("allowed.test"))
	for i, tt := range []struct {
		name    string
		request []byte
		host    string
		port    int
	}{
		{"SOCKS4", []byte{socks4Version, 1, 0x01, 0xbb, 127, 0, 0, 1, 'u', 0}, "127.0.0.1", 443},
		{"SOCKS4a", append([]byte{socks4Version, 1, 0, 80, 0, 0, 0, 1, 0}, "allowed.test\x00"...), "allowed.test", 80},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := env.dial(env.socksAddr)
			c.Write(tt.request)
			got, err := io.ReadAll(c)
			if want := []byte{0, socks4Rejected, 0, 0, 0, 0, 0, 0}; err != nil || !bytes.Equal(got, want) {
				t.Errorf("reply %x, %v; want %x", got, err, want)
			}
			checkBlocked(t, env.nthBlocked(i+1), "socks4", tt.host, tt.port, "SOCKS4 is not supported (use SOCKS5)")
		})
	}
}

func TestDialReply(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want byte
	}{
		{&net.OpError{Op: "dial", Err: fmt.Errorf("connect: %w", syscall.ECONNREFUSED)}, repConnRefused},
		{&net.OpError{Op: "dial", Err: fmt.Errorf("connect: %w", syscall.EHOSTUNREACH)}, repHostUnreachable},
		{&net.OpError{Op: "dial", Err: fmt.Errorf("connect: %w", syscall.ENETUNREACH)}, repNetUnreachable},
		{io.ErrUnexpectedEOF, repGeneralFailure},
	} {
		if got := dialReply(tt.err); got != tt.want {
			t.Errorf("dialReply(%v) = %#02x, want %#02x", tt.err, got, tt.want)
		}
	}
}
