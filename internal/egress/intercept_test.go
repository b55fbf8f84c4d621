package egress

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/secrets"
	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// The tests of secrets (S3) run real TLS on loopback: upstream HTTPS
// servers with certificates of a test CA, the proxy intercepting with a
// sandbox CA, and clients trusting one or the other.

// testPKI is a CA for upstream servers.
type testPKI struct {
	pool *x509.CertPool
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// newTestPKI makes a CA for upstream servers.
func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "hutch test upstream CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testPKI{pool: pool, cert: cert, key: key}
}

// issue makes a server certificate for names.
func (k *testPKI) issue(t *testing.T, names ...string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: names[0]},
		DNSNames:     names,
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, k.cert, &key.PublicKey, k.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// seen is what an upstream saw of one whole request.
type seen struct {
	echoed
	ContentLength int64
	Query         url.Values
}

// recUpstream is an upstream server that records the requests it read
// whole and echoes them: the request as JSON, its Authorization in the
// response header X-Echo-Auth and its query in X-Echo-Query.
type recUpstream struct {
	*httptest.Server
	port  int
	conns atomic.Int32
	mu    sync.Mutex
	got   []seen
}

// startRecUpstream starts a recording upstream: over TLS with a
// certificate of pki for the test names (HTTP/2 too when h2), or in
// clear text when pki is nil. Its paths:
//
//	/ws     a WebSocket-style upgrade when Authorization is "Bearer real"
//	        (real as given), then an echo of the bytes
//	/early  answers 200 and flushes before it reads the body, then
//	        writes the body's length
//	anything else: the echo
func startRecUpstream(t *testing.T, pki *testPKI, h2 bool, real string) *recUpstream {
	t.Helper()
	u := &recUpstream{}
	u.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/ws":
			if r.Header.Get("Authorization") != "Bearer "+real || !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
			conn, brw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				return
			}
			defer conn.Close()
			io.WriteString(conn, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nX-Echo-Auth: "+r.Header.Get("Authorization")+"\r\n\r\n")
			io.Copy(conn, brw.Reader)
			return
		case "/early":
			rc := http.NewResponseController(w)
			rc.EnableFullDuplex()
			w.WriteHeader(http.StatusOK)
			rc.Flush()
			n, err := io.Copy(io.Discard, r.Body)
			if err != nil {
				return
			}
			fmt.Fprintf(w, "read %d bytes\n", n)
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return // an aborted request is not recorded
		}
		s := seen{
			echoed:        echoed{Method: r.Method, URI: r.RequestURI, Host: r.Host, Proto: r.Proto, Header: r.Header, Body: string(body)},
			ContentLength: r.ContentLength,
			Query:         r.URL.Query(),
		}
		u.mu.Lock()
		u.got = append(u.got, s)
		u.mu.Unlock()
		w.Header().Set("X-Echo-Auth", r.Header.Get("Authorization"))
		w.Header().Set("X-Echo-Query", r.URL.RawQuery)
		json.NewEncoder(w).Encode(s)
	}))
	u.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			u.conns.Add(1)
		}
	}
	u.Config.ErrorLog = log.New(io.Discard, "", 0) // refused handshakes, aborted requests
	if pki == nil {
		u.Start()
	} else {
		u.TLS = &tls.Config{Certificates: []tls.Certificate{pki.issue(t, "bound.test", "second.test", "other.test", "plain.test", "loose.test")}}
		u.EnableHTTP2 = h2
		u.StartTLS()
	}
	t.Cleanup(u.Close)
	u.port = portOf(t, u.Listener.Addr().String())
	return u
}

// requests returns the requests the upstream read whole.
func (u *recUpstream) requests() []seen {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]seen(nil), u.got...)
}

// last returns the last request the upstream read whole.
func (u *recUpstream) last(t *testing.T) seen {
	t.Helper()
	got := u.requests()
	if len(got) == 0 {
		t.Fatal("the upstream got no request")
	}
	return got[len(got)-1]
}

// secretEnv is a running proxy with secrets.
type secretEnv struct {
	*testEnv
	ca      *secrets.CA
	caPool  *x509.CertPool   // trusts ca only
	logs    *testutil.Buffer // everything the proxy logged
	report  *testutil.Buffer // every event as JSON
	secrets []*secrets.Secret
}

// newSecret makes a secret with a placeholder for real.
func newSecret(t *testing.T, name, real string, hosts ...string) *secrets.Secret {
	t.Helper()
	ph, err := secrets.NewPlaceholder("hutch_", len(real))
	if err != nil {
		t.Fatal(err)
	}
	return &secrets.Secret{Name: name, Hosts: hosts, Value: secrets.NewValue([]byte(real)), Placeholder: ph}
}

// secretConfig is testConfig with the secrets, more names pinned, and
// the allowed destinations given.
func secretConfig(list []*secrets.Secret, allow ...string) Config {
	cfg := testConfig(allow...)
	for _, name := range []string{"bound.test", "second.test", "plain.test", "loose.test"} {
		cfg.Hosts[name] = []netip.Addr{loopback4}
	}
	cfg.Secrets = list
	return cfg
}

