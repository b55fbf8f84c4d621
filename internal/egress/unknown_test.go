package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/yamux"
	"github.com/hutch-sandbox/hutch/internal/approve"
)

// The tests of network.on_unknown: ask. A question that should come is
// waited for long (questionWait); the clients' own deadlines only keep a
// broken proxy from hanging the test.
const questionWait = 30 * time.Second

// question is one call of Proxy.Unknown, for the test to answer.
type question struct {
	ctx    context.Context
	host   string
	port   int
	answer chan error
}

// questions is a Proxy.Unknown that hands every question to the test.
type questions chan question

// unknown is the Proxy.Unknown: it waits for the test's answer or for
// ctx to end.
func (qs questions) unknown(ctx context.Context, host string, port int) error {
	q := question{ctx: ctx, host: host, port: port, answer: make(chan error, 1)}
	select {
	case qs <- q:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-q.answer:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// next waits for the next question, which must be about host:port.
func (qs questions) next(t *testing.T, host string, port int) question {
	t.Helper()
	select {
	case q := <-qs:
		if q.host != host || q.port != port {
			t.Errorf("asked about %s:%d, want %s:%d", q.host, q.port, host, port)
		}
		return q
	case <-time.After(questionWait):
		t.Fatalf("no question about %s:%d", host, port)
	}
	return question{}
}

// none checks that no question is waiting.
func (qs questions) none(t *testing.T) {
	t.Helper()
	select {
	case q := <-qs:
		t.Errorf("asked about %s:%d, want no question", q.host, q.port)
		q.answer <- errors.New("not asked for")
	default:
	}
}

// pending runs try, a request that the test expects to be held, in a
// goroutine, and returns the question about host:port and where try's
// answer comes.
func (qs questions) pending(t *testing.T, try func() string, host string, port int) (question, <-chan string) {
	t.Helper()
	done := make(chan string, 1)
	go func() { done <- try() }()
	return qs.next(t, host, port), done
}

// askingProxy starts a proxy with cfg whose Unknown the test answers.
func askingProxy(t *testing.T, cfg Config, opts ...func(*Proxy)) (*testEnv, questions) {
	qs := make(questions)
	env := startProxy(t, cfg, append([]func(*Proxy){func(p *Proxy) { p.Unknown = qs.unknown }}, opts...)...)
	return env, qs
}

// clientDeadline keeps a broken proxy from hanging a test's client.
const clientDeadline = time.Minute

// dialProxy connects to a listener of the proxy, for a client in a
// goroutine of its own (which cannot fail the test).
func dialProxy(addr string) (*net.TCPConn, error) {
	c, err := net.DialTimeout("tcp", addr, clientDeadline)
	if err != nil {
		return nil, err
	}
	_ = c.SetDeadline(time.Now().Add(clientDeadline))
	return c.(*net.TCPConn), nil
}

// httpVia sends GET http://target/held through the HTTP proxy on a new
// connection and says what came back: "ok URI" (the echo upstream's
// answer), "403 REASON" (X-Hutch-Blocked), or the error.
func httpVia(proxy, target string) string {
	c, err := dialProxy(proxy)
	if err != nil {
		return err.Error()
	}
	defer c.Close()
	fmt.Fprintf(c, "GET http://%s/held HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	return readAnswer(bufio.NewReader(c), nil, func(body io.Reader) string {
		var e echoed
		if err := json.NewDecoder(body).Decode(&e); err != nil {
			return err.Error()
		}
		return "ok " + e.URI
	})
}

// readAnswer reads a response of the proxy to req: "403 REASON" for a
// refusal, ok's word for a 200, else the status or the error.
func readAnswer(br *bufio.Reader, req *http.Request, ok func(io.Reader) string) string {
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusForbidden:
		return "403 " + resp.Header.Get("X-Hutch-Blocked")
	case http.StatusOK:
		return ok(resp.Body)
	}
	return resp.Status
}

