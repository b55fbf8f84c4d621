package egress

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// The tests run everything on loopback: upstream servers on 127.0.0.1:0,
// the proxy's listeners too, and names pinned with Config.Hosts and a
// Lookup that fails, so that nothing reaches the system resolver or
// another machine.

var loopback4 = netip.MustParseAddr("127.0.0.1")

// failLookup stands in for the system resolver: the tests pin every name.
func failLookup(host string) ([]netip.Addr, error) {
	return nil, fmt.Errorf("test lookup of %s: every name is pinned", host)
}

// testConfig allows the given destinations; allowed.test, denied.test and
// other.test are pinned to 127.0.0.1, which the guard lets through.
func testConfig(allow ...string) Config {
	return Config{
		AllowDomains: allow,
		Hosts: map[string][]netip.Addr{
			"allowed.test": {loopback4},
			"denied.test":  {loopback4},
			"other.test":   {loopback4},
		},
		AllowPrivate: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")},
		Lookup:       failLookup,
		HostAddrs:    []netip.Addr{netip.MustParseAddr("192.0.2.254")},
	}
}

// testEnv is a running proxy.
type testEnv struct {
	t         *testing.T
	p         *Proxy
	rec       *Recorder
	httpAddr  string
	socksAddr string
	accepted  *atomic.Int32 // connections accepted by the HTTP listener
	serveErrs chan error
}

// countListener counts the connections it accepts.
type countListener struct {
	net.Listener
	n *atomic.Int32
}

func (l countListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// listen listens on a free loopback port.
func listen(t testing.TB) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// startProxy serves a proxy with cfg's rules on loopback listeners, after
// opts set its other fields; the test's cleanup closes it and checks that
// both servers return nil.
func startProxy(t *testing.T, cfg Config, opts ...func(*Proxy)) *testEnv {
	t.Helper()
	rules, err := NewRules(cfg)
	if err != nil {
		t.Fatal(err)
	}
	env := &testEnv{t: t, rec: NewRecorder(nil), accepted: new(atomic.Int32), serveErrs: make(chan error, 2)}
	env.p = &Proxy{
		Rules:       rules,
		Sandbox:     "sb-test",
		Record:      env.rec.Record,
		Log:         slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug})),
		DialTimeout: 5 * time.Second,
	}
	for _, o := range opts {
		o(env.p)
	}
	env.serve()
	return env
}

// serve starts env.p on loopback listeners for HTTP and SOCKS5; the test's
// cleanup closes it.
func (env *testEnv) serve() {
	hl, sl := listen(env.t), listen(env.t)
	env.httpAddr, env.socksAddr = hl.Addr().String(), sl.Addr().String()
	go func() { env.serveErrs <- env.p.ServeHTTP(countListener{hl, env.accepted}) }()
	go func() { env.serveErrs <- env.p.ServeSOCKS(sl) }()
	env.t.Cleanup(env.close)
}

// close closes the proxy and checks how its servers ended; it may be
// called more than once.
func (env *testEnv) close() {
	env.t.Helper()
	if err := env.p.Close(); err != nil {
		env.t.Errorf("Close: %v", err)
	}
	if env.serveErrs == nil {
		return
	}
	for range 2 {
		select {
		case err := <-env.serveErrs:
			if err != nil {
				env.t.Errorf("Serve returned %v after Close, want nil", err)
			}
		case <-time.After(10 * time.Second):
			env.t.Errorf("Serve did not return after Close")
		}
	}
	env.serveErrs = nil
}

// blocked returns the refusals recorded so far.
func (env *testEnv) blocked() []Event { return env.rec.Blocked() }

// onlyBlocked returns the one refusal recorded, failing unless there is
// exactly one.
func (env *testEnv) onlyBlocked() Event {
	env.t.Helper()
	b := env.blocked()
	if len(b) != 1 {
		env.t.Fatalf("recorded %d refusals, want 1: %+v", len(b), b)
	}
	return b[0]
}

// nthBlocked returns the last refusal recorded, failing unless it is the
// n-th.
func (env *testEnv) nthBlocked(n int) Event {
	env.t.Helper()
	b := env.blocked()
	if len(b) != n {
		env.t.Fatalf("recorded %d refusals, want %d: %+v", len(b), n, b)
	}
	return b[n-1]
}