// startSecretProxy serves a proxy with cfg's rules, a sandbox CA, and
// roots for the upstreams. Its logs and events are kept; when the test
// ends, after the proxy closed, none of them may hold a real value.
func startSecretProxy(t *testing.T, cfg Config, roots *x509.CertPool, opts ...func(*Proxy)) *secretEnv {
	t.Helper()
	rules, err := NewRules(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := secrets.NewCA("test", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	env := &secretEnv{ca: ca, caPool: x509.NewCertPool(), logs: &testutil.Buffer{}, report: &testutil.Buffer{}, secrets: cfg.Secrets}
	env.caPool.AddCert(ca.Certificate())
	env.testEnv = &testEnv{t: t, rec: NewRecorder(env.report), accepted: new(atomic.Int32), serveErrs: make(chan error, 2)}
	env.p = &Proxy{
		Rules:         rules,
		Sandbox:       "sb-test",
		Record:        env.rec.Record,
		Log:           slog.New(slog.NewTextHandler(io.MultiWriter(env.logs, t.Output()), &slog.HandlerOptions{Level: slog.LevelDebug})),
		DialTimeout:   5 * time.Second,
		CA:            ca,
		UpstreamRoots: roots,
	}
	for _, o := range opts {
		o(env.p)
	}
	// Cleanups run last first: the check runs after the proxy closed.
	t.Cleanup(env.checkNoLeak)
	env.serve()
	return env
}

// checkNoLeak fails the test if a log line, an event or the traffic
// holds a secret's real value, as it is or encoded.
func (env *secretEnv) checkNoLeak() {
	t := env.t
	t.Helper()
	traffic, err := json.Marshal(env.p.Traffic())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range env.secrets {
		for _, form := range secrets.RedactionPairs(s.Value.Bytes(), []byte(s.Placeholder)) {
			for what, text := range map[string]string{"log": env.logs.String(), "report": env.report.String(), "traffic": string(traffic)} {
				if strings.Contains(text, string(form[0])) {
					t.Errorf("the %s holds the real value of %s (as %q)", what, s.Name, form[0])
				}
			}
		}
	}
}

// waitBlocked waits for the n-th refusal, which the proxy may record
// after the client saw its effect, and returns it; it fails unless there
// are exactly n.
func (env *secretEnv) waitBlocked(n int) Event {
	env.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for len(env.blocked()) < n && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	return env.nthBlocked(n)
}

// client returns an HTTP client through the proxy's HTTP listener that
// trusts roots.
func (env *secretEnv) client(roots *x509.CertPool) *http.Client {
	return env.clientVia(&url.URL{Scheme: "http", Host: env.httpAddr}, roots)
}

// clientVia returns an HTTP client through proxy that trusts roots.
func (env *secretEnv) clientVia(proxy *url.URL, roots *x509.CertPool) *http.Client {
	tr := &http.Transport{
		Proxy:              http.ProxyURL(proxy),
		TLSClientConfig:    &tls.Config{RootCAs: roots},
		DisableCompression: true,
	}
	env.t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 20 * time.Second}
}

// do sends req through client and returns the response with its body.
func do(t *testing.T, client *http.Client, req *http.Request) (*http.Response, string) {
	t.Helper()
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the body: %v", req.Method, req.URL, err)
	}
	return resp, string(b)
}

// mustOK fails unless resp is 200.
func mustOK(t *testing.T, resp *http.Response, body string) {
	t.Helper()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s %s: %s (%s): %s", resp.Request.Method, resp.Request.URL, resp.Status, resp.Header.Get("X-Hutch-Blocked"), body)
	}
}

// checkRefused checks a refusal for a secret: 403, the reason in
// X-Hutch-Blocked, and the event with the secret's name.
func checkRefused(t *testing.T, resp *http.Response, e Event, proto, host string, port int, secret, reason string) {
	t.Helper()
	if resp.StatusCode != http.StatusForbidden || resp.Header.Get("X-Hutch-Blocked") != reason {
		t.Errorf("answer %s, X-Hutch-Blocked %q; want 403 and %q", resp.Status, resp.Header.Get("X-Hutch-Blocked"), reason)
	}
	checkBlocked(t, e, proto, host, port, reason)
	if e.Secret != secret {
		t.Errorf("event secret %q, want %q", e.Secret, secret)
	}
}

const (
	realToken = "REALtokenVALUE0123456789abcdefghijkl"
	realShort = "REALshort1"
	realOther = "REALotherVALUE9876543210zyxwvutsrqpo"
)