// tlsVia opens a CONNECT tunnel to target through the HTTP proxy, speaks
// TLS in it (checking the upstream's certificate against roots) and says
// what came back: "ok BODY", "403 REASON", or the error.
func tlsVia(proxy, target string, roots *x509.CertPool) string {
	c, err := dialProxy(proxy)
	if err != nil {
		return err.Error()
	}
	defer c.Close()
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	return readAnswer(bufio.NewReader(c), &http.Request{Method: http.MethodConnect}, func(io.Reader) string {
		host, _, _ := net.SplitHostPort(target)
		tc := tls.Client(c, &tls.Config{RootCAs: roots, ServerName: host})
		fmt.Fprintf(tc, "GET /secure HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", target)
		resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
		if err != nil {
			return err.Error()
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			return err.Error()
		}
		return "ok " + string(b)
	})
}

// socksVia asks the SOCKS5 proxy for name:port, and on success sends
// "ping" to the echo server there; it says "ok ping" (with the echo
// server's "bye"), "reply 0xNN" for a refusal, or the error.
func socksVia(proxy, name string, port int) string {
	c, err := dialProxy(proxy)
	if err != nil {
		return err.Error()
	}
	defer c.Close()
	c.Write([]byte{socks5Version, 1, socksNoAuth})
	var choice [2]byte
	if _, err := io.ReadFull(c, choice[:]); err != nil {
		return err.Error()
	}
	c.Write(socksDomain(name, port))
	var reply [10]byte // the proxy's replies carry 0.0.0.0:0
	if _, err := io.ReadFull(c, reply[:]); err != nil {
		return err.Error()
	}
	if reply[1] != repSucceeded {
		return fmt.Sprintf("reply %#02x", reply[1])
	}
	io.WriteString(c, "ping")
	c.CloseWrite()
	got, err := io.ReadAll(c)
	if err != nil {
		return err.Error()
	}
	return "ok " + string(got)
}

// tlsUpstream is an HTTPS server for allowed.test (testCA's certificate)
// that counts its connections.
type tlsUpstream struct {
	port  int
	roots *x509.CertPool
	conns atomic.Int32
}

func startTLSUpstream(t *testing.T) *tlsUpstream {
	t.Helper()
	u := &tlsUpstream{}
	pool, cert := testCA(t)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "tls %s", r.URL.Path)
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			u.conns.Add(1)
		}
	}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	u.port, u.roots = portOf(t, srv.Listener.Addr().String()), pool
	return u
}

// unknownPath is one way the sandbox reaches a destination that no rule
// allows, with an upstream that counts its connections.
type unknownPath struct {
	name       string
	host       string
	port       int
	try        func() string // the request; what came back
	ok         string        // what comes back when allowed
	refused    string        // … when refused, the reason apart
	protocol   string        // of the refusal's event
	upstreamed func() int32
}

// unknownPaths are the three ways to an unknown destination: a
// forwarded http:// request and a SOCKS5 stream to other.test (not in
// allowedDomains), and TLS in a CONNECT tunnel to allowed.test on a port
// its rule does not allow.
func unknownPaths(t *testing.T) (Config, func(*testEnv) []unknownPath) {
	up := startHTTPUpstream(t, nil)
	tu := startTLSUpstream(t)
	echo, echoConns := countingEcho(t)
	cfg := testConfig("allowed.test:1")
	return cfg, func(env *testEnv) []unknownPath {
		return []unknownPath{
			{
				name: "http", host: "other.test", port: up.port, protocol: "http",
				try:        func() string { return httpVia(env.httpAddr, fmt.Sprintf("other.test:%d", up.port)) },
				ok:         "ok /held",
				refused:    "403 ",
				upstreamed: up.conns.Load,
			},
			{
				name: "connect-tls", host: "allowed.test", port: tu.port, protocol: "connect",
				try:        func() string { return tlsVia(env.httpAddr, fmt.Sprintf("allowed.test:%d", tu.port), tu.roots) },
				ok:         "ok tls /secure",
				refused:    "403 ",
				upstreamed: tu.conns.Load,
			},
			{
				name: "socks5", host: "other.test", port: echo, protocol: "socks5",
				try:        func() string { return socksVia(env.socksAddr, "Other.Test.", echo) },
				ok:         "ok pingbye",
				refused:    fmt.Sprintf("reply %#02x", repNotAllowed),
				upstreamed: echoConns.Load,
			},
		}
	}
}

