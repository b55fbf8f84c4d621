package egress

import (
	"bufio"
	"bytes"
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
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
)

// proxyClient is an HTTP client that uses env's proxy.
func proxyClient(t *testing.T, env *testEnv, tlsConf *tls.Config) *http.Client {
	t.Helper()
	tr := &http.Transport{
		Proxy:                 http.ProxyURL(&url.URL{Scheme: "http", User: url.UserPassword("user", "secret"), Host: env.httpAddr}),
		TLSClientConfig:       tlsConf,
		DisableCompression:    true,
		ExpectContinueTimeout: time.Minute, // a lost "100 Continue" times the test out
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 20 * time.Second}
}

// getEcho sends req through client and decodes the echo.
func getEcho(t *testing.T, client *http.Client, req *http.Request) echoed {
	t.Helper()
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("%s %s: %s: %s", req.Method, req.URL, resp.Status, b)
	}
	var e echoed
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
		t.Fatal(err)
	}
	return e
}

// rawRequest sends a request as written on a new connection to the HTTP
// proxy and reads the response, whose body it returns.
func rawRequest(t *testing.T, env *testEnv, request string) (*http.Response, string) {
	t.Helper()
	c := env.dial(env.httpAddr)
	io.WriteString(c, request)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading the answer to %q: %v", request, err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the body of the answer to %q: %v", request, err)
	}
	return resp, string(body)
}

func TestHTTPForward(t *testing.T) {
	up := startHTTPUpstream(t, nil)
	env := startProxy(t, testConfig(fmt.Sprintf("allowed.test:%d", up.port)))
	client := proxyClient(t, env, nil)

	req, _ := http.NewRequest("GET", fmt.Sprintf("http://allowed.test:%d/path/x?q=1&r=%%2F", up.port), nil)
	req.Header.Set("X-Test", "kept")
	req.Header.Set("User-Agent", "hutch-test")
	e := getEcho(t, client, req)
	if e.Method != "GET" || e.URI != "/path/x?q=1&r=%2F" || e.Host != fmt.Sprintf("allowed.test:%d", up.port) || e.Proto != "HTTP/1.1" {
		t.Errorf("upstream saw %s %s (Host %s, %s), want GET /path/x?q=1&r=%%2F in origin form", e.Method, e.URI, e.Host, e.Proto)
	}
	if e.Header.Get("X-Test") != "kept" || e.Header.Get("User-Agent") != "hutch-test" {
		t.Errorf("upstream headers %v lack X-Test or User-Agent", e.Header)
	}
	if e.Header.Get("Proxy-Authorization") != "" {
		t.Errorf("upstream got the proxy's credentials: %v", e.Header)
	}

	// A POST with a body, announced with Expect: 100-continue, and one
	// of unknown length (chunked).
	req, _ = http.NewRequest("POST", fmt.Sprintf("http://allowed.test:%d/post", up.port), strings.NewReader("hello body"))
	req.Header.Set("Expect", "100-continue")
	if e := getEcho(t, client, req); e.Method != "POST" || e.Body != "hello body" {
		t.Errorf("upstream saw %s with body %q, want POST with %q", e.Method, e.Body, "hello body")
	}
	req, _ = http.NewRequest("PUT", fmt.Sprintf("http://allowed.test:%d/put", up.port), io.MultiReader(strings.NewReader("chunked "), strings.NewReader("body")))
	req.ContentLength = -1
	if e := getEcho(t, client, req); e.Body != "chunked body" {
		t.Errorf("upstream saw body %q, want %q", e.Body, "chunked body")
	}

	// HEAD keeps the upstream's Content-Length; 204 has no body.
	req, _ = http.NewRequest("HEAD", fmt.Sprintf("http://allowed.test:%d/head", up.port), nil)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.ContentLength != 1234 {
		t.Errorf("HEAD: %s, Content-Length %d, want 200 and 1234", resp.Status, resp.ContentLength)
	}
	resp, err = client.Get(fmt.Sprintf("http://allowed.test:%d/nocontent", up.port))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Errorf("GET /nocontent: %s, want 204", resp.Status)
	}
	if len(env.blocked()) != 0 {
		t.Errorf("refusals recorded: %+v", env.blocked())
	}
	if n := env.accepted.Load(); n != 1 {
		t.Errorf("the client opened %d connections to the proxy, want 1 (keep-alive)", n)
	}
}