func TestInterceptHeaders(t *testing.T) {
	pki := newTestPKI(t)
	up := startRecUpstream(t, pki, false, realToken)
	tok := newSecret(t, "GITHUB_TOKEN", realToken, fmt.Sprintf("bound.test:%d", up.port))
	env := startSecretProxy(t, secretConfig([]*secrets.Secret{tok}), pki.pool)
	client := env.client(env.caPool)
	ph := tok.Placeholder
	target := fmt.Sprintf("https://bound.test:%d", up.port)

	req, _ := http.NewRequest("GET", target+"/h?q="+ph, nil)
	req.Header.Set("Authorization", "Bearer "+ph)
	req.Header.Add("X-Multi", "a "+ph+" b")
	req.Header.Add("X-Multi", "none")
	req.Header.Set("Accept-Encoding", "gzip")
	req.Header.Set("Proxy-Authorization", "Basic "+ph)
	resp, body := do(t, client, req)
	mustOK(t, resp, body)
	got := up.last(t)
	if a := got.Header.Get("Authorization"); a != "Bearer "+realToken {
		t.Errorf("the upstream got Authorization %q, want the real value", a)
	}
	if m := got.Header.Values("X-Multi"); len(m) != 2 || m[0] != "a "+realToken+" b" || m[1] != "none" {
		t.Errorf("the upstream got X-Multi %q", m)
	}
	if ae, pa := got.Header.Get("Accept-Encoding"), got.Header.Get("Proxy-Authorization"); ae != "" || pa != "" {
		t.Errorf("the upstream got Accept-Encoding %q and Proxy-Authorization %q, want neither", ae, pa)
	}
	if q := got.Query.Get("q"); q != ph {
		t.Errorf("the upstream got query q=%q, want the placeholder (InQuery is off)", q)
	}
	// The echo of the real value comes back as the placeholder.
	if a := resp.Header.Get("X-Echo-Auth"); a != "Bearer "+ph {
		t.Errorf("the client got X-Echo-Auth %q, want the placeholder", a)
	}
	if strings.Contains(body, realToken) || !strings.Contains(body, "Bearer "+ph) {
		t.Errorf("the client got body %s, want the placeholder, not the real value", body)
	}
	if resp.TLS == nil || resp.TLS.PeerCertificates[0].Issuer.CommonName != env.ca.Certificate().Subject.CommonName {
		t.Errorf("the client's TLS was not the sandbox CA's: %+v", resp.TLS)
	}

	// Basic authorization, git style: the password, and the user.
	for _, userPass := range [][2]string{{"x-access-token", ph}, {ph, "x-oauth-basic"}} {
		req, _ = http.NewRequest("GET", target+"/git/info/refs", nil)
		req.SetBasicAuth(userPass[0], userPass[1])
		resp, body = do(t, client, req)
		mustOK(t, resp, body)
		got := up.last(t)
		r := &http.Request{Header: got.Header}
		user, pass, ok := r.BasicAuth()
		wantUser, wantPass := strings.ReplaceAll(userPass[0], ph, realToken), strings.ReplaceAll(userPass[1], ph, realToken)
		if !ok || user != wantUser || pass != wantPass {
			t.Errorf("the upstream got Basic %q:%q, want the real value in place of the placeholder", user, pass)
		}
		if strings.Contains(body, realToken) {
			t.Error("the response body holds the real value")
		}
	}
	if n := len(env.blocked()); n != 0 {
		t.Errorf("refusals recorded: %+v", env.blocked())
	}
	if n := env.accepted.Load(); n != 1 {
		t.Errorf("the client opened %d connections to the proxy, want 1 (keep-alive in the tunnel)", n)
	}
	env.close()
	tr := env.p.Traffic()
	if len(tr) != 1 || tr[0].Host != "bound.test" || tr[0].Port != up.port || tr[0].Protocol != "connect" ||
		tr[0].Connections != 1 || tr[0].BytesOut < 500 || tr[0].BytesIn < 1000 {
		t.Errorf("Traffic = %+v, want one connection to bound.test with its bytes", tr)
	}
}

