package e2b

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/agent"
	"github.com/hutch-sandbox/hutch/internal/daemon"
	"github.com/hutch-sandbox/hutch/internal/envd"
	"github.com/hutch-sandbox/hutch/internal/gvisor"
	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/portconnect"
	"github.com/hutch-sandbox/hutch/internal/portfwd"
	"github.com/hutch-sandbox/hutch/internal/sandbox"
	"github.com/hutch-sandbox/hutch/internal/testutil"
	"golang.org/x/sys/unix"
)

// portServerCommand makes this test binary, run in a sandbox at
// sandbox.SandboxHutch, the server of testPortServer.
const portServerCommand = "e2b-test-port-server"

// This test binary is also what sandboxes run of hutch: port-connect (the
// sandbox's end of the port proxy) and the test's server.
func init() {
	if len(os.Args) < 2 {
		return
	}
	switch os.Args[1] {
	case portconnect.Command:
		os.Exit(portconnect.Main(os.Args[2:], os.Stdin, os.Stdout, os.Stderr))
	case portServerCommand:
		testPortServer(os.Args[2])
		os.Exit(1)
	}
}

// portEcho is what the test's server answers a GET with.
type portEcho struct {
	Host, Path, XForwardedHost, TrafficToken, APIKey string
}

// testPortServer serves on 127.0.0.1:port: a GET is answered with what
// the request carried (portEcho); /stream writes a line and holds the
// response open until the client goes; a request to upgrade to "echo"
// switches to echoing bytes, as a WebSocket's upgrade switches.
func testPortServer(port string) {
	_ = http.ListenAndServe("127.0.0.1:"+port, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Header.Get("Upgrade") == "echo":
			conn, brw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				return
			}
			defer conn.Close()
			_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
			_ = brw.Flush()
			_, _ = io.Copy(conn, brw)
		case r.URL.Path == "/stream":
			_, _ = io.WriteString(w, "first\n")
			_ = http.NewResponseController(w).Flush()
			<-r.Context().Done()
		default:
			_ = json.NewEncoder(w).Encode(portEcho{
				Host: r.Host, Path: r.URL.RequestURI(), XForwardedHost: r.Header.Get("X-Forwarded-Host"),
				TrafficToken: r.Header.Get(TrafficTokenHeader), APIKey: r.Header.Get("X-API-Key"),
			})
		}
	}))
}

// domainClient serves f's stack under testDomain over TLS, with a
// certificate of a CA made here, and returns a client that trusts the CA
// and resolves every name under the domain to that server.
func (f *realFixture) domainClient(t *testing.T) *http.Client {
	t.Helper()
	certs := testutil.NewServerTLS(t, "*."+testDomain, "api."+testDomain)
	srv := httptest.NewUnstartedServer(f.h.Domain(f.srv, envd.Paths, f.envd))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{certs.Cert}, NextProtos: []string{"http/1.1"}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return &http.Client{Transport: &http.Transport{
		DialContext:     testutil.ResolvingDialer(testDomain, srv.Listener.Addr().String()),
		TLSClientConfig: &tls.Config{RootCAs: certs.Pool},
	}}
}

// domainRequest sends method url with headers (pairs) through c.
func domainRequest(t *testing.T, c *http.Client, method, url, body string, headers ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// createOnDomain makes a sandbox of tenant through https://api.D with
// create body body, and returns E2B's answer.
func (f *realFixture) createOnDomain(t *testing.T, c *http.Client, tenant, body string) sandboxJSON {
	t.Helper()
	resp, b := domainRequest(t, c, "POST", "https://api."+testDomain+"/sandboxes", body, "X-API-Key", f.keys[tenant], "Content-Type", "application/json")
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("create on the domain: %d %s", resp.StatusCode, b)
	}
	var sb sandboxJSON
	if err := json.Unmarshal([]byte(b), &sb); err != nil {
		t.Fatal(err)
	}
	if sb.Domain == nil || *sb.Domain != testDomain {
		t.Fatalf("create's domain: %v, want %s", sb.Domain, testDomain)
	}
	return sb
}

// startPortServer starts the test's server on port in tenant's sandbox id
// and waits until the sandbox's loopback answers there.
func (f *realFixture) startPortServer(t *testing.T, tenant, id string, port int) {
	t.Helper()
	ctx := context.Background()
	c, err := f.dm.Agent(ctx, tenant, id)
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.Exec(ctx, agent.ExecRequest{Args: []string{sandbox.SandboxHutch, portServerCommand, strconv.Itoa(port)}})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = io.Copy(io.Discard, p.Stdout) }()
	go func() { _, _ = io.Copy(io.Discard, p.Stderr) }()
	if !testutil.Eventually(3*time.Minute, func() bool {
		conn, err := portfwd.Dial(ctx, c, port)
		if err == nil {
			conn.Close()
		}
		return err == nil
	}) {
		t.Fatalf("the test's server did not listen on %d in %s", port, id)
	}
}