func TestHTTPKeepAliveReusesUpstream(t *testing.T) {
	up := startHTTPUpstream(t, nil)
	env := startProxy(t, testConfig(fmt.Sprintf("allowed.test:%d", up.port)))
	client := proxyClient(t, env, nil)
	for i := range 3 {
		req, _ := http.NewRequest("GET", fmt.Sprintf("http://allowed.test:%d/%d", up.port, i), nil)
		if e := getEcho(t, client, req); e.URI != fmt.Sprintf("/%d", i) {
			t.Errorf("request %d reached %s", i, e.URI)
		}
	}
	if n, m := env.accepted.Load(), up.conns.Load(); n != 1 || m != 1 {
		t.Errorf("3 requests took %d client and %d upstream connections, want 1 and 1", n, m)
	}

	// The upstream closes its idle connection: the next GET is sent again
	// on a new one.
	up.CloseClientConnections()
	time.Sleep(20 * time.Millisecond)
	req, _ := http.NewRequest("GET", fmt.Sprintf("http://allowed.test:%d/again", up.port), nil)
	if e := getEcho(t, client, req); e.URI != "/again" {
		t.Errorf("request after the upstream's close reached %s", e.URI)
	}
	if n, m := env.accepted.Load(), up.conns.Load(); n != 1 || m != 2 {
		t.Errorf("after the upstream's close: %d client and %d upstream connections, want 1 and 2", n, m)
	}
}

func TestHTTPHopByHopHeaders(t *testing.T) {
	up := startHTTPUpstream(t, nil)
	env := startProxy(t, testConfig(fmt.Sprintf("allowed.test:%d", up.port)))
	resp, body := rawRequest(t, env, fmt.Sprintf("GET http://allowed.test:%d/ HTTP/1.1\r\n"+
		"Host: allowed.test:%d\r\nConnection: X-Drop, close\r\nX-Drop: 1\r\nX-Keep: 1\r\n"+
		"Keep-Alive: timeout=5\r\nProxy-Connection: keep-alive\r\nProxy-Authorization: Basic eDp5\r\nTE: trailers\r\nUpgrade: h2c\r\n\r\n",
		up.port, up.port))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: %s", resp.Status, body)
	}
	var e echoed
	if err := json.Unmarshal([]byte(body), &e); err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"X-Drop", "Keep-Alive", "Proxy-Connection", "Proxy-Authorization", "Te", "Upgrade"} {
		if v := e.Header.Get(h); v != "" {
			t.Errorf("upstream got hop-by-hop header %s: %s", h, v)
		}
	}
	if e.Header.Get("X-Keep") != "1" || e.Header.Get("User-Agent") != "" {
		t.Errorf("upstream headers %v: want X-Keep and no User-Agent", e.Header)
	}
	if !resp.Close {
		t.Error("the proxy kept the connection of a client that asked to close it")
	}
}

func TestHTTPStreamsResponses(t *testing.T) {
	release := make(chan struct{})
	up := startHTTPUpstream(t, release)
	defer close(release)
	env := startProxy(t, testConfig(fmt.Sprintf("allowed.test:%d", up.port)))
	client := proxyClient(t, env, nil)
	resp, err := client.Get(fmt.Sprintf("http://allowed.test:%d/stream", up.port))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	// The first part arrives while the upstream still holds the second.
	br := bufio.NewReader(resp.Body)
	if line, err := br.ReadString('\n'); line != "first\n" {
		t.Fatalf("first line %q, %v", line, err)
	}
	release <- struct{}{}
	if line, err := br.ReadString('\n'); line != "second\n" {
		t.Fatalf("second line %q, %v", line, err)
	}
}

