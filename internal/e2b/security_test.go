package e2b

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/agent"
	"github.com/hutch-sandbox/hutch/internal/api/apitest"
	"github.com/hutch-sandbox/hutch/internal/daemon"
	"github.com/hutch-sandbox/hutch/internal/store"
	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// fixture is the E2B front end over apitest's manager, mounted as hutch
// serve mounts it, with a stand-in for envd that answers the id of the
// sandbox Mount resolved.
type fixture struct {
	m    *apitest.Manager
	h    *Handler
	srv  http.Handler
	logs *testutil.Buffer
	// keys are API keys by tenant.
	keys map[string]string
}

// newFixture returns a fixture with the tenants "alice" and "bob". Its
// sandboxes are plain directories on the host (apitest), so the user
// setup, which edits /etc/passwd in the sandbox, is replaced by a no-op.
func newFixture(t *testing.T) *fixture {
	t.Helper()
	m, err := apitest.NewManager(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	logs := &testutil.Buffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	h := New(m, log, WithStateDir(t.TempDir()))
	h.setup = func(context.Context, string, string) error { return nil }
	envd := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, ok := Resolved(r)
		if !ok {
			http.Error(w, "not resolved", http.StatusInternalServerError)
			return
		}
		fmt.Fprint(w, s.ID)
	})
	hutchAPI := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { http.NotFound(w, r) })
	isEnvd := func(p string) bool {
		return p == "/health" || p == "/files" || strings.HasPrefix(p, "/process.Process/")
	}
	f := &fixture{m: m, h: h, srv: h.Mount(hutchAPI, isEnvd, envd), logs: logs, keys: map[string]string{}}
	f.addKeys(t, m.Store())
	return f
}

// addKeys makes an API key for the tenants alice and bob.
func (f *fixture) addKeys(t *testing.T, st store.Backend) {
	t.Helper()
	for _, tenant := range []string{"alice", "bob"} {
		key, err := st.CreateE2BToken(context.Background(), tenant)
		if err != nil {
			t.Fatal(err)
		}
		f.keys[tenant] = key
	}
}

// do sends a request with headers (name, value pairs) and returns the
// answer.
func (f *fixture) do(method, path, body string, headers ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, path, strings.NewReader(body))
	for i := 0; i+1 < len(headers); i += 2 {
		if headers[i] == "Host" {
			r.Host = headers[i+1]
			continue
		}
		r.Header.Set(headers[i], headers[i+1])
	}
	w := httptest.NewRecorder()
	f.srv.ServeHTTP(w, r)
	return w
}

// as sends a request with tenant's API key.
func (f *fixture) as(tenant, method, path, body string) *httptest.ResponseRecorder {
	return f.do(method, path, body, "X-API-Key", f.keys[tenant])
}

// create makes a sandbox for tenant and returns its id and access token.
func (f *fixture) create(t *testing.T, tenant string) (string, string) {
	t.Helper()
	w := f.as(tenant, "POST", "/v2/sandboxes", `{"templateID":"base","timeout":300,"metadata":{"owner":"`+tenant+`"}}`)
	if w.Code != http.StatusCreated {
		t.Fatalf("create for %s: %d %s", tenant, w.Code, w.Body)
	}
	var sb sandboxJSON
	if err := json.Unmarshal(w.Body.Bytes(), &sb); err != nil {
		t.Fatal(err)
	}
	return sb.SandboxID, sb.EnvdAccessToken
}

// checkError checks that w is an error answer of status in E2B's shape,
// exactly {"code": status, "message": "..."}, and returns its message.
func checkError(t *testing.T, what string, w *httptest.ResponseRecorder, status int) string {
	t.Helper()
	if w.Code != status {
		t.Errorf("%s: status %d, want %d: %s", what, w.Code, status, w.Body)
		return ""
	}
	if ct := w.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("%s: Content-Type %q", what, ct)
	}
	dec := json.NewDecoder(bytes.NewReader(w.Body.Bytes()))
	dec.DisallowUnknownFields()
	var e struct {
		Code    *int    `json:"code"`
		Message *string `json:"message"`
	}
	if err := dec.Decode(&e); err != nil || e.Code == nil || e.Message == nil {
		t.Errorf("%s: body %q is not {code, message}: %v", what, w.Body, err)
		return ""
	}
	if *e.Code != status || *e.Message == "" {
		t.Errorf("%s: body %q, want code %d and a message", what, w.Body, status)
	}
	return *e.Message
}