func TestUnknownHeldThenAllowed(t *testing.T) {
	cfg, paths := unknownPaths(t)
	env, qs := askingProxy(t, cfg)
	for _, path := range paths(env) {
		t.Run(path.name, func(t *testing.T) {
			q, done := qs.pending(t, path.try, path.host, path.port)
			// Held: the upstream has seen nothing while the question waits.
			if n := path.upstreamed(); n != 0 {
				t.Errorf("the upstream saw %d connections before the answer", n)
			}
			if _, ok := q.ctx.Deadline(); ok {
				t.Error("the question has a deadline of the proxy's: only the asker's own bounds it")
			}
			select {
			case got := <-done:
				t.Fatalf("the request ended before the answer: %s", got)
			default:
			}
			q.answer <- nil
			if got := <-done; got != path.ok {
				t.Errorf("after the approval: %q, want %q", got, path.ok)
			}
			if n := path.upstreamed(); n != 1 {
				t.Errorf("the upstream saw %d connections, want 1", n)
			}
		})
	}
	if b := env.blocked(); len(b) != 0 {
		t.Errorf("refusals recorded: %+v", b)
	}
	qs.none(t)
	env.close()
	if tr := env.p.Traffic(); len(tr) != 3 {
		t.Errorf("Traffic = %+v, want the three approved destinations", tr)
	}
}

func TestUnknownHeldThenRefused(t *testing.T) {
	cfg, paths := unknownPaths(t)
	env, qs := askingProxy(t, cfg)
	for i, path := range paths(env) {
		t.Run(path.name, func(t *testing.T) {
			q, done := qs.pending(t, path.try, path.host, path.port)
			q.answer <- errors.New("the person said no")
			got := <-done
			want := path.refused
			if want == "403 " {
				want += "not approved: the person said no"
			}
			if got != want {
				t.Errorf("after the refusal: %q, want %q", got, want)
			}
			e := env.nthBlocked(i + 1)
			checkBlocked(t, e, path.protocol, path.host, path.port, "not approved: the person said no")
			if !strings.HasPrefix(e.Allow, "--allow-domain "+path.host) || e.AllowField != "network.allowed_domains" {
				t.Errorf("event %+v: want the rule that would allow it", e)
			}
			if n := path.upstreamed(); n != 0 {
				t.Errorf("the upstream saw %d connections", n)
			}
		})
	}
	qs.none(t)
}

func TestUnknownQuestionEndsWithTheProxy(t *testing.T) {
	up := startHTTPUpstream(t, nil)
	env, qs := askingProxy(t, testConfig())
	q, done := qs.pending(t, func() string { return httpVia(env.httpAddr, fmt.Sprintf("other.test:%d", up.port)) }, "other.test", up.port)
	closed := make(chan struct{})
	go func() {
		env.p.Close()
		close(closed)
	}()
	select {
	case <-q.ctx.Done():
	case <-time.After(questionWait):
		t.Fatal("the question's context did not end when the proxy closed")
	}
	select {
	case <-closed:
	case <-time.After(questionWait):
		t.Fatal("Close did not return")
	}
	if got := <-done; strings.HasPrefix(got, "ok") {
		t.Errorf("the request went through: %s", got)
	}
	if n := up.conns.Load(); n != 0 {
		t.Errorf("the upstream saw %d connections", n)
	}
}