func TestHTTPUpgrade(t *testing.T) {
	up := startHTTPUpstream(t, nil)
	env := startProxy(t, testConfig(fmt.Sprintf("allowed.test:%d", up.port)))
	c := env.dial(env.httpAddr)
	// "hello " follows the request at once; it belongs to the new protocol.
	fmt.Fprintf(c, "GET http://allowed.test:%d/upgrade HTTP/1.1\r\nHost: allowed.test:%d\r\n"+
		"Connection: keep-alive, Upgrade\r\nUpgrade: echo\r\n\r\nhello ", up.port, up.port)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get("Upgrade") != "echo" {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("%s %v: %s", resp.Status, resp.Header, b)
	}
	io.WriteString(c, "world")
	c.CloseWrite()
	got, err := io.ReadAll(br)
	if err != nil || string(got) != "hello world" {
		t.Errorf("echo through the upgraded connection: %q, %v; want %q", got, err, "hello world")
	}
}

func TestHTTPBlocked(t *testing.T) {
	up := startHTTPUpstream(t, nil)
	env := startProxy(t, testConfig(fmt.Sprintf("allowed.test:%d", up.port)))
	client := proxyClient(t, env, nil)
	resp, err := client.Get(fmt.Sprintf("http://denied.test:%d/secret", up.port))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	e := env.onlyBlocked()
	checkBlocked(t, e, "http", "denied.test", up.port, "not in allowedDomains")
	if resp.StatusCode != http.StatusForbidden || resp.Header.Get("X-Hutch-Blocked") != e.Reason {
		t.Errorf("answer %s, X-Hutch-Blocked %q; want 403 and %q", resp.Status, resp.Header.Get("X-Hutch-Blocked"), e.Reason)
	}
	fix := fmt.Sprintf("--allow-domain denied.test:%d", up.port)
	if e.Allow != fix || e.AllowField != "network.allowed_domains" || resp.Header.Get("X-Hutch-Allow") != fix {
		t.Errorf("event %+v, X-Hutch-Allow %q: want the fix %q", e, resp.Header.Get("X-Hutch-Allow"), fix)
	}
	if want := fmt.Sprintf("hutch: blocked denied.test:%d: not in allowedDomains\nhutch: to allow it: %s (network.allowed_domains)\n", up.port, fix); string(body) != want {
		t.Errorf("body %q, want %q", body, want)
	}
	if up.conns.Load() != 0 {
		t.Error("the upstream was reached")
	}
}