// dial connects to one of the proxy's listeners.
func (env *testEnv) dial(addr string) *net.TCPConn {
	env.t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		env.t.Fatal(err)
	}
	env.t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	return c.(*net.TCPConn)
}

// checkBlocked compares the fields of a refusal that the test knows.
func checkBlocked(t *testing.T, e Event, proto, host string, port int, reason string) {
	t.Helper()
	if e.Action != "blocked" || e.Sandbox != "sb-test" || e.Protocol != proto || e.Host != host || e.Port != port || e.Time.IsZero() {
		t.Errorf("event = %+v, want blocked %s %s:%d of sb-test", e, proto, host, port)
	}
	if reason != "" && e.Reason != reason {
		t.Errorf("event reason = %q, want %q", e.Reason, reason)
	}
	if e.Reason == "" {
		t.Errorf("event %+v has no reason", e)
	}
}

// portOf returns the port of a host:port address.
func portOf(t testing.TB, addr string) int {
	t.Helper()
	_, ps, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	p, err := strconv.Atoi(ps)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// echoed is what the echo server saw of a request.
type echoed struct {
	Method string
	URI    string
	Host   string
	Proto  string
	Header http.Header
	Body   string
}

// httpUpstream is an HTTP server that echoes requests as JSON, and counts
// its connections.
type httpUpstream struct {
	*httptest.Server
	port  int
	conns atomic.Int32
}

// startHTTPUpstream starts the echo server. Its paths:
//
//	/stream    writes "first", flushes, waits for release, writes "second"
//	/upgrade   switches to protocol "echo" and echoes bytes until EOF
//	/head      answers with a Content-Length of 1234 (for HEAD)
//	/nocontent answers 204
//	anything else: the request as JSON
func startHTTPUpstream(t *testing.T, release <-chan struct{}) *httpUpstream {
	t.Helper()
	u := &httpUpstream{}
	u.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/stream":
			io.WriteString(w, "first\n")
			w.(http.Flusher).Flush()
			<-release
			io.WriteString(w, "second\n")
			return
		case "/upgrade":
			if r.Header.Get("Upgrade") != "echo" || !strings.EqualFold(r.Header.Get("Connection"), "upgrade") {
				http.Error(w, "want Upgrade: echo", http.StatusBadRequest)
				return
			}
			conn, brw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				return
			}
			defer conn.Close()
			io.WriteString(conn, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
			io.Copy(conn, brw.Reader)
			return
		case "/head":
			w.Header().Set("Content-Length", "1234")
			return
		case "/nocontent":
			w.WriteHeader(http.StatusNoContent)
			return
		}
		body, _ := io.ReadAll(r.Body)
		json.NewEncoder(w).Encode(echoed{Method: r.Method, URI: r.RequestURI, Host: r.Host, Proto: r.Proto, Header: r.Header, Body: string(body)})
	}))
	u.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			u.conns.Add(1)
		}
	}
	u.Start()
	t.Cleanup(u.Close)
	u.port = portOf(t, u.Listener.Addr().String())
	return u
}

// startEchoServer starts a TCP server that echoes what it reads; when the
// client half-closes, it writes "bye" and half-closes too.
func startEchoServer(t testing.TB) int {
	t.Helper()
	port, _ := countingEcho(t)
	return port
}

// countingEcho starts startEchoServer's server and returns its port and
// the count of the connections it accepted.
func countingEcho(t testing.TB) (port int, conns *atomic.Int32) {
	t.Helper()
	conns = new(atomic.Int32)
	l := listen(t)
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func() {
				defer c.Close()
				if _, err := io.Copy(c, c); err != nil {
					return
				}
				io.WriteString(c, "bye")
				c.(*net.TCPConn).CloseWrite()
				io.Copy(io.Discard, c)
			}()
		}
	}()
	return portOf(t, l.Addr().String()), conns
}

// freePort returns a loopback port that nothing listens on.
func freePort(t *testing.T) int {
	t.Helper()
	// A socket bound to the port and not listening holds it for the
	// test: a connection to it is refused, and no other test's server
	// can take the port meanwhile (as one could a port merely found free).
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return sa.(*syscall.SockaddrInet4).Port
}