func TestUnknownQuestionEndsWhenTheSandboxHangsUp(t *testing.T) {
	echo, conns := countingEcho(t)
	events := make(chan Event, 1)
	env, qs := askingProxy(t, testConfig(), func(p *Proxy) {
		record := p.Record
		p.Record = func(e Event) {
			record(e)
			events <- e
		}
	})
	c := env.dial(env.httpAddr)
	fmt.Fprintf(c, "CONNECT other.test:%d HTTP/1.1\r\n\r\n", echo)
	q := qs.next(t, "other.test", echo)
	c.Close()
	select {
	case <-q.ctx.Done():
	case <-time.After(questionWait):
		t.Fatal("the question's context did not end when the sandbox hung up")
	}
	e := <-events
	checkBlocked(t, e, "connect", "other.test", echo, "not approved: the sandbox closed the connection before an answer")
	if n := conns.Load(); n != 0 {
		t.Errorf("the upstream saw %d connections", n)
	}
}

func TestUnknownNotAsked(t *testing.T) {
	up := startHTTPUpstream(t, nil)
	hp := func(host string) string { return fmt.Sprintf("%s:%d", host, up.port) }
	for _, tt := range []struct {
		name, target, reason string
		cfg                  func(*Config)
	}{
		{"deny rule", hp("denied.test"), "denied by deniedDomains", func(c *Config) { c.DenyDomains = []string{"denied.test"} }},
		{"deny rule on the port", hp("other.test"), "denied by deniedDomains", func(c *Config) { c.DenyDomains = []string{hp("other.test")} }},
		{"address guard: allowed name on loopback", hp("allowed.test"), "resolves to 127.0.0.1 (loopback)", func(c *Config) {
			c.AllowDomains, c.AllowPrivate = []string{hp("allowed.test")}, nil
		}},
		{"address guard: metadata literal", "169.254.169.254:80", "", nil},
		{"address guard: private literal", "10.0.0.5:80", "", nil},
		{"address guard: loopback literal", "127.0.0.2:80", "", nil},
		{"offline", hp("other.test"), OfflineReason, func(c *Config) { c.Offline = true }},
		{"invalid name", "bad_name!.test:80", "invalid host name", nil},
		{"failed lookup of an allowed name", hp("nowhere.test"), "lookup failed", func(c *Config) { c.AllowDomains = []string{hp("nowhere.test")} }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig()
			if tt.cfg != nil {
				tt.cfg(&cfg)
			}
			env, qs := askingProxy(t, cfg)
			got := httpVia(env.httpAddr, tt.target)
			if !strings.HasPrefix(got, "403 "+tt.reason) {
				t.Errorf("answer %q, want 403 %s…", got, tt.reason)
			}
			qs.none(t)
			if n := up.conns.Load(); n != 0 {
				t.Errorf("the upstream saw %d connections", n)
			}
		})
	}
}

func TestUnknownApprovedStillGuarded(t *testing.T) {
	echo, conns := countingEcho(t)
	var lookups []string
	var mu sync.Mutex
	cfg := testConfig()
	cfg.Hosts["intranet.test"] = []netip.Addr{netip.MustParseAddr("10.0.0.5")}
	cfg.Hosts["loop.test"] = []netip.Addr{netip.MustParseAddr("127.0.0.2")}
	cfg.Hosts["meta.test"] = []netip.Addr{netip.MustParseAddr("169.254.169.254")}
	// Allowed names may resolve to 10/8; an approved one may not.
	cfg.PrivateNames = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	cfg.Lookup = func(host string) ([]netip.Addr, error) {
		mu.Lock()
		lookups = append(lookups, host)
		mu.Unlock()
		return failLookup(host)
	}
	env, qs := askingProxy(t, cfg)
	for _, tt := range []struct{ host, reason string }{
		{"intranet.test", "approved, but resolves to 10.0.0.5 (private)"},
		{"loop.test", "approved, but resolves to 127.0.0.2 (loopback)"},
		{"meta.test", "approved, but resolves to 169.254.169.254 (metadata)"},
		{"fresh.test", "approved, but lookup failed: "},
	} {
		t.Run(tt.host, func(t *testing.T) {
			q, done := qs.pending(t, func() string { return socksVia(env.socksAddr, tt.host, echo) }, tt.host, echo)
			mu.Lock()
			if len(lookups) != 0 {
				t.Errorf("looked up %v before the approval", lookups)
			}
			mu.Unlock()
			q.answer <- nil
			if got, want := <-done, fmt.Sprintf("reply %#02x", repNotAllowed); got != want {
				t.Errorf("answer %q, want %q", got, want)
			}
			b := env.blocked()
			e := b[len(b)-1]
			if e.Host != tt.host || !strings.HasPrefix(e.Reason, tt.reason) {
				t.Errorf("event %+v, want %s refused: %s", e, tt.host, tt.reason)
			}
		})
	}
	if n := conns.Load(); n != 0 {
		t.Errorf("the upstream saw %d connections", n)
	}
}

