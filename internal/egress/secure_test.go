package egress

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/hutch-sandbox/hutch/internal/secrets"
)

// plainSecret is a secret for the rule tests.
func plainSecret(name, placeholder string, hosts ...string) *secrets.Secret {
	return &secrets.Secret{Name: name, Hosts: hosts, Value: secrets.NewValue([]byte("real-" + name)), Placeholder: placeholder}
}

// names returns the names of list.
func names(list []*secrets.Secret) []string {
	var out []string
	for _, s := range list {
		out = append(out, s.Name)
	}
	return out
}

func TestRulesSecretsBound(t *testing.T) {
	gh := plainSecret("GITHUB_TOKEN", "ph_gh", "api.github.com", "*.githubusercontent.com", "github.com:8443")
	npm := plainSecret("NPM_TOKEN", "ph_npm", "registry.npmjs.org", "API.GitHub.com.")
	npm.AllowPlainHTTP = true
	ip := plainSecret("IP_TOKEN", "ph_ip", "203.0.113.7", "[2001:db8::1]:9000")
	r, _ := mustRules(t, Config{Secrets: []*secrets.Secret{gh, npm, ip}, DenyDomains: []string{"raw.githubusercontent.com"}}, nil)

	if got := names(r.secrets); strings.Join(got, ",") != "GITHUB_TOKEN,NPM_TOKEN,IP_TOKEN" {
		t.Errorf("secrets = %v", got)
	}
	for _, tt := range []struct {
		host string
		port int
		want string
	}{
		{"api.github.com", 443, "GITHUB_TOKEN,NPM_TOKEN"},
		{"API.GITHUB.COM.", 443, "GITHUB_TOKEN,NPM_TOKEN"},
		{"api.github.com", 80, "NPM_TOKEN"}, // GITHUB_TOKEN allows no plain HTTP
		{"api.github.com", 8443, ""},
		{"objects.githubusercontent.com", 443, "GITHUB_TOKEN"},
		{"githubusercontent.com", 443, ""},
		{"github.com", 8443, "GITHUB_TOKEN"},
		{"github.com", 443, ""},
		{"registry.npmjs.org", 80, "NPM_TOKEN"},
		{"203.0.113.7", 443, "IP_TOKEN"},
		{"::ffff:203.0.113.7", 443, "IP_TOKEN"},
		{"2001:db8::1", 9000, "IP_TOKEN"},
		{"[2001:db8::1]", 9000, "IP_TOKEN"},
		{"2001:db8::1", 443, ""},
		{"evil.test", 443, ""},
		{"exa mple.com", 443, ""},
	} {
		var bound []*secrets.Secret
		for _, i := range r.bound(tt.host, tt.port) {
			bound = append(bound, r.secrets[i])
		}
		if got := strings.Join(names(bound), ","); got != tt.want {
			t.Errorf("bound(%q, %d) = %q, want %q", tt.host, tt.port, got, tt.want)
		}
	}

	// The secrets' hosts are allowed as if listed in AllowDomains (ports
	// 80 and 443 without a port); deny rules win.
	for _, tt := range []struct {
		host    string
		port    int
		allowed bool
		rule    string
	}{
		{"api.github.com", 443, true, "api.github.com"},
		{"api.github.com", 80, true, "api.github.com"},
		{"api.github.com", 22, false, "api.github.com"},
		{"objects.githubusercontent.com", 443, true, "*.githubusercontent.com"},
		{"raw.githubusercontent.com", 443, false, "raw.githubusercontent.com"},
		{"github.com", 8443, true, "github.com:8443"},
		{"github.com", 443, false, "github.com:8443"},
		{"evil.test", 443, false, ""},
	} {
		v := r.Resolve(context.Background(), tt.host, tt.port)
		if v.Allowed != tt.allowed || v.Rule != tt.rule {
			t.Errorf("Resolve(%q, %d) = allowed %v by %q (%s), want %v by %q", tt.host, tt.port, v.Allowed, v.Rule, v.Reason, tt.allowed, tt.rule)
		}
	}
}