func TestHTTPHostMismatch(t *testing.T) {
	up := startHTTPUpstream(t, nil)
	env := startProxy(t, testConfig(fmt.Sprintf("allowed.test:%d", up.port)))

	// The same authority, spelled differently, is not a mismatch.
	for _, host := range []string{fmt.Sprintf("ALLOWED.test.:%d", up.port), ""} {
		hdr := ""
		if host != "" {
			hdr = "Host: " + host + "\r\n"
		}
		resp, body := rawRequest(t, env, fmt.Sprintf("GET http://allowed.test:%d/ HTTP/1.1\r\n%s\r\n", up.port, hdr))
		if resp.StatusCode != http.StatusOK {
			t.Errorf("Host %q: %s: %s", host, resp.Status, body)
		}
	}
	resp, body := rawRequest(t, env, "GET http://allowed.test/ HTTP/1.1\r\nHost: allowed.test:80\r\n\r\n")
	if resp.StatusCode != http.StatusForbidden || strings.Contains(body, "differs") {
		// Port 80 is not allowed; the Host header is not the reason.
		t.Errorf("default port: %s: %s", resp.Status, body)
	}
	resp, body = rawRequest(t, env, fmt.Sprintf("GET http://allowed.test:%d/ HTTP/1.1\r\nHost: evil.test\r\n\r\n", up.port))
	want := fmt.Sprintf("Host header evil.test differs from request target allowed.test:%d", up.port)
	if resp.StatusCode != http.StatusForbidden || resp.Header.Get("X-Hutch-Blocked") != want {
		t.Errorf("answer %s, X-Hutch-Blocked %q, body %q; want 403 and %q", resp.Status, resp.Header.Get("X-Hutch-Blocked"), body, want)
	}
	checkBlocked(t, env.nthBlocked(2), "http", "allowed.test", up.port, want)
	resp, _ = rawRequest(t, env, fmt.Sprintf("CONNECT allowed.test:%d HTTP/1.1\r\nHost: evil.test:%d\r\n\r\n", up.port, up.port))
	want = fmt.Sprintf("Host header evil.test:%d differs from CONNECT target allowed.test:%d", up.port, up.port)
	if resp.StatusCode != http.StatusForbidden || resp.Header.Get("X-Hutch-Blocked") != want {
		t.Errorf("CONNECT: answer %s, X-Hutch-Blocked %q; want 403 and %q", resp.Status, resp.Header.Get("X-Hutch-Blocked"), want)
	}
	checkBlocked(t, env.nthBlocked(3), "connect", "allowed.test", up.port, want)
	if up.conns.Load() != 2 {
		t.Errorf("the upstream saw %d connections, want 2 (the allowed requests')", up.conns.Load())
	}
}

func TestHTTPBadRequests(t *testing.T) {
	up := startHTTPUpstream(t, nil)
	env := startProxy(t, testConfig(fmt.Sprintf("allowed.test:%d", up.port)))
	for _, tt := range []struct {
		name, request string
		status        int
		body          string
	}{
		{"origin form", "GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n", 400, "hutch's egress proxy"},
		{"asterisk", "OPTIONS * HTTP/1.1\r\nHost: allowed.test\r\n\r\n", 400, "hutch's egress proxy"},
		{"malformed", "GET\r\n\r\n", 400, "malformed request"},
		{"two hosts", "GET http://allowed.test/ HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400, "malformed request"},
		{"connect without port", "CONNECT allowed.test HTTP/1.1\r\n\r\n", 400, "host:port"},
		{"connect bad port", "CONNECT allowed.test:99999 HTTP/1.1\r\n\r\n", 400, "invalid port"},
		{"header too large", "GET http://allowed.test/ HTTP/1.1\r\nX-Big: " + strings.Repeat("b", 70<<10) + "\r\n\r\n", 431, "64 KiB"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := rawRequest(t, env, tt.request)
			if resp.StatusCode != tt.status || !strings.Contains(body, tt.body) {
				t.Errorf("answer %s %q, want %d with %q", resp.Status, body, tt.status, tt.body)
			}
		})
	}
	if n := len(env.blocked()); n != 0 {
		t.Errorf("%d refusals recorded for malformed requests, want none: %+v", n, env.blocked())
	}

	// An https:// URL is refused (its traffic would go in clear text).
	resp, body := rawRequest(t, env, "GET https://allowed.test/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "use CONNECT") {
		t.Errorf("https URL: %s %q", resp.Status, body)
	}
	checkBlocked(t, env.onlyBlocked(), "http", "allowed.test", 443, "https:// URLs are not forwarded (only http://; use CONNECT)")
}

