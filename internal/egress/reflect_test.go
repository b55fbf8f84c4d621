package egress

import (
	"crypto/tls"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"sync"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/secrets"
)

// A real value an upstream reflects is redacted wherever a response
// carries it: header names and values, trailer names and values
// (announced or not), interim (1xx) responses, the status text, and the
// proxy's own error messages; HTTP/1.1 and HTTP/2 on either side.

// startReflector starts an upstream (over TLS with pki's certificate, in
// clear text when pki is nil; HTTP/2 too when h2) that takes the real
// value from the request's Authorization ("Bearer VALUE") and reflects it:
//
//	/everywhere  a 103 with the value in a header name and value, then
//	             the value in header names and values, the body, and
//	             trailers (announced and not) by name and value
//	/status      (HTTP/1.1) the value in the status text of a 103 and of
//	             the final response, and in their headers
//	/malformed   (HTTP/1.1) a response whose header line is the value
//	             alone, which the proxy cannot read
func startReflector(t *testing.T, pki *testPKI, h2 bool) int {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		real := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		switch r.URL.Path {
		case "/everywhere":
			h := w.Header()
			h.Set("X-Hint-"+real, real)
			w.WriteHeader(http.StatusEarlyHints)
			clear(h)
			h.Set("X-Name-"+real, "name")
			h.Set("X-Value", "value "+real)
			h.Set("Trailer", "X-Trailer-"+real+", X-Trailer-Value")
			w.WriteHeader(http.StatusOK)
			fmt.Fprintf(w, "body %s\n", real)
			h.Set("X-Trailer-"+real, "trailer name")
			h.Set("X-Trailer-Value", "trailer "+real)
			h.Set(http.TrailerPrefix+"X-Late-"+real, "late "+real)
		case "/status", "/malformed":
			conn, brw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				return
			}
			defer conn.Close()
			if r.URL.Path == "/status" {
				fmt.Fprintf(brw, "HTTP/1.1 103 Hint %s\r\nX-Hint-%s: %s\r\n\r\n", real, real, real)
				fmt.Fprintf(brw, "HTTP/1.1 200 OK %s\r\nX-Raw-%s: raw %s\r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n", real, real, real)
			} else {
				fmt.Fprintf(brw, "HTTP/1.1 200 OK\r\n%s\r\nContent-Length: 0\r\n\r\n", real)
			}
			brw.Flush()
		}
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	if pki == nil {
		srv.Start()
	} else {
		srv.TLS = &tls.Config{Certificates: []tls.Certificate{pki.issue(t, "bound.test", "loose.test")}}
		srv.EnableHTTP2 = h2
		srv.StartTLS()
	}
	t.Cleanup(srv.Close)
	return portOf(t, srv.Listener.Addr().String())
}

// seenBySandbox is everything of a response a client through the proxy
// sees, as text: status, interim responses, header, body and trailer.
type seenBySandbox struct {
	mu    sync.Mutex
	parts []string
}

func (s *seenBySandbox) add(what string, h http.Header) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, vs := range h {
		s.parts = append(s.parts, what+" name "+k)
		for _, v := range vs {
			s.parts = append(s.parts, what+" value "+k+": "+v)
		}
	}
}

// fetch sends GET url with the placeholder through client and collects
// what the client sees.
func (s *seenBySandbox) fetch(t *testing.T, client *http.Client, url, ph string) *http.Response {
	t.Helper()
	trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
		s.add(fmt.Sprintf("%d", code), http.Header(h))
		return nil
	}}
	req := mustRequest(t, "GET", url)
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), trace))
	req.Header.Set("Authorization", "Bearer "+ph)
	resp, body := do(t, client, req)
	s.mu.Lock()
	s.parts = append(s.parts, "status "+resp.Status, "body "+body)
	s.mu.Unlock()
	s.add("header", resp.Header)
	s.add("trailer", resp.Trailer)
	return resp
}

// check fails the test where the real value, in any case or encoding,
// is in what the client saw; the placeholder must be where want says.
func (s *seenBySandbox) check(t *testing.T, sec *secrets.Secret, want ...string) {
	t.Helper()
	all := strings.Join(s.parts, "\n")
	lower := strings.ToLower(all)
	for _, form := range secrets.RedactionPairs(sec.Value.Bytes(), []byte(sec.Placeholder)) {
		if strings.Contains(lower, strings.ToLower(string(form[0]))) {
			t.Errorf("the client saw the real value (as %q):\n%s", form[0], all)
		}
	}
	for _, w := range want {
		if !strings.Contains(lower, strings.ToLower(w)) {
			t.Errorf("the client did not see %q:\n%s", w, all)
		}
	}
}