// TestTenantIsolation: a tenant's API key reaches none of another
// tenant's sandboxes, through E2B's REST API or envd, and is told no more
// than for an id that does not exist.
func TestTenantIsolation(t *testing.T) {
	f := newFixture(t)
	bobID, bobTok := f.create(t, "bob")
	aliceID, aliceTok := f.create(t, "alice")
	const unknown = "sb-nonexistent"

	// Every route that names a sandbox: alice on bob's is answered as
	// on an id that does not exist.
	for _, rt := range []struct{ method, path, body string }{
		{"GET", "/sandboxes/%s", ""},
		{"DELETE", "/sandboxes/%s", ""},
		{"POST", "/sandboxes/%s/timeout", `{"timeout":60}`},
		{"POST", "/sandboxes/%s/refreshes", `{"duration":60}`},
		{"POST", "/sandboxes/%s/pause", ""},
		{"POST", "/sandboxes/%s/resume", `{"timeout":60}`},
		{"POST", "/sandboxes/%s/connect", `{"timeout":60}`},
		{"POST", "/v2/sandboxes/%s/connect", `{"timeout":60}`},
	} {
		what := rt.method + " " + fmt.Sprintf(rt.path, "ID")
		got := checkError(t, what+" (bob's)", f.as("alice", rt.method, fmt.Sprintf(rt.path, bobID), rt.body), http.StatusNotFound)
		want := checkError(t, what+" (unknown)", f.as("alice", rt.method, fmt.Sprintf(rt.path, unknown), rt.body), http.StatusNotFound)
		if strings.ReplaceAll(got, bobID, "ID") != strings.ReplaceAll(want, unknown, "ID") {
			t.Errorf("%s: message %q for bob's sandbox, %q for an unknown one", what, got, want)
		}
		for _, leak := range []string{"bob", bobTok} {
			if strings.Contains(got, leak) {
				t.Errorf("%s: message %q names %q", what, got, leak)
			}
		}
	}
	for _, path := range []string{"/sandboxes", "/v2/sandboxes", "/v2/sandboxes?state=running,paused", "/sandboxes?metadata=owner%3Dbob"} {
		w := f.as("alice", "GET", path, "")
		if w.Code != http.StatusOK || strings.Contains(w.Body.String(), bobID) || strings.Contains(w.Body.String(), "bob") {
			t.Errorf("alice: GET %s = %d %s, want 200 without bob's sandbox", path, w.Code, w.Body)
		}
	}
	// Bob's sandbox is untouched: running, its timeout as it was.
	w := f.as("bob", "GET", "/sandboxes/"+bobID, "")
	var d detailJSON
	if err := json.Unmarshal(w.Body.Bytes(), &d); err != nil || w.Code != http.StatusOK || d.State != "running" {
		t.Fatalf("bob: GET his sandbox = %d %s", w.Code, w.Body)
	}

	// envd: only bob's sandbox's access token opens it; an API key, bob's
	// own included, is not an access token.
	for _, c := range []struct {
		name    string
		headers []string
		status  int
	}{
		{"no token", []string{"E2b-Sandbox-Id", bobID}, http.StatusUnauthorized},
		{"no sandbox id, wrong token", []string{"X-Access-Token", strings.Repeat("0", len(bobTok))}, http.StatusUnauthorized},
		{"bob's token, alice's sandbox in the host name", []string{"Host", "49983-" + aliceID + ".e2b.test", "X-Access-Token", bobTok}, http.StatusUnauthorized},
		{"wrong token", []string{"E2b-Sandbox-Id", bobID, "X-Access-Token", strings.Repeat("0", len(bobTok))}, http.StatusUnauthorized},
		{"short token", []string{"E2b-Sandbox-Id", bobID, "X-Access-Token", bobTok[:len(bobTok)-1]}, http.StatusUnauthorized},
		{"alice's sandbox's token", []string{"E2b-Sandbox-Id", bobID, "X-Access-Token", aliceTok}, http.StatusUnauthorized},
		{"alice's API key", []string{"E2b-Sandbox-Id", bobID, "X-Access-Token", f.keys["alice"], "X-API-Key", f.keys["alice"]}, http.StatusUnauthorized},
		{"bob's API key", []string{"E2b-Sandbox-Id", bobID, "X-Access-Token", f.keys["bob"]}, http.StatusUnauthorized},
		{"bob's token, unknown id", []string{"E2b-Sandbox-Id", unknown, "X-Access-Token", bobTok}, http.StatusUnauthorized},
	} {
		for _, path := range []string{"/health", "/files?path=/etc/passwd", "/process.Process/List"} {
			w := f.do("GET", path, "", c.headers...)
			msg := checkError(t, "envd "+path+", "+c.name, w, c.status)
			if strings.Contains(msg, "bob") || strings.Contains(msg, bobTok) {
				t.Errorf("envd %s, %s: message %q leaks", path, c.name, msg)
			}
		}
	}
	// The sandbox is named by the header, by E2B's host name
	// (PORT-ID.DOMAIN), or by its token alone (as older SDKs do).
	for name, headers := range map[string][]string{
		"header":     {"E2b-Sandbox-Id", bobID, "X-Access-Token", bobTok},
		"host name":  {"Host", "49983-" + bobID + ".e2b.test", "X-Access-Token", bobTok},
		"token only": {"X-Access-Token", bobTok},
	} {
		w = f.do("GET", "/health", "", headers...)
		if w.Code != http.StatusOK || w.Body.String() != bobID {
			t.Errorf("envd with bob's token, sandbox by %s: %d %s, want bob's sandbox", name, w.Code, w.Body)
		}
	}

	// Alice cannot kill bob's sandbox; bob can, after which its token
	// opens nothing.
	if w := f.as("bob", "DELETE", "/sandboxes/"+bobID, ""); w.Code != http.StatusNoContent {
		t.Fatalf("bob: kill: %d %s", w.Code, w.Body)
	}
	w = f.do("GET", "/health", "", "E2b-Sandbox-Id", bobID, "X-Access-Token", bobTok)
	checkError(t, "envd after kill", w, http.StatusBadGateway)
}