// TestDomainPorts: E2B's domain layout over TLS, as E2B's SDKs use it
// with E2B_DOMAIN alone — api.D, envd at 49983-ID.D, a sandbox's port at
// PORT-ID.D (HTTP, streaming, upgrades) — and the privacy of ports: the
// traffic access token opens its own sandbox's ports only, an API key
// none, a public sandbox's are open; maskRequestHost is the Host the
// server sees.
func TestDomainPorts(t *testing.T) {
	f := newRealFixtureWith(t, daemon.Config{}, WithDomain(testDomain))
	testDomainPorts(t, f)
}

// TestDomainPortsGVisor is TestDomainPorts for sandboxes of the gvisor
// tier.
func TestDomainPortsGVisor(t *testing.T) {
	testutil.RequireRoot(t)
	bin, err := gvisor.Find(testutil.Runsc(t))
	if err != nil {
		t.Fatalf("the test's runsc: %v", err)
	}
	// A state directory of the test's own, beside gVisor's default
	// (which other daemons on this host may use).
	base := gvisor.DefaultStateDir + "-e2b-test-" + sandbox.RandomID()
	t.Cleanup(func() {
		_ = unix.Unmount(base, unix.MNT_DETACH)
		_ = os.Remove(base)
	})
	f := newRealFixtureWith(t, daemon.Config{DefaultTier: policy.TierGVisor, Runtimes: map[string]sandbox.Runtime{
		policy.TierNamespace: sandbox.Namespaces{},
		policy.TierGVisor:    &gvisor.Runtime{Runsc: bin, StateDir: base},
	}}, WithDomain(testDomain))
	testDomainPorts(t, f)
}