// TestReflectedValueRedacted: through intercepted TLS (HTTP/1.1 and
// HTTP/2 clients, HTTP/1.1 and HTTP/2 upstreams) and plain HTTP
// forwarding, the real value an upstream reflects reaches the client
// nowhere; its placeholder stands in.
func TestReflectedValueRedacted(t *testing.T) {
	pki := newTestPKI(t)
	for _, tc := range []struct {
		name       string
		clientH2   bool
		upstreamH2 bool
	}{{"h1-h1", false, false}, {"h1-h2", false, true}, {"h2-h1", true, false}, {"h2-h2", true, true}} {
		t.Run(tc.name, func(t *testing.T) {
			port := startReflector(t, pki, tc.upstreamH2)
			tok := newSecret(t, "TOKEN", realToken, fmt.Sprintf("bound.test:%d", port))
			env := startSecretProxy(t, secretConfig([]*secrets.Secret{tok}), pki.pool)
			client := env.client(env.caPool)
			if tc.clientH2 {
				client = env.h2Client()
			}
			ph := tok.Placeholder
			base := fmt.Sprintf("https://bound.test:%d", port)
			var seen seenBySandbox
			resp := seen.fetch(t, client, base+"/everywhere", ph)
			mustOK(t, resp, "")
			want := []string{"X-Name-" + ph, "value " + ph, "body " + ph, "X-Hint-" + ph, "X-Trailer-" + ph}
			if tc.clientH2 || !tc.upstreamH2 {
				// (An HTTP/2 upstream's response comes with its length,
				// which an HTTP/1.1 answer keeps: no trailer then.)
				want = append(want, "trailer "+ph, "X-Late-"+ph, "late "+ph)
			}
			seen.check(t, tok, want...)
			if !tc.upstreamH2 {
				var raw seenBySandbox
				resp = raw.fetch(t, client, base+"/status", ph)
				mustOK(t, resp, "")
				raw.check(t, tok, "X-Raw-"+ph, "raw "+ph)
				var bad seenBySandbox
				resp = bad.fetch(t, client, base+"/malformed", ph)
				if resp.StatusCode != http.StatusBadGateway {
					t.Errorf("a malformed response: %s, want 502", resp.Status)
				}
				bad.check(t, tok)
			}
		})
	}
	t.Run("plain", func(t *testing.T) {
		port := startReflector(t, nil, false)
		tok := newSecret(t, "TOKEN", realToken, fmt.Sprintf("loose.test:%d", port))
		tok.AllowPlainHTTP = true
		env := startSecretProxy(t, secretConfig([]*secrets.Secret{tok}), nil)
		client := env.client(nil)
		ph := tok.Placeholder
		base := fmt.Sprintf("http://loose.test:%d", port)
		var seen seenBySandbox
		mustOK(t, seen.fetch(t, client, base+"/everywhere", ph), "")
		seen.check(t, tok, "X-Name-"+ph, "value "+ph, "body "+ph, "X-Hint-"+ph, "X-Trailer-"+ph, "trailer "+ph, "X-Late-"+ph, "late "+ph)
		var raw seenBySandbox
		resp := raw.fetch(t, client, base+"/status", ph)
		mustOK(t, resp, "")
		raw.check(t, tok, "OK "+ph, "X-Raw-"+ph, "raw "+ph)
		// Every byte on the wire, the interim response's status text
		// included (which Go's client does not show).
		c := env.dial(env.httpAddr)
		fmt.Fprintf(c, "GET %s/status HTTP/1.1\r\nHost: loose.test:%d\r\nAuthorization: Bearer %s\r\nConnection: close\r\n\r\n", base, port, ph)
		wire, err := io.ReadAll(c)
		if err != nil {
			t.Fatal(err)
		}
		onWire := seenBySandbox{parts: []string{string(wire)}}
		onWire.check(t, tok, "103 Hint "+ph, "200 OK "+ph)
		var bad seenBySandbox
		if resp := bad.fetch(t, client, base+"/malformed", ph); resp.StatusCode != http.StatusBadGateway {
			t.Errorf("a malformed response: %s, want 502", resp.Status)
		}
		bad.check(t, tok)
	})
}

// TestScrubQuoted: the proxy's error messages, which quote what they
// show as Go does (%q), lose a real value in that spelling too.
func TestScrubQuoted(t *testing.T) {
	real := "REAL\x01value\tWITH\"quotes\\0123456789"
	s := newSecret(t, "ODD", real, "bound.test")
	r, _ := mustRules(t, Config{Secrets: []*secrets.Secret{s}}, nil)
	for _, msg := range []string{fmt.Sprintf("malformed header %q", real), "raw " + real} {
		got := r.scrub(msg)
		if strings.Contains(got, "REAL") || !strings.Contains(got, "[redacted]") {
			t.Errorf("scrub(%q) = %q", msg, got)
		}
	}
}