func TestUnknownHoldsNoLock(t *testing.T) {
	up := startHTTPUpstream(t, nil)
	echo, _ := countingEcho(t)
	cfg := testConfig(fmt.Sprintf("allowed.test:%d", up.port))
	env, qs := askingProxy(t, cfg)

	// Two questions about the same host wait at once.
	tunnels := make(chan string, 2)
	for range 2 {
		go func() { tunnels <- socksVia(env.socksAddr, "other.test", echo) }()
	}
	q1 := qs.next(t, "other.test", echo)
	q2 := qs.next(t, "other.test", echo)

	// Meanwhile the proxy serves, and its rules can change.
	if got := httpVia(env.httpAddr, fmt.Sprintf("allowed.test:%d", up.port)); got != "ok /held" {
		t.Errorf("an allowed request while questions wait: %q", got)
	}
	rules, err := NewRules(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.p.SetRules(rules); err != nil {
		t.Fatal(err)
	}
	_ = env.p.Traffic()

	q1.answer <- nil
	q2.answer <- errors.New("no")
	got := []string{<-tunnels, <-tunnels}
	if !(got[0] == "ok pingbye" || got[1] == "ok pingbye") || !(strings.HasPrefix(got[0], "reply") || strings.HasPrefix(got[1], "reply")) {
		t.Errorf("the two tunnels: %q, want one through and one refused", got)
	}
}

func TestUnknownHeldCountAgainstMaxConns(t *testing.T) {
	echo, _ := countingEcho(t)
	env, qs := askingProxy(t, testConfig(), func(p *Proxy) { p.MaxConns = 2 })
	tunnels := make(chan string, 2)
	for range 2 {
		go func() { tunnels <- socksVia(env.socksAddr, "other.test", echo) }()
	}
	q1 := qs.next(t, "other.test", echo)
	q2 := qs.next(t, "other.test", echo)
	// Both held connections count: the next one is closed at once.
	extra := env.dial(env.socksAddr)
	if _, err := extra.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("a connection past MaxConns: %v, want EOF", err)
	}
	q1.answer <- errors.New("no")
	q2.answer <- errors.New("no")
	<-tunnels
	<-tunnels
}

func TestUnknownApprovedTunnelAndSetRules(t *testing.T) {
	echo, _ := countingEcho(t)
	cfg := testConfig()
	env, qs := askingProxy(t, cfg)
	c := env.dial(env.httpAddr)
	fmt.Fprintf(c, "CONNECT other.test:%d HTTP/1.1\r\n\r\n", echo)
	qs.next(t, "other.test", echo).answer <- nil
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT: %v, %v", resp, err)
	}

	same, err := NewRules(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := env.p.SetRules(same); err != nil || n != 0 {
		t.Errorf("SetRules with the same rules closed %d, %v; want 0: the approval stands", n, err)
	}
	io.WriteString(c, "still")
	buf := make([]byte, 5)
	if _, err := io.ReadFull(br, buf); err != nil || string(buf) != "still" {
		t.Errorf("the approved tunnel after SetRules: %q, %v", buf, err)
	}

	deny := cfg
	deny.DenyDomains = []string{"other.test:*"}
	denied, err := NewRules(deny)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := env.p.SetRules(denied); err != nil || n != 1 {
		t.Errorf("SetRules denying it closed %d, %v; want 1", n, err)
	}
	if _, err := io.Copy(io.Discard, br); err != nil {
		t.Errorf("the cut tunnel: %v, want EOF", err)
	}
}