// TestTokenRecordNotReplaced: the access token of one tenant's sandbox is
// never replaced by another tenant's request, even if the manager let it
// through.
func TestTokenRecordNotReplaced(t *testing.T) {
	h := New(nil, nil)
	tok, err := h.token(context.Background(), "bob", "sb-1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.token(context.Background(), "alice", "sb-1"); err == nil || classify(err) != http.StatusNotFound {
		t.Errorf("token(alice, bob's sandbox) = %v, want 404", err)
	}
	if again, err := h.token(context.Background(), "bob", "sb-1"); err != nil || again != tok {
		t.Errorf("bob's token changed: %q, %v", again, err)
	}
}

// TestAccessTokens: tokens are long random strings independent of the
// sandbox id, returned only by create and connect (and resume, E2B's
// older connect), and never logged.
func TestAccessTokens(t *testing.T) {
	f := newFixture(t)
	seen := map[string]bool{}
	var ids, toks []string
	for range 20 {
		id, tok := f.create(t, "alice")
		b, err := hex.DecodeString(tok)
		if err != nil || len(b) < 16 {
			t.Fatalf("access token %q: want at least 128 random bits in hex", tok)
		}
		// (apitest's ids are short counters; the real daemon's are random
		// and checked by TestRealDaemon.)
		if seen[tok] || (len(id) > 8 && strings.Contains(tok, strings.TrimPrefix(id, "sb-"))) {
			t.Fatalf("access token %q repeats or contains its sandbox id %s", tok, id)
		}
		seen[tok] = true
		ids, toks = append(ids, id), append(toks, tok)
	}
	// A new handler over the same sandboxes makes other tokens: they come
	// from no property of the sandbox.
	h2 := New(f.m, nil)
	if tok, err := h2.token(context.Background(), "alice", ids[0]); err != nil || seen[tok] {
		t.Errorf("a second handler's token for %s: %q, %v", ids[0], tok, err)
	}

	id, tok := ids[0], toks[0]
	w := f.as("alice", "POST", "/v2/sandboxes/"+id+"/connect", `{"timeout":60}`)
	if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `"envdAccessToken":"`+tok+`"`) {
		t.Errorf("connect: %d %s, want the sandbox's token", w.Code, w.Body)
	}
	for _, path := range []string{"/sandboxes/" + id, "/sandboxes", "/v2/sandboxes"} {
		if w := f.as("alice", "GET", path, ""); w.Code != http.StatusOK || strings.Contains(w.Body.String(), tok) {
			t.Errorf("GET %s: %d, and the token appears: %v", path, w.Code, strings.Contains(w.Body.String(), tok))
		}
	}
	f.do("GET", "/health", "", "E2b-Sandbox-Id", id, "X-Access-Token", tok)
	f.do("GET", "/health", "", "E2b-Sandbox-Id", id, "X-Access-Token", tok+"0")
	f.as("alice", "POST", "/sandboxes/"+id+"/pause", "")
	f.do("GET", "/health", "", "E2b-Sandbox-Id", id, "X-Access-Token", tok)
	f.as("alice", "DELETE", "/sandboxes/"+id, "")

	logs := f.logs.String()
	if !strings.Contains(logs, id) {
		t.Fatalf("the handler logged nothing about %s at debug level:\n%s", id, logs)
	}
	for _, tok := range toks {
		if strings.Contains(logs, tok) {
			t.Errorf("an access token is in the log:\n%s", logs)
		}
	}
	for _, key := range f.keys {
		if strings.Contains(logs, key) {
			t.Errorf("an API key is in the log:\n%s", logs)
		}
	}
}