func TestInterceptQueryAndBody(t *testing.T) {
	pki := newTestPKI(t)
	up := startRecUpstream(t, pki, false, realToken)
	host := fmt.Sprintf("bound.test:%d", up.port)
	tok := newSecret(t, "TOKEN", realToken, host)
	tok.InQuery, tok.InBody = true, true
	short := newSecret(t, "SHORT", realShort, host)
	short.InBody = true
	hdrOnly := newSecret(t, "HEADER_ONLY", realOther, host)
	// A placeholder that a query holds escaped, and a value that needs
	// escaping there.
	plus := &secrets.Secret{Name: "PLUS", Hosts: []string{host}, Value: secrets.NewValue([]byte("real&plus=1")),
		Placeholder: "hutch+q/" + strings.Repeat("Q", 24), InQuery: true}
	if len(short.Placeholder) == len(realShort) || len(tok.Placeholder) != len(realToken) {
		t.Fatalf("placeholder lengths %d and %d, want SHORT's to differ from its value's, TOKEN's not", len(short.Placeholder), len(tok.Placeholder))
	}
	env := startSecretProxy(t, secretConfig([]*secrets.Secret{tok, short, hdrOnly, plus}), pki.pool)
	client := env.client(env.caPool)
	target := "https://" + host

	// The query: only for TOKEN and PLUS, whose placeholder is sent
	// escaped and whose value goes escaped.
	req, _ := http.NewRequest("GET", fmt.Sprintf("%s/q?a=%s&b=%s&c=%s&d=%s", target, tok.Placeholder,
		url.QueryEscape(plus.Placeholder), short.Placeholder, hdrOnly.Placeholder), nil)
	resp, body := do(t, client, req)
	mustOK(t, resp, body)
	got := up.last(t)
	if a, b := got.Query.Get("a"), got.Query.Get("b"); a != realToken || b != "real&plus=1" || got.Query.Has("plus") {
		t.Errorf("query a=%q b=%q, want TOKEN's and PLUS's real values", a, b)
	}
	if c, d := got.Query.Get("c"), got.Query.Get("d"); c != short.Placeholder || d != hdrOnly.Placeholder {
		t.Errorf("query c=%q d=%q, want the placeholders (InQuery is off)", c, d)
	}
	if q := resp.Header.Get("X-Echo-Query"); strings.Contains(q, realToken) || !strings.Contains(q, tok.Placeholder) {
		t.Errorf("the echoed query %q holds the real value", q)
	}
	if strings.Contains(body, realToken) {
		t.Error("the response body holds the real value")
	}

	// The body: TOKEN's placeholder keeps its length, SHORT's does not;
	// HEADER_ONLY's stays.
	plain := fmt.Sprintf("token=%s&short=%s&other=%s", tok.Placeholder, short.Placeholder, hdrOnly.Placeholder)
	want := fmt.Sprintf("token=%s&short=%s&other=%s", realToken, realShort, hdrOnly.Placeholder)
	for _, chunked := range []bool{false, true} {
		var rd io.Reader = strings.NewReader(plain)
		if chunked {
			rd = io.MultiReader(strings.NewReader(plain[:20]), strings.NewReader(plain[20:]))
		}
		req, _ = http.NewRequest("POST", target+"/body", rd)
		req.Header.Set("Expect", "100-continue")
		if chunked {
			req.ContentLength = -1
		}
		resp, body = do(t, client, req)
		mustOK(t, resp, body)
		got = up.last(t)
		if got.Body != want {
			t.Errorf("chunked %v: the upstream got body %q, want %q", chunked, got.Body, want)
		}
		if !chunked && got.ContentLength != int64(len(want)) {
			t.Errorf("the upstream got Content-Length %d, want %d", got.ContentLength, len(want))
		}
		var echo seen
		if err := json.Unmarshal([]byte(body), &echo); err != nil {
			t.Fatalf("the echo %q: %v", body, err)
		}
		// SHORT's real value is shorter than its placeholder: the
		// response's length changes, and it is sent in chunks.
		if echo.Body != plain || resp.ContentLength != -1 {
			t.Errorf("the client got the body back as %q (Content-Length %d), want %q in chunks", echo.Body, resp.ContentLength, plain)
		}
	}
	if n := len(env.blocked()); n != 0 {
		t.Errorf("refusals recorded: %+v", env.blocked())
	}
}

func TestInterceptBodyTooLarge(t *testing.T) {
	pki := newTestPKI(t)
	up := startRecUpstream(t, pki, false, realShort)
	host := fmt.Sprintf("bound.test:%d", up.port)
	short := newSecret(t, "SHORT", realShort, host)
	short.InBody = true
	env := startSecretProxy(t, secretConfig([]*secrets.Secret{short}), pki.pool)
	c, _ := connectTunnel(t, env.testEnv, host, "")
	tc := tls.Client(c, &tls.Config{RootCAs: env.caPool, ServerName: "bound.test"})
	fmt.Fprintf(tc, "POST /big HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n\r\nstart", host, 17<<20)
	resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	e := env.onlyBlocked()
	checkBlocked(t, e, "https", "bound.test", up.port, "")
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(e.Reason, "16 MiB") {
		t.Errorf("answer %s, event %+v; want 413 and a reason naming the limit", resp.Status, e)
	}
	if n := len(up.requests()); n != 0 {
		t.Errorf("the upstream got %d requests, want none", n)
	}
}

func TestInterceptHTTP2Upstream(t *testing.T) {
	pki := newTestPKI(t)
	up := startRecUpstream(t, pki, true, realToken)
	tok := newSecret(t, "TOKEN", realToken, fmt.Sprintf("bound.test:%d", up.port))
	tok.InBody = true
	env := startSecretProxy(t, secretConfig([]*secrets.Secret{tok}), pki.pool)
	client := env.client(env.caPool)
	for i := range 3 {
		req, _ := http.NewRequest("POST", fmt.Sprintf("https://bound.test:%d/h2/%d", up.port, i), strings.NewReader("body "+tok.Placeholder))
		req.Header.Set("Authorization", "token "+tok.Placeholder)
		resp, body := do(t, client, req)
		mustOK(t, resp, body)
		got := up.last(t)
		if got.Proto != "HTTP/2.0" || got.Header.Get("Authorization") != "token "+realToken || got.Body != "body "+realToken {
			t.Errorf("the upstream got %s with the real value %v in the header and %v in the body; want HTTP/2.0 and both",
				got.Proto, got.Header.Get("Authorization") == "token "+realToken, got.Body == "body "+realToken)
		}
		if resp.Header.Get("X-Echo-Auth") != "token "+tok.Placeholder || strings.Contains(body, realToken) {
			t.Errorf("the client got X-Echo-Auth %q and a body with the real value: %v", resp.Header.Get("X-Echo-Auth"), strings.Contains(body, realToken))
		}
	}
	if n := up.conns.Load(); n != 1 {
		t.Errorf("3 requests took %d upstream connections, want 1", n)
	}
}

