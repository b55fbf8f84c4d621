package egress

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/hutch-sandbox/hutch/internal/secrets"
)

// The sandbox's side of an intercepted connection speaks HTTP/2 to a
// client that negotiates h2, through the same request path as HTTP/1.1.

// h2Client returns a client through the proxy's HTTP listener that
// speaks only HTTP/2 (it offers only h2 in its TLS handshake) and trusts
// the sandbox CA.
func (env *secretEnv) h2Client() *http.Client {
	var protocols http.Protocols
	protocols.SetHTTP2(true)
	tr := &http.Transport{
		Proxy:              http.ProxyURL(&url.URL{Scheme: "http", Host: env.httpAddr}),
		TLSClientConfig:    &tls.Config{RootCAs: env.caPool},
		DisableCompression: true,
		Protocols:          &protocols,
	}
	env.t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 20 * time.Second}
}

// lineUpstream is an upstream that echoes a request body line by line
// as it streams, each line answered at once with the real value after
// it, and ends with a trailer holding the real value.
type lineUpstream struct {
	*httptest.Server
	port     int
	requests atomic.Int32
}

// startLineUpstream starts a line upstream over TLS with a certificate of
// pki (HTTP/2 too when h2).
func startLineUpstream(t *testing.T, pki *testPKI, h2 bool, real string) *lineUpstream {
	t.Helper()
	u := &lineUpstream{}
	u.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.requests.Add(1)
		rc := http.NewResponseController(w)
		_ = rc.EnableFullDuplex()
		w.Header().Set("Trailer", "X-Done")
		w.Header().Set("X-Echo-Auth", r.Header.Get("Authorization"))
		w.WriteHeader(http.StatusOK)
		_ = rc.Flush()
		sc := bufio.NewScanner(r.Body)
		n := 0
		for sc.Scan() {
			n++
			fmt.Fprintf(w, "echo %s %s\n", sc.Text(), real)
			if rc.Flush() != nil {
				return
			}
		}
		if sc.Err() != nil {
			return
		}
		w.Header().Set("X-Done", fmt.Sprintf("%d lines %s", n, real))
	}))
	u.Config.ErrorLog = log.New(io.Discard, "", 0) // aborted requests
	u.TLS = &tls.Config{Certificates: []tls.Certificate{pki.issue(t, "bound.test", "second.test")}}
	u.EnableHTTP2 = h2
	u.StartTLS()
	t.Cleanup(u.Close)
	u.port = portOf(t, u.Listener.Addr().String())
	return u
}

func TestInterceptHTTP2Client(t *testing.T) {
	for _, upH2 := range []bool{false, true} {
		t.Run(fmt.Sprintf("upstream-h2=%v", upH2), func(t *testing.T) {
			pki := newTestPKI(t)
			up := startRecUpstream(t, pki, upH2, realToken)
			tok := newSecret(t, "TOKEN", realToken, fmt.Sprintf("bound.test:%d", up.port))
			tok.InBody = true
			other := newSecret(t, "OTHER", realOther, "second.test:1")
			env := startSecretProxy(t, secretConfig([]*secrets.Secret{tok, other}), pki.pool)
			client := env.h2Client()
			target := fmt.Sprintf("https://bound.test:%d", up.port)
			reason := fmt.Sprintf("secret OTHER is not bound to bound.test:%d", up.port)

			// Refused first, in the header and in the body: nothing
			// reaches the upstream, not even a connection.
			req := mustRequest(t, "GET", target+"/refused")
			req.Header.Set("Authorization", "Bearer "+other.Placeholder)
			resp, body := do(t, client, req)
			if resp.ProtoMajor != 2 {
				t.Fatalf("the client spoke %s, want HTTP/2", resp.Proto)
			}
			checkRefused(t, resp, env.waitBlocked(1), "https", "bound.test", up.port, "OTHER", reason)
			if !strings.Contains(body, reason) {
				t.Errorf("refusal body %q", body)
			}
			req, _ = http.NewRequest("POST", target+"/refused", strings.NewReader(strings.Repeat("z", 100<<10)+other.Placeholder))
			resp, _ = do(t, client, req)
			checkRefused(t, resp, env.waitBlocked(2), "https", "bound.test", up.port, "OTHER", reason)
			if c, r := up.conns.Load(), len(up.requests()); c != 0 || r != 0 {
				t.Errorf("the upstream got %d requests on %d connections, want none", r, c)
			}

			// The placeholder in a header: the upstream gets the real
			// value, the client its echo as the placeholder.
			req = mustRequest(t, "GET", target+"/h")
			req.Header.Set("Authorization", "Bearer "+tok.Placeholder)
			req.Header.Set("X-Multi", "a "+tok.Placeholder+" b")
			resp, body = do(t, client, req)
			mustOK(t, resp, body)
			got := up.last(t)
			if a, m := got.Header.Get("Authorization"), got.Header.Get("X-Multi"); a != "Bearer "+realToken || m != "a "+realToken+" b" {
				t.Errorf("the upstream got Authorization %q and X-Multi %q, want the real value in both", a, m)
			}
			if a := resp.Header.Get("X-Echo-Auth"); a != "Bearer "+tok.Placeholder {
				t.Errorf("the client got X-Echo-Auth %q, want the placeholder", a)
			}
			if strings.Contains(body, realToken) || !strings.Contains(body, "Bearer "+tok.Placeholder) {
				t.Errorf("the client got body %s, want the placeholder, not the real value", body)
			}

			// Basic authorization.
			req = mustRequest(t, "GET", target+"/git/info/refs")
			req.SetBasicAuth("x-access-token", tok.Placeholder)
			resp, body = do(t, client, req)
			mustOK(t, resp, body)
			if user, pass, ok := (&http.Request{Header: up.last(t).Header}).BasicAuth(); !ok || user != "x-access-token" || pass != realToken {
				t.Errorf("the upstream got Basic %q:%q, want the real password", user, pass)
			}

			// In the body, with in_body.
			req, _ = http.NewRequest("POST", target+"/b", strings.NewReader("body "+tok.Placeholder+" end"))
			resp, body = do(t, client, req)
			mustOK(t, resp, body)
			if got := up.last(t); got.Body != "body "+realToken+" end" {
				t.Errorf("the upstream got body %q, want the real value", got.Body)
			}
			if strings.Contains(body, realToken) {
				t.Error("the response body holds the real value")
			}
			if upH2 && up.last(t).Proto != "HTTP/2.0" {
				t.Errorf("the upstream got %s, want HTTP/2.0", up.last(t).Proto)
			}

			// One connection of the client: the refusals did not end it.
			if n := env.accepted.Load(); n != 1 {
				t.Errorf("the client opened %d connections to the proxy, want 1", n)
			}
			if n := len(env.blocked()); n != 2 {
				t.Errorf("refusals recorded: %+v", env.blocked())
			}
		})
	}
}

