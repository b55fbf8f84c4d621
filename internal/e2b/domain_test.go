package e2b

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// testDomain is the domain of the tests of E2B's domain layout.
const testDomain = "sandbox.hutch.test"

// TestCheckDomain: hutch serve --domain takes DNS names of two labels or
// more, in their normal form.
func TestCheckDomain(t *testing.T) {
	for in, want := range map[string]string{"Sandbox.Example.COM.": "sandbox.example.com", "a-1.b": "a-1.b"} {
		if got, err := CheckDomain(in); err != nil || got != want {
			t.Errorf("CheckDomain(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "localhost", "a..b", "-a.b", "a-.b", "a_b.c", "a.b/c", "a.b:443", "*.a.b", strings.Repeat("a", 64) + ".b"} {
		if _, err := CheckDomain(in); err == nil {
			t.Errorf("CheckDomain(%q): no error", in)
		}
	}
}

// TestDomainRouting: the host alone routes, in its normal form: api.D and
// hosts outside D to the API, 49983-ID.D to envd for ID whatever
// E2b-Sandbox-Id says, PORT-ID.D to the port proxy (which wants the
// traffic token, and knows no sandbox it has no record of), any other
// name under D 404.
func TestDomainRouting(t *testing.T) {
	f := newFixture(t)
	f.h.domain = testDomain
	envd := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, _ := Resolved(r)
		fmt.Fprint(w, "envd of "+s.ID)
	})
	f.srv = f.h.Domain(f.srv, func(p string) bool { return p == "/health" }, envd)
	id, tok := f.create(t, "alice")
	other, _ := f.create(t, "bob")
	for _, c := range []struct {
		host   string
		path   string
		hdr    []string
		status int
		want   string
	}{
		{"api." + testDomain, "/sandboxes", []string{"X-API-Key", f.keys["alice"]}, 200, id},
		{"API." + strings.ToUpper(testDomain) + ".:443", "/sandboxes", []string{"X-API-Key", f.keys["alice"]}, 200, id},
		{"127.0.0.1:7070", "/sandboxes", []string{"X-API-Key", f.keys["alice"]}, 200, id},
		{"api." + testDomain, "/sandboxes", nil, 401, "missing API key"},
		{"49983-" + id + "." + testDomain, "/health", []string{"X-Access-Token", tok}, 200, "envd of " + id},
		{"49983-" + id + "." + testDomain, "/health", []string{"X-Access-Token", tok, "E2b-Sandbox-Id", other}, 200, "envd of " + id},
		{"49983-" + other + "." + testDomain, "/health", []string{"X-Access-Token", tok, "E2b-Sandbox-Id", id}, 401, "invalid envd access token"},
		{"49983-" + id + "." + testDomain, "/sandboxes", []string{"X-Access-Token", tok, "X-API-Key", f.keys["alice"]}, 404, "no such route of envd"},
		{"8000-" + id + "." + testDomain, "/", []string{"X-API-Key", f.keys["alice"]}, 403, TrafficTokenHeader},
		{"8000-sb-nosuchsandbx." + testDomain, "/", nil, 502, "The sandbox was not found"},
		{testDomain, "/sandboxes", []string{"X-API-Key", f.keys["alice"]}, 404, "no such host"},
		{"x.8000-" + id + "." + testDomain, "/", nil, 404, "no such host"},
		{"08000-" + id + "." + testDomain, "/", nil, 404, "no such host"},
		{"0-" + id + "." + testDomain, "/", nil, 404, "no such host"},
		{"65536-" + id + "." + testDomain, "/", nil, 404, "no such host"},
		{"-" + id + "." + testDomain, "/", nil, 404, "no such host"},
		{"api-x." + testDomain, "/sandboxes", []string{"X-API-Key", f.keys["alice"]}, 404, "no such host"},
	} {
		w := f.do("GET", c.path, "", append([]string{"Host", c.host}, c.hdr...)...)
		if w.Code != c.status || !strings.Contains(w.Body.String(), c.want) {
			t.Errorf("GET %s on %s: %d %s; want %d with %q", c.path, c.host, w.Code, w.Body, c.status, c.want)
		}
		if w.Code >= 400 && !json.Valid(w.Body.Bytes()) {
			t.Errorf("GET %s on %s: %s is not JSON", c.path, c.host, w.Body)
		}
	}
}