func TestInterceptOnlyBoundDestinations(t *testing.T) {
	pki := newTestPKI(t)
	bound := startRecUpstream(t, pki, false, realToken)
	other := startRecUpstream(t, pki, false, realToken)
	tok := newSecret(t, "TOKEN", realToken, fmt.Sprintf("bound.test:%d", bound.port))
	env := startSecretProxy(t, secretConfig([]*secrets.Secret{tok}, fmt.Sprintf("other.test:%d", other.port)), pki.pool)

	// A destination without secrets is tunneled: the client sees the
	// upstream's own certificate.
	otherURL := fmt.Sprintf("https://other.test:%d/", other.port)
	resp, body := do(t, env.client(pki.pool), mustRequest(t, "GET", otherURL))
	mustOK(t, resp, body)
	if resp.TLS == nil || resp.TLS.PeerCertificates[0].Issuer.CommonName != "hutch test upstream CA" {
		t.Errorf("the client of other.test saw %+v, want the upstream's certificate", resp.TLS)
	}
	_, err := env.client(env.caPool).Get(otherURL)
	var unknown x509.UnknownAuthorityError
	if !errors.As(err, &unknown) {
		t.Errorf("other.test trusting only the sandbox CA: %v, want an unknown authority", err)
	}

	// The bound destination is intercepted: trusting only the upstream's
	// CA fails, trusting the sandbox CA works.
	boundURL := fmt.Sprintf("https://bound.test:%d/", bound.port)
	if _, err := env.client(pki.pool).Get(boundURL); !errors.As(err, &unknown) {
		t.Errorf("bound.test trusting only the upstream CA: %v, want an unknown authority", err)
	}
	resp, body = do(t, env.client(env.caPool), mustRequest(t, "GET", boundURL))
	mustOK(t, resp, body)

	// The proxy checks the upstream's certificate: roots that do not
	// hold the upstream's CA make the request fail.
	env2 := startSecretProxy(t, secretConfig([]*secrets.Secret{tok}), x509.NewCertPool())
	resp, body = do(t, env2.client(env2.caPool), mustRequest(t, "GET", boundURL))
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, "certificate") {
		t.Errorf("an upstream of an unknown CA: %s %q, want 502 about its certificate", resp.Status, body)
	}
}