// connectTunnel sends CONNECT target (with extra bytes right after the
// request) and returns the connection and its reader after a 200.
func connectTunnel(t *testing.T, env *testEnv, target string, extra string) (*net.TCPConn, *bufio.Reader) {
	t.Helper()
	c := env.dial(env.httpAddr)
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n%s", target, target, extra)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT %s: %s (%s)", target, resp.Status, resp.Header.Get("X-Hutch-Blocked"))
	}
	return c, br
}

func TestTraffic(t *testing.T) {
	echo := startEchoServer(t)
	target := fmt.Sprintf("allowed.test:%d", echo)
	env := startProxy(t, testConfig(target))
	payload := bytes.Repeat([]byte("x"), 1000)

	// A CONNECT tunnel, then a SOCKS5 stream to the same destination.
	c, br := connectTunnel(t, env, target, "")
	c.Write(payload)
	c.CloseWrite()
	got, err := io.ReadAll(br)
	if err != nil || len(got) != 1003 {
		t.Fatalf("CONNECT echo: %d bytes, %v; want 1003", len(got), err)
	}
	s := socks5Connect(t, env, socksDomain("allowed.test", echo), repSucceeded)
	s.Write(payload)
	s.CloseWrite()
	if got, err := io.ReadAll(s); err != nil || len(got) != 1003 {
		t.Fatalf("SOCKS5 echo: %d bytes, %v; want 1003", len(got), err)
	}

	env.close()
	tr := env.p.Traffic()
	if len(tr) != 1 {
		t.Fatalf("Traffic = %+v, want one destination", tr)
	}
	e := tr[0]
	want := Event{Time: e.Time, Sandbox: "sb-test", Action: "allowed", Protocol: "connect", Host: "allowed.test", Port: echo,
		Address: "127.0.0.1", Connections: 2, BytesOut: 2000, BytesIn: 2006}
	if e != want || e.Time.IsZero() {
		t.Errorf("Traffic = %+v\nwant      %+v", e, want)
	}
}

func TestTrafficHTTP(t *testing.T) {
	up := startHTTPUpstream(t, nil)
	env := startProxy(t, testConfig(fmt.Sprintf("allowed.test:%d", up.port), fmt.Sprintf("other.test:%d", up.port)))
	client := proxyClient(t, env, nil)
	var in int64
	for _, host := range []string{"allowed.test", "other.test", "allowed.test"} {
		resp, err := client.Get(fmt.Sprintf("http://%s:%d/", host, up.port))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if host == "allowed.test" {
			in += int64(len(b))
		}
	}
	env.close()
	tr := env.p.Traffic()
	if len(tr) != 2 || tr[0].Host != "allowed.test" || tr[1].Host != "other.test" {
		t.Fatalf("Traffic = %+v, want allowed.test then other.test", tr)
	}
	e := tr[0]
	// The destination changed in between, so allowed.test was dialed twice.
	if e.Protocol != "http" || e.Connections != 2 || e.Address != "127.0.0.1" || e.BytesOut < 2*40 || e.BytesIn <= in {
		t.Errorf("Traffic[0] = %+v, want 2 http connections, more than %d bytes in", e, in)
	}
}