func TestInterceptHTTP2Bidirectional(t *testing.T) {
	for _, upH2 := range []bool{false, true} {
		t.Run(fmt.Sprintf("upstream-h2=%v", upH2), func(t *testing.T) {
			pki := newTestPKI(t)
			up := startLineUpstream(t, pki, upH2, realToken)
			tok := newSecret(t, "TOKEN", realToken, fmt.Sprintf("bound.test:%d", up.port))
			tok.InBody = true
			// A secret bound elsewhere: the body is watched, read ahead
			// for a second, then streamed.
			other := newSecret(t, "OTHER", realOther, "second.test:1")
			env := startSecretProxy(t, secretConfig([]*secrets.Secret{tok, other}), pki.pool)
			client := env.h2Client()
			target := fmt.Sprintf("https://bound.test:%d", up.port)

			pr, pw := io.Pipe()
			req, _ := http.NewRequest("POST", target+"/lines", pr)
			req.Header.Set("Authorization", "Bearer "+tok.Placeholder)
			go io.WriteString(pw, "line 0 "+tok.Placeholder+"\n")
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK || resp.ProtoMajor != 2 {
				t.Fatalf("%s %s, want 200 over HTTP/2", resp.Proto, resp.Status)
			}
			if a := resp.Header.Get("X-Echo-Auth"); a != "Bearer "+tok.Placeholder {
				t.Errorf("the client got X-Echo-Auth %q, want the placeholder", a)
			}
			br := bufio.NewReader(resp.Body)
			// Each line is answered before the next is sent.
			for i := range 5 {
				if i > 0 {
					if _, err := fmt.Fprintf(pw, "line %d %s\n", i, tok.Placeholder); err != nil {
						t.Fatal(err)
					}
				}
				line, err := br.ReadString('\n')
				if err != nil {
					t.Fatalf("line %d: %v", i, err)
				}
				// The upstream echoes what it got (the real value, in
				// the body) and adds the real value: both come back as
				// the placeholder.
				if want := fmt.Sprintf("echo line %d %s %s\n", i, tok.Placeholder, tok.Placeholder); line != want {
					t.Errorf("line %d: %q, want %q", i, line, want)
				}
			}
			pw.Close()
			rest, err := io.ReadAll(br)
			if err != nil || len(rest) != 0 {
				t.Errorf("after the last line: %q, %v", rest, err)
			}
			if d := resp.Trailer.Get("X-Done"); d != "5 lines "+tok.Placeholder {
				t.Errorf("trailer X-Done %q, want the placeholder", d)
			}
			if n := len(env.blocked()); n != 0 {
				t.Errorf("refusals recorded: %+v", env.blocked())
			}
		})
	}
}