func TestUnknownThroughGate(t *testing.T) {
	up := startHTTPUpstream(t, nil)
	echo, echoConns := countingEcho(t)
	var (
		mu      sync.Mutex
		asked   []approve.Request
		records []approve.Record
	)
	gate := &approve.Gate{
		OnUnknown: approve.Ask,
		Asker: approve.AskerFunc(func(_ context.Context, r approve.Request) approve.Reply {
			mu.Lock()
			asked = append(asked, r)
			mu.Unlock()
			if r.Subject == fmt.Sprintf("other.test:%d", up.port) {
				return approve.Reply{Answer: approve.AnswerRun, By: "test"}
			}
			return approve.Reply{Answer: approve.AnswerDeny, By: "test"}
		}),
		Record: func(r approve.Record) {
			mu.Lock()
			records = append(records, r)
			mu.Unlock()
		},
		Sandbox: "sb-test",
	}
	env := startProxy(t, testConfig(), func(p *Proxy) { p.Unknown = gate.Host })
	target := fmt.Sprintf("other.test:%d", up.port)

	// Asked once, answered "for this run": the next connection is not asked.
	for i := range 2 {
		if got := httpVia(env.httpAddr, target); got != "ok /held" {
			t.Fatalf("request %d: %q", i, got)
		}
	}
	if up.conns.Load() != 2 {
		t.Errorf("the upstream saw %d connections, want 2", up.conns.Load())
	}
	// Another port of the same host is another question, refused.
	if got, want := socksVia(env.socksAddr, "other.test", echo), fmt.Sprintf("reply %#02x", repNotAllowed); got != want {
		t.Errorf("SOCKS5 to a refused port: %q, want %q", got, want)
	}
	if echoConns.Load() != 0 {
		t.Error("the refused destination was reached")
	}
	e := env.onlyBlocked()
	checkBlocked(t, e, "socks5", "other.test", echo, "")
	if !strings.HasPrefix(e.Reason, fmt.Sprintf("network not approved: other.test:%d", echo)) {
		t.Errorf("reason %q, want the gate's refusal", e.Reason)
	}

	mu.Lock()
	defer mu.Unlock()
	if len(asked) != 2 || asked[0].Kind != approve.KindNetwork || asked[0].Subject != target || asked[0].Sandbox != "sb-test" || asked[0].Rule != "network.on_unknown: ask" {
		t.Errorf("asked %+v, want %s then the SOCKS5 port", asked, target)
	}
	want := []struct{ decision, by string }{{"allow", "test"}, {"allow", "rule"}, {"deny", "test"}}
	if len(records) != len(want) {
		t.Fatalf("records %+v, want %d", records, len(want))
	}
	for i, w := range want {
		if r := records[i]; r.Kind != approve.KindNetwork || r.Decision != w.decision || r.By != w.by {
			t.Errorf("record %d = %+v, want %s by %s", i, r, w.decision, w.by)
		}
	}
}

func TestUnknownGateWithoutAsk(t *testing.T) {
	up := startHTTPUpstream(t, nil)
	var asks atomic.Int32
	gate := &approve.Gate{OnUnknown: approve.Deny, Asker: approve.AskerFunc(func(context.Context, approve.Request) approve.Reply {
		asks.Add(1)
		return approve.Reply{Answer: approve.AnswerOnce}
	})}
	env := startProxy(t, testConfig(), func(p *Proxy) { p.Unknown = gate.Host })
	if got := httpVia(env.httpAddr, fmt.Sprintf("other.test:%d", up.port)); !strings.HasPrefix(got, "403 network not approved") {
		t.Errorf("answer %q, want a refusal", got)
	}
	if asks.Load() != 0 || up.conns.Load() != 0 {
		t.Errorf("asked %d times, upstream saw %d connections; want neither", asks.Load(), up.conns.Load())
	}
}