// TestConnectPaths: every path of connect the SDKs of the last year use
// (POST /sandboxes/{id}/connect: JavaScript 2.6 to 2.50 and Python;
// /v2/...: JavaScript 2.51) answers as connect does: 200 with the
// sandbox's access token while it runs, 201 once it resumed a paused one,
// a timeout extending its life, 404 for one that is gone.
func TestConnectPaths(t *testing.T) {
	f := newFixture(t)
	for _, prefix := range []string{"/sandboxes/", "/v2/sandboxes/"} {
		id, tok := f.create(t, "alice")
		connect := func(want int) {
			t.Helper()
			w := f.as("alice", "POST", prefix+id+"/connect", `{"timeout":3000}`)
			if w.Code != want {
				t.Fatalf("POST %s%s/connect: %d %s, want %d", prefix, id, w.Code, w.Body, want)
			}
			var sb sandboxJSON
			if err := json.Unmarshal(w.Body.Bytes(), &sb); err != nil || sb.SandboxID != id || sb.EnvdAccessToken != tok || sb.EnvdVersion != EnvdVersion {
				t.Errorf("POST %s%s/connect: %s (%v)", prefix, id, w.Body, err)
			}
		}
		connect(http.StatusOK)
		info, err := f.m.Get(context.Background(), "alice", id)
		if err != nil {
			t.Fatal(err)
		}
		if left := time.Until(info.ExpiresAt); left < 2000*time.Second {
			t.Errorf("%s: %v left after a connect with a timeout of 3000 s", prefix, left)
		}
		if w := f.as("alice", "POST", "/sandboxes/"+id+"/pause", ""); w.Code != http.StatusNoContent {
			t.Fatalf("pause: %d %s", w.Code, w.Body)
		}
		connect(http.StatusCreated)
		if info, err := f.m.Get(context.Background(), "alice", id); err != nil || info.State != store.StateRunning {
			t.Errorf("%s: after connect to a paused sandbox: %+v, %v", prefix, info, err)
		}
		f.as("alice", "DELETE", "/sandboxes/"+id, "")
		checkError(t, "connect to a killed sandbox", f.as("alice", "POST", prefix+id+"/connect", `{}`), http.StatusNotFound)
	}
}

// routesWithBody are the routes that read a JSON body, with %s for a
// sandbox id.
var routesWithBody = []string{
	"/sandboxes", "/v2/sandboxes",
	"/sandboxes/%s/timeout", "/sandboxes/%s/refreshes", "/sandboxes/%s/pause",
	"/sandboxes/%s/resume", "/sandboxes/%s/connect", "/v2/sandboxes/%s/connect",
}