func TestRulesSecretsPrivateIP(t *testing.T) {
	// A secret bound to a private address lets that address through the
	// guard, as an IP-literal allow rule does.
	s := plainSecret("LOCAL", "ph_local", "10.1.2.3:8080")
	r, _ := mustRules(t, Config{Secrets: []*secrets.Secret{s}, OperatorRules: true}, nil)
	if v := r.Resolve(context.Background(), "10.1.2.3", 8080); !v.Allowed {
		t.Errorf("Resolve(10.1.2.3, 8080) = %+v, want allowed", v)
	}
	// Unless a tenant wrote it.
	r, _ = mustRules(t, Config{Secrets: []*secrets.Secret{s}}, nil)
	if v := r.Resolve(context.Background(), "10.1.2.3", 8080); v.Allowed || v.Reason != "10.1.2.3 is private" {
		t.Errorf("tenant: Resolve(10.1.2.3, 8080) = %+v, want refused as private", v)
	}
}

func TestRulesSecretsErrors(t *testing.T) {
	ok := func() *secrets.Secret { return plainSecret("OK", "ph_ok", "ok.example") }
	empty := ok()
	empty.Value = secrets.Value{}
	tests := []struct {
		list []*secrets.Secret
		want string
	}{
		{[]*secrets.Secret{plainSecret("GITHUB_TOKEN", "ph", "x y")}, `secret GITHUB_TOKEN: host "x y": invalid character ' '`},
		{[]*secrets.Secret{plainSecret("T", "ph", "*")}, `~secret T: host "*": "*" would send the secret anywhere`},
		{[]*secrets.Secret{plainSecret("T", "ph", "https://api.example")}, `~secret T: host "https://api.example": give a host name`},
		{[]*secrets.Secret{plainSecret("T", "ph", "api.example:0")}, `~secret T: host "api.example:0": invalid port "0"`},
		{[]*secrets.Secret{plainSecret("T", "ph")}, `secret T: bound to no host`},
		{[]*secrets.Secret{plainSecret("T", "", "ok.example")}, `secret T: empty placeholder`},
		{[]*secrets.Secret{plainSecret("", "ph", "ok.example")}, `secret #1: no name`},
		{[]*secrets.Secret{ok(), nil}, `secret #2: nil`},
		{[]*secrets.Secret{ok(), ok()}, "secret OK: listed twice\nsecret OK: same placeholder as secret OK"},
		{[]*secrets.Secret{empty}, `secret OK: empty value`},
	}
	for _, tt := range tests {
		r, err := NewRules(Config{Secrets: tt.list, HostAddrs: []netip.Addr{}})
		if err == nil {
			t.Errorf("NewRules(%v) = %v, nil; want error %q", names(tt.list), r, tt.want)
			continue
		}
		if want, sub := strings.CutPrefix(tt.want, "~"); sub && !strings.Contains(err.Error(), want) || !sub && err.Error() != tt.want {
			t.Errorf("NewRules: error %q; want %q", err, tt.want)
		}
	}
}

func TestScanReader(t *testing.T) {
	watch := secrets.NewReplacer([2][]byte{[]byte("SECRETONE"), nil}, [2][]byte{[]byte("TWO"), nil})
	for _, tt := range []struct {
		in    string
		found int // -1: none
	}{
		{"nothing to see here", -1},
		{"", -1},
		{"SECRETON", -1},
		{"xxSECRETONEyy", 0},
		{strings.Repeat("a", 70000) + "TWO" + strings.Repeat("b", 10), 1},
		{strings.Repeat("a", scanChunk-4) + "SECRETONE", 0},
	} {
		for mode, oneByte := range []bool{false, true} {
			var src io.Reader = strings.NewReader(tt.in)
			if oneByte {
				src = iotest.OneByteReader(src)
			}
			found := -1
			s := &scanReader{src: src, watch: watch, found: func(i int) { found = i }}
			out, err := io.ReadAll(s)
			if tt.found < 0 {
				if err != nil || string(out) != tt.in || found != -1 {
					t.Errorf("%.20q (mode %d): %d bytes, %v, found %d; want it all", tt.in, mode, len(out), err, found)
				}
				continue
			}
			// Nothing of the pattern is passed on.
			at := min(strings.Index(tt.in, "SECRETONE"), strings.Index(tt.in, "TWO"))
			if at < 0 {
				at = max(strings.Index(tt.in, "SECRETONE"), strings.Index(tt.in, "TWO"))
			}
			if !errors.Is(err, errForbiddenPlaceholder) || found != tt.found || !bytes.HasPrefix([]byte(tt.in), out) || len(out) > at {
				t.Errorf("%.20q (mode %d): %d bytes, %v, found %d; want at most %d bytes and pattern %d", tt.in, mode, len(out), err, found, at, tt.found)
			}
		}
	}
}

