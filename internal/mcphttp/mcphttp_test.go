package mcphttp

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/hutch-sandbox/hutch/internal/api"
	"github.com/hutch-sandbox/hutch/internal/api/apitest"
	"github.com/hutch-sandbox/hutch/internal/audit"
	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// env is the handler on the daemon's listeners, as hutch serve mounts it
// (api.Serve: origins and peer checks), over a stand-in daemon
// (apitest): a TCP listener on loopback and a unix socket.
type env struct {
	h    *Handler
	m    *apitest.Manager
	tcp  string // http://127.0.0.1:PORT
	sock string
}

func newEnv(t *testing.T, cfg Config) *env {
	t.Helper()
	m, err := apitest.NewManager(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	cfg.Sandboxes = m
	h, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "mcphttp-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "s.sock")
	ls, err := api.Listen(sock, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- api.Serve(ctx, h.Mount(api.New(m, nil)), nil, ls...) }()
	t.Cleanup(func() {
		h.Close()
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return &env{h: h, m: m, tcp: "http://" + ls[1].Addr().String(), sock: sock}
}

// token makes a token of tenant.
func (e *env) token(t *testing.T, tenant string) string {
	t.Helper()
	tok, err := e.m.Store().CreateToken(context.Background(), tenant)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// bearer is a transport that adds a token to every request.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// httpClient is a client of the TCP listener with token, or of the unix
// socket without one when token is "".
func (e *env) httpClient(t *testing.T, token string) *http.Client {
	t.Helper()
	tr := &http.Transport{}
	if token == "" {
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", e.sock)
		}
	}
	t.Cleanup(tr.CloseIdleConnections)
	var rt http.RoundTripper = tr
	if token != "" {
		rt = bearer{token, tr}
	}
	return &http.Client{Transport: rt}
}

// base is where a client with token reaches the daemon.
func (e *env) base(token string) string {
	if token == "" {
		return "http://hutch"
	}
	return e.tcp
}

// connect opens an MCP session at path with token (none: on the socket),
// speaking protocol version (the SDK's newest when "").
func (e *env) connect(t *testing.T, token, path, version string) *sdk.ClientSession {
	t.Helper()
	c := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil)
	cs, err := c.Connect(context.Background(), &sdk.StreamableClientTransport{
		Endpoint: e.base(token) + path, HTTPClient: e.httpClient(t, token), MaxRetries: -1,
	}, &sdk.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatalf("connect to %s: %v", path, err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

const initialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`

// post sends body to path as an MCP client does, with the headers hdr
// (Authorization among them, or none), and returns the answer's status,
// headers and body.
func (e *env) post(t *testing.T, c *http.Client, url, body string, hdr map[string]string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range hdr {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, string(b)
}

// apiError decodes an answer of hutch's API's error shape.
func apiError(t *testing.T, body string) api.ErrorBody {
	t.Helper()
	var e api.ErrorBody
	if err := json.Unmarshal([]byte(body), &e); err != nil || e.Code == "" || e.Message == "" {
		t.Fatalf("not an error of hutch's API: %q (%v)", body, err)
	}
	return e
}

// TestAuthentication: /mcp takes the API's tokens (E2B-shaped ones too)
// and, on the unix socket, no token; anything else is a 401 in the API's
// shape, with WWW-Authenticate.
func TestAuthentication(t *testing.T) {
	e := newEnv(t, Config{})
	plain := &http.Client{}
	for _, tc := range []struct{ name, authz, want string }{
		{"no token", "", "needs a token"},
		{"not bearer", "Basic eDp5", "want Bearer"},
		{"unknown token", "Bearer hutch_nope", "not valid"},
	} {
		for _, path := range []string{Path, StatelessPath} {
			hdr := map[string]string{}
			if tc.authz != "" {
				hdr["Authorization"] = tc.authz
			}
			status, h, body := e.post(t, plain, e.tcp+path, initialize, hdr)
			if status != http.StatusUnauthorized || h.Get("WWW-Authenticate") != `Bearer realm="hutch"` {
				t.Errorf("%s on %s: %d %q %s, want 401 with WWW-Authenticate", tc.name, path, status, h.Get("WWW-Authenticate"), body)
				continue
			}
			if eb := apiError(t, body); eb.Code != api.CodeUnauthorized || !strings.Contains(eb.Message, tc.want) {
				t.Errorf("%s on %s: %+v, want unauthorized saying %q", tc.name, path, eb, tc.want)
			}
		}
	}
	tok := e.token(t, "alice")
	e2bTok, err := e.m.Store().CreateE2BToken(context.Background(), "alice")
	if err != nil {
		t.Fatal(err)
	}
	for _, token := range []string{tok, e2bTok, ""} {
		for _, path := range []string{Path, StatelessPath} {
			cs := e.connect(t, token, path, "2025-11-25")
			if _, err := cs.ListTools(context.Background(), nil); err != nil {
				t.Errorf("tools/list on %s (token %q): %v", path, token, err)
			}
		}
	}
}

// TestSessionBoundToTenant: a session id is useless to another tenant, and
// to the same tenant through the other kind of listener (the socket's
// sessions have the operator's rights); the session goes on for its own.
func TestSessionBoundToTenant(t *testing.T) {
	e := newEnv(t, Config{})
	alice, bob := e.token(t, "alice"), e.token(t, "bob")
	cs := e.connect(t, alice, Path, "")
	id := cs.ID()
	if id == "" {
		t.Fatal("no session id")
	}
	ping := `{"jsonrpc":"2.0","id":2,"method":"ping"}`
	hdr := func(token string) map[string]string {
		h := map[string]string{"Mcp-Session-Id": id, "MCP-Protocol-Version": "2025-11-25"}
		if token != "" {
			h["Authorization"] = "Bearer " + token
		}
		return h
	}
	if status, _, body := e.post(t, &http.Client{}, e.tcp+Path, ping, hdr(bob)); status != http.StatusForbidden {
		t.Errorf("bob's ping in alice's session: %d %s, want 403", status, body)
	}
	if status, _, body := e.post(t, e.httpClient(t, ""), "http://hutch"+Path, ping, hdr("")); status != http.StatusForbidden {
		t.Errorf("the operator's ping in alice's session: %d %s, want 403", status, body)
	}
	if status, _, body := e.post(t, e.httpClient(t, ""), "http://hutch"+Path, ping, hdr(alice)); status != http.StatusForbidden {
		t.Errorf("alice's ping in her TCP session through the socket: %d %s, want 403", status, body)
	}
	del, err := http.NewRequest(http.MethodDelete, e.tcp+Path, nil)
	if err != nil {
		t.Fatal(err)
	}
	del.Header.Set("Mcp-Session-Id", id)
	del.Header.Set("Authorization", "Bearer "+bob)
	resp, err := http.DefaultClient.Do(del)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("bob's DELETE of alice's session: %d, want 403", resp.StatusCode)
	}
	if err := cs.Ping(context.Background(), nil); err != nil {
		t.Errorf("alice's session after the others' attempts: %v", err)
	}
	if status, _, body := e.post(t, &http.Client{}, e.tcp+Path, ping, hdr(alice)); status != http.StatusOK || !strings.Contains(body, `"id":2`) {
		t.Errorf("alice's own ping: %d %s", status, body)
	}
}

// TestRebinding: on TCP, a Host that is neither the address reached nor
// an allowed name, and an Origin of another site, are refused before any
// token is looked at; the listener's own address and localhost (on
// loopback) are answered.
func TestRebinding(t *testing.T) {
	e := newEnv(t, Config{AllowedHosts: []string{"mcp.example.org"}, PublicURL: "https://hutch.example.net"})
	tok := e.token(t, "alice")
	c := &http.Client{}
	own := strings.TrimPrefix(e.tcp, "http://")
	_, port, _ := net.SplitHostPort(own)
	authz := "Bearer " + tok
	for _, tc := range []struct {
		name string
		hdr  map[string]string
		ok   bool
		// sdk: refused by the SDK's check, which comes after the
		// token's.
		sdk bool
	}{
		{"own address", map[string]string{}, true, false},
		{"localhost", map[string]string{"Host": "localhost:" + port}, true, false},
		// A loopback listener answers loopback names only (the SDK's
		// check), even those allowed; CheckHost allows them elsewhere
		// (TestCheckHost).
		{"allowed name on loopback", map[string]string{"Host": "MCP.example.org:443"}, false, true},
		{"same origin", map[string]string{"Origin": e.tcp}, true, false},
		{"allowed origin", map[string]string{"Origin": "https://mcp.example.org"}, true, false},
		{"same-origin fetch", map[string]string{"Sec-Fetch-Site": "same-origin"}, true, false},
		{"rebound name", map[string]string{"Host": "evil.example.com:" + port}, false, false},
		{"rebound name, its origin", map[string]string{"Host": "evil.example.com", "Origin": "http://evil.example.com"}, false, false},
		{"other address", map[string]string{"Host": "10.9.8.7:" + port}, false, false},
		{"other origin", map[string]string{"Origin": "http://evil.example.com"}, false, false},
		{"other port", map[string]string{"Origin": "http://127.0.0.1:1"}, false, false},
		{"null origin", map[string]string{"Origin": "null"}, false, false},
		{"cross-site fetch", map[string]string{"Sec-Fetch-Site": "cross-site"}, false, false},
	} {
		for _, withToken := range []bool{true, false} {
			hdr := map[string]string{}
			for k, v := range tc.hdr {
				hdr[k] = v
			}
			if withToken {
				hdr["Authorization"] = authz
			}
			status, _, body := e.post(t, c, e.tcp+Path, initialize, hdr)
			switch {
			case tc.ok && withToken && status != http.StatusOK:
				t.Errorf("%s: %d %s, want 200", tc.name, status, body)
			case (tc.ok || tc.sdk) && !withToken && status != http.StatusUnauthorized:
				t.Errorf("%s without a token: %d %s, want 401", tc.name, status, body)
			case !tc.ok && (withToken || !tc.sdk) && status != http.StatusForbidden:
				t.Errorf("%s (token %v): %d %s, want 403", tc.name, withToken, status, body)
			case !tc.ok && status == http.StatusForbidden && !strings.Contains(body, "invalid Host header") && apiError(t, body).Code != api.CodePermissionDenied:
				t.Errorf("%s: %s, want permission_denied", tc.name, body)
			}
		}
	}
	// The unix socket is reached by no browser: any Host will do, an
	// Origin of another site will not.
	if status, _, body := e.post(t, e.httpClient(t, ""), "http://whatever.example"+Path, initialize, nil); status != http.StatusOK {
		t.Errorf("socket, any Host: %d %s", status, body)
	}
	if status, _, body := e.post(t, e.httpClient(t, ""), "http://hutch"+Path, initialize, map[string]string{"Origin": "http://evil.example.com"}); status != http.StatusForbidden {
		t.Errorf("socket, Origin of another site: %d %s, want 403", status, body)
	}
}

// TestCheckHost: on a TCP listener of any address, a Host is answered
// when it is that address, an allowed name or the public URL's host, and
// localhost only on loopback.
func TestCheckHost(t *testing.T) {
	h := &Handler{allowed: api.Hosts{"mcp.example.org": true, "203.0.113.9": true}}
	for _, tc := range []struct {
		local, host string
		ok          bool
	}{
		{"192.0.2.1:7070", "192.0.2.1:7070", true},
		{"192.0.2.1:7070", "192.0.2.1", true},
		{"192.0.2.1:7070", "mcp.example.org:7070", true},
		{"192.0.2.1:7070", "MCP.Example.org.", true},
		{"192.0.2.1:7070", "203.0.113.9:80", true},
		{"[2001:db8::1]:7070", "[2001:db8::1]:7070", true},
		{"[::ffff:192.0.2.1]:7070", "192.0.2.1:7070", true},
		{"127.0.0.1:7070", "localhost:7070", true},
		{"[::1]:7070", "[::1]:7070", true},
		{"192.0.2.1:7070", "localhost:7070", false},
		{"192.0.2.1:7070", "192.0.2.2:7070", false},
		{"192.0.2.1:7070", "evil.example.com", false},
		{"192.0.2.1:7070", "mcp.example.org.evil.example.com", false},
		{"192.0.2.1:7070", "", false},
	} {
		r, err := http.NewRequest(http.MethodPost, "http://x/mcp", nil)
		if err != nil {
			t.Fatal(err)
		}
		r.Host = tc.host
		local, err := net.ResolveTCPAddr("tcp", tc.local)
		if err != nil {
			t.Fatal(err)
		}
		r = r.WithContext(api.WithOrigin(context.WithValue(r.Context(), http.LocalAddrContextKey, net.Addr(local)), api.OriginRemote))
		if err := h.allowed.CheckHost(r); (err == nil) != tc.ok {
			t.Errorf("Host %q on %s: %v, want allowed %v", tc.host, tc.local, err, tc.ok)
		}
	}
}

// TestLinksAndRoutes: a link is served without a token (its URL is the
// capability); nothing else under /mcp is.
func TestLinksAndRoutes(t *testing.T) {
	e := newEnv(t, Config{})
	url, err := e.h.links.Publish("alice", e.tcp+LinksPath, "x.bin", "", 5, func(_ context.Context, w io.Writer) error {
		_, err := io.WriteString(w, "hello")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(b) != "hello" {
		t.Errorf("GET %s without a token: %d %q", url, resp.StatusCode, b)
	}
	for _, p := range []string{"/mcp/linksx", "/mcp/other", "/mcp/stateless/x", "/mcp/links/../stateless"} {
		resp, err := http.Get(e.tcp + p)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound && resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("GET %s without a token: %d %s, want 404 or 401", p, resp.StatusCode, b)
		}
	}
	// hutch's own API is still there, behind its tokens.
	resp, err = http.Get(e.tcp + "/v1/sandboxes")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET /v1/sandboxes without a token: %d, want 401", resp.StatusCode)
	}
}

// TestLimits: a body over MaxBody is refused (413); a tenant's sessions
// are bounded (429 in the API's shape), another tenant's are not counted
// with them, and a session ended frees its place; an idle session ends.
func TestLimits(t *testing.T) {
	e := newEnv(t, Config{MaxBody: 4096, MaxSessions: 2, SessionTimeout: time.Hour})
	alice, bob := e.token(t, "alice"), e.token(t, "bob")
	c := e.httpClient(t, alice)
	big := `{"jsonrpc":"2.0","id":1,"method":"ping","params":{"_meta":{"pad":"` + strings.Repeat("x", 5000) + `"}}}`
	for _, p := range []string{Path, StatelessPath} {
		if status, _, body := e.post(t, c, e.tcp+p, big, nil); status != http.StatusRequestEntityTooLarge {
			t.Errorf("POST %s of %d bytes: %d %s, want 413", p, len(big), status, body)
		}
	}
	s1 := e.connect(t, alice, Path, "")
	e.connect(t, alice, Path, "")
	status, _, body := e.post(t, c, e.tcp+Path, initialize, nil)
	if status != http.StatusTooManyRequests || apiError(t, body).Code != api.CodeQuota {
		t.Errorf("alice's third session: %d %s, want 429 quota", status, body)
	}
	e.connect(t, bob, Path, "")
	if err := s1.Close(); err != nil {
		t.Fatal(err)
	}
	if !testutil.Eventually(time.Minute, func() bool { return e.h.sessions("alice") < 2 }) {
		t.Fatal("the session alice closed is still counted")
	}
	e.connect(t, alice, Path, "")

	idle := newEnv(t, Config{SessionTimeout: 50 * time.Millisecond})
	tok := idle.token(t, "alice")
	cs := idle.connect(t, tok, Path, "")
	if !testutil.Eventually(time.Minute, func() bool { return idle.h.sessions("alice") == 0 }) {
		t.Fatal("an idle session did not end")
	}
	if err := cs.Ping(context.Background(), nil); err == nil {
		t.Error("a ping in a session that idled out succeeded")
	}
}

// TestProtocolRevisions: a client of the newest revision (no sessions) is
// served at StatelessPath as it speaks, and falls back to a session at
// Path; a client of an older one is served at both.
func TestProtocolRevisions(t *testing.T) {
	e := newEnv(t, Config{})
	tok := e.token(t, "alice")
	for _, tc := range []struct {
		path, version string
		session       bool
	}{
		{Path, "", true},
		{Path, "2025-06-18", true},
		{StatelessPath, "", false},
		{StatelessPath, "2025-11-25", false},
	} {
		cs := e.connect(t, tok, tc.path, tc.version)
		if got := cs.ID() != ""; got != tc.session {
			t.Errorf("%s, version %q: session id %q", tc.path, tc.version, cs.ID())
		}
		if _, err := cs.ListTools(context.Background(), nil); err != nil {
			t.Errorf("%s, version %q: tools/list: %v", tc.path, tc.version, err)
		}
	}
	// The stateless path has nothing to GET or DELETE.
	req, _ := http.NewRequest(http.MethodGet, e.tcp+StatelessPath, nil)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := e.httpClient(t, tok).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET %s: %d, want 405", StatelessPath, resp.StatusCode)
	}
}

// TestClose: Close ends the sessions, whose clients see their connection
// end.
func TestClose(t *testing.T) {
	e := newEnv(t, Config{})
	cs := e.connect(t, e.token(t, "alice"), Path, "")
	e.h.Close()
	if !testutil.Eventually(time.Minute, func() bool { return e.h.sessions("alice") == 0 }) {
		t.Fatal("a session outlived Close")
	}
	if err := cs.Ping(context.Background(), nil); err == nil || errors.Is(err, context.Canceled) {
		t.Errorf("a ping after Close: %v, want the session gone", err)
	}
}

// callTool calls a tool; it fails the test on a protocol error, not on a
// tool error.
func callTool(t *testing.T, cs *sdk.ClientSession, name string, args map[string]any) *sdk.CallToolResult {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return res
}

// structured is a result's structured content.
func structured(t *testing.T, res *sdk.CallToolResult) map[string]any {
	t.Helper()
	b, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("structured content %s: %v", b, err)
	}
	return m
}

// TestToolCalls: every tool call is in the audit log (tenant, tool,
// sandbox, argument size, duration, outcome) and counted; a tenant's
// sandboxes are its own, and the operator's rights come with the socket
// only; links point under the request's Host, or the public URL.
func TestToolCalls(t *testing.T) {
	logPath := filepath.Join(t.TempDir(), audit.FileName)
	al, err := audit.Open(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer al.Close()
	e := newEnv(t, Config{Audit: al})
	alice, bob := e.token(t, "alice"), e.token(t, "bob")
	okExec, errExec := ToolCalls.With("exec", "ok").Value(), ToolCalls.With("exec", "error").Value()

	a := e.connect(t, alice, Path, "")
	id, _ := structured(t, callTool(t, a, "sandbox_create", nil))["sandbox_id"].(string)
	if id == "" || e.m.LastCreate().Operator {
		t.Fatalf("alice's sandbox_create on TCP: id %q, operator %v", id, e.m.LastCreate().Operator)
	}
	args := map[string]any{"sandbox_id": id, "command": "echo hi"}
	if res := callTool(t, a, "exec", args); res.IsError || structured(t, res)["output"] != "hi\n" {
		t.Fatalf("exec: %+v", res)
	}
	b := e.connect(t, bob, StatelessPath, "")
	if res := callTool(t, b, "exec", args); !res.IsError {
		t.Fatalf("bob's exec in alice's sandbox: %+v", res)
	}
	op := e.connect(t, "", Path, "")
	callTool(t, op, "sandbox_create", nil)
	if !e.m.LastCreate().Operator {
		t.Error("the operator's sandbox_create on the socket is not the operator's")
	}
	if got := ToolCalls.With("exec", "ok").Value() - okExec; got != 1 {
		t.Errorf("hutch_mcp_tool_calls_total{exec,ok} grew by %v, want 1", got)
	}
	if got := ToolCalls.With("exec", "error").Value() - errExec; got != 1 {
		t.Errorf("hutch_mcp_tool_calls_total{exec,error} grew by %v, want 1", got)
	}

	f, err := os.Open(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if n, err := audit.Verify(f); err != nil || n != 4 {
		t.Fatalf("audit log: %d entries, %v; want 4", n, err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	var got []audit.Entry
	for d := json.NewDecoder(f); ; {
		var ent audit.Entry
		if err := d.Decode(&ent); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		got = append(got, ent)
	}
	argBytes, _ := json.Marshal(args)
	for i, want := range []audit.Entry{
		{Tenant: "alice", Tool: "sandbox_create", Sandbox: ""},
		{Tenant: "alice", Tool: "exec", Sandbox: id, BytesIn: int64(len(argBytes))},
		{Tenant: "bob", Tool: "exec", Sandbox: id, BytesIn: int64(len(argBytes)), Error: api.CodeNotFound},
		{Tenant: "admin", Tool: "sandbox_create"},
	} {
		g := got[i]
		if g.Action != "mcp_call" || g.Tenant != want.Tenant || g.Tool != want.Tool || g.Error != want.Error ||
			(want.Sandbox != "" && g.Sandbox != want.Sandbox) || (want.BytesIn != 0 && g.BytesIn != want.BytesIn) {
			t.Errorf("audit entry %d: %+v, want %+v", i+1, g, want)
		}
	}

	// Links: under the Host the request named, or under the public URL.
	for _, public := range []string{"", "https://hutch.example.net:8443"} {
		e := newEnv(t, Config{PublicURL: public})
		want := cmp.Or(public, e.tcp) + LinksPath
		cs := e.connect(t, e.token(t, "alice"), Path, "")
		id, _ := structured(t, callTool(t, cs, "sandbox_create", nil))["sandbox_id"].(string)
		callTool(t, cs, "file_write", map[string]any{"sandbox_id": id, "path": "b.bin", "content": "AAEC", "encoding": "base64"})
		out := structured(t, callTool(t, cs, "file_read", map[string]any{"sandbox_id": id, "path": "b.bin"}))
		u, _ := out["url"].(string)
		if !strings.HasPrefix(u, want) {
			t.Errorf("public URL %q: file_read's link %q is not under %s", public, u, want)
		}
	}
}

// TestConfig: bad limits, allowed hosts and public URLs are refused with
// their name.
func TestConfig(t *testing.T) {
	for _, h := range []string{"", "http://x", "x:80", "a/b", "a..b", "-" + strings.Repeat("a", 64)} {
		if _, err := CheckHost(h); err == nil {
			t.Errorf("CheckHost(%q): no error", h)
		}
	}
	for h, want := range map[string]string{"Example.org": "example.org", "[::1]": "::1", "10.0.0.1": "10.0.0.1", "a.b.": "a.b"} {
		if got, err := CheckHost(h); err != nil || got != want {
			t.Errorf("CheckHost(%q) = %q, %v; want %q", h, got, err, want)
		}
	}
	for _, u := range []string{"", "ftp://x", "http://", "http://u@x", "http://x/p", "http://x?q", "x"} {
		if _, err := ParsePublicURL(u); err == nil {
			t.Errorf("ParsePublicURL(%q): no error", u)
		}
	}
	m, err := apitest.NewManager(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for _, cfg := range []Config{{}, {Sandboxes: m, MaxBody: -1}, {Sandboxes: m, AllowedHosts: []string{"a b"}}, {Sandboxes: m, PublicURL: "x"}} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v): no error", cfg)
		}
	}
}
