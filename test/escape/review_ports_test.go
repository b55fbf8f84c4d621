//go:build linux

package escape

import (
	"bufio"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// portsDomain is the domain of hutch serve --domain in these tests.
const portsDomain = "ports.hutch.test"

// TestSandboxPortsHostRouting attacks E2B's domain layout (hutch serve
// --domain D over TLS): sandbox ports at PORT-ID.D, private by default.
// No spelling of a host — upper case, a trailing dot, a port in Host, an
// absolute request URI naming another host than Host, X-Forwarded-Host,
// names nested under or around D, a port with leading zeros — reaches a
// sandbox's port without its own traffic access token, or the daemon's
// API without a key: neither the owner's API key, nor another tenant's,
// nor another sandbox's traffic token, nor the envd access token opens
// a port; a sandbox's host never serves the daemon's API; and a port
// nothing in the sandbox listens on is never the host's loopback, where
// a server listens on it (and never sees a connection). Controls: each
// sandbox's own token opens its own port, in every spelling that names
// it.
func TestSandboxPortsHostRouting(t *testing.T) {
	forEachServedTier(t, func(t *testing.T, tierFlags []string) {
		dir := hostDir(t, 0, "serve")
		certs := testutil.NewServerTLS(t, "*."+portsDomain, "127.0.0.1")
		for name, b := range map[string][]byte{"cert.pem": certs.CertPEM, "key.pem": certs.KeyPEM} {
			if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		s := startServed(t, dir, true, append([]string{"--domain", portsDomain,
			"--tls-cert", filepath.Join(dir, "cert.pem"), "--tls-key", filepath.Join(dir, "key.pem")}, tierFlags...)...)
		s.roots = certs.Pool
		addr := strings.TrimPrefix(s.url, "https://")
		client := &http.Client{Timeout: 2 * time.Minute, Transport: &http.Transport{
			DialContext:     testutil.ResolvingDialer(portsDomain, addr),
			TLSClientConfig: &tls.Config{RootCAs: certs.Pool},
		}}
		alice, bob := s.token(t, "alice"), s.token(t, "bob")

		// send sends a request to url with headers (pairs; "Host" sets
		// the Host header) and returns the status and the body.
		send := func(url string, headers ...string) (int, string) {
			t.Helper()
			req, err := http.NewRequest("GET", url, nil)
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i+1 < len(headers); i += 2 {
				if headers[i] == "Host" {
					req.Host = headers[i+1]
				} else {
					req.Header.Set(headers[i], headers[i+1])
				}
			}
			resp, err := client.Do(req)
			if err != nil {
				t.Fatalf("GET %s: %v", url, err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(b)
		}
		type sandboxOf struct{ id, envd, traffic, secret string }
		create := func(key, secret string) sandboxOf {
			t.Helper()
			req, _ := http.NewRequest("POST", "https://api."+portsDomain+"/sandboxes", strings.NewReader(`{"templateID":"base","timeout":600}`))
			req.Header.Set("X-API-Key", key)
			req.Header.Set("Content-Type", "application/json")
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var sb struct {
				SandboxID, EnvdAccessToken, TrafficAccessToken string
			}
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusCreated || json.Unmarshal(b, &sb) != nil || sb.TrafficAccessToken == "" {
				t.Fatalf("E2B create on api.D: %d %s", resp.StatusCode, b)
			}
			// A file server on the sandbox's loopback, its page the
			// sandbox's secret.
			script := "mkdir -p /tmp/www && echo " + secret + " >/tmp/www/index.html && cd /tmp/www && " +
				"(setsid python3 -m http.server 8000 --bind 127.0.0.1 >/dev/null 2>&1 &) && " +
				"for i in $(seq 600); do python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", 8000))' 2>/dev/null && exit 0; sleep 0.1; done; exit 1"
			if _, errOut, code, ok := s.runIn(t, key, sb.SandboxID, script); !ok || code != 0 {
				testutil.Need(t, exists("/usr/bin/python3"), "the sandboxes' file server is python3's http.server")
				t.Fatalf("the file server in %s: %d %s", sb.SandboxID, code, errOut)
			}
			return sandboxOf{sb.SandboxID, sb.EnvdAccessToken, sb.TrafficAccessToken, secret}
		}
		a, b := create(alice, "alice-page-"+randomName("")), create(bob, "bob-page-"+randomName(""))
		host := func(sb sandboxOf) string { return "8000-" + sb.id + "." + portsDomain }

		// opened: the page of sb was served.
		opened := func(what string, status int, body string, sb sandboxOf, want bool) {
			t.Helper()
			got := strings.Contains(body, sb.secret)
			switch {
			case want && (status != http.StatusOK || !got):
				t.Errorf("control, %s: %d %s; want the page of %s", what, status, clip(body), sb.id)
			case !want && got:
				t.Errorf("%s: %d, the page of %s was served", what, status, sb.id)
			}
		}
		for _, sb := range []sandboxOf{a, b} {
			other := b
			if sb == b {
				other = a
			}
			for _, h := range []string{host(sb), strings.ToUpper(host(sb)), host(sb) + ".", host(sb) + ":443"} {
				status, body := send("https://"+host(sb)+"/", "Host", h, "E2b-Traffic-Access-Token", sb.traffic)
				opened("its own token, Host "+h, status, body, sb, true)
				for what, hdr := range map[string][]string{
					"no token":                    nil,
					"the other sandbox's token":   {"E2b-Traffic-Access-Token", other.traffic},
					"its envd access token":       {"E2b-Traffic-Access-Token", sb.envd},
					"alice's API key":             {"X-API-Key", alice, "Authorization", "Bearer " + alice},
					"bob's API key":               {"X-API-Key", bob, "Authorization", "Bearer " + bob},
					"its token as X-Access-Token": {"X-Access-Token", sb.traffic},
				} {
					status, body := send("https://"+host(sb)+"/", append([]string{"Host", h}, hdr...)...)
					opened(what+", Host "+h, status, body, sb, false)
					if status != http.StatusForbidden {
						t.Errorf("%s, Host %s: %d %s, want 403", what, h, status, clip(body))
					}
				}
			}
		}

		// Names that are not a sandbox's host under D: never a port.
		for _, h := range []string{
			"08000-" + a.id + "." + portsDomain, "x." + host(a), host(a) + ".evil.test", portsDomain,
			"8000-" + a.id + "." + strings.TrimPrefix(portsDomain, "ports."), "8000-" + a.id,
		} {
			status, body := send("https://api."+portsDomain+"/", "Host", h, "E2b-Traffic-Access-Token", a.traffic)
			opened("Host "+h, status, body, a, false)
		}

		// X-Forwarded-Host is never read: on a sandbox's host it opens
		// nothing, on api.D it reaches no sandbox.
		status, body := send("https://"+host(a)+"/", "X-Forwarded-Host", "api."+portsDomain, "X-API-Key", alice)
		if status != http.StatusForbidden {
			t.Errorf("X-Forwarded-Host api.D on a sandbox's host: %d %s, want 403", status, clip(body))
		}
		status, body = send("https://api."+portsDomain+"/", "X-Forwarded-Host", host(a), "E2b-Traffic-Access-Token", a.traffic)
		opened("X-Forwarded-Host of a sandbox on api.D", status, body, a, false)

		// The daemon's API through a sandbox's host: the sandbox's own
		// server answers, never the API (whose list would name a).
		for _, p := range []string{"/v1/sandboxes", "/sandboxes", "/metrics"} {
			status, body := send("https://"+host(a)+p, "E2b-Traffic-Access-Token", a.traffic, "X-API-Key", alice, "Authorization", "Bearer "+alice)
			if strings.Contains(body, `"`+a.id+`"`) || strings.Contains(body, "hutch_") || status == http.StatusOK {
				t.Errorf("the API at %s on a sandbox's host: %d %s, want the sandbox's own 404", p, status, clip(body))
			}
			status, body = send("https://49983-"+a.id+"."+portsDomain+p, "X-Access-Token", a.envd, "X-API-Key", alice, "Authorization", "Bearer "+alice)
			if strings.Contains(body, `"`+a.id+`"`) || strings.Contains(body, "hutch_") || status != http.StatusNotFound {
				t.Errorf("the API at %s on envd's host: %d %s, want 404", p, status, clip(body))
			}
		}
		// And without a key api.D is the API, which wants one.
		if status, body := send("https://api." + portsDomain + "/sandboxes"); status != http.StatusUnauthorized {
			t.Errorf("api.D without a key: %d %s, want 401", status, clip(body))
		}

		// Absolute request URIs: the host of the URI routes (as Go's
		// server reads it), whatever Host says; either way no page
		// without its token and no API without a key.
		raw := func(serverName, request string) (int, string) {
			t.Helper()
			conn, err := tls.DialWithDialer(&net.Dialer{Timeout: time.Minute}, "tcp", addr, &tls.Config{ServerName: serverName, RootCAs: certs.Pool})
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(2 * time.Minute))
			if _, err := io.WriteString(conn, request); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatalf("%q: %v", request, err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(b)
		}
		status, body = raw("api."+portsDomain, fmt.Sprintf("GET https://%s/ HTTP/1.1\r\nHost: api.%s\r\nE2b-Traffic-Access-Token: %s\r\nConnection: close\r\n\r\n", host(a), portsDomain, b.traffic))
		opened("an absolute URI of a's host with b's token, Host api.D", status, body, a, false)
		status, body = raw(host(a), fmt.Sprintf("GET https://api.%s/sandboxes HTTP/1.1\r\nHost: %s\r\nE2b-Traffic-Access-Token: %s\r\nConnection: close\r\n\r\n", portsDomain, host(a), a.traffic))
		if status != http.StatusUnauthorized {
			t.Errorf("an absolute URI of api.D without a key, Host a's: %d %s, want 401", status, clip(body))
		}
		status, body = raw(host(a), fmt.Sprintf("GET https://%s/ HTTP/1.1\r\nHost: %s\r\nE2b-Traffic-Access-Token: %s\r\nConnection: close\r\n\r\n", host(a), host(b), a.traffic))
		opened("control: an absolute URI of a's host with a's token, Host b's", status, body, a, true)

		// The host's loopback: a server there, on a port nothing in the
		// sandbox listens on, is never what the port proxy reaches.
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		var accepted atomic.Int32
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				accepted.Add(1)
				_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 13\r\n\r\nhost-loopback")
				c.Close()
			}
		}()
		defer l.Close()
		port := l.Addr().(*net.TCPAddr).Port
		status, body = send(fmt.Sprintf("https://%d-%s.%s/", port, a.id, portsDomain), "E2b-Traffic-Access-Token", a.traffic)
		if status != http.StatusBadGateway || strings.Contains(body, "host-loopback") || !strings.Contains(body, "port is not open") {
			t.Errorf("a's port %d (the host's loopback server's): %d %s, want 502 port not open", port, status, clip(body))
		}
		if n := accepted.Load(); n != 0 {
			t.Errorf("the host's loopback server on %d accepted %d connections", port, n)
		}
	})
}