// mustRequest makes a request without a body.
func mustRequest(t *testing.T, method, u string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

func TestSecretNotBound(t *testing.T) {
	pki := newTestPKI(t)
	boundA := startRecUpstream(t, pki, false, realToken)
	boundB := startRecUpstream(t, pki, false, realOther)
	plainUp := startRecUpstream(t, nil, false, "")
	a := newSecret(t, "TOKEN_A", realToken, fmt.Sprintf("bound.test:%d", boundA.port))
	b := newSecret(t, "TOKEN_B", realOther, fmt.Sprintf("second.test:%d", boundB.port))
	env := startSecretProxy(t, secretConfig([]*secrets.Secret{a, b}, fmt.Sprintf("other.test:%d", plainUp.port)), pki.pool)
	client := env.client(env.caPool)
	n := 0
	refused := func(t *testing.T, req *http.Request, proto, host string, port int, s *secrets.Secret) {
		t.Helper()
		resp, _ := do(t, client, req)
		n++
		checkRefused(t, resp, env.nthBlocked(n), proto, host, port, s.Name, fmt.Sprintf("secret %s is not bound to %s:%d", s.Name, host, port))
	}

	// Plain HTTP to another allowed host, in a header, the URL (also
	// percent-encoded) and the decoded Basic credentials.
	otherURL := fmt.Sprintf("http://other.test:%d", plainUp.port)
	req := mustRequest(t, "GET", otherURL+"/")
	req.Header.Set("X-Token", a.Placeholder)
	refused(t, req, "http", "other.test", plainUp.port, a)
	refused(t, mustRequest(t, "GET", otherURL+"/p/"+b.Placeholder), "http", "other.test", plainUp.port, b)
	refused(t, mustRequest(t, "GET", otherURL+"/?x="+strings.Replace(a.Placeholder, "_", "%5F", 1)), "http", "other.test", plainUp.port, a)
	req = mustRequest(t, "GET", otherURL+"/")
	req.SetBasicAuth("x", a.Placeholder)
	refused(t, req, "http", "other.test", plainUp.port, a)
	// In the body, found while it streams.
	req, _ = http.NewRequest("POST", otherURL+"/", io.MultiReader(strings.NewReader(strings.Repeat("x", 100<<10)+a.Placeholder[:5]), strings.NewReader(a.Placeholder[5:]+"tail")))
	refused(t, req, "http", "other.test", plainUp.port, a)
	if c, r := plainUp.conns.Load(), len(plainUp.requests()); r != 0 {
		t.Errorf("the plain upstream got %d requests on %d connections, want none", r, c)
	}

	// Secret A's placeholder to secret B's host, intercepted.
	bURL := fmt.Sprintf("https://second.test:%d", boundB.port)
	req = mustRequest(t, "GET", bURL+"/")
	req.Header.Set("Authorization", "Bearer "+a.Placeholder)
	refused(t, req, "https", "second.test", boundB.port, a)
	req, _ = http.NewRequest("PUT", bURL+"/", strings.NewReader(strings.Repeat("y", 200<<10)+a.Placeholder))
	refused(t, req, "https", "second.test", boundB.port, a)
	req, _ = http.NewRequest("PUT", bURL+"/", io.MultiReader(strings.NewReader(strings.Repeat("y", 200<<10)+a.Placeholder), strings.NewReader("more")))
	req.ContentLength = -1
	refused(t, req, "https", "second.test", boundB.port, a)
	if r := len(boundB.requests()); r != 0 {
		t.Errorf("secret B's upstream got %d requests, want none", r)
	}
	// B's own placeholder goes through there.
	req = mustRequest(t, "GET", bURL+"/")
	req.Header.Set("Authorization", "Bearer "+b.Placeholder)
	resp, body := do(t, client, req)
	mustOK(t, resp, body)
	if got := boundB.last(t).Header.Get("Authorization"); got != "Bearer "+realOther {
		t.Errorf("secret B's upstream got %q, want its real value", got)
	}

	// A placeholder in the name of a CONNECT or SOCKS5 destination.
	name := strings.ToLower(a.Placeholder) + ".evil.test"
	resp, _ = rawRequest(t, env.testEnv, fmt.Sprintf("CONNECT %s:443 HTTP/1.1\r\nHost: %s:443\r\n\r\n", name, name))
	n++
	checkRefused(t, resp, env.nthBlocked(n), "connect", name, 443, a.Name, fmt.Sprintf("secret %s is not bound to %s:443", a.Name, name))
	c := socks5Connect(t, env.testEnv, socksDomain(name, 443), repNotAllowed)
	c.Close()
	n++
	if e := env.nthBlocked(n); e.Secret != a.Name || e.Protocol != "socks5" {
		t.Errorf("SOCKS5 refusal %+v, want one for %s", e, a.Name)
	}
}

func TestSecretBodyAfterResponseBegan(t *testing.T) {
	pki := newTestPKI(t)
	up := startRecUpstream(t, pki, false, realOther)
	a := newSecret(t, "TOKEN_A", realToken, "bound.test:1")
	b := newSecret(t, "TOKEN_B", realOther, fmt.Sprintf("second.test:%d", up.port))
	env := startSecretProxy(t, secretConfig([]*secrets.Secret{a, b}), pki.pool)
	client := env.client(env.caPool)
	pr, pw := io.Pipe()
	req, _ := http.NewRequest("POST", fmt.Sprintf("https://second.test:%d/early", up.port), pr)
	go io.WriteString(pw, "first part, ")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s, want the upstream's early 200", resp.Status)
	}
	// The placeholder comes after the response began: the proxy ends the
	// connection.
	go func() {
		io.WriteString(pw, a.Placeholder+" and more")
		pw.Close()
	}()
	body, err := io.ReadAll(resp.Body)
	if err == nil {
		t.Errorf("the response ended well (%q), want the connection broken off", body)
	}
	e := env.waitBlocked(1)
	checkBlocked(t, e, "https", "second.test", up.port, fmt.Sprintf("secret TOKEN_A is not bound to second.test:%d", up.port))
	if e.Secret != "TOKEN_A" {
		t.Errorf("event %+v, want secret TOKEN_A", e)
	}
}