// A forbidden placeholder in a stream's body after its response began
// resets that stream only: the client's connection goes on serving.
func TestInterceptHTTP2StreamTripped(t *testing.T) {
	pki := newTestPKI(t)
	up := startLineUpstream(t, pki, true, realToken)
	tok := newSecret(t, "TOKEN", realToken, fmt.Sprintf("bound.test:%d", up.port))
	other := newSecret(t, "OTHER", realOther, "second.test:1")
	env := startSecretProxy(t, secretConfig([]*secrets.Secret{tok, other}), pki.pool)
	client := env.h2Client()
	target := fmt.Sprintf("https://bound.test:%d", up.port)

	pr, pw := io.Pipe()
	req, _ := http.NewRequest("POST", target+"/lines", pr)
	go io.WriteString(pw, "first\n")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if line, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(line, "echo first ") {
		t.Fatalf("first line %q, %v", line, err)
	}
	go func() {
		io.WriteString(pw, "then "+other.Placeholder+"\n")
		pw.Close()
	}()
	if rest, err := io.ReadAll(br); err == nil {
		t.Errorf("the stream ended well (%q), want it reset", rest)
	}
	e := env.waitBlocked(1)
	checkBlocked(t, e, "https", "bound.test", up.port, fmt.Sprintf("secret OTHER is not bound to bound.test:%d", up.port))
	if e.Secret != "OTHER" {
		t.Errorf("event %+v, want secret OTHER", e)
	}

	// The connection serves the next stream.
	req, _ = http.NewRequest("POST", target+"/lines", strings.NewReader("again\n"))
	resp2, body := do(t, client, req)
	mustOK(t, resp2, body)
	if body != "echo again "+tok.Placeholder+"\n" {
		t.Errorf("body %q", body)
	}
	if n := env.accepted.Load(); n != 1 {
		t.Errorf("the client opened %d connections to the proxy, want 1", n)
	}
}

// The intercepted TLS offers h2 and http/1.1: a client gets the one it
// offers, and one that offers none gets HTTP/1.1.
func TestInterceptALPN(t *testing.T) {
	pki := newTestPKI(t)
	up := startRecUpstream(t, pki, false, realToken)
	tok := newSecret(t, "TOKEN", realToken, fmt.Sprintf("bound.test:%d", up.port))
	env := startSecretProxy(t, secretConfig([]*secrets.Secret{tok}), pki.pool)
	target := fmt.Sprintf("bound.test:%d", up.port)
	for _, tt := range []struct {
		offer []string
		want  string
	}{
		{[]string{"h2"}, "h2"},
		{[]string{"http/1.1"}, "http/1.1"},
		{[]string{"h2", "http/1.1"}, "h2"},
		{nil, ""},
	} {
		c, br := connectTunnel(t, env.testEnv, target, "")
		if br.Buffered() != 0 {
			t.Fatal("bytes after the CONNECT answer")
		}
		tc := tls.Client(c, &tls.Config{RootCAs: env.caPool, ServerName: "bound.test", NextProtos: tt.offer})
		if err := tc.Handshake(); err != nil {
			t.Fatalf("offering %q: %v", tt.offer, err)
		}
		if got := tc.ConnectionState().NegotiatedProtocol; got != tt.want {
			t.Errorf("offering %q: negotiated %q, want %q", tt.offer, got, tt.want)
		}
		tc.Close()
	}
}

// A slow sandbox keeps its HTTP/2 connection: Go's HTTP/2 server would
// close one whose preface comes more than 10 s after the TLS handshake,
// or whose first SETTINGS comes more than 2 s after the preface (a
// microVM under emulation on a busy machine lost its first request so).
// The proxy waits for both as long as for the handshake.
func TestInterceptHTTP2SlowClient(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	up := startRecUpstream(t, pki, false, realToken)
	tok := newSecret(t, "TOKEN", realToken, fmt.Sprintf("bound.test:%d", up.port))
	env := startSecretProxy(t, secretConfig([]*secrets.Secret{tok}), pki.pool)
	target := fmt.Sprintf("bound.test:%d", up.port)

	c := env.dial(env.httpAddr)
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusOK || br.Buffered() != 0 {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	tc := tls.Client(c, &tls.Config{RootCAs: env.caPool, ServerName: "bound.test", NextProtos: []string{"h2"}})
	if err := tc.Handshake(); err != nil || tc.ConnectionState().NegotiatedProtocol != "h2" {
		t.Fatalf("TLS: %v, protocol %q", err, tc.ConnectionState().NegotiatedProtocol)
	}
	time.Sleep(11 * time.Second)
	if _, err := io.WriteString(tc, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	fr := http2.NewFramer(tc, tc)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "https"}, {":authority", target}, {":path", "/slow"}, {"authorization", "Bearer " + tok.Placeholder}} {
		_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block.Bytes(), EndStream: true, EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	_ = tc.SetReadDeadline(time.Now().Add(time.Minute))
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("the proxy ended the connection before answering: %v", err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = fr.WriteSettingsAck()
			}
		case *http2.GoAwayFrame:
			t.Fatalf("the proxy sent GOAWAY: %v", f.ErrCode)
		case *http2.MetaHeadersFrame:
			if s := f.PseudoValue("status"); s != "200" {
				t.Fatalf("status %s, want 200", s)
			}
			if got := up.last(t); got.Header.Get("Authorization") != "Bearer "+realToken {
				t.Errorf("the upstream got Authorization %q, want the real value", got.Header.Get("Authorization"))
			}
			return
		}
	}
}