func TestHTTPUpstreamDown(t *testing.T) {
	port := freePort(t)
	env := startProxy(t, testConfig(fmt.Sprintf("allowed.test:%d", port)))
	resp, body := rawRequest(t, env, fmt.Sprintf("GET http://allowed.test:%d/ HTTP/1.1\r\nHost: allowed.test:%d\r\n\r\n", port, port))
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, "connection refused") {
		t.Errorf("GET: %s %q, want 502 saying connection refused", resp.Status, body)
	}
	resp, body = rawRequest(t, env, fmt.Sprintf("CONNECT allowed.test:%d HTTP/1.1\r\n\r\n", port))
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, "connection refused") {
		t.Errorf("CONNECT: %s %q, want 502 saying connection refused", resp.Status, body)
	}
	if len(env.blocked()) != 0 {
		t.Errorf("a failed dial was recorded as a refusal: %+v", env.blocked())
	}
}

func TestHTTP10Client(t *testing.T) {
	up := startHTTPUpstream(t, nil)
	env := startProxy(t, testConfig(fmt.Sprintf("allowed.test:%d", up.port)))
	c := env.dial(env.httpAddr)
	fmt.Fprintf(c, "GET http://allowed.test:%d/ HTTP/1.0\r\n\r\n", up.port)
	all, err := io.ReadAll(c) // the proxy ends the connection after the response
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(all, []byte("HTTP/1.0 200 OK\r\n")) || !bytes.Contains(all, []byte(`"Method":"GET"`)) {
		t.Errorf("HTTP/1.0 response:\n%s", all)
	}
}

func TestConnectPortNotAllowed(t *testing.T) {
	echo := startEchoServer(t)
	env := startProxy(t, testConfig(fmt.Sprintf("allowed.test:%d", echo)))
	resp, body := rawRequest(t, env, "CONNECT allowed.test:22 HTTP/1.1\r\nHost: allowed.test:22\r\n\r\n")
	e := env.onlyBlocked()
	checkBlocked(t, e, "connect", "allowed.test", 22, "")
	if !strings.Contains(e.Reason, "port 22") || e.Rule != fmt.Sprintf("allowed.test:%d", echo) {
		t.Errorf("event %+v: want the port in the reason and the host's rule", e)
	}
	if resp.StatusCode != http.StatusForbidden || resp.Header.Get("X-Hutch-Blocked") != e.Reason ||
		resp.Header.Get("X-Hutch-Allow") != "--allow-domain allowed.test:22" ||
		body != fmt.Sprintf("hutch: blocked allowed.test:22: %s\nhutch: to allow it: --allow-domain allowed.test:22 (network.allowed_domains)\n", e.Reason) {
		t.Errorf("answer %s %v %q", resp.Status, resp.Header, body)
	}
}

func TestConnectPinnedLoopbackWithoutAllowPrivate(t *testing.T) {
	echo := startEchoServer(t)
	cfg := testConfig(fmt.Sprintf("allowed.test:%d", echo))
	cfg.AllowPrivate = nil
	env := startProxy(t, cfg)
	resp, _ := rawRequest(t, env, fmt.Sprintf("CONNECT allowed.test:%d HTTP/1.1\r\n\r\n", echo))
	e := env.onlyBlocked()
	checkBlocked(t, e, "connect", "allowed.test", echo, "")
	if resp.StatusCode != http.StatusForbidden || e.Address != "127.0.0.1" || !strings.Contains(e.Reason, "loopback") {
		t.Errorf("answer %s, event %+v: want 403, address 127.0.0.1, a loopback reason", resp.Status, e)
	}
}

func TestConnectHalfClose(t *testing.T) {
	echo := startEchoServer(t)
	env := startProxy(t, testConfig(fmt.Sprintf("allowed.test:%d", echo)))
	// Bytes sent right after the CONNECT request belong to the tunnel.
	c, br := connectTunnel(t, env, fmt.Sprintf("allowed.test:%d", echo), "early ")
	io.WriteString(c, "late")
	if err := c.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	// The upstream sees our end, answers after it, and ends too.
	got, err := io.ReadAll(br)
	if err != nil || string(got) != "early latebye" {
		t.Errorf("through the tunnel: %q, %v; want %q", got, err, "early latebye")
	}
}