func TestSecretPlainHTTP(t *testing.T) {
	up := startRecUpstream(t, nil, false, "")
	strict := newSecret(t, "STRICT", realToken, fmt.Sprintf("plain.test:%d", up.port))
	loose := newSecret(t, "LOOSE", realOther, fmt.Sprintf("loose.test:%d", up.port))
	loose.AllowPlainHTTP = true
	short := newSecret(t, "LOOSE_SHORT", realShort, fmt.Sprintf("loose.test:%d", up.port))
	short.AllowPlainHTTP, short.InBody = true, true
	env := startSecretProxy(t, secretConfig([]*secrets.Secret{strict, loose, short}), nil)
	client := env.client(nil)

	// Forwarding: STRICT's placeholder is refused, LOOSE's substituted.
	req := mustRequest(t, "GET", fmt.Sprintf("http://plain.test:%d/", up.port))
	req.Header.Set("Authorization", "Bearer "+strict.Placeholder)
	resp, _ := do(t, client, req)
	reason := "secret STRICT is sent only over https (allow_plain_http is off)"
	checkRefused(t, resp, env.nthBlocked(1), "http", "plain.test", up.port, "STRICT", reason)
	req = mustRequest(t, "GET", fmt.Sprintf("http://loose.test:%d/", up.port))
	req.Header.Set("Authorization", "Bearer "+loose.Placeholder)
	req.Header.Set("Accept-Encoding", "gzip")
	resp, body := do(t, client, req)
	mustOK(t, resp, body)
	got := up.last(t)
	if got.Header.Get("Authorization") != "Bearer "+realOther || got.Header.Get("Accept-Encoding") != "" {
		t.Errorf("the upstream got Authorization with the real value: %v, Accept-Encoding %q; want it and none",
			got.Header.Get("Authorization") == "Bearer "+realOther, got.Header.Get("Accept-Encoding"))
	}
	if resp.Header.Get("X-Echo-Auth") != "Bearer "+loose.Placeholder || strings.Contains(body, realOther) {
		t.Error("the response holds the real value")
	}
	if n := len(up.requests()); n != 1 {
		t.Errorf("the upstream got %d requests, want 1", n)
	}

	// A body whose length changes: read whole after the proxy's own
	// "100 Continue", sent with its new length; the response, whose
	// length changes back, in chunks.
	req, _ = http.NewRequest("POST", fmt.Sprintf("http://loose.test:%d/body", up.port), strings.NewReader("short="+short.Placeholder))
	req.Header.Set("Expect", "100-continue")
	resp, body = do(t, proxyClient(t, env.testEnv, nil), req)
	mustOK(t, resp, body)
	got = up.last(t)
	if got.Body != "short="+realShort || got.ContentLength != int64(len("short="+realShort)) || got.Header.Get("Expect") != "" {
		t.Errorf("the upstream got body %q, Content-Length %d, Expect %q", got.Body, got.ContentLength, got.Header.Get("Expect"))
	}
	var echo seen
	if err := json.Unmarshal([]byte(body), &echo); err != nil || echo.Body != "short="+short.Placeholder || resp.ContentLength != -1 {
		t.Errorf("the client got %q (Content-Length %d), want the placeholder back in chunks", body, resp.ContentLength)
	}

	// Plain HTTP inside CONNECT: the same rules.
	for _, tt := range []struct {
		s    *secrets.Secret
		host string
	}{{strict, "plain.test"}, {loose, "loose.test"}} {
		target := fmt.Sprintf("%s:%d", tt.host, up.port)
		c, br := connectTunnel(t, env.testEnv, target, "")
		fmt.Fprintf(c, "GET /in-tunnel HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n\r\n", target, tt.s.Placeholder)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if tt.s == strict {
			checkRefused(t, resp, env.nthBlocked(2), "http", "plain.test", up.port, "STRICT", reason)
			continue
		}
		if resp.StatusCode != http.StatusOK || strings.Contains(string(b), realOther) {
			t.Errorf("LOOSE in a tunnel: %s %s", resp.Status, b)
		}
		if got := up.last(t); got.URI != "/in-tunnel" || got.Header.Get("Authorization") != "Bearer "+realOther {
			t.Errorf("the upstream got %s without the real value", got.URI)
		}
	}
	if n := len(up.requests()); n != 3 {
		t.Errorf("the upstream got %d requests, want 3", n)
	}
}

func TestInterceptWebSocket(t *testing.T) {
	pki := newTestPKI(t)
	up := startRecUpstream(t, pki, false, realToken)
	host := fmt.Sprintf("bound.test:%d", up.port)
	tok := newSecret(t, "TOKEN", realToken, host)
	env := startSecretProxy(t, secretConfig([]*secrets.Secret{tok}), pki.pool)
	c, _ := connectTunnel(t, env.testEnv, host, "")
	tc := tls.Client(c, &tls.Config{RootCAs: env.caPool, ServerName: "bound.test"})
	fmt.Fprintf(tc, "GET /ws HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nAuthorization: Bearer %s\r\n\r\n", host, tok.Placeholder)
	br := bufio.NewReader(tc)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("%s: %s", resp.Status, b)
	}
	if a := resp.Header.Get("X-Echo-Auth"); a != "Bearer "+tok.Placeholder {
		t.Errorf("the 101's X-Echo-Auth is %q, want the placeholder", a)
	}
	// The upgraded stream is copied as it is, both ways.
	for _, msg := range []string{"hello ", tok.Placeholder, " world"} {
		io.WriteString(tc, msg)
		got := make([]byte, len(msg))
		if _, err := io.ReadFull(br, got); err != nil || string(got) != msg {
			t.Fatalf("echo %q, %v; want %q", got, err, msg)
		}
	}
	tc.Close()
	if n := len(env.blocked()); n != 0 {
		t.Errorf("refusals recorded: %+v", env.blocked())
	}
}

func TestInterceptSNIAndHost(t *testing.T) {
	pki := newTestPKI(t)
	up := startRecUpstream(t, pki, false, realToken)
	host := fmt.Sprintf("bound.test:%d", up.port)
	tok := newSecret(t, "TOKEN", realToken, host)
	env := startSecretProxy(t, secretConfig([]*secrets.Secret{tok}), pki.pool)

	// The client's SNI names another host: the handshake is refused.
	c, _ := connectTunnel(t, env.testEnv, host, "")
	tc := tls.Client(c, &tls.Config{RootCAs: env.caPool, ServerName: "evil.test"})
	if err := tc.Handshake(); err == nil {
		t.Error("the handshake with SNI evil.test succeeded")
	}
	checkBlocked(t, env.waitBlocked(1), "https", "bound.test", up.port, fmt.Sprintf("TLS server name evil.test differs from CONNECT target %s", host))

	// The same SNI in another spelling is the same name.
	c, _ = connectTunnel(t, env.testEnv, host, "")
	tc = tls.Client(c, &tls.Config{RootCAs: env.caPool, ServerName: "BOUND.test."})
	if err := tc.Handshake(); err != nil {
		t.Errorf("the handshake with SNI BOUND.test.: %v", err)
	}
	// The Host header of a request in the stream must name the target.
	fmt.Fprintf(tc, "GET / HTTP/1.1\r\nHost: other.test:%d\r\nAuthorization: Bearer %s\r\n\r\n", up.port, tok.Placeholder)
	resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	reason := fmt.Sprintf("Host header other.test:%d differs from CONNECT target %s", up.port, host)
	if resp.StatusCode != http.StatusForbidden || resp.Header.Get("X-Hutch-Blocked") != reason {
		t.Errorf("answer %s, X-Hutch-Blocked %q; want 403 and %q", resp.Status, resp.Header.Get("X-Hutch-Blocked"), reason)
	}
	checkBlocked(t, env.nthBlocked(2), "https", "bound.test", up.port, reason)
	if n := len(up.requests()); n != 0 {
		t.Errorf("the upstream got %d requests, want none", n)
	}
}

