package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/agent"
	"github.com/hutch-sandbox/hutch/internal/api/apitest"
	"github.com/hutch-sandbox/hutch/internal/daemon"
	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/store"
)

// testEnv is the API on a fake manager (package apitest), served by an
// httptest server whose connections have OriginLocal unless remote.
type testEnv struct {
	m   *apitest.Manager
	h   *handler
	srv *httptest.Server
}

func newEnv(t *testing.T, cfg Config, origin Origin) *testEnv {
	t.Helper()
	m, err := apitest.NewManager(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	hh, err := NewWithConfig(m, cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(hh)
	srv.Config.ConnContext = func(ctx context.Context, _ net.Conn) context.Context { return WithOrigin(ctx, origin) }
	srv.Start()
	t.Cleanup(srv.Close)
	return &testEnv{m: m, h: hh.(*handler), srv: srv}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// request sends a request; body is JSON unless it is a string or an
// io.Reader, sent as is.
func (e *testEnv) request(t *testing.T, method, path string, body any, header ...string) (*http.Response, []byte) {
	t.Helper()
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		r = strings.NewReader(b)
	case io.Reader:
		r = b
	default:
		data, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		r = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, e.srv.URL+path, r)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read the body: %v", method, path, err)
	}
	return resp, data
}

// want checks the status of a response, and for errors its code and that
// its message contains every one of msgs.
func want(t *testing.T, resp *http.Response, body []byte, status int, code string, msgs ...string) {
	t.Helper()
	if resp.StatusCode != status {
		t.Fatalf("%s %s: status %d, want %d; body %s", resp.Request.Method, resp.Request.URL, resp.StatusCode, status, body)
	}
	if code == "" {
		return
	}
	var e ErrorBody
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatalf("error body %q: %v", body, err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("error with Content-Type %q", ct)
	}
	if e.Code != code {
		t.Errorf("code %q, want %q (message %q)", e.Code, code, e.Message)
	}
	for _, m := range msgs {
		if !strings.Contains(e.Message, m) {
			t.Errorf("message %q does not contain %q", e.Message, m)
		}
	}
}

// create makes a sandbox and returns its info.
func (e *testEnv) create(t *testing.T, body any) daemon.Info {
	t.Helper()
	resp, data := e.request(t, "POST", "/v1/sandboxes", body)
	want(t, resp, data, http.StatusCreated, "")
	var info daemon.Info
	if err := json.Unmarshal(data, &info); err != nil {
		t.Fatal(err)
	}
	if resp.Header.Get("Location") != "/v1/sandboxes/"+info.ID {
		t.Errorf("Location %q", resp.Header.Get("Location"))
	}
	return info
}

func TestClassify(t *testing.T) {
	t.Parallel()
	tests := []struct {
		err    error
		status int
		code   string
	}{
		{errorf(errUnauthorized, "x"), 401, CodeUnauthorized},
		{errorf(ErrPermission, "x"), 403, CodePermissionDenied},
		{errorf(errTooLarge, "x"), 413, CodeTooLarge},
		{&http.MaxBytesError{Limit: 1}, 413, CodeTooLarge},
		{errorf(errMethod, "x"), 405, CodeMethodNotAllowed},
		{fmt.Errorf("create: %w", daemon.ErrInvalid), 400, CodeInvalid},
		{&policy.Error{Msg: "bad"}, 400, CodeInvalid},
		{fmt.Errorf("get: %w", daemon.ErrNotFound), 404, CodeNotFound},
		{fmt.Errorf("get: %w", store.ErrNotFound), 404, CodeNotFound},
		{os.ErrProcessDone, 404, CodeNotFound},
		{fmt.Errorf("x: %w", daemon.ErrConflict), 409, CodeConflict},
		{fmt.Errorf("x: %w", store.ErrConflict), 409, CodeConflict},
		{fmt.Errorf("x: %w", daemon.ErrQuota), 429, CodeQuota},
		{fmt.Errorf("x: %w", daemon.ErrUnavailable), 503, CodeUnavailable},
		{&agent.Error{Code: agent.CodeNotFound}, 404, CodeNotFound},
		{fmt.Errorf("read: %w", &agent.Error{Code: agent.CodeExists}), 409, CodeConflict},
		{&agent.Error{Code: agent.CodePermissionDenied}, 403, CodePermissionDenied},
		{&agent.Error{Code: agent.CodeInvalid}, 400, CodeInvalid},
		{&agent.Error{Code: agent.CodeNotDir}, 400, CodeInvalid},
		{&agent.Error{Code: agent.CodeIsDir}, 400, CodeInvalid},
		{&agent.Error{Code: agent.CodeTooLarge}, 413, CodeTooLarge},
		{&agent.Error{Code: agent.CodeInternal}, 500, CodeInternal},
		{fmt.Errorf("wait: %w", agent.ErrClosed), 409, CodeConflict},
		{context.Canceled, 503, CodeUnavailable},
		{errors.New("disk on fire"), 500, CodeInternal},
	}
	for _, tc := range tests {
		status, code := classify(tc.err)
		if status != tc.status || code != tc.code {
			t.Errorf("classify(%v) = %d %s, want %d %s", tc.err, status, code, tc.status, tc.code)
		}
	}
}

// TestAuth serves the API with Listen and Serve on a unix socket and TCP
// and checks who a request acts as on each.
func TestAuth(t *testing.T) {
	t.Parallel()
	m, err := apitest.NewManager(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	sock := filepath.Join(t.TempDir(), "api.sock")
	ls, err := Listen(sock, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o660 || fi.Mode().Type() != os.ModeSocket {
		t.Errorf("socket mode %v, want socket 0660", fi.Mode())
	}
	if ls[0].Addr().String() != sock || ls[0].Addr().Network() != "unix" {
		t.Errorf("the socket's address is %s %s", ls[0].Addr().Network(), ls[0].Addr())
	}
	if _, err := Listen(sock, ""); err == nil || !strings.Contains(err.Error(), "another daemon") {
		t.Errorf("a second Listen on a live socket: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- Serve(ctx, New(m, nil), nil, ls...) }()
	defer func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
		if _, err := os.Lstat(sock); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the socket is still there after Serve: %v", err)
		}
	}()

	unixClient := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
	tcpURL := "http://" + ls[1].Addr().String()
	tokA, err := m.Store().CreateToken(ctx, "tenant-a")
	if err != nil {
		t.Fatal(err)
	}
	tokB, err := m.Store().CreateToken(ctx, "tenant-b")
	if err != nil {
		t.Fatal(err)
	}
	do := func(c *http.Client, method, url, token string, body string) (int, []byte, http.Header) {
		t.Helper()
		req, err := http.NewRequest(method, url, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", token)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, data, resp.Header
	}
	tenantOfBody := func(data []byte) string {
		var info daemon.Info
		if err := json.Unmarshal(data, &info); err != nil {
			t.Fatalf("%s: %v", data, err)
		}
		return info.Tenant
	}

	// The unix socket: no token is the admin, a token its tenant.
	status, data, _ := do(unixClient, "POST", "http://hutch/v1/sandboxes", "", "")
	if status != 201 || tenantOfBody(data) != AdminTenant {
		t.Errorf("unix without a token: %d %s", status, data)
	}
	status, data, _ = do(unixClient, "POST", "http://hutch/v1/sandboxes", "Bearer "+tokA, "")
	if status != 201 || tenantOfBody(data) != "tenant-a" {
		t.Errorf("unix with a token: %d %s", status, data)
	}
	var infoA daemon.Info
	_ = json.Unmarshal(data, &infoA)

	// TCP: every request needs a valid token, even health.
	for _, tc := range []struct{ name, authz string }{
		{"no token", ""},
		{"bad token", "Bearer hutch_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"},
		{"garbage", "Bearer x"},
		{"basic", "Basic dXNlcjpwYXNz"},
	} {
		for _, path := range []string{"/v1/health", "/v1/sandboxes", "/v1/sandboxes/" + infoA.ID, "/v1/nowhere"} {
			status, data, hdr := do(http.DefaultClient, "GET", tcpURL+path, tc.authz, "")
			var e ErrorBody
			_ = json.Unmarshal(data, &e)
			if status != 401 || e.Code != CodeUnauthorized || hdr.Get("WWW-Authenticate") == "" {
				t.Errorf("TCP %s, %s: %d %s", tc.name, path, status, data)
			}
		}
	}
	status, data, _ = do(http.DefaultClient, "GET", tcpURL+"/v1/sandboxes/"+infoA.ID, "Bearer "+tokA, "")
	if status != 200 || tenantOfBody(data) != "tenant-a" {
		t.Errorf("TCP, tenant A, its sandbox: %d %s", status, data)
	}
	// Tenant B sees nothing of A's: 404, exactly as a missing sandbox.
	for _, tc := range []struct{ method, path, body string }{
		{"GET", "/v1/sandboxes/" + infoA.ID, ""},
		{"DELETE", "/v1/sandboxes/" + infoA.ID, ""},
		{"POST", "/v1/sandboxes/" + infoA.ID + "/exec", `{"args":["true"]}`},
		{"GET", "/v1/sandboxes/" + infoA.ID + "/files/stat?path=/", ""},
	} {
		status, data, _ := do(http.DefaultClient, tc.method, tcpURL+tc.path, "Bearer "+tokB, tc.body)
		if status != 404 {
			t.Errorf("tenant B: %s %s: %d %s", tc.method, tc.path, status, data)
		}
	}
	status, data, _ = do(http.DefaultClient, "GET", tcpURL+"/v1/sandboxes", "Bearer "+tokB, "")
	if status != 200 || strings.TrimSpace(string(data)) != "[]" {
		t.Errorf("tenant B lists: %d %s", status, data)
	}
	// The admin is a tenant like the others.
	status, data, _ = do(unixClient, "GET", "http://hutch/v1/sandboxes/"+infoA.ID, "", "")
	if status != 404 {
		t.Errorf("admin gets tenant A's sandbox: %d %s", status, data)
	}
}

func TestRemotePolicy(t *testing.T) {
	t.Parallel()
	remote := newEnv(t, Config{}, OriginRemote)
	tok, err := remote.m.Store().CreateToken(context.Background(), "t")
	if err != nil {
		t.Fatal(err)
	}
	local := newEnv(t, Config{}, OriginLocal)
	for _, tc := range []struct{ policy, field string }{
		{`{"root":"/srv/rootfs"}`, "root"},
		{`{"filesystem":{"allow_write":["/etc"]}}`, "filesystem.allow_write"},
		{`{"filesystem":{"allow_read":["/root/.ssh"]}}`, "filesystem.allow_read"},
		{`{"filesystem":{"no_default_denies":true}}`, "filesystem.no_default_denies"},
		{`{"network":{"mode":"host"}}`, "network.mode host"},
		{`{"network":{"allowed_domains":["example.com"],"allow_private":["10.0.0.0/8"]}}`, "network.allow_private"},
		{`{"secrets":[{"name":"TOKEN","hosts":["api.example.com"]}]}`, "secrets[0].from"},
		{`{"secrets":[{"name":"TOKEN","hosts":["api.example.com"],"from":"file:/etc/hutch/token"}]}`, "secrets[0].from"},
		{`{"env":{"pass":["AWS_SECRET_ACCESS_KEY"]}}`, "env.pass"},
		{`{"best_effort":true}`, "best_effort"},
	} {
		body := `{"policy":` + tc.policy + `}`
		resp, data := remote.request(t, "POST", "/v1/sandboxes", body, "Authorization", "Bearer "+tok)
		want(t, resp, data, http.StatusForbidden, CodePermissionDenied, tc.field)
		resp, data = local.request(t, "POST", "/v1/sandboxes", body)
		want(t, resp, data, http.StatusCreated, "")
	}
	// What stays inside the sandbox is fine from anywhere.
	resp, data := remote.request(t, "POST", "/v1/sandboxes",
		`{"policy":{"filesystem":{"deny_read":["/opt/x"]},"network":{"allowed_domains":["example.com"]},"resources":{"memory":"512m","timeout":"1m"}}}`,
		"Authorization", "Bearer "+tok)
	want(t, resp, data, http.StatusCreated, "")
	got := remote.m.LastCreate().Policy
	if got.Resources.MemoryBytes != 512<<20 || !slices.Equal(got.Network.AllowedDomains, []string{"example.com"}) {
		t.Errorf("the policy reached the manager as %+v", got)
	}
	// So is an image of the daemon's store as the root (the daemon
	// checks that it is there and allowed).
	resp, data = remote.request(t, "POST", "/v1/sandboxes", `{"policy":{"root":"image:python:3.12"}}`, "Authorization", "Bearer "+tok)
	want(t, resp, data, http.StatusCreated, "")
	if got := remote.m.LastCreate().Policy.Root; got != "image:python:3.12" {
		t.Errorf("the image root reached the manager as %q", got)
	}
	// A secret whose value comes with the request is fine from anywhere;
	// the value reaches the manager and nothing echoes it.
	resp, data = remote.request(t, "POST", "/v1/sandboxes",
		`{"policy":{"secrets":[{"name":"TOKEN","hosts":["api.example.com"]}]},"secrets":{"TOKEN":"real-value-77"}}`,
		"Authorization", "Bearer "+tok)
	want(t, resp, data, http.StatusCreated, "")
	req := remote.m.LastCreate()
	if v := req.Secrets["TOKEN"]; string(v.Bytes()) != "real-value-77" || len(req.Policy.Secrets) != 1 || req.Policy.Secrets[0].From != policy.SecretFromRequest {
		t.Errorf("the manager got secrets %v and policy secrets %+v", req.Secrets, req.Policy.Secrets)
	}
	if strings.Contains(string(data), "real-value-77") {
		t.Errorf("the response shows the value: %s", data)
	}
	resp, data = remote.request(t, "POST", "/v1/sandboxes", `{"secrets":{"TOKEN":5}}`, "Authorization", "Bearer "+tok)
	want(t, resp, data, http.StatusBadRequest, CodeInvalid, "secret value")
}

func TestCreate(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{}, OriginLocal)
	info := e.create(t, map[string]any{
		"labels": map[string]string{"team": "a", "job": "build"}, "env": map[string]string{"FOO": "bar"},
		"timeout": "10m", "idle_timeout": "90",
	})
	req := e.m.LastCreate()
	if req.Timeout != 10*time.Minute || req.IdleTimeout != 90*time.Second || req.Env["FOO"] != "bar" || req.Labels["job"] != "build" {
		t.Errorf("the manager got %+v", req)
	}
	e.create(t, map[string]any{"labels": map[string]string{"team": "b"}})
	e.create(t, nil) // an empty body asks for the defaults

	list := func(query string) []string {
		resp, data := e.request(t, "GET", "/v1/sandboxes"+query, nil)
		want(t, resp, data, 200, "")
		var infos []daemon.Info
		if err := json.Unmarshal(data, &infos); err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, i := range infos {
			ids = append(ids, i.ID)
		}
		return ids
	}
	if ids := list("?label=team=a"); !slices.Equal(ids, []string{info.ID}) {
		t.Errorf("label team=a: %v", ids)
	}
	if ids := list("?label=team=a&label=job=build&state=running"); !slices.Equal(ids, []string{info.ID}) {
		t.Errorf("two labels: %v", ids)
	}
	if ids := list(""); len(ids) != 3 {
		t.Errorf("all: %v", ids)
	}
	if ids := list("?state=stopped"); len(ids) != 0 {
		t.Errorf("stopped: %v", ids)
	}

	resp, data := e.request(t, "POST", "/v1/sandboxes/"+info.ID+"/timeout", `{"timeout":"1h"}`)
	want(t, resp, data, 200, "")
	var ext daemon.Info
	_ = json.Unmarshal(data, &ext)
	if d := time.Until(ext.ExpiresAt); d < 59*time.Minute || d > time.Hour {
		t.Errorf("extended to expire in %s", d)
	}
	resp, data = e.request(t, "GET", "/v1/sandboxes/"+info.ID, nil)
	want(t, resp, data, 200, "")
	resp, data = e.request(t, "DELETE", "/v1/sandboxes/"+info.ID, nil)
	want(t, resp, data, 204, "")
	resp, data = e.request(t, "GET", "/v1/sandboxes/"+info.ID, nil)
	want(t, resp, data, 404, CodeNotFound, info.ID)
	resp, data = e.request(t, "DELETE", "/v1/sandboxes/"+info.ID, nil)
	want(t, resp, data, 404, CodeNotFound)

	e.m.Quota = 2
	resp, data = e.request(t, "POST", "/v1/sandboxes", nil)
	want(t, resp, data, http.StatusTooManyRequests, CodeQuota)
}

// TestBadRequests checks that malformed requests are refused with 400 (or
// 413) and a message that names the problem, before anything happens.
func TestBadRequests(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{MaxUpload: 1000}, OriginLocal)
	id := e.create(t, nil).ID
	sb := "/v1/sandboxes/" + id
	huge := `{"labels":{"x":"` + strings.Repeat("a", MaxJSONBody) + `"}}`
	tests := []struct {
		name, method, path string
		body               any
		status             int
		code               string
		msgs               []string
	}{
		{"unknown field", "POST", "/v1/sandboxes", `{"timeout":"1m","lables":{}}`, 400, CodeInvalid, []string{`unknown field "lables"`}},
		{"unknown nested field", "POST", sb + "/exec", `{"args":["true"],"stdn":true}`, 400, CodeInvalid, []string{`"stdn"`}},
		{"bad JSON", "POST", "/v1/sandboxes", "{\n  \"timeout\": \"1m\",,\n}", 400, CodeInvalid, []string{"invalid JSON", "line 2"}},
		{"truncated JSON", "POST", "/v1/sandboxes", `{"timeout":"1m"`, 400, CodeInvalid, []string{"truncated"}},
		{"wrong type", "POST", "/v1/sandboxes", `{"labels":["a"]}`, 400, CodeInvalid, []string{`field "labels"`, "want an object"}},
		{"number for a duration", "POST", "/v1/sandboxes", `{"timeout":60}`, 400, CodeInvalid, []string{`"timeout"`, "a string"}},
		{"bad duration", "POST", "/v1/sandboxes", `{"timeout":"soon"}`, 400, CodeInvalid, []string{"timeout", `"soon"`}},
		{"trailing data", "POST", "/v1/sandboxes", `{} {}`, 400, CodeInvalid, []string{"after the JSON value"}},
		{"not an object", "POST", "/v1/sandboxes", `[1]`, 400, CodeInvalid, []string{"want an object, got array"}},
		{"body too large", "POST", "/v1/sandboxes", huge, 413, CodeTooLarge, []string{"1048576"}},
		{"empty body", "POST", sb + "/timeout", "", 400, CodeInvalid, []string{"empty"}},
		{"policy error", "POST", "/v1/sandboxes", `{"policy":{"resources":{"memory":"12q"}}}`, 400, CodeInvalid, []string{"policy:1:", "resources.memory"}},
		{"policy unknown field", "POST", "/v1/sandboxes", `{"policy":{"filesystm":{}}}`, 400, CodeInvalid, []string{"filesystm"}},
		{"policy not an object", "POST", "/v1/sandboxes", `{"policy":"deny everything"}`, 400, CodeInvalid, []string{"policy"}},
		{"empty label key", "POST", "/v1/sandboxes", `{"labels":{"":"x"}}`, 400, CodeInvalid, []string{"empty key"}},
		{"bad env", "POST", "/v1/sandboxes", `{"env":{"A=B":"x"}}`, 400, CodeInvalid, []string{`"A=B"`}},
		{"unknown query parameter", "GET", "/v1/sandboxes?lable=x=y", nil, 400, CodeInvalid, []string{`"lable"`}},
		{"bad label query", "GET", "/v1/sandboxes?label=x", nil, 400, CodeInvalid, []string{`"x"`, "KEY=VALUE"}},
		{"bad state", "GET", "/v1/sandboxes?state=dancing", nil, 400, CodeInvalid, []string{"dancing"}},
		{"zero timeout", "POST", sb + "/timeout", `{"timeout":"0s"}`, 400, CodeInvalid, []string{"positive"}},
		{"no command", "POST", sb + "/exec", `{"args":[]}`, 400, CodeInvalid, []string{"no command"}},
		{"stdin without a stream", "POST", sb + "/exec", `{"args":["cat"],"stdin":true}`, 400, CodeInvalid, []string{"stdin", "hutch-exec/1"}},
		{"rows without tty", "POST", sb + "/exec", `{"args":["true"],"rows":5}`, 400, CodeInvalid, []string{"tty"}},
		{"relative cwd", "POST", sb + "/exec", `{"args":["true"],"cwd":"tmp"}`, 400, CodeInvalid, []string{"cwd", "absolute"}},
		{"unknown upgrade", "POST", sb + "/exec", `{"args":["true"]}`, 400, CodeInvalid, []string{"websocket"}},
		{"bad signal", "POST", sb + "/processes/1/signal", `{"signal":99}`, 400, CodeInvalid, []string{"99"}},
		{"bad pid", "POST", sb + "/processes/x/signal", `{"signal":9}`, 400, CodeInvalid, []string{`"x"`}},
		{"no path", "GET", sb + "/files", nil, 400, CodeInvalid, []string{"missing path"}},
		{"relative path", "GET", sb + "/files?path=etc/passwd", nil, 400, CodeInvalid, []string{"absolute"}},
		{"dot-dot path", "PUT", sb + "/files?path=" + "/workspace/../../etc/passwd", "x", 400, CodeInvalid, []string{`".."`}},
		{"dot-dot mkdir", "POST", sb + "/files/mkdir", `{"path":"/a/.."}`, 400, CodeInvalid, []string{`".."`}},
		{"dot-dot rename", "POST", sb + "/files/rename", `{"from":"/a","to":"/b/../../c"}`, 400, CodeInvalid, []string{"to"}},
		{"two paths", "GET", sb + "/files/stat?path=/a&path=/b", nil, 400, CodeInvalid, []string{"2 times"}},
		{"bad mode", "PUT", sb + "/files?path=/tmp/x&mode=rwx", "x", 400, CodeInvalid, []string{"rwx"}},
		{"bad recursive", "DELETE", sb + "/files?path=/tmp/x&recursive=maybe", nil, 400, CodeInvalid, []string{"maybe"}},
		{"upload too large", "PUT", sb + "/files?path=/tmp/x", strings.Repeat("x", 1001), 413, CodeTooLarge, []string{"1000"}},
		{"archive too large", "PUT", sb + "/archive?path=/tmp/x", strings.Repeat("x", 1001), 413, CodeTooLarge, []string{"1000"}},
		{"no such route", "GET", "/v1/sandbox", nil, 404, CodeNotFound, []string{"no such route"}},
		{"wrong method", "PATCH", sb, nil, 405, CodeMethodNotAllowed, []string{"GET", "DELETE"}},
		{"no such sandbox", "GET", "/v1/sandboxes/nope/files/list?path=/", nil, 404, CodeNotFound, []string{"nope"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var hdr []string
			if tc.name == "unknown upgrade" {
				hdr = []string{"Connection", "Upgrade", "Upgrade", "websocket"}
			}
			resp, data := e.request(t, tc.method, tc.path, tc.body, hdr...)
			want(t, resp, data, tc.status, tc.code, tc.msgs...)
		})
	}
}

func TestHealthAndOpenAPI(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{}, OriginLocal)
	resp, data := e.request(t, "GET", "/v1/health", nil)
	want(t, resp, data, 200, "")
	if strings.TrimSpace(string(data)) != `{"ok":true}` {
		t.Errorf("health: %s", data)
	}
	resp, data = e.request(t, "GET", "/v1/openapi.json", nil)
	want(t, resp, data, 200, "")
	if !bytes.Equal(data, OpenAPI()) {
		t.Error("GET /v1/openapi.json is not OpenAPI()")
	}
}

// TestOpenAPIMatchesRoutes checks that the OpenAPI document lists exactly
// the routes registered on the mux, and that the mux routes each of the
// document's operations to the pattern of the same method and path.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	t.Parallel()
	var doc struct {
		OpenAPI    string                                `json:"openapi"`
		Paths      map[string]map[string]json.RawMessage `json:"paths"`
		Components struct {
			Schemas map[string]json.RawMessage `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(OpenAPI(), &doc); err != nil {
		t.Fatalf("the OpenAPI document is not valid JSON: %v", err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.0.") {
		t.Errorf("openapi %q, want 3.0.x", doc.OpenAPI)
	}
	m, err := apitest.NewManager(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	h := New(m, nil).(*handler)

	var documented []string
	for p, ops := range doc.Paths {
		for method := range ops {
			if method == "parameters" {
				continue
			}
			pattern := strings.ToUpper(method) + " " + p
			documented = append(documented, pattern)
			probe := strings.NewReplacer("{id}", "sb-1", "{pid}", "42").Replace(p)
			req := httptest.NewRequest(strings.ToUpper(method), probe, nil)
			if _, got := h.mux.Handler(req); got != pattern {
				t.Errorf("the mux routes %s %s to %q, the document has %q", req.Method, probe, got, pattern)
			}
		}
	}
	slices.Sort(documented)
	registered := slices.Clone(h.routes)
	slices.Sort(registered)
	if !slices.Equal(documented, registered) {
		t.Errorf("documented routes:\n  %s\nregistered routes:\n  %s", strings.Join(documented, "\n  "), strings.Join(registered, "\n  "))
	}

	// Every reference resolves.
	for _, ref := range refs(t, OpenAPI()) {
		name, ok := strings.CutPrefix(ref, "#/components/schemas/")
		if ok {
			if _, found := doc.Components.Schemas[name]; !found {
				t.Errorf("unresolved %s", ref)
			}
		}
	}
}

// refs returns every "$ref" in a JSON document.
func refs(t *testing.T, data []byte) []string {
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatal(err)
	}
	var out []string
	var walk func(any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, c := range x {
				if s, ok := c.(string); ok && k == "$ref" {
					out = append(out, s)
				}
				walk(c)
			}
		case []any:
			for _, c := range x {
				walk(c)
			}
		}
	}
	walk(v)
	return out
}