func testDomainPorts(t *testing.T, f *realFixture) {
	c := f.domainClient(t)
	const port = 8123
	priv := f.createOnDomain(t, c, "alice", `{"templateID":"base","timeout":300}`)
	if priv.TrafficAccessToken == nil || len(*priv.TrafficAccessToken) != 2*accessTokenBytes || *priv.TrafficAccessToken == priv.EnvdAccessToken {
		t.Fatalf("a private sandbox's traffic access token: %v", priv.TrafficAccessToken)
	}
	tok := *priv.TrafficAccessToken
	pub := f.createOnDomain(t, c, "alice", `{"templateID":"base","timeout":300,"network":{"allowPublicTraffic":true,"maskRequestHost":"custom-host.example.com:${PORT}"}}`)
	if pub.TrafficAccessToken != nil {
		t.Errorf("a public sandbox's traffic access token: %q, want null", *pub.TrafficAccessToken)
	}
	bobs := f.createOnDomain(t, c, "bob", `{"templateID":"base","timeout":300}`)
	f.startPortServer(t, "alice", priv.SandboxID, port)
	f.startPortServer(t, "alice", pub.SandboxID, port)
	f.startPortServer(t, "bob", bobs.SandboxID, port)
	host := func(p int, id string) string { return fmt.Sprintf("https://%d-%s.%s", p, id, testDomain) }

	t.Run("envd", func(t *testing.T) {
		// As the SDK with E2B_DOMAIN: https://49983-ID.D, the access
		// token, no E2b-Sandbox-Id needed.
		resp, b := domainRequest(t, c, "POST", host(EnvdPort, priv.SandboxID)+"/process.Process/List", `{}`,
			"X-Access-Token", priv.EnvdAccessToken, "Content-Type", "application/json")
		// protojson leaves an empty list out: {} is no process.
		var list struct{ Processes []json.RawMessage }
		if resp.StatusCode != http.StatusOK || json.Unmarshal([]byte(b), &list) != nil {
			t.Errorf("envd on the domain: %d %s", resp.StatusCode, b)
		}
		// Another sandbox named in the header, with its token: the
		// host's sandbox alone is served, so the token does not fit.
		resp, b = domainRequest(t, c, "POST", host(EnvdPort, priv.SandboxID)+"/process.Process/List", `{}`,
			"X-Access-Token", bobs.EnvdAccessToken, "E2b-Sandbox-Id", bobs.SandboxID, "Content-Type", "application/json")
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("envd of alice's sandbox with bob's sandbox named and its token: %d %s, want 401", resp.StatusCode, b)
		}
	})

	t.Run("port header", func(t *testing.T) {
		// As the SDK with E2B_SANDBOX_URL: every port's requests to one
		// URL, the port in E2b-Sandbox-Port, the sandbox in
		// E2b-Sandbox-Id; the port's privacy holds.
		api := "https://api." + testDomain
		resp, b := domainRequest(t, c, "GET", api+"/via-header?q=1", "", "E2b-Sandbox-Id", pub.SandboxID, SandboxPortHeader, strconv.Itoa(port))
		var echo portEcho
		if resp.StatusCode != http.StatusOK || json.Unmarshal([]byte(b), &echo) != nil || echo.Path != "/via-header?q=1" {
			t.Errorf("a public port by header: %d %s", resp.StatusCode, b)
		}
		resp, b = domainRequest(t, c, "GET", api+"/x", "", "E2b-Sandbox-Id", priv.SandboxID, SandboxPortHeader, strconv.Itoa(port))
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("a private port by header without its token: %d %s, want 403", resp.StatusCode, b)
		}
		resp, b = domainRequest(t, c, "GET", api+"/x", "", "E2b-Sandbox-Id", priv.SandboxID, SandboxPortHeader, strconv.Itoa(port), TrafficTokenHeader, tok)
		if resp.StatusCode != http.StatusOK {
			t.Errorf("a private port by header with its token: %d %s", resp.StatusCode, b)
		}
		// envd's port is the listener's own routes; a bad port or no
		// sandbox is a clear 400.
		resp, b = domainRequest(t, c, "GET", api+"/health", "", "E2b-Sandbox-Id", pub.SandboxID, SandboxPortHeader, strconv.Itoa(EnvdPort))
		if strings.Contains(b, "/health") && resp.StatusCode == http.StatusOK {
			t.Errorf("envd's port by header reached the sandbox's server: %d %s", resp.StatusCode, b)
		}
		for _, hv := range [][]string{{SandboxPortHeader, "http"}, {SandboxPortHeader, "70000"}, {SandboxPortHeader, "8123"}} {
			resp, b = domainRequest(t, c, "GET", api+"/x", "", hv...)
			if resp.StatusCode != http.StatusBadRequest || !strings.Contains(b, SandboxPortHeader) {
				t.Errorf("%q: %d %s, want 400 naming the header", hv, resp.StatusCode, b)
			}
		}
	})

	t.Run("private", func(t *testing.T) {
		resp, b := domainRequest(t, c, "GET", host(port, priv.SandboxID)+"/x", "")
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(b, TrafficTokenHeader) {
			t.Errorf("a private port without the token: %d %s, want 403 naming the header", resp.StatusCode, b)
		}
		for name, hdr := range map[string][]string{
			"the owner's API key":         {"X-API-Key", f.keys["alice"]},
			"the envd access token":       {TrafficTokenHeader, priv.EnvdAccessToken},
			"another sandbox's token":     {TrafficTokenHeader, *bobs.TrafficAccessToken},
			"the token in another header": {"X-Access-Token", tok},
		} {
			resp, b := domainRequest(t, c, "GET", host(port, priv.SandboxID)+"/x", "", hdr...)
			if resp.StatusCode != http.StatusForbidden {
				t.Errorf("a private port with %s: %d %s, want 403", name, resp.StatusCode, b)
			}
		}
		resp, b = domainRequest(t, c, "GET", host(port, priv.SandboxID)+"/x?y=1", "", TrafficTokenHeader, tok, "X-API-Key", "not-for-the-sandbox")
		var got portEcho
		if resp.StatusCode != http.StatusOK || json.Unmarshal([]byte(b), &got) != nil {
			t.Fatalf("a private port with its token: %d %s", resp.StatusCode, b)
		}
		want := fmt.Sprintf("%d-%s.%s", port, priv.SandboxID, testDomain)
		if got.Host != want || got.Path != "/x?y=1" || got.TrafficToken != "" || got.XForwardedHost != want {
			t.Errorf("the server saw %+v; want Host %s, the path, no traffic token", got, want)
		}
	})

	t.Run("public and maskRequestHost", func(t *testing.T) {
		resp, b := domainRequest(t, c, "GET", host(port, pub.SandboxID)+"/", "")
		var got portEcho
		if resp.StatusCode != http.StatusOK || json.Unmarshal([]byte(b), &got) != nil {
			t.Fatalf("a public port: %d %s", resp.StatusCode, b)
		}
		if want := fmt.Sprintf("custom-host.example.com:%d", port); got.Host != want {
			t.Errorf("the server saw Host %q, want %q", got.Host, want)
		}
		resp, b = domainRequest(t, c, "GET", "https://api."+testDomain+"/sandboxes/"+pub.SandboxID, "", "X-API-Key", f.keys["alice"])
		if resp.StatusCode != http.StatusOK || !strings.Contains(b, `"allowPublicTraffic":true`) || !strings.Contains(b, `"maskRequestHost":"custom-host.example.com:${PORT}"`) || !strings.Contains(b, `"domain":"`+testDomain+`"`) {
			t.Errorf("GET the public sandbox: %d %s", resp.StatusCode, b)
		}
	})

	t.Run("stream and upgrade", func(t *testing.T) {
		req, _ := http.NewRequest("GET", host(port, pub.SandboxID)+"/stream", nil)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		resp, err := c.Do(req.WithContext(ctx))
		if err != nil {
			t.Fatal(err)
		}
		line, err := bufio.NewReader(resp.Body).ReadString('\n')
		if err != nil || line != "first\n" {
			t.Errorf("a streamed response: %q, %v", line, err)
		}
		cancel()
		resp.Body.Close()

		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: time.Minute}, "tcp", listenerOf(t, c), &tls.Config{
			ServerName: fmt.Sprintf("%d-%s.%s", port, priv.SandboxID, testDomain), RootCAs: c.Transport.(*http.Transport).TLSClientConfig.RootCAs,
		})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		fmt.Fprintf(conn, "GET /ws HTTP/1.1\r\nHost: %d-%s.%s\r\n%s: %s\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n", port, priv.SandboxID, testDomain, TrafficTokenHeader, tok)
		br := bufio.NewReader(conn)
		resp, err = http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
			t.Fatalf("upgrade: %v %v", resp, err)
		}
		fmt.Fprint(conn, "ping\n")
		if got, err := br.ReadString('\n'); err != nil || got != "ping\n" {
			t.Errorf("echo over the upgraded connection: %q, %v", got, err)
		}
	})

	t.Run("not listening and host loopback", func(t *testing.T) {
		// A server on the host's loopback, on a port nothing in the
		// sandbox listens on: the proxy reaches the sandbox's loopback,
		// never the host's.
		hostSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "the host's loopback") }))
		defer hostSrv.Close()
		_, hp, _ := net.SplitHostPort(hostSrv.Listener.Addr().String())
		resp, b := domainRequest(t, c, "GET", host(mustAtoi(t, hp), pub.SandboxID)+"/", "")
		if resp.StatusCode != http.StatusBadGateway || strings.Contains(b, "the host's loopback") || !strings.Contains(b, "port is not open") {
			t.Errorf("a port nothing listens on in the sandbox, the host's loopback server on it: %d %s", resp.StatusCode, b)
		}
	})

	t.Run("paused and gone", func(t *testing.T) {
		if w := f.as("bob", "POST", "/sandboxes/"+bobs.SandboxID+"/pause", ""); w.Code != http.StatusNoContent {
			t.Fatalf("pause: %d %s", w.Code, w.Body)
		}
		resp, b := domainRequest(t, c, "GET", host(port, bobs.SandboxID)+"/", "", TrafficTokenHeader, *bobs.TrafficAccessToken)
		if resp.StatusCode != http.StatusBadGateway || !strings.Contains(b, "paused") {
			t.Errorf("a paused sandbox's port: %d %s, want 502 saying it is paused", resp.StatusCode, b)
		}
		if w := f.as("bob", "DELETE", "/sandboxes/"+bobs.SandboxID, ""); w.Code != http.StatusNoContent {
			t.Fatalf("kill: %d %s", w.Code, w.Body)
		}
		resp, b = domainRequest(t, c, "GET", host(port, bobs.SandboxID)+"/", "", TrafficTokenHeader, *bobs.TrafficAccessToken)
		var pe proxyError
		if resp.StatusCode != http.StatusBadGateway || json.Unmarshal([]byte(b), &pe) != nil || pe.Message != "The sandbox was not found" || pe.SandboxID != bobs.SandboxID || pe.Code != 502 {
			t.Errorf("a killed sandbox's port: %d %s, want E2B's 502", resp.StatusCode, b)
		}
	})
}

// listenerOf is the address c's resolver sends the test domain to.
func listenerOf(t *testing.T, c *http.Client) string {
	t.Helper()
	conn, err := c.Transport.(*http.Transport).DialContext(context.Background(), "tcp", "api."+testDomain+":443")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	return conn.RemoteAddr().String()
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