func TestInterceptSOCKS5(t *testing.T) {
	pki := newTestPKI(t)
	up := startRecUpstream(t, pki, false, realToken)
	tok := newSecret(t, "TOKEN", realToken, fmt.Sprintf("bound.test:%d", up.port))
	env := startSecretProxy(t, secretConfig([]*secrets.Secret{tok}), pki.pool)
	client := env.clientVia(&url.URL{Scheme: "socks5h", Host: env.socksAddr}, env.caPool)
	req := mustRequest(t, "GET", fmt.Sprintf("https://bound.test:%d/socks", up.port))
	req.Header.Set("Authorization", "Bearer "+tok.Placeholder)
	resp, body := do(t, client, req)
	mustOK(t, resp, body)
	if got := up.last(t).Header.Get("Authorization"); got != "Bearer "+realToken {
		t.Errorf("the upstream got Authorization %q, want the real value", got)
	}
	if strings.Contains(body, realToken) {
		t.Error("the response body holds the real value")
	}
	env.close()
	if tr := env.p.Traffic(); len(tr) != 1 || tr[0].Protocol != "socks5" || tr[0].Connections != 1 {
		t.Errorf("Traffic = %+v", tr)
	}
}

func TestInterceptUpstreamDown(t *testing.T) {
	port := freePort(t)
	tok := newSecret(t, "TOKEN", realToken, fmt.Sprintf("bound.test:%d", port))
	env := startSecretProxy(t, secretConfig([]*secrets.Secret{tok}), nil)
	req := mustRequest(t, "GET", fmt.Sprintf("https://bound.test:%d/", port))
	req.Header.Set("Authorization", "Bearer "+tok.Placeholder)
	resp, body := do(t, env.client(env.caPool), req)
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, "connection refused") {
		t.Errorf("%s %q, want 502 saying connection refused", resp.Status, body)
	}
	if len(env.blocked()) != 0 {
		t.Errorf("a failed dial was recorded as a refusal: %+v", env.blocked())
	}
}

func TestServeNeedsCAForSecrets(t *testing.T) {
	tok := newSecret(t, "TOKEN", realToken, "bound.test")
	rules, err := NewRules(secretConfig([]*secrets.Secret{tok}))
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{Rules: rules}
	defer p.Close()
	if err := p.ServeHTTP(listen(t)); err == nil || !strings.Contains(err.Error(), "no CA") {
		t.Errorf("ServeHTTP without a CA = %v, want an error", err)
	}
}

func TestInterceptCloseEndsEverything(t *testing.T) {
	pki := newTestPKI(t)
	up := startRecUpstream(t, pki, true, realToken)
	time.Sleep(10 * time.Millisecond)
	base := runtime.NumGoroutine()
	tok := newSecret(t, "TOKEN", realToken, fmt.Sprintf("bound.test:%d", up.port))
	env := startSecretProxy(t, secretConfig([]*secrets.Secret{tok}), pki.pool)
	client := env.client(env.caPool)
	resp, body := do(t, client, mustRequest(t, "GET", fmt.Sprintf("https://bound.test:%d/", up.port)))
	mustOK(t, resp, body)
	// A stream that waits for its first byte, and one in a request.
	c1, _ := connectTunnel(t, env.testEnv, fmt.Sprintf("bound.test:%d", up.port), "")
	c2, _ := connectTunnel(t, env.testEnv, fmt.Sprintf("bound.test:%d", up.port), "")
	tc := tls.Client(c2, &tls.Config{RootCAs: env.caPool, ServerName: "bound.test"})
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	io.WriteString(tc, "GET / HTTP/1.1\r\n")
	time.Sleep(50 * time.Millisecond)
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
	for _, c := range []net.Conn{c1, tc} {
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.Copy(io.Discard, c); err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !strings.Contains(err.Error(), "reset") {
			t.Errorf("reading after Close: %v, want the end", err)
		}
		c.Close()
	}
	client.Transport.(*http.Transport).CloseIdleConnections()
	up.CloseClientConnections()

	// No goroutine of the proxy is left.
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > base && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > base {
		buf := make([]byte, 1<<20)
		t.Errorf("%d goroutines after Close, %d before the proxy started:\n%s", n, base, buf[:runtime.Stack(buf, true)])
	}
}