// A scanReader holds back only what may begin a pattern: a
// stream that pauses is passed on up to the pause.
func TestScanReaderPause(t *testing.T) {
	watch := secrets.NewReplacer([2][]byte{[]byte("SECRETONE"), nil})
	pr, pw := io.Pipe()
	s := &scanReader{src: pr, watch: watch, found: func(int) {}}
	go io.WriteString(pw, "hello\n")
	buf := make([]byte, 64)
	if n, err := s.Read(buf); err != nil || string(buf[:n]) != "hello\n" {
		t.Fatalf("read %q, %v; want the line", buf[:n], err)
	}
	go io.WriteString(pw, "then SECR")
	if n, err := s.Read(buf); err != nil || string(buf[:n]) != "then " {
		t.Fatalf("read %q, %v; want what precedes a possible pattern", buf[:n], err)
	}
	go func() {
		io.WriteString(pw, "ET")
		pw.Close()
	}()
	rest, err := io.ReadAll(s)
	if err != nil || string(rest) != "SECRET" {
		t.Fatalf("rest %q, %v", rest, err)
	}
}

func TestFindHeadAndSubstitution(t *testing.T) {
	a := plainSecret("A", "ph_aaaaaaaa", "a.example")
	a.InQuery = true
	b := plainSecret("B", "ph_bbbbbbbb", "b.example")
	ss := newSecretSet([]*secrets.Secret{a, b}, []int{0}, false)
	for _, tt := range []struct {
		uri    string
		header http.Header
		want   string
	}{
		{"/x?q=ph_aaaaaaaa", nil, ""},
		{"/x?q=ph_bbbbbbbb", nil, "B"},
		{"/x/ph%5Fbbbbbbbb", nil, "B"},
		{"/", http.Header{"X-Ph_bbbbbbbb": {"1"}}, "B"},
		{"/", http.Header{"Cookie": {"s=ph_bbbbbbbb"}}, "B"},
		{"/", http.Header{"Authorization": {"Basic dXNlcjpwaF9iYmJiYmJiYg=="}}, "B"}, // user:ph_bbbbbbbb
		{"/", http.Header{"Authorization": {"basic dXNlcjpwaF9iYmJiYmJiYg"}}, "B"},   // unpadded
		{"/", http.Header{"Proxy-Authorization": {"Basic dXNlcjpwaF9iYmJiYmJiYg=="}}, ""},
		{"/", http.Header{"Authorization": {"Bearer ph_aaaaaaaa"}}, ""},
	} {
		got := ""
		if f := ss.findHead(tt.uri, tt.header); f != nil {
			got = f.secret.Name
		}
		if got != tt.want {
			t.Errorf("findHead(%q, %v) = %q, want %q", tt.uri, tt.header, got, tt.want)
		}
	}

	h := http.Header{
		"Authorization": {"Basic cGhfYWFhYWFhYWE6eC1vYXV0aA=="}, // ph_aaaaaaaa:x-oauth
		"X-Both":        {"ph_aaaaaaaa ph_bbbbbbbb"},
	}
	ss.substHeader(h)
	r := &http.Request{Header: h}
	if user, pass, ok := r.BasicAuth(); !ok || user != "real-A" || pass != "x-oauth" {
		t.Errorf("Basic after substitution: %q:%q %v", user, pass, ok)
	}
	if got := h.Get("X-Both"); got != "real-A ph_bbbbbbbb" {
		t.Errorf("X-Both = %q", got)
	}
	resp := &http.Response{StatusCode: 200, Header: http.Header{"X-Echo": {"real-A"}}, Body: io.NopCloser(strings.NewReader("got real-A.")), ContentLength: 11}
	ss.redactResponse(resp)
	body, _ := io.ReadAll(resp.Body)
	if resp.Header.Get("X-Echo") != "ph_aaaaaaaa" || string(body) != "got ph_aaaaaaaa." || resp.ContentLength != -1 {
		t.Errorf("redacted response: %v %q, Content-Length %d", resp.Header, body, resp.ContentLength)
	}
}