func TestCloseEndsEverything(t *testing.T) {
	// An upstream that holds every connection open until its client ends it.
	hold := listen(t)
	t.Cleanup(func() { hold.Close() })
	go func() {
		for {
			c, err := hold.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.Copy(io.Discard, c)
			}()
		}
	}()
	holdPort := portOf(t, hold.Addr().String())
	up := startHTTPUpstream(t, nil)
	time.Sleep(10 * time.Millisecond)
	base := runtime.NumGoroutine()

	env := startProxy(t, testConfig(fmt.Sprintf("allowed.test:%d", holdPort), fmt.Sprintf("allowed.test:%d", up.port)))
	var clients []net.Conn
	tunnel, _ := connectTunnel(t, env, fmt.Sprintf("allowed.test:%d", holdPort), "")
	clients = append(clients, tunnel)
	clients = append(clients, socks5Connect(t, env, socksDomain("allowed.test", holdPort), repSucceeded))
	// A kept-alive forwarding connection, idle after one request.
	ka := env.dial(env.httpAddr)
	fmt.Fprintf(ka, "GET http://allowed.test:%d/ HTTP/1.1\r\nHost: allowed.test:%d\r\n\r\n", up.port, up.port)
	kbr := bufio.NewReader(ka)
	resp, err := http.ReadResponse(kbr, nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET: %v, %v", resp, err)
	}
	io.ReadAll(resp.Body)
	clients = append(clients, ka)
	// Connections in the middle of a request header and of a handshake.
	half := env.dial(env.httpAddr)
	io.WriteString(half, "GET http://allowed.test/ HTTP/1.1\r\n")
	clients = append(clients, half)
	halfSocks := env.dial(env.socksAddr)
	halfSocks.Write([]byte{socks5Version})
	clients = append(clients, halfSocks)
	time.Sleep(50 * time.Millisecond) // let the proxy read what was sent

	closed := make(chan struct{})
	go func() {
		env.close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return")
	}
	for i, c := range clients {
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		var r io.Reader = c
		if c == ka {
			r = kbr
		}
		if _, err := io.Copy(io.Discard, r); err != nil {
			t.Errorf("client %d: reading after Close: %v, want EOF", i, err)
		}
		c.Close()
	}
	up.CloseClientConnections()
	tr := env.p.Traffic()
	if len(tr) != 2 || tr[0].Connections != 2 || tr[0].Protocol != "connect" || tr[1].Connections != 1 {
		t.Errorf("Traffic = %+v", tr)
	}

	// No goroutine of the proxy is left; the upstream's end soon after.
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > base && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > base {
		buf := make([]byte, 1<<20)
		t.Errorf("%d goroutines after Close, %d before the proxy started:\n%s", n, base, buf[:runtime.Stack(buf, true)])
	}

	// Serving after Close returns at once and closes the listener.
	l := listen(t)
	if err := env.p.ServeHTTP(l); err != nil {
		t.Errorf("ServeHTTP after Close = %v, want nil", err)
	}
	if _, err := net.Dial("tcp", l.Addr().String()); err == nil {
		t.Error("the listener given after Close is still open")
	}
}

// BenchmarkConnectThroughput downloads 256 MiB from a loopback server,
// directly and through a CONNECT tunnel; compare their MB/s.
func BenchmarkConnectThroughput(b *testing.B) {
	const size = 256 << 20
	l := listen(b)
	b.Cleanup(func() { l.Close() })
	go func() {
		buf := make([]byte, 1<<20)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				for sent := 0; sent < size; sent += len(buf) {
					if _, err := c.Write(buf); err != nil {
						return
					}
				}
			}()
		}
	}()
	port := portOf(b, l.Addr().String())
	rules, err := NewRules(testConfig(fmt.Sprintf("allowed.test:%d", port)))
	if err != nil {
		b.Fatal(err)
	}
	p := &Proxy{Rules: rules}
	pl := listen(b)
	go p.ServeHTTP(pl)
	b.Cleanup(func() { p.Close() })

	buf := make([]byte, 256<<10)
	download := func(b *testing.B, viaProxy bool) {
		b.SetBytes(size)
		for b.Loop() {
			var c net.Conn
			var r io.Reader
			if viaProxy {
				c, err = net.Dial("tcp", pl.Addr().String())
				if err != nil {
					b.Fatal(err)
				}
				fmt.Fprintf(c, "CONNECT allowed.test:%d HTTP/1.1\r\n\r\n", port)
				br := bufio.NewReader(c)
				resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
				if err != nil || resp.StatusCode != http.StatusOK {
					b.Fatalf("CONNECT: %v %v", resp, err)
				}
				r = br
			} else {
				c, err = net.Dial("tcp", l.Addr().String())
				if err != nil {
					b.Fatal(err)
				}
				r = c
			}
			n, err := discard(r, buf)
			c.Close()
			if err != nil || n != size {
				b.Fatalf("downloaded %d bytes, %v", n, err)
			}
		}
	}
	b.Run("direct", func(b *testing.B) { download(b, false) })
	b.Run("connect", func(b *testing.B) { download(b, true) })
}

// discard reads r to its end with buf and returns the bytes read.
func discard(r io.Reader, buf []byte) (int64, error) {
	var n int64
	for {
		m, err := r.Read(buf)
		n += int64(m)
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

func TestCleanText(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"example.com", "example.com"},
		{"a\r\nb\x1b[31m", "a??b?[31m"},
		{"bad\xffutf8", "bad?utf8"},
		{"e\u202eve", "e?ve"},
		{strings.Repeat("é", 10), "éééééé…"},
	} {
		if got := cleanText(tt.in, 12); got != tt.want {
			t.Errorf("cleanText(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