// testCA makes a CA and a certificate for allowed.test that it signed.
func testCA(t *testing.T) (*x509.CertPool, tls.Certificate) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "hutch test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leafTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "allowed.test"},
		DNSNames:     []string{"allowed.test"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leafTmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return pool, tls.Certificate{Certificate: [][]byte{leafDER}, PrivateKey: key}
}

func TestConnectTLS(t *testing.T) {
	pool, cert := testCA(t)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "tls %s %s", r.Host, r.URL.Path)
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake below
	srv.StartTLS()
	t.Cleanup(srv.Close)
	port := portOf(t, srv.Listener.Addr().String())
	env := startProxy(t, testConfig(fmt.Sprintf("allowed.test:%d", port)))

	// The client checks the upstream's own certificate through the tunnel.
	client := proxyClient(t, env, &tls.Config{RootCAs: pool})
	resp, err := client.Get(fmt.Sprintf("https://allowed.test:%d/secure", port))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := fmt.Sprintf("tls allowed.test:%d /secure", port); string(body) != want {
		t.Errorf("body %q, want %q", body, want)
	}
	if resp.TLS == nil || len(resp.TLS.VerifiedChains) == 0 || resp.TLS.VerifiedChains[0][0].Subject.CommonName != "allowed.test" {
		t.Errorf("the connection's certificate was not the upstream's: %+v", resp.TLS)
	}

	// Without the test CA the client refuses the certificate: the proxy
	// does not stand in for the upstream.
	other := proxyClient(t, env, &tls.Config{RootCAs: x509.NewCertPool()})
	_, err = other.Get(fmt.Sprintf("https://allowed.test:%d/", port))
	var unknown x509.UnknownAuthorityError
	if !errors.As(err, &unknown) {
		t.Errorf("GET without the CA: %v, want an unknown authority", err)
	}
	if len(env.blocked()) != 0 {
		t.Errorf("refusals recorded: %+v", env.blocked())
	}
}

func TestSameAuthority(t *testing.T) {
	for _, tt := range []struct {
		hdr, host string
		port, def int
		want      bool
	}{
		{"example.com", "example.com", 80, 80, true},
		{"Example.COM.:80", "example.com", 80, 80, true},
		{"example.com:8080", "example.com", 80, 80, false},
		{"example.com", "example.com", 8080, 80, false},
		{"[::1]:443", "::1", 443, 443, true},
		{"[::1]", "0:0::1", 443, 443, true},
		{"::1", "::1", 443, 443, true},
		{"evil.test:443", "example.com", 443, 443, false},
		{"example.com:x", "example.com", 80, 80, false},
	} {
		if got := sameAuthority(tt.hdr, tt.host, tt.port, tt.def); got != tt.want {
			t.Errorf("sameAuthority(%q, %q, %d, %d) = %v, want %v", tt.hdr, tt.host, tt.port, tt.def, got, tt.want)
		}
	}
}

func TestHTTPPipelined(t *testing.T) {
	up := startHTTPUpstream(t, nil)
	env := startProxy(t, testConfig(fmt.Sprintf("allowed.test:%d", up.port)))
	c := env.dial(env.httpAddr)
	req := "GET http://allowed.test:%d/%s HTTP/1.1\r\nHost: allowed.test:%d\r\n\r\n"
	fmt.Fprintf(c, req+req, up.port, "one", up.port, up.port, "two", up.port)
	br := bufio.NewReader(c)
	for _, want := range []string{"/one", "/two"} {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		var e echoed
		err = json.NewDecoder(resp.Body).Decode(&e)
		io.Copy(io.Discard, resp.Body)
		if err != nil || e.URI != want {
			t.Errorf("response for %s: %+v, %v", want, e, err)
		}
	}
	if n := up.conns.Load(); n != 1 {
		t.Errorf("two pipelined requests took %d upstream connections, want 1", n)
	}
}