// TestBodies: an oversized, malformed or unknown body is refused with
// E2B's error shape and a 4xx status on every route, and creates nothing.
func TestBodies(t *testing.T) {
	f := newFixture(t)
	id, _ := f.create(t, "alice")
	huge := `{"metadata":{"k":"` + strings.Repeat("x", maxBody) + `"}}`
	for _, route := range routesWithBody {
		path := route
		if strings.Contains(route, "%s") {
			path = fmt.Sprintf(route, id)
		}
		for _, c := range []struct {
			body   string
			status int
			want   string
		}{
			{huge, http.StatusRequestEntityTooLarge, "too large"},
			{`{`, http.StatusBadRequest, "invalid JSON"},
			{`{"timeout":`, http.StatusBadRequest, "invalid JSON"},
			{`[1,2]`, http.StatusBadRequest, "invalid JSON"},
			{`{"timeout":"60"}`, http.StatusBadRequest, "timeout"},
			{`{"timeout":1.5}`, http.StatusBadRequest, "timeout"},
			{`{"timeout":1e30}`, http.StatusBadRequest, "timeout"},
			{`{} {}`, http.StatusBadRequest, "data after"},
			{`{}x`, http.StatusBadRequest, "invalid JSON"},
			{`{"newThing":1}`, http.StatusBadRequest, "newThing"},
		} {
			body := c.body
			if strings.Contains(route, "refreshes") {
				body = strings.ReplaceAll(body, "timeout", "duration")
			}
			w := f.as("alice", "POST", path, body)
			msg := checkError(t, fmt.Sprintf("POST %s %.40s", route, body), w, c.status)
			if want := strings.ReplaceAll(c.want, "timeout", map[bool]string{true: "duration", false: "timeout"}[strings.Contains(route, "refreshes")]); !strings.Contains(msg, want) {
				t.Errorf("POST %s %.40s: message %q does not name %q", route, body, msg, want)
			}
		}
	}
	if got := f.m.LastCreateID(); got != id {
		t.Errorf("a refused request created sandbox %s", got)
	}
	if w := f.as("alice", "GET", "/v2/sandboxes/", ""); w.Code != http.StatusNotFound {
		t.Errorf("GET /v2/sandboxes/: %d", w.Code)
	}
}

