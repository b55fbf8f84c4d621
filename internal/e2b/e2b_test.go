package e2b

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/daemon"
	"github.com/hutch-sandbox/hutch/internal/policy"
)

// tenantRule checks a tenant's rule as a daemon that opened nothing.
func tenantRule(field, entry string, cidr bool) error {
	return daemon.TenantRule(field, entry, cidr, nil)
}

func body(t *testing.T, s string) CreateBody {
	t.Helper()
	var b CreateBody
	if err := json.Unmarshal([]byte(s), &b); err != nil {
		t.Fatal(err)
	}
	return b
}

func TestCreateRequest(t *testing.T) {
	req, _, err := createRequest(body(t, `{"templateID":"base","timeout":90,"metadata":{"k":"v"},"envVars":{"A":"1"},"secure":true,"autoPause":false,"autoResume":{"enabled":false}}`), true, tenantRule, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if req.Timeout != 90*time.Second || req.Labels["k"] != "v" || req.Env["A"] != "1" {
		t.Errorf("request %+v", req)
	}
	// E2B's default is the internet: every public destination (on 80
	// and 443) through the proxy.
	if nw := req.Policy.Network; req.Policy.Filesystem.Workspace != Workspace || nw.Mode != "proxy" || !slices.Equal(nw.AllowedDomains, []string{"*"}) {
		t.Errorf("policy %+v", req.Policy)
	}
	for _, in := range []string{`{"allow_internet_access":true}`, `{"network":{"allowOut":["0.0.0.0/0"],"denyOut":["evil.example"]}}`} {
		req, _, err := createRequest(body(t, in), true, tenantRule, nil, nil)
		if nw := req.Policy.Network; err != nil || nw.Mode != "proxy" || !slices.Equal(nw.AllowedDomains, []string{"*"}) {
			t.Errorf("createRequest(%s) = %+v, %v; want the internet", in, nw, err)
		}
	}

	req, _, err = createRequest(body(t, `{"templateID":"base","network":{"allowOut":["example.com","*.npmjs.org","93.184.216.0/24"],"denyOut":["0.0.0.0/0","bad.example.com"]}}`), true, tenantRule, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	nw := req.Policy.Network
	if nw.Mode != "proxy" || !slices.Equal(nw.AllowedDomains, []string{"example.com", "*.npmjs.org"}) ||
		!slices.Equal(nw.AllowedCIDRs, []string{"93.184.216.0/24"}) || !slices.Equal(nw.DeniedDomains, []string{"bad.example.com"}) {
		t.Errorf("network %+v", nw)
	}

	req, _, err = createRequest(body(t, `{"volumeMounts":[{"name":"v","path":"/mnt/v"},{"name":"w","path":"/home/user/w"}]}`), true, tenantRule, nil, nil)
	if err != nil || len(req.Volumes) != 2 || req.Volumes[0] != (daemon.Volume{Name: "v", At: "/mnt/v"}) || req.Volumes[1] != (daemon.Volume{Name: "w", At: "/home/user/w"}) {
		t.Errorf("volumeMounts: %+v, %v", req.Volumes, err)
	}
	for _, in := range []string{`{"network":{"allowPublicTraffic":true,"maskRequestHost":"custom.example:${PORT}"}}`, `{"network":{"allowPublicTraffic":false}}`} {
		if _, _, err := createRequest(body(t, in), true, tenantRule, nil, nil); err != nil {
			t.Errorf("createRequest(%s): %v", in, err)
		}
	}
	for in, want := range map[string]daemon.Lifecycle{
		`{}`:                  {},
		`{"autoPause":false}`: {},
		`{"autoPause":true}`:  {PauseOnTimeout: true},
		`{"autoPause":true,"autoPauseMemory":true,"autoResume":{"enabled":true}}`:   {PauseOnTimeout: true},
		`{"autoPause":true,"autoPauseMemory":false,"autoResume":{"enabled":false}}`: {PauseOnTimeout: true, FilesOnly: true},
	} {
		req, _, err := createRequest(body(t, in), true, tenantRule, nil, nil)
		if err != nil || req.Lifecycle != want {
			t.Errorf("createRequest(%s): lifecycle %+v, %v; want %+v", in, req.Lifecycle, err, want)
		}
	}

	for in, want := range map[string]string{
		`{"autoPauseMemory":false}`:                                                                          "autoPauseMemory: only with autoPause true",
		`{"autoResume":{"enabled":true}}`:                                                                    "autoResume: can only be enabled when the sandbox pauses",
		`{"autoPause":true,"autoPauseMemory":false,"autoResume":{"enabled":true}}`:                           "filesystem-only pause must be resumed explicitly",
		`{"autoPause":true,"autoResume":{"on":true}}`:                                                        `autoResume: want {"enabled": true or false}`,
		`{"autoPause":true,"autoResume":true}`:                                                               `autoResume: want {"enabled": true or false}`,
		`{"mcp":["x"]}`:                                                                                      "mcp: want an object",
		`{"volumeMounts":[{"name":"v","path":"v"}]}`:                                                         "volumeMounts[0]: path",
		`{"volumeMounts":[{"name":"v","path":"/"}]}`:                                                         "volumeMounts[0]: path",
		`{"volumeMounts":[{"name":"v","path":"/a/../b"}]}`:                                                   "volumeMounts[0]: path",
		`{"volumeMounts":[{"name":"../v","path":"/v"}]}`:                                                     "volumeMounts[0]: volume name",
		`{"volumeMounts":[{"name":"v","path":"/v"},{"name":"w","path":"/v"}]}`:                               "two volumes at one path",
		`{"volumeMounts":[{"name":"v","path":"/v","readOnly":true}]}`:                                        "volumeMounts: want",
		`{"volumeMounts":{"name":"v"}}`:                                                                      "volumeMounts: want",
		`{"network":{"maskRequestHost":"a b:${PORT}"}}`:                                                      "network.maskRequestHost",
		`{"network":{"maskRequestHost":""}}`:                                                                 "network.maskRequestHost",
		`{"network":{"maskRequestHost":"x\r\nInjected: 1"}}`:                                                 "network.maskRequestHost",
		`{"network":{"rules":{"10.0.0.0/8":[{"transform":{"headers":{"a":"b"}}}]}}}`:                         "not to an address range",
		`{"network":{"rules":{"a.example":[{"transform":{"cookies":{}}}]}}}`:                                 "network.rules: want",
		`{"network":{"rules":{"a.example":[{"transform":{"headers":{"a":"${e2b.identity.tokens.aws}"}}}]}}}`: "workload identity tokens",
		`{"network":{"rules":{"a.example":[{"transform":{"headers":{"Host":"x"}}}]}}}`:                       "belongs to the connection",
		`{"network":{"rules":{"a.example":[{"transform":{"headers":{"a":"x\r\ny: z"}}}]}}}`:                  "line break",
		`{"network":{"rules":{"*":[{"transform":{"headers":{"a":"b"}}}]}}}`:                                  "name the hosts",
		`{"network":{"denyOut":["10.0.0.0/8"]}}`:                                                             "not address ranges",
		`{"allow_internet_access":false,"network":{"allowOut":["a.b"]}}`:                                     "both offline",
		`{"timeout":-1}`: "out of range",
		// A tenant's rules never open what the proxy's guard refuses.
		`{"network":{"allowOut":["127.0.0.1"]}}`:                           `network.allowOut[0]: "127.0.0.1" names loopback addresses: only the daemon's operator`,
		`{"network":{"allowOut":["a.example","[::ffff:127.0.0.1]:8080"]}}`: `network.allowOut[1]: "[::ffff:127.0.0.1]:8080" names loopback`,
		`{"network":{"allowOut":["169.254.169.254"]}}`:                     "network.allowOut[0]: \"169.254.169.254\" names metadata",
		`{"network":{"allowOut":["10.0.0.0/8"]}}`:                          "network.allowOut[0]: \"10.0.0.0/8\" names private",
		`{"network":{"allowOut":["[64:ff9b::a9fe:a9fe]"]}}`:                "names metadata",
		`{"network":{"allowOut":["2002:7f00::/24"]}}`:                      "names loopback",
		`{"network":{"allowOut":["localhost:8080"]}}`:                      "names loopback",
		`{"network":{"allowOut":["100.64.0.0/10"]}}`:                       "names cgnat",
		`{"network":{"allowOut":["fe80::/10"]}}`:                           "names link-local",
	} {
		_, _, err := createRequest(body(t, in), true, tenantRule, nil, nil)
		if err == nil || !strings.Contains(err.Error(), want) || classify(err) != http.StatusBadRequest {
			t.Errorf("createRequest(%s) = %v (status %d), want 400 naming %q", in, err, classify(err), want)
		}
	}

	// Templates: an unknown one is E2B's not-found error naming the ones
	// there are; a known one starts its image; "base" is the host's root
	// unless a template of that name replaces it.
	templates := map[string]string{"python": "docker.io/library/python:3.12"}
	if _, _, err := createRequest(body(t, `{"templateID":"node"}`), true, tenantRule, templates, nil); classify(err) != http.StatusNotFound ||
		!strings.Contains(err.Error(), `template "node"`) || !strings.Contains(err.Error(), "base, python") {
		t.Errorf("an unknown template: %v (status %d)", err, classify(err))
	}
	req, name, err := createRequest(body(t, `{"templateID":"python"}`), true, tenantRule, templates, nil)
	if err != nil || name != "python" || req.Policy.Root != "image:docker.io/library/python:3.12" {
		t.Errorf("the python template: %q %q, %v", name, req.Policy.Root, err)
	}
	req, name, err = createRequest(body(t, `{}`), true, tenantRule, templates, nil)
	if err != nil || name != Template || req.Policy.Root != "" {
		t.Errorf("the default template: %q %q, %v", name, req.Policy.Root, err)
	}
	req, _, err = createRequest(body(t, `{"templateID":"base"}`), true, tenantRule, map[string]string{"base": "hutch.test/base:1"}, nil)
	if err != nil || req.Policy.Root != "image:hutch.test/base:1" {
		t.Errorf("base replaced: %q, %v", req.Policy.Root, err)
	}
}

// TestNoInternet: for a daemon that gives no internet (hutch serve
// --no-internet), E2B's default network is none, named hosts still work,
// and asking for the internet is refused, naming the flag.
func TestNoInternet(t *testing.T) {
	for in, want := range map[string]policy.Network{
		`{}`:                              {Mode: "none"},
		`{"allow_internet_access":false}`: {Mode: "none"},
		`{"network":{"allowOut":["example.com"]}}`: {Mode: "proxy", AllowedDomains: []string{"example.com"}},
	} {
		req, _, err := createRequest(body(t, in), false, tenantRule, nil, nil)
		if nw := req.Policy.Network; err != nil || nw.Mode != want.Mode || !slices.Equal(nw.AllowedDomains, want.AllowedDomains) {
			t.Errorf("createRequest(%s) = %+v, %v; want %+v", in, nw, err, want)
		}
	}
	for _, in := range []string{`{"allow_internet_access":true}`, `{"network":{"allowOut":["0.0.0.0/0"]}}`, `{"network":{"allowOut":["a.example","*"]}}`} {
		_, _, err := createRequest(body(t, in), false, tenantRule, nil, nil)
		if err == nil || !strings.Contains(err.Error(), "--no-internet") || classify(err) != http.StatusBadRequest {
			t.Errorf("createRequest(%s) = %v (status %d), want 400 naming --no-internet", in, err, classify(err))
		}
	}
}

func TestUnknownField(t *testing.T) {
	r := httptest.NewRequest("POST", "/v2/sandboxes", strings.NewReader(`{"templateID":"base","newThing":1}`))
	var b CreateBody
	err := decode(httptest.NewRecorder(), r, &b, false)
	if err == nil || !strings.Contains(err.Error(), "newThing") || classify(err) != http.StatusBadRequest {
		t.Fatalf("decode = %v, want 400 naming newThing", err)
	}
}

func TestParseList(t *testing.T) {
	// As E2B's JavaScript SDK encodes a metadata filter.
	md := url.Values{}
	md.Set(url.PathEscape("key with space"), url.PathEscape("a/b c"))
	q := url.Values{"metadata": {md.Encode()}, "state": {"running,paused"}, "limit": {"5"}, "nextToken": {listKey{time.Unix(5, 0), "sb-5"}.token(false)}}
	lq, err := parseList(q, true)
	if err != nil {
		t.Fatal(err)
	}
	if lq.metadata["key with space"] != "a/b c" || len(lq.metadata) != 1 {
		t.Errorf("metadata %q", lq.metadata)
	}
	if !slices.Equal(lq.states, []string{"running", "paused"}) || lq.limit != 5 || lq.after == nil || lq.after.id != "sb-5" || !lq.after.started.Equal(time.Unix(5, 0)) {
		t.Errorf("query %+v", lq)
	}
	for _, bad := range []url.Values{{"limit": {"0"}}, {"limit": {"101"}}, {"state": {"gone"}}, {"nextToken": {"!"}}, {"other": {"1"}},
		{"nextToken": {listKey{time.Unix(5, 0), "sb-5"}.token(true)}}, {"order": {"asc"}, "nextToken": {listKey{time.Unix(5, 0), "sb-5"}.token(false)}},
		{"order": {"up"}}} {
		if _, err := parseList(bad, true); err == nil || classify(err) != http.StatusBadRequest {
			t.Errorf("parseList(%v) = %v, want 400", bad, err)
		}
	}
}

func TestPaths(t *testing.T) {
	for p, want := range map[string]bool{
		"/sandboxes": true, "/sandboxes/sb-1": true, "/v2/sandboxes": true, "/v2/sandboxes/sb-1/connect": true,
		"/templates": true, "/v3/templates": true, "/volumes/v": true, "/secrets": true, "/snapshots/s": true, "/teams": true,
		"/v1/sandboxes": false, "/sandboxesx": false, "/health": false, "/files": false, "/metrics": false, "/ui/": false, "/mcp": false,
	} {
		if Paths(p) != want {
			t.Errorf("Paths(%q) = %v", p, !want)
		}
	}
}

func TestClassify(t *testing.T) {
	for err, want := range map[error]int{
		errorf(ErrUnauthenticated, "x"): 401,
		errorf(errNoRoute, "x"):         501,
		errors.New("other"):             500,
	} {
		if got := classify(err); got != want {
			t.Errorf("classify(%v) = %d, want %d", err, got, want)
		}
	}
}
