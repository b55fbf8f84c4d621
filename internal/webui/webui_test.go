package webui

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/api"
	"github.com/hutch-sandbox/hutch/internal/api/apitest"
)

// env is the UI on a loopback TCP listener, mounted as hutch serve mounts
// it (api.Serve), over a stand-in daemon (apitest) whose API is wrapped
// by extra, when not nil.
type env struct {
	m     *apitest.Manager
	base  string // http://127.0.0.1:PORT
	token string // a token of alice
}

func newEnv(t *testing.T, extra func(next http.Handler, m *apitest.Manager) http.Handler) *env {
	t.Helper()
	return newEnvAs(t, extra, false)
}

// newEnvAs is newEnv whose requests, with operator, come as the daemon's
// operator's do (api.OriginLocal: its unix socket, which a browser
// reaches through a forwarded socket).
func newEnvAs(t *testing.T, extra func(next http.Handler, m *apitest.Manager) http.Handler, operator bool) *env {
	t.Helper()
	m, err := apitest.NewManager(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	var h http.Handler = api.New(m, nil)
	if extra != nil {
		h = extra(h, m)
	}
	ui, err := New(Config{Store: m.Store()})
	if err != nil {
		t.Fatal(err)
	}
	ls, err := api.Listen("", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	served := ui.Mount(h)
	if operator {
		mounted := served
		served = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mounted.ServeHTTP(w, r.WithContext(api.WithOrigin(r.Context(), api.OriginLocal)))
		})
	}
	go func() { done <- api.Serve(ctx, served, nil, ls...) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	tok, err := m.Store().CreateToken(context.Background(), "alice")
	if err != nil {
		t.Fatal(err)
	}
	return &env{m: m, base: "http://" + ls[0].Addr().String(), token: tok}
}

// noRedirect is a client that shows redirects instead of following them.
var noRedirect = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// do sends a request with headers and answers status, header and body.
func (e *env) do(t *testing.T, method, path string, body io.Reader, hdr map[string]string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(method, e.base+path, body)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// login posts the login form with token.
func (e *env) login(t *testing.T, token string, hdr map[string]string) (int, http.Header, string) {
	t.Helper()
	h := map[string]string{"Content-Type": "application/x-www-form-urlencoded", "Origin": e.base}
	for k, v := range hdr {
		h[k] = v
	}
	return e.do(t, http.MethodPost, LoginPath, strings.NewReader(url.Values{"token": {token}}.Encode()), h)
}

// cookieOf is the UI's cookie among the Set-Cookie headers of h.
func cookieOf(t *testing.T, h http.Header) *http.Cookie {
	t.Helper()
	for _, c := range (&http.Response{Header: h}).Cookies() {
		if c.Name == api.UICookie {
			return c
		}
	}
	return nil
}

// TestLogin: the form takes a valid token and keeps it in an HttpOnly,
// SameSite=Strict cookie of /ui with a bounded lifetime; a wrong or
// missing token gets the form again with a message that names nothing
// of the token; the pages greet the token's tenant; logout clears the
// cookie.
func TestLogin(t *testing.T) {
	e := newEnv(t, nil)
	status, hdr, body := e.do(t, http.MethodGet, Path, nil, nil)
	if status != http.StatusOK || !strings.Contains(body, `<form method="post" action="/ui/login"`) || cookieOf(t, hdr) != nil {
		t.Fatalf("GET %s: %d %s", Path, status, body)
	}
	for _, bad := range []string{"hutch_nope", e.token + "x", "e2b_0123456789abcdef0123456789abcdef01234567", strings.Repeat("a", 4000)} {
		status, hdr, body := e.login(t, bad, nil)
		if status != http.StatusUnauthorized || !strings.Contains(body, "That token is not valid.") || cookieOf(t, hdr) != nil {
			t.Errorf("login with %.20q: %d %v %s", bad, status, hdr, body)
		}
	}
	if status, _, body := e.login(t, "", nil); status != http.StatusBadRequest || !strings.Contains(body, "Enter a token.") {
		t.Errorf("login without a token: %d %s", status, body)
	}
	if status, hdr, body := e.login(t, strings.Repeat("x", 1<<20), nil); status != http.StatusBadRequest || cookieOf(t, hdr) != nil || !strings.Contains(body, "The form could not be read.") {
		t.Errorf("login with a form of 1 MiB: %d %s", status, body)
	}
	status, hdr, body = e.login(t, e.token, nil)
	c := cookieOf(t, hdr)
	if status != http.StatusSeeOther || hdr.Get("Location") != Path || c == nil {
		t.Fatalf("login: %d %v %s", status, hdr, body)
	}
	if c.Value != e.token || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/ui" || c.MaxAge != int(DefaultLifetime.Seconds()) || c.Secure {
		t.Errorf("cookie %+v", c)
	}
	cookie := map[string]string{"Cookie": api.UICookie + "=" + e.token}
	status, _, body = e.do(t, http.MethodGet, Path, nil, cookie)
	if status != http.StatusOK || !strings.Contains(body, `<strong id="tenant">alice</strong>`) || !strings.Contains(body, `src="/ui/static/app.js"`) {
		t.Errorf("the pages: %d %s", status, body)
	}
	// A cookie whose token is no longer valid: the form, the cookie
	// cleared.
	status, hdr, body = e.do(t, http.MethodGet, Path, nil, map[string]string{"Cookie": api.UICookie + "=hutch_revoked"})
	if c := cookieOf(t, hdr); status != http.StatusOK || !strings.Contains(body, "log in again") || c == nil || c.MaxAge >= 0 {
		t.Errorf("stale cookie: %d %v %s", status, hdr, body)
	}
	status, hdr, _ = e.do(t, http.MethodPost, LogoutPath, nil, map[string]string{"Origin": e.base, "Cookie": api.UICookie + "=" + e.token})
	if c := cookieOf(t, hdr); status != http.StatusSeeOther || c == nil || c.MaxAge >= 0 || c.Value != "" || c.Path != "/ui" {
		t.Errorf("logout: %d %v", status, hdr)
	}
	// Forms of another site are refused: no login forgery.
	if status, hdr, _ := e.login(t, e.token, map[string]string{"Origin": "http://evil.example"}); status != http.StatusForbidden || cookieOf(t, hdr) != nil {
		t.Errorf("login from another origin: %d", status)
	}
	if status, hdr, _ := e.login(t, e.token, map[string]string{"Origin": "", "Sec-Fetch-Site": "cross-site"}); status != http.StatusForbidden || cookieOf(t, hdr) != nil {
		t.Errorf("login from another site: %d", status)
	}
}

// TestLoginLimited: failed logins from one address are limited; past the
// limit even a valid token is refused until some time has passed.
func TestLoginLimited(t *testing.T) {
	e := newEnv(t, nil)
	for i := range loginBurst {
		if status, _, _ := e.login(t, "hutch_wrong", nil); status != http.StatusUnauthorized {
			t.Fatalf("failed login %d: %d, want 401", i+1, status)
		}
	}
	status, hdr, body := e.login(t, e.token, nil)
	if status != http.StatusTooManyRequests || cookieOf(t, hdr) != nil || !strings.Contains(body, "Too many failed logins") {
		t.Errorf("login past the limit: %d %s", status, body)
	}
}

// TestCookieNeedsTheUI: the API takes the cookie only from the UI's
// pages: with X-Hutch-UI: 1 and a same-origin fetch (or an Origin of its
// own host); anything else with the cookie is 403, under /v1 and /ui/v1
// alike. A bearer token is unaffected.
func TestCookieNeedsTheUI(t *testing.T) {
	e := newEnv(t, nil)
	cookie := api.UICookie + "=" + e.token
	for _, c := range []struct {
		name string
		hdr  map[string]string
		want int
	}{
		{"no header", map[string]string{}, http.StatusForbidden},
		{"no header, same origin", map[string]string{"Sec-Fetch-Site": "same-origin"}, http.StatusForbidden},
		{"header, nothing of the origin", map[string]string{api.UIHeader: "1"}, http.StatusForbidden},
		{"header, cross-site", map[string]string{api.UIHeader: "1", "Sec-Fetch-Site": "cross-site"}, http.StatusForbidden},
		{"header, same-site", map[string]string{api.UIHeader: "1", "Sec-Fetch-Site": "same-site"}, http.StatusForbidden},
		{"header, other origin", map[string]string{api.UIHeader: "1", "Origin": "http://evil.example"}, http.StatusForbidden},
		{"header, same-origin but other Origin", map[string]string{api.UIHeader: "1", "Sec-Fetch-Site": "same-origin", "Origin": "http://evil.example"}, http.StatusForbidden},
		{"header, own origin but cross-site", map[string]string{api.UIHeader: "1", "Sec-Fetch-Site": "cross-site", "Origin": e.base}, http.StatusForbidden},
		{"header 0", map[string]string{api.UIHeader: "0", "Sec-Fetch-Site": "same-origin"}, http.StatusForbidden},
		{"header, same-origin", map[string]string{api.UIHeader: "1", "Sec-Fetch-Site": "same-origin"}, http.StatusOK},
		{"header, own Origin", map[string]string{api.UIHeader: "1", "Origin": e.base}, http.StatusOK},
	} {
		for _, prefix := range []string{"", "/ui"} {
			hdr := map[string]string{"Cookie": cookie}
			for k, v := range c.hdr {
				hdr[k] = v
			}
			status, _, body := e.do(t, http.MethodGet, prefix+"/v1/sandboxes", nil, hdr)
			if status != c.want {
				t.Errorf("%s at %s/v1: %d %s, want %d", c.name, prefix, status, body, c.want)
				continue
			}
			if status == http.StatusForbidden {
				var eb api.ErrorBody
				if json.Unmarshal([]byte(body), &eb) != nil || eb.Code != api.CodePermissionDenied {
					t.Errorf("%s at %s/v1: %s, want permission_denied", c.name, prefix, body)
				}
			}
		}
	}
	ui := map[string]string{"Cookie": api.UICookie + "=hutch_wrong", api.UIHeader: "1", "Sec-Fetch-Site": "same-origin"}
	if status, _, body := e.do(t, http.MethodGet, "/ui/v1/sandboxes", nil, ui); status != http.StatusUnauthorized {
		t.Errorf("a cookie of no token: %d %s, want 401", status, body)
	}
	if status, _, body := e.do(t, http.MethodGet, "/v1/sandboxes", nil, map[string]string{"Authorization": "Bearer " + e.token, "Cookie": api.UICookie + "=hutch_wrong"}); status != http.StatusOK {
		t.Errorf("a bearer token next to a cookie: %d %s", status, body)
	}
	// Nothing of the UI reaches another front end: only /ui/v1/ is the
	// API.
	for _, p := range []string{"/ui/mcp", "/ui/v1/../mcp", "/ui/v1/./sandboxes", "/ui/v1//sandboxes", "/ui/v1/../../v1/sandboxes"} {
		if status, _, body := e.do(t, http.MethodGet, p, nil, ui); status != http.StatusNotFound {
			t.Errorf("%s: %d %s, want 404", p, status, body)
		}
	}
}

// TestHeaders: every answer under /ui/ forbids framing, inline script and
// sniffing; a Host that is not the daemon's is refused (DNS rebinding);
// static files are served with their type and revalidated by ETag.
func TestHeaders(t *testing.T) {
	e := newEnv(t, nil)
	ui := map[string]string{"Cookie": api.UICookie + "=" + e.token, api.UIHeader: "1", "Sec-Fetch-Site": "same-origin"}
	for _, p := range []string{Path, StaticPath + "app.js", StaticPath + "nothing.js", "/ui/v1/sandboxes", "/ui/elsewhere"} {
		_, hdr, _ := e.do(t, http.MethodGet, p, nil, ui)
		csp := hdr.Get("Content-Security-Policy")
		if !strings.Contains(csp, "default-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") || strings.Contains(csp, "unsafe") ||
			hdr.Get("X-Frame-Options") != "DENY" || hdr.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s: headers %v", p, hdr)
		}
	}
	for name, ctype := range map[string]string{"app.js": "text/javascript; charset=utf-8", "diff.js": "text/javascript; charset=utf-8", "app.css": "text/css; charset=utf-8", "icon.svg": "image/svg+xml"} {
		status, hdr, body := e.do(t, http.MethodGet, StaticPath+name, nil, nil)
		if status != http.StatusOK || hdr.Get("Content-Type") != ctype || body == "" || hdr.Get("ETag") == "" {
			t.Errorf("%s: %d %v", name, status, hdr)
			continue
		}
		if status, _, _ := e.do(t, http.MethodGet, StaticPath+name, nil, map[string]string{"If-None-Match": hdr.Get("ETag")}); status != http.StatusNotModified {
			t.Errorf("%s again: %d, want 304", name, status)
		}
	}
	for _, p := range []string{Path, "/ui/v1/sandboxes", StaticPath + "app.js"} {
		status, _, body := e.do(t, http.MethodGet, p, nil, map[string]string{"Host": "evil.example:80", "Cookie": ui["Cookie"], api.UIHeader: "1", "Sec-Fetch-Site": "same-origin"})
		if status != http.StatusForbidden || !strings.Contains(body, "DNS rebinding") {
			t.Errorf("%s with Host evil.example: %d %s", p, status, body)
		}
	}
	if status, hdr, _ := e.do(t, http.MethodGet, "/ui", nil, nil); status != http.StatusMovedPermanently || hdr.Get("Location") != Path {
		t.Errorf("/ui: %d %v", status, hdr)
	}
	if status, _, _ := e.do(t, http.MethodDelete, Path, nil, map[string]string{"Origin": e.base}); status != http.StatusMethodNotAllowed {
		t.Errorf("DELETE %s: %d", Path, status)
	}
	// A link from anywhere shows a page (without the cookie, which
	// SameSite=Strict keeps from a cross-site navigation).
	if status, _, _ := e.do(t, http.MethodGet, Path, nil, map[string]string{"Sec-Fetch-Site": "cross-site"}); status != http.StatusOK {
		t.Errorf("a link from another site: %d", status)
	}
}

// TestRoutesUntouched: the daemon's other paths pass the UI by.
func TestRoutesUntouched(t *testing.T) {
	e := newEnv(t, nil)
	status, hdr, _ := e.do(t, http.MethodGet, "/v1/health", nil, map[string]string{"Authorization": "Bearer " + e.token})
	if status != http.StatusOK || hdr.Get("Content-Security-Policy") != "" {
		t.Errorf("/v1/health: %d %v", status, hdr)
	}
	if status, _, _ := e.do(t, http.MethodGet, "/uix", nil, map[string]string{"Authorization": "Bearer " + e.token}); status != http.StatusNotFound {
		t.Errorf("/uix: %d", status)
	}
}