// TestCreateBounds: metadata, envVars and timeouts beyond the daemon's
// bounds are refused with 400 naming the field, and create nothing; at the
// bounds they pass.
func TestCreateBounds(t *testing.T) {
	f := newFixture(t)
	many := func(n int, key func(int) string, value string) string {
		m := map[string]string{}
		for i := range n {
			m[key(i)] = value
		}
		b, _ := json.Marshal(m)
		return string(b)
	}
	longKey := func(n int) func(int) string {
		return func(i int) string { return fmt.Sprintf("%0*d", n, i) }
	}
	envName := func(i int) string { return fmt.Sprintf("V%d", i) }
	for _, c := range []struct {
		body string
		want string // "" when accepted
	}{
		{`{"metadata":` + many(daemon.MaxLabels, longKey(daemon.MaxLabelKey), strings.Repeat("v", daemon.MaxLabelValue)) + `}`, ""},
		{`{"metadata":` + many(daemon.MaxLabels+1, longKey(3), "v") + `}`, "metadata: 65 entries"},
		{`{"metadata":` + many(1, longKey(daemon.MaxLabelKey+1), "v") + `}`, "metadata: key"},
		{`{"metadata":` + many(1, longKey(3), strings.Repeat("v", daemon.MaxLabelValue+1)) + `}`, "metadata: \"000\": value longer"},
		{`{"metadata":{"":"v"}}`, "metadata: empty key"},
		{`{"metadata":{"a\nb":"v"}}`, "metadata: key"},
		{`{"metadata":{"k":"a\u0000b"}}`, "metadata"},
		{`{"envVars":` + many(daemon.MaxEnvVars, envName, strings.Repeat("v", 400)) + `}`, ""},
		{`{"envVars":` + many(daemon.MaxEnvVars+1, envName, "v") + `}`, "envVars: 257 variables"},
		{`{"envVars":` + many(2, envName, strings.Repeat("v", daemon.MaxEnvBytes/2)) + `}`, "envVars: "},
		{`{"envVars":{"A=B":"v"}}`, "envVars: invalid variable name"},
		{`{"envVars":{"":"v"}}`, "envVars: empty"},
		{`{"envVars":{"A\nB":"v"}}`, "envVars: invalid variable name"},
		{`{"envVars":{"A":"a\u0000b"}}`, "envVars: \"A\": value contains a NUL"},
		{`{"timeout":-1}`, "timeout: -1 seconds"},
		{`{"timeout":99999999999}`, "timeout: 99999999999 seconds"},
		{`{"allow_internet_access":true,"network":{"denyOut":["10.0.0.0/8"]}}`, "not address ranges"},
	} {
		before := f.m.LastCreateID()
		w := f.as("alice", "POST", "/sandboxes", c.body)
		if c.want == "" {
			if w.Code != http.StatusCreated {
				t.Errorf("create %.60s…: %d %s, want 201", c.body, w.Code, w.Body)
			}
			continue
		}
		msg := checkError(t, fmt.Sprintf("create %.60s", c.body), w, http.StatusBadRequest)
		if !strings.Contains(msg, c.want) {
			t.Errorf("create %.60s: message %q does not name %q", c.body, msg, c.want)
		}
		if f.m.LastCreateID() != before {
			t.Errorf("create %.60s: a sandbox was created", c.body)
		}
	}

	// Offline: internet access off, or all traffic denied without an
	// allowOut.
	for _, body := range []string{`{"allow_internet_access":false}`, `{"network":{"denyOut":["0.0.0.0/0"]}}`} {
		if w := f.as("alice", "POST", "/sandboxes", body); w.Code != http.StatusCreated {
			t.Fatalf("create %s: %d %s", body, w.Code, w.Body)
		}
		if nw := f.m.LastCreate().Policy.Network; nw.Mode != "none" || len(nw.AllowedDomains)+len(nw.AllowedCIDRs)+len(nw.DeniedDomains) != 0 {
			t.Errorf("create %s: network %+v, want mode none", body, nw)
		}
	}

	id, _ := f.create(t, "alice")
	for body, want := range map[string]string{
		`{"timeout":0}`:           "timeout: want a positive",
		`{"timeout":-5}`:          "timeout: -5 seconds",
		`{}`:                      "timeout: want a positive",
		`{"timeout":99999999999}`: "timeout: 99999999999",
	} {
		msg := checkError(t, "timeout "+body, f.as("alice", "POST", "/sandboxes/"+id+"/timeout", body), http.StatusBadRequest)
		if !strings.Contains(msg, want) {
			t.Errorf("timeout %s: message %q does not name %q", body, msg, want)
		}
	}
	msg := checkError(t, "refresh", f.as("alice", "POST", "/sandboxes/"+id+"/refreshes", `{"duration":-1}`), http.StatusBadRequest)
	if !strings.Contains(msg, "duration") {
		t.Errorf("refresh: message %q does not name duration", msg)
	}
	msg = checkError(t, "connect", f.as("alice", "POST", "/v2/sandboxes/"+id+"/connect", `{"timeout":-1}`), http.StatusBadRequest)
	if !strings.Contains(msg, "timeout") {
		t.Errorf("connect: message %q does not name timeout", msg)
	}
}

// failing is a manager whose listing fails with an error that names
// internals.
type failing struct {
	*apitest.Manager
}

func (failing) List(context.Context, string, map[string]string, string) ([]daemon.Info, error) {
	return nil, fmt.Errorf("list sandboxes: open /var/lib/hutch/secret-path/state.db: %w", errors.New("disk I/O error"))
}

func (failing) Agent(context.Context, string, string) (*agent.Client, error) {
	return nil, fmt.Errorf("dial /var/lib/hutch/sandboxes/agent.sock: %w", errors.New("broken pipe"))
}