func TestResolveUnknownAndApproved(t *testing.T) {
	public := netip.MustParseAddr("93.184.216.34")
	cfg := testConfig("allowed.test", "port.test:8080")
	cfg.Hosts["public.test"] = []netip.Addr{public}
	cfg.Hosts["port.test"] = []netip.Addr{public}
	cfg.Hosts["intranet.test"] = []netip.Addr{netip.MustParseAddr("10.1.2.3")}
	cfg.DenyDomains = []string{"denied.test"}
	cfg.PrivateNames = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	r, err := NewRules(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		host    string
		port    int
		unknown bool   // Resolve's Verdict.Unknown
		reason  string // ResolveApproved's reason, "" when allowed
		rule    string // ResolveApproved's rule
		byHand  bool   // ResolveApproved's Verdict.Approved
	}{
		{"public.test", 443, true, "", "", true},
		{"PUBLIC.test.", 443, true, "", "", true},
		{"port.test", 22, true, "", "", true},
		{"93.184.216.34", 8443, true, "", "", true},
		{"127.0.0.1", 9, true, "", "", true}, // AllowPrivate opens it
		{"allowed.test", 443, false, "", "allowed.test", false},
		{"denied.test", 443, false, "denied by deniedDomains", "denied.test", false},
		{"intranet.test", 443, true, "approved, but resolves to 10.1.2.3 (private)", "", true},
		{"10.1.2.3", 443, false, "approved, but 10.1.2.3 is private", "", true},
		{"169.254.169.254", 80, false, "approved, but 169.254.169.254 is metadata", "", true},
		{"bad host", 443, false, "invalid host name", "", false},
	} {
		v := r.Resolve(context.Background(), tt.host, tt.port)
		if v.Unknown != tt.unknown || (v.Unknown && v.Allowed) {
			t.Errorf("Resolve(%s, %d) = %+v, want Unknown %v", tt.host, tt.port, v, tt.unknown)
		}
		a := r.ResolveApproved(context.Background(), tt.host, tt.port)
		if a.Allowed != (tt.reason == "") || a.Reason != tt.reason || a.Rule != tt.rule || a.Approved != tt.byHand || a.Unknown {
			t.Errorf("ResolveApproved(%s, %d) = %+v, want reason %q, rule %q, approved %v", tt.host, tt.port, a, tt.reason, tt.rule, tt.byHand)
		}
	}
	off := testConfig()
	off.Offline = true
	ro, err := NewRules(off)
	if err != nil {
		t.Fatal(err)
	}
	if v := ro.Resolve(context.Background(), "other.test", 443); v.Unknown {
		t.Errorf("offline: %+v, want no question", v)
	}
	if v := ro.ResolveApproved(context.Background(), "other.test", 443); v.Allowed {
		t.Errorf("offline, approved: %+v, want refused", v)
	}
}

// TestDeadlineError: the watch of a held connection ends at its deadline
// whatever kind of connection it is: the os package's error, and a yamux
// stream's (the microVM tier's relayed connections), whose refusal was
// reported as the sandbox hanging up; an end of the connection is not a
// deadline.
func TestDeadlineError(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{os.ErrDeadlineExceeded, true},
		{fmt.Errorf("read: %w", os.ErrDeadlineExceeded), true},
		{yamux.ErrTimeout, true},
		{io.EOF, false},
		{yamux.ErrStreamClosed, false},
	} {
		if got := deadlineError(c.err); got != c.want {
			t.Errorf("deadlineError(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