// TestErrorShape: every error answer is {code, message} with the right
// status, and a 500 tells nothing of the daemon's internals.
func TestErrorShape(t *testing.T) {
	f := newFixture(t)
	f.m.Quota = 1
	id, _ := f.create(t, "alice")

	checkError(t, "no API key", f.do("GET", "/v2/sandboxes", ""), http.StatusUnauthorized)
	checkError(t, "bad API key", f.do("GET", "/v2/sandboxes", "", "X-API-Key", "e2b_"+strings.Repeat("0", 40)), http.StatusUnauthorized)
	checkError(t, "malformed API key", f.do("GET", "/v2/sandboxes", "", "X-API-Key", "x"), http.StatusUnauthorized)
	checkError(t, "bearer", f.do("GET", "/v2/sandboxes", "", "Authorization", "Bearer nope"), http.StatusUnauthorized)
	checkError(t, "unknown sandbox", f.as("alice", "GET", "/sandboxes/sb-zzz", ""), http.StatusNotFound)
	checkError(t, "bad query", f.as("alice", "GET", "/v2/sandboxes?limit=0", ""), http.StatusBadRequest)
	checkError(t, "quota", f.as("alice", "POST", "/sandboxes", `{}`), http.StatusTooManyRequests)
	if w := f.as("alice", "POST", "/sandboxes/"+id+"/pause", ""); w.Code != http.StatusNoContent {
		t.Fatalf("pause: %d %s", w.Code, w.Body)
	}
	checkError(t, "pause twice", f.as("alice", "POST", "/sandboxes/"+id+"/pause", ""), http.StatusConflict)
	checkError(t, "resume a running one", func() *httptest.ResponseRecorder {
		f.as("alice", "POST", "/sandboxes/"+id+"/resume", "")
		return f.as("alice", "POST", "/sandboxes/"+id+"/resume", "")
	}(), http.StatusConflict)
	// A route of E2B's that hutch lacks is 501 naming it, any other path
	// under E2B's prefixes 404: E2B's shape, never hutch's own API (whose
	// refusal here is a plain 404 without {code, message}), with or
	// without a key.
	for _, r := range [][2]string{
		{"GET", "/sandboxes/" + id + "/logs"}, {"GET", "/v2/sandboxes/" + id + "/logs"},
		{"POST", "/templates"}, {"POST", "/v2/templates"}, {"POST", "/templates/t1"}, {"POST", "/templates/t1/builds/b1"},
		{"DELETE", "/templates/tags/n"}, {"GET", "/teams"},
		{"GET", "/api-keys"},
	} {
		for _, key := range []string{f.keys["alice"], ""} {
			msg := checkError(t, r[0]+" "+r[1], f.do(r[0], r[1], "", "X-API-Key", key), http.StatusNotImplemented)
			if !strings.Contains(msg, "not supported by hutch") || !strings.Contains(msg, r[0]+" /") {
				t.Errorf("%s %s: message %q", r[0], r[1], msg)
			}
		}
	}
	for _, r := range [][2]string{
		{"PUT", "/sandboxes"}, {"PATCH", "/sandboxes/" + id}, {"GET", "/snapshots/x"}, {"GET", "/snapshots/x/y"},
		{"GET", "/volumes/v1/nothing"}, {"POST", "/v2/anything"}, {"GET", "/v3/templates"}, {"GET", "/secrets/a/b"},
		{"GET", "/templates/t1/builds/b1/nothing"}, {"GET", "/admin"}, {"PUT", "/sandboxes/" + id + "/timeout"},
	} {
		msg := checkError(t, r[0]+" "+r[1], f.as("alice", r[0], r[1], ""), http.StatusNotFound)
		if !strings.Contains(msg, "no such route") {
			t.Errorf("%s %s: message %q", r[0], r[1], msg)
		}
	}

	// A 500 tells the client nothing of what failed inside.
	h := New(failing{f.m}, slog.New(slog.DiscardHandler))
	r := httptest.NewRequest("GET", "/v2/sandboxes", nil)
	r.Header.Set("X-API-Key", f.keys["alice"])
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	msg := checkError(t, "internal error", w, http.StatusInternalServerError)
	if strings.Contains(msg, "/var/lib") || strings.Contains(msg, "disk") {
		t.Errorf("500 message %q leaks internals", msg)
	}
	tok, err := h.token(context.Background(), "alice", id)
	if err != nil {
		t.Fatal(err)
	}
	r = httptest.NewRequest("GET", "/health", nil)
	r.Header.Set("E2b-Sandbox-Id", id)
	r.Header.Set("X-Access-Token", tok)
	w = httptest.NewRecorder()
	h.Mount(http.NotFoundHandler(), func(p string) bool { return p == "/health" }, http.NotFoundHandler()).ServeHTTP(w, r)
	msg = checkError(t, "envd, internal error", w, http.StatusInternalServerError)
	if strings.Contains(msg, "/var/lib") || strings.Contains(msg, "pipe") {
		t.Errorf("envd 500 message %q leaks internals", msg)
	}
}

// TestDecodeErrorsAreClientErrors: whatever a body holds, decode's error
// is never classified as the server's fault.
func TestDecodeErrorsAreClientErrors(t *testing.T) {
	for _, body := range []string{"{", `{"timeout":`, "\x00", `"x"`, `null x`, `{"timeout":{}}`, `{"metadata":[]}`, "\xff\xfe"} {
		r := httptest.NewRequest("POST", "/sandboxes", strings.NewReader(body))
		var b CreateBody
		err := decode(httptest.NewRecorder(), r, &b, false)
		if err == nil {
			t.Errorf("decode(%q) = nil", body)
		}
		if err != nil && classify(err) != http.StatusBadRequest {
			t.Errorf("decode(%q) = %v, status %d", body, err, classify(err))
		}
	}
	// A body cut short by the client.
	r := httptest.NewRequest("POST", "/sandboxes", io.MultiReader(strings.NewReader(`{"ti`), errReader{}))
	var b CreateBody
	if err := decode(httptest.NewRecorder(), r, &b, false); err == nil || classify(err) != http.StatusBadRequest {
		t.Errorf("decode of a body cut short = %v, want 400", err)
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, io.ErrUnexpectedEOF }

// TestListOrder: GET /sandboxes and /v2/sandboxes list newest first, as
// E2B does (ties by id); order=asc is the exact reverse; pages go on
// after the place their nextToken names, which a list of the other order
// refuses.
func TestListOrder(t *testing.T) {
	f := newFixture(t)
	for range 4 {
		f.create(t, "alice")
	}
	infos, err := f.m.List(context.Background(), "alice", nil, "")
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(infos, func(a, b daemon.Info) int {
		if c := b.CreatedAt.Truncate(time.Microsecond).Compare(a.CreatedAt.Truncate(time.Microsecond)); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	var newest []string
	for _, i := range infos {
		newest = append(newest, i.ID)
	}
	oldest := slices.Clone(newest)
	slices.Reverse(oldest)
	list := func(path string) ([]string, string) {
		t.Helper()
		w := f.as("alice", "GET", path, "")
		if w.Code != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, w.Code, w.Body)
		}
		var out []listedJSON
		if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, s := range out {
			got = append(got, s.SandboxID)
		}
		return got, w.Header().Get("X-Next-Token")
	}
	if got, _ := list("/sandboxes"); !slices.Equal(got, newest) {
		t.Errorf("GET /sandboxes: %v, want newest first %v", got, newest)
	}
	if got, _ := list("/v2/sandboxes"); !slices.Equal(got, newest) {
		t.Errorf("GET /v2/sandboxes: %v, want newest first %v", got, newest)
	}
	if got, _ := list("/v2/sandboxes?order=asc"); !slices.Equal(got, oldest) {
		t.Errorf("GET /v2/sandboxes?order=asc: %v, want oldest first %v", got, oldest)
	}
	for _, order := range []string{"desc", "asc"} {
		want := map[string][]string{"desc": newest, "asc": oldest}[order]
		var got []string
		next, made := "", ""
		for page := 0; ; page++ {
			ids, tok := list("/v2/sandboxes?limit=3&order=" + order + "&nextToken=" + url.QueryEscape(next))
			got = append(got, ids...)
			if tok == "" {
				break
			}
			if page > len(want) {
				t.Fatalf("order %s: pages do not end", order)
			}
			if next == "" {
				// A sandbox made meanwhile is newer than all: it moves
				// nothing on the next page.
				made, _ = f.create(t, "alice")
				if order == "asc" {
					want = append(want, made)
				}
				other := map[string]string{"desc": "asc", "asc": "desc"}[order]
				checkError(t, "a token of the other order", f.as("alice", "GET", "/v2/sandboxes?order="+other+"&nextToken="+url.QueryEscape(tok), ""), http.StatusBadRequest)
			}
			next = tok
		}
		f.as("alice", "DELETE", "/sandboxes/"+made, "")
		if !slices.Equal(got, want) {
			t.Errorf("order %s, pages of 3: %v, want %v", order, got, want)
		}
	}
}
