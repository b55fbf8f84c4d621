package egress

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
)

// Addresses that the tests treat as public. Nothing is ever sent to them:
// names resolve through stubs and Resolve never dials.
const (
	pub4  = "93.184.216.34"
	pub4b = "93.184.216.35"
	pub6  = "2606:2800:220:1::1"
)

// stubLookup is a Config.Lookup that answers from a table and records the
// names it was asked about.
type stubLookup struct {
	mu      sync.Mutex
	answers map[string][]netip.Addr
	errs    map[string]error
	calls   []string
}

func (s *stubLookup) lookup(host string) ([]netip.Addr, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, host)
	if err, ok := s.errs[host]; ok {
		return nil, err
	}
	if addrs, ok := s.answers[host]; ok {
		return addrs, nil
	}
	return []netip.Addr{netip.MustParseAddr(pub4)}, nil
}

// addrs parses addresses for test tables.
func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

// mustRules compiles c with a stub resolver (answering pub4 for any name
// the table does not know) and a fixed host address.
func mustRules(t *testing.T, c Config, answers map[string][]netip.Addr) (*Rules, *stubLookup) {
	t.Helper()
	stub := &stubLookup{answers: answers}
	if c.Lookup == nil {
		c.Lookup = stub.lookup
	}
	if c.HostAddrs == nil {
		c.HostAddrs = addrs("10.0.0.5", "2001:4860::5")
	}
	r, err := NewRules(c)
	if err != nil {
		t.Fatalf("NewRules: %v", err)
	}
	return r, stub
}

// verdictDiff describes how got differs from want, or returns "".
func verdictDiff(got, want Verdict) string {
	var d []string
	if got.Host != want.Host {
		d = append(d, fmt.Sprintf("Host %q, want %q", got.Host, want.Host))
	}
	if got.Port != want.Port {
		d = append(d, fmt.Sprintf("Port %d, want %d", got.Port, want.Port))
	}
	if got.Allowed != want.Allowed {
		d = append(d, fmt.Sprintf("Allowed %v, want %v", got.Allowed, want.Allowed))
	}
	if !slices.Equal(got.Addrs, want.Addrs) {
		d = append(d, fmt.Sprintf("Addrs %v, want %v", got.Addrs, want.Addrs))
	}
	if got.Addr != want.Addr {
		d = append(d, fmt.Sprintf("Addr %v, want %v", got.Addr, want.Addr))
	}
	if got.Rule != want.Rule {
		d = append(d, fmt.Sprintf("Rule %q, want %q", got.Rule, want.Rule))
	}
	if got.Reason != want.Reason {
		d = append(d, fmt.Sprintf("Reason %q, want %q", got.Reason, want.Reason))
	}
	return strings.Join(d, "; ")
}

func TestRulesNormalizeHost(t *testing.T) {
	long63 := strings.Repeat("a", 63)
	name253 := strings.Repeat(long63+".", 3) + strings.Repeat("b", 61) // 3*64 + 61 = 253
	tests := []struct {
		in      string
		want    string
		literal bool
		err     string // substring of the error; "" when valid
	}{
		// Names: case, trailing dot, internationalized names.
		{in: "example.com", want: "example.com"},
		{in: "Example.COM", want: "example.com"},
		{in: "example.com.", want: "example.com"},
		{in: "EXAMPLE.com.", want: "example.com"},
		{in: "localhost", want: "localhost"},
		{in: "intranet", want: "intranet"},
		{in: "_dmarc.example.com", want: "_dmarc.example.com"},
		{in: "a-b.example.com", want: "a-b.example.com"},
		{in: "BÜCHER.example", want: "xn--bcher-kva.example"},
		{in: "bücher.example.", want: "xn--bcher-kva.example"},
		{in: "xn--bcher-kva.example", want: "xn--bcher-kva.example"},
		{in: "XN--BCHER-KVA.EXAMPLE", want: "xn--bcher-kva.example"},
		{in: "ｅｘａｍｐｌｅ．ｃｏｍ", want: "example.com"}, // full-width letters and dot
		{in: "example。com", want: "example.com"}, // ideographic full stop
		{in: long63 + ".com", want: long63 + ".com"},
		{in: name253, want: name253},
		{in: name253 + ".", want: name253},

		// IP literals: canonical, unmapped, brackets stripped.
		{in: "127.0.0.1", want: "127.0.0.1", literal: true},
		{in: "127.0.0.1.", want: "127.0.0.1", literal: true},
		{in: "[::1]", want: "::1", literal: true},
		{in: "::1", want: "::1", literal: true},
		{in: "[2001:DB8:0::1]", want: "2001:db8::1", literal: true},
		{in: "::ffff:127.0.0.1", want: "127.0.0.1", literal: true},
		{in: "[::ffff:7f00:1]", want: "127.0.0.1", literal: true},
		{in: "[::FFFF:169.254.169.254]", want: "169.254.169.254", literal: true},
		{in: "１２７.０.０.１", want: "127.0.0.1", literal: true}, // full-width digits
		{in: "[64:ff9b::7f00:1]", want: "64:ff9b::7f00:1", literal: true},

		// Invalid hosts.
		{in: "", err: "empty host"},
		{in: ".", err: "empty host"},
		{in: "example.com..", err: "empty label"},
		{in: ".example.com", err: "empty label"},
		{in: "a..example.com", err: "empty label"},
		{in: "exa mple.com", err: "invalid character ' '"},
		{in: " example.com", err: "invalid character ' '"},
		{in: "a%b.com", err: "invalid character '%'"},
		{in: "fe80::1%eth0", err: "invalid character '%'"},
		{in: "[fe80::1%eth0]", err: "invalid character '%'"},
		{in: "a/b.com", err: "invalid character '/'"},
		{in: "user@example.com", err: "invalid character '@'"},
		{in: "a\x00.com", err: "invalid character '\\x00'"},
		{in: "example.com:443", err: "invalid character ':'"},
		{in: "*.example.com", err: "invalid character '*'"},
		{in: "bü cher.example", err: "invalid internationalized name"},
		{in: "bü%x.example", err: "invalid internationalized name"},
		{in: "bü\x00.example", err: "invalid internationalized name"},
		{in: strings.Repeat("a", 64) + ".com", err: "longer than 63"},
		{in: name253 + "b", err: "longer than 253"},
		{in: "[127.0.0.1]", err: "not an IPv6 address"},
		{in: "[example.com]", err: "not an IPv6 address"},
		{in: "[::1", err: "unbalanced brackets"},
		{in: "::1]", err: "unbalanced brackets"},
		{in: "127.1", err: "ends in a number"},
		{in: "2130706433", err: "ends in a number"},
		{in: "0x7f.1", err: "ends in a number"},
		{in: "0x7f000001", err: "ends in a number"},
		{in: "1.2.3.4.5", err: "ends in a number"},
	}
	for _, tt := range tests {
		name, addr, err := normalizeHost(tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("normalizeHost(%q) = %q, %v, %v; want error containing %q", tt.in, name, addr, err, tt.err)
			}
			continue
		}
		if err != nil || name != tt.want || addr.IsValid() != tt.literal {
			t.Errorf("normalizeHost(%q) = %q, %v, %v; want %q (literal %v)", tt.in, name, addr, err, tt.want, tt.literal)
		}
		if tt.literal && addr.String() != tt.want {
			t.Errorf("normalizeHost(%q) address %v, want %s", tt.in, addr, tt.want)
		}
	}
}

func TestRulesParse(t *testing.T) {
	tests := []struct {
		list   string // "allow", "deny" or "cidr"
		in     string
		kind   ruleKind
		name   string
		prefix string
		port   int
	}{
		{list: "allow", in: "example.com", kind: matchName, name: "example.com"},
		{list: "allow", in: "Example.COM.:8443", kind: matchName, name: "example.com", port: 8443},
		{list: "allow", in: "localhost", kind: matchName, name: "localhost"},
		{list: "allow", in: "*.example.com", kind: matchSuffix, name: ".example.com"},
		{list: "allow", in: "*.BÜCHER.example:8443", kind: matchSuffix, name: ".xn--bcher-kva.example", port: 8443},
		{list: "allow", in: "203.0.113.7", kind: matchPrefix, prefix: "203.0.113.7/32"},
		{list: "allow", in: "203.0.113.7:22", kind: matchPrefix, prefix: "203.0.113.7/32", port: 22},
		{list: "allow", in: "[2001:db8::1]", kind: matchPrefix, prefix: "2001:db8::1/128"},
		{list: "allow", in: "[2001:DB8::1]:443", kind: matchPrefix, prefix: "2001:db8::1/128", port: 443},
		{list: "allow", in: "[::ffff:10.0.0.1]", kind: matchPrefix, prefix: "10.0.0.1/32"},
		{list: "deny", in: "*", kind: matchEveryone},
		{list: "deny", in: "*:22", kind: matchEveryone, port: 22},
		{list: "deny", in: "*.evil.example", kind: matchSuffix, name: ".evil.example"},
		{list: "deny", in: "65535.example:65535", kind: matchName, name: "65535.example", port: 65535},
		{list: "cidr", in: "10.0.0.0/8", kind: matchPrefix, prefix: "10.0.0.0/8"},
		{list: "cidr", in: "10.0.0.0/8:5432", kind: matchPrefix, prefix: "10.0.0.0/8", port: 5432},
		{list: "cidr", in: "2001:db8::/32", kind: matchPrefix, prefix: "2001:db8::/32"},
		{list: "cidr", in: "[2001:db8::/32]:443", kind: matchPrefix, prefix: "2001:db8::/32", port: 443},
		{list: "cidr", in: "[2001:db8::/32]", kind: matchPrefix, prefix: "2001:db8::/32"},
		{list: "cidr", in: "2001:db8::/32:443", kind: matchPrefix, prefix: "2001:db8::/32", port: 443},
		{list: "cidr", in: "10.1.2.3", kind: matchPrefix, prefix: "10.1.2.3/32"},
		{list: "cidr", in: "10.1.2.3:80", kind: matchPrefix, prefix: "10.1.2.3/32", port: 80},
		{list: "cidr", in: "2001:db8::1", kind: matchPrefix, prefix: "2001:db8::1/128"},
		{list: "cidr", in: "[2001:db8::1]:80", kind: matchPrefix, prefix: "2001:db8::1/128", port: 80},
		{list: "cidr", in: "::ffff:10.0.0.0/104", kind: matchPrefix, prefix: "10.0.0.0/8"},
		{list: "cidr", in: "0.0.0.0/0", kind: matchPrefix, prefix: "0.0.0.0/0"},
	}
	for _, tt := range tests {
		var ru rule
		var err error
		switch tt.list {
		case "allow":
			ru, err = parseDomainRule(tt.in, false)
		case "deny":
			ru, err = parseDomainRule(tt.in, true)
		case "cidr":
			ru, err = parseCIDRRule(tt.in)
		}
		if err != nil {
			t.Errorf("%s %q: %v", tt.list, tt.in, err)
			continue
		}
		var prefix string
		if ru.prefix.IsValid() {
			prefix = ru.prefix.String()
		}
		if ru.raw != tt.in || ru.kind != tt.kind || ru.name != tt.name || prefix != tt.prefix || ru.port != tt.port {
			t.Errorf("%s %q = %+v; want kind %d name %q prefix %q port %d", tt.list, tt.in, ru, tt.kind, tt.name, tt.prefix, tt.port)
		}
	}
}

func TestRulesNewRulesErrors(t *testing.T) {
	tests := []struct {
		c    Config
		want string // the error, or a substring of it after "~"
	}{
		{Config{AllowDomains: []string{"exa mple.com"}}, `allow-domain "exa mple.com": invalid character ' '`},
		{Config{AllowDomains: []string{""}}, `allow-domain "": empty host`},
		{Config{AllowDomains: []string{"*x"}}, `~allow-domain "*x": "*" is allowed only as a leading`},
		{Config{AllowDomains: []string{"*.*.example.com"}}, `~allow-domain "*.*.example.com": "*" is allowed only as a leading "*."`},
		{Config{AllowDomains: []string{"a.*.example.com"}}, `~allow-domain "a.*.example.com": "*" is allowed only`},
		{Config{AllowDomains: []string{"*example.com"}}, `~allow-domain "*example.com": "*" is allowed only`},
		{Config{AllowDomains: []string{"*.10.0.0.1"}}, `~allow-domain "*.10.0.0.1": "*." needs a domain name`},
		{Config{AllowDomains: []string{"*."}}, `allow-domain "*.": empty host`},
		{Config{AllowDomains: []string{"example.com:0"}}, `allow-domain "example.com:0": invalid port "0": want a number from 1 to 65535, or *`},
		{Config{AllowDomains: []string{"example.com:65536"}}, `~invalid port "65536"`},
		{Config{AllowDomains: []string{"example.com:+443"}}, `~invalid port "+443"`},
		{Config{AllowDomains: []string{"example.com:0443"}}, `~invalid port "0443"`},
		{Config{AllowDomains: []string{"example.com:https"}}, `~invalid port "https"`},
		{Config{AllowDomains: []string{"example.com:"}}, `allow-domain "example.com:": empty port`},
		{Config{AllowDomains: []string{"https://example.com"}}, `~allow-domain "https://example.com": give a host name, not a URL`},
		{Config{AllowDomains: []string{"10.0.0.0/8"}}, `~allow-domain "10.0.0.0/8": give a host name, not a URL or a CIDR`},
		{Config{AllowDomains: []string{"2001:db8::1"}}, `~allow-domain "2001:db8::1": write IPv6 addresses in brackets`},
		{Config{AllowDomains: []string{"[2001:db8::1"}}, `allow-domain "[2001:db8::1": unclosed "["`},
		{Config{AllowDomains: []string{"[2001:db8::1]443"}}, `allow-domain "[2001:db8::1]443": unexpected text after "]"`},
		{Config{AllowDomains: []string{"[2001:db8::1]:"}}, `allow-domain "[2001:db8::1]:": empty port`},
		{Config{AllowDomains: []string{"[203.0.113.7]"}}, `~allow-domain "[203.0.113.7]": "203.0.113.7" is not an IPv6 address`},
		{Config{AllowDomains: []string{"[fe80::1%eth0]"}}, `~allow-domain "[fe80::1%eth0]": invalid character '%'`},
		{Config{AllowDomains: []string{strings.Repeat("a", 64) + ".com"}}, `~longer than 63 bytes`},
		{Config{AllowDomains: []string{"127.1"}}, `allow-domain "127.1": ends in a number but is not an IP address`},
		{Config{DenyDomains: []string{"a b"}}, `deny-domain "a b": invalid character ' '`},
		{Config{DenyDomains: []string{"*:0"}}, `~deny-domain "*:0": invalid port "0"`},
		{Config{DenyDomains: []string{"**"}}, `~deny-domain "**": "*" is allowed only`},
		{Config{AllowCIDRs: []string{"10.0.0.0/33"}}, `allow-cidr "10.0.0.0/33": invalid CIDR "10.0.0.0/33"`},
		{Config{AllowCIDRs: []string{"10.0.0.1/8"}}, `allow-cidr "10.0.0.1/8": 10.0.0.1/8 has host bits set (did you mean 10.0.0.0/8?)`},
		{Config{AllowCIDRs: []string{"[10.0.0.0/8]"}}, `allow-cidr "[10.0.0.0/8]": brackets are for IPv6 addresses only`},
		{Config{AllowCIDRs: []string{"10.0.0.0/8:"}}, `allow-cidr "10.0.0.0/8:": empty port`},
		{Config{AllowCIDRs: []string{"10.0.0.0/8:99999"}}, `~allow-cidr "10.0.0.0/8:99999": invalid port "99999"`},
		{Config{AllowCIDRs: []string{"example.com"}}, `allow-cidr "example.com": invalid CIDR "example.com"`},
		{Config{AllowCIDRs: []string{"[2001:db8::/32"}}, `allow-cidr "[2001:db8::/32": unclosed "["`},
		{Config{AllowCIDRs: []string{"[2001:db8::/32]x"}}, `~unexpected text after "]"`},
		{Config{AllowCIDRs: []string{"fe80::%eth0/64"}}, `~allow-cidr "fe80::%eth0/64": invalid CIDR`},
		{Config{AllowCIDRs: []string{""}}, `allow-cidr "": invalid CIDR ""`},
		{Config{AllowPrivate: []netip.Prefix{{}}}, `~allow-private "invalid Prefix": invalid prefix`},
		{Config{HostAddrs: []netip.Addr{{}}}, `host address: the zero address is not an address`},
		{Config{Hosts: map[string][]netip.Addr{"bad host": addrs(pub4)}}, `hosts "bad host": invalid character ' '`},
		{Config{Hosts: map[string][]netip.Addr{"127.0.0.1": addrs(pub4)}}, `hosts "127.0.0.1": an IP address needs no pinning`},
		{Config{Hosts: map[string][]netip.Addr{"empty.test": nil}}, `hosts "empty.test": no addresses`},
		{Config{Hosts: map[string][]netip.Addr{"zero.test": {{}}}}, `hosts "zero.test": the zero address is not an address`},
		{Config{Hosts: map[string][]netip.Addr{"Twice.test": addrs(pub4), "twice.test.": addrs(pub4b)}}, `hosts "twice.test.": twice.test is pinned twice (also as "Twice.test")`},
	}
	for _, tt := range tests {
		if tt.c.HostAddrs == nil {
			tt.c.HostAddrs = []netip.Addr{}
		}
		r, err := NewRules(tt.c)
		if err == nil {
			t.Errorf("NewRules(%+v) = %v, nil; want error %q", tt.c, r, tt.want)
			continue
		}
		if want, sub := strings.CutPrefix(tt.want, "~"); sub && !strings.Contains(err.Error(), want) || !sub && err.Error() != tt.want {
			t.Errorf("NewRules(%+v): error %q; want %q", tt.c, err, tt.want)
		}
	}
}

func TestRulesNewRulesReportsEveryBadEntry(t *testing.T) {
	_, err := NewRules(Config{
		AllowDomains: []string{"ok.example", "bad one", "also bad"},
		AllowCIDRs:   []string{"10.0.0.0/99"},
		HostAddrs:    []netip.Addr{},
	})
	if err == nil {
		t.Fatal("NewRules accepted bad entries")
	}
	for _, want := range []string{`allow-domain "bad one"`, `allow-domain "also bad"`, `allow-cidr "10.0.0.0/99"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
	if strings.Contains(err.Error(), "ok.example") {
		t.Errorf("error %q mentions a good entry", err)
	}
}

func TestRulesHostAddrsDefault(t *testing.T) {
	r, err := NewRules(Config{})
	if err != nil {
		t.Fatalf("NewRules: %v", err)
	}
	if r.guard.hostAddrs == nil {
		t.Fatal("host addresses not read")
	}
	want, err := interfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(r.guard.hostAddrs, want) {
		t.Errorf("host addresses %v, want %v", r.guard.hostAddrs, want)
	}
	for _, a := range r.guard.hostAddrs {
		if a.IsLoopback() || a.Is4In6() || a.Zone() != "" {
			t.Errorf("host address %v: loopback, mapped or zoned", a)
		}
		if c := Classify(a, r.guard.hostAddrs); c != classThisHost {
			t.Errorf("Classify(%v) = %q, want %q", a, c, classThisHost)
		}
	}
	// Explicit empty host addresses are kept empty.
	r, err = NewRules(Config{HostAddrs: []netip.Addr{}})
	if err != nil || len(r.guard.hostAddrs) != 0 {
		t.Errorf("NewRules with no host addresses: %v, %v", r.guard.hostAddrs, err)
	}
}

// matchConfig is the policy of TestResolveMatching.
var matchConfig = Config{
	AllowDomains: []string{
		"example.com",
		"*.example.org",
		"api.example.net:8443",
		"*.example.com:8443",
		"git.example.net",
		"git.example.net:22",
		"BÜCHER.example",
		"xn--caf-dma.example",
		"localhost",
		pub4 + ":8080",
		"[" + pub6 + "]",
	},
	DenyDomains: []string{
		"bad.example.org",
		"*.evil.example.org",
		"git.example.net:22",
		"Blocked.Example.COM.",
	},
}

func TestResolveMatching(t *testing.T) {
	r, _ := mustRules(t, matchConfig, map[string][]netip.Addr{
		"localhost": addrs("127.0.0.1", "::1"),
	})
	pub := addrs(pub4)
	tests := []struct {
		host string
		port int
		want Verdict
	}{
		// An exact name: that name only, ports 80 and 443 without a port.
		{"example.com", 443, Verdict{Allowed: true, Addrs: pub, Rule: "example.com"}},
		{"example.com", 80, Verdict{Allowed: true, Addrs: pub, Rule: "example.com"}},
		{"example.com", 22, Verdict{Rule: "example.com", Reason: "port 22 not allowed for example.com"}},
		{"example.com", 8443, Verdict{Rule: "example.com", Reason: "port 8443 not allowed for example.com"}},
		{"notexample.com", 443, Verdict{Reason: "not in allowedDomains"}},
		{"example.com.evil.test", 443, Verdict{Reason: "not in allowedDomains"}},

		// Case and trailing dot.
		{"EXAMPLE.com.", 443, Verdict{Host: "example.com", Allowed: true, Addrs: pub, Rule: "example.com"}},

		// Wildcards: deeper names, not the domain itself; ports.
		{"www.example.org", 443, Verdict{Allowed: true, Addrs: pub, Rule: "*.example.org"}},
		{"a.b.example.org", 80, Verdict{Allowed: true, Addrs: pub, Rule: "*.example.org"}},
		{"example.org", 443, Verdict{Reason: "not in allowedDomains"}},
		{"fooexample.org", 443, Verdict{Reason: "not in allowedDomains"}},
		{"www.example.org", 8080, Verdict{Rule: "*.example.org", Reason: "port 8080 not allowed for www.example.org"}},
		{"www.example.com", 8443, Verdict{Allowed: true, Addrs: pub, Rule: "*.example.com:8443"}},
		{"a.b.example.com", 8443, Verdict{Allowed: true, Addrs: pub, Rule: "*.example.com:8443"}},
		{"www.example.com", 443, Verdict{Rule: "*.example.com:8443", Reason: "port 443 not allowed for www.example.com"}},
		{"api.example.net", 8443, Verdict{Allowed: true, Addrs: pub, Rule: "api.example.net:8443"}},
		{"api.example.net", 443, Verdict{Rule: "api.example.net:8443", Reason: "port 443 not allowed for api.example.net"}},

		// Deny wins over allow, by name, wildcard and port.
		{"bad.example.org", 443, Verdict{Rule: "bad.example.org", Reason: "denied by deniedDomains"}},
		{"BAD.example.org.", 80, Verdict{Host: "bad.example.org", Rule: "bad.example.org", Reason: "denied by deniedDomains"}},
		{"x.evil.example.org", 443, Verdict{Rule: "*.evil.example.org", Reason: "denied by deniedDomains"}},
		{"a.b.evil.example.org", 443, Verdict{Rule: "*.evil.example.org", Reason: "denied by deniedDomains"}},
		{"evil.example.org", 443, Verdict{Allowed: true, Addrs: pub, Rule: "*.example.org"}},
		{"git.example.net", 22, Verdict{Rule: "git.example.net:22", Reason: "denied by deniedDomains"}},
		{"git.example.net", 443, Verdict{Allowed: true, Addrs: pub, Rule: "git.example.net"}},
		{"blocked.example.com", 8443, Verdict{Rule: "Blocked.Example.COM.", Reason: "denied by deniedDomains"}},
		{"blocked.example.com", 1, Verdict{Rule: "Blocked.Example.COM.", Reason: "denied by deniedDomains"}},

		// Internationalized names match their ASCII form both ways.
		{"bücher.example", 443, Verdict{Host: "xn--bcher-kva.example", Allowed: true, Addrs: pub, Rule: "BÜCHER.example"}},
		{"xn--bcher-kva.example", 443, Verdict{Allowed: true, Addrs: pub, Rule: "BÜCHER.example"}},
		{"CAFÉ.example", 443, Verdict{Host: "xn--caf-dma.example", Allowed: true, Addrs: pub, Rule: "xn--caf-dma.example"}},
		{"café.example.", 443, Verdict{Host: "xn--caf-dma.example", Allowed: true, Addrs: pub, Rule: "xn--caf-dma.example"}},

		// IP literals match IP-literal rules only.
		{pub4, 8080, Verdict{Allowed: true, Addrs: pub, Rule: pub4 + ":8080"}},
		{"::ffff:" + pub4, 8080, Verdict{Host: pub4, Allowed: true, Addrs: pub, Rule: pub4 + ":8080"}},
		{"[::ffff:" + pub4 + "]", 8080, Verdict{Host: pub4, Allowed: true, Addrs: pub, Rule: pub4 + ":8080"}},
		{pub4, 443, Verdict{Rule: pub4 + ":8080", Reason: "port 443 not allowed for " + pub4}},
		{pub4b, 8080, Verdict{Reason: "not in allowedDomains"}},
		{"[" + pub6 + "]", 443, Verdict{Host: pub6, Allowed: true, Addrs: addrs(pub6), Rule: "[" + pub6 + "]"}},
		{strings.ToUpper(pub6), 80, Verdict{Host: pub6, Allowed: true, Addrs: addrs(pub6), Rule: "[" + pub6 + "]"}},

		// localhost is a name like any other; the guard refuses where it
		// leads.
		{"localhost", 443, Verdict{Addr: netip.MustParseAddr("127.0.0.1"), Rule: "localhost", Reason: "resolves to 127.0.0.1 (loopback)"}},
		{"LOCALHOST.", 80, Verdict{Host: "localhost", Addr: netip.MustParseAddr("127.0.0.1"), Rule: "localhost", Reason: "resolves to 127.0.0.1 (loopback)"}},

		// Invalid hosts and ports.
		{"exa mple.com", 443, Verdict{Reason: "invalid host name"}},
		{"", 443, Verdict{Reason: "invalid host name"}},
		{"example.com/x", 443, Verdict{Reason: "invalid host name"}},
		{"user@example.com", 443, Verdict{Reason: "invalid host name"}},
		{"example.com\x00.evil.test", 443, Verdict{Reason: "invalid host name"}},
		{"ex%61mple.com", 443, Verdict{Reason: "invalid host name"}},
		{strings.Repeat("a", 64) + ".example.org", 443, Verdict{Reason: "invalid host name"}},
		{strings.Repeat("a.", 126) + "example.org", 443, Verdict{Reason: "invalid host name"}},
		{"example.com", 0, Verdict{Reason: "invalid port 0"}},
		{"example.com", 65536, Verdict{Reason: "invalid port 65536"}},
	}
	for _, tt := range tests {
		want := tt.want
		want.Port = tt.port
		if want.Host == "" {
			want.Host = tt.host
		}
		got := r.Resolve(context.Background(), tt.host, tt.port)
		if d := verdictDiff(got, want); d != "" {
			t.Errorf("Resolve(%q, %d): %s", tt.host, tt.port, d)
		}
	}
}

func TestResolveDenyEverything(t *testing.T) {
	tests := []struct {
		deny   []string
		host   string
		port   int
		rule   string
		reason string
	}{
		{[]string{"*"}, "example.com", 443, "*", "denied by deniedDomains"},
		{[]string{"*"}, pub4, 443, "*", "denied by deniedDomains"},
		{[]string{"*"}, "[" + pub6 + "]", 443, "*", "denied by deniedDomains"},
		{[]string{"*"}, "localhost", 80, "*", "denied by deniedDomains"},
		{[]string{"*:22"}, "example.com", 22, "*:22", "denied by deniedDomains"},
		{[]string{"*:22"}, pub4, 22, "*:22", "denied by deniedDomains"},
		{[]string{"*:22"}, "example.com", 443, "", ""},
		{[]string{"*:22"}, pub4, 443, "", ""},
		{[]string{pub4}, pub4, 443, pub4, "denied by deniedDomains"},
		{[]string{"[::ffff:" + pub4 + "]:443"}, pub4, 443, "[::ffff:" + pub4 + "]:443", "denied by deniedDomains"},
		{[]string{pub4 + ":443"}, pub4, 80, "", ""},
		{[]string{"[" + pub6 + "]"}, "[" + pub6 + "]", 8443, "[" + pub6 + "]", "denied by deniedDomains"},
	}
	for _, tt := range tests {
		r, _ := mustRules(t, Config{
			AllowDomains: []string{"example.com", "localhost", pub4, "[" + pub6 + "]:8443"},
			AllowCIDRs:   []string{"0.0.0.0/0:22"},
			DenyDomains:  tt.deny,
		}, nil)
		v := r.Resolve(context.Background(), tt.host, tt.port)
		if v.Reason != tt.reason || v.Allowed != (tt.reason == "") || !v.Allowed && v.Rule != tt.rule {
			t.Errorf("deny %q: Resolve(%q, %d) = %+v; want rule %q reason %q", tt.deny, tt.host, tt.port, v, tt.rule, tt.reason)
		}
	}
}

func TestResolveCIDRRules(t *testing.T) {
	r, stub := mustRules(t, Config{
		AllowCIDRs: []string{
			"93.184.216.0/24",
			"[2606:2800::/32]:8443",
			"2606:4700::/32",
			"10.0.0.0/8:5432",
			"0.0.0.0/0:9999",
		},
		OperatorRules: true,
	}, map[string][]netip.Addr{"inside.test": addrs("93.184.216.99")})
	tests := []struct {
		host string
		port int
		want Verdict
	}{
		{"93.184.216.99", 443, Verdict{Allowed: true, Addrs: addrs("93.184.216.99"), Rule: "93.184.216.0/24"}},
		{"93.184.216.99", 80, Verdict{Allowed: true, Addrs: addrs("93.184.216.99"), Rule: "93.184.216.0/24"}},
		{"::ffff:93.184.216.99", 80, Verdict{Host: "93.184.216.99", Allowed: true, Addrs: addrs("93.184.216.99"), Rule: "93.184.216.0/24"}},
		{"93.184.216.99", 22, Verdict{Rule: "93.184.216.0/24", Reason: "port 22 not allowed for 93.184.216.99"}},
		{"93.184.217.1", 443, Verdict{Rule: "0.0.0.0/0:9999", Reason: "port 443 not allowed for 93.184.217.1"}},
		{"[2606:2800::5]", 8443, Verdict{Host: "2606:2800::5", Allowed: true, Addrs: addrs("2606:2800::5"), Rule: "[2606:2800::/32]:8443"}},
		{"[2606:2800::5]", 443, Verdict{Host: "2606:2800::5", Rule: "[2606:2800::/32]:8443", Reason: "port 443 not allowed for 2606:2800::5"}},
		{"2606:4700::1", 443, Verdict{Allowed: true, Addrs: addrs("2606:4700::1"), Rule: "2606:4700::/32"}},
		{"2606:4701::1", 443, Verdict{Reason: "not in allowedDomains"}},
		{"10.1.2.3", 5432, Verdict{Allowed: true, Addrs: addrs("10.1.2.3"), Rule: "10.0.0.0/8:5432"}},
		{"10.1.2.3", 443, Verdict{Rule: "10.0.0.0/8:5432", Reason: "port 443 not allowed for 10.1.2.3"}},
		{"198.51.100.1", 9999, Verdict{Addr: netip.MustParseAddr("198.51.100.1"), Rule: "0.0.0.0/0:9999", Reason: "198.51.100.1 is reserved"}},
		{pub4b, 9999, Verdict{Allowed: true, Addrs: addrs(pub4b), Rule: "0.0.0.0/0:9999"}},
		// A name is never matched by a CIDR rule, whatever it resolves to.
		{"inside.test", 443, Verdict{Reason: "not in allowedDomains"}},
	}
	for _, tt := range tests {
		want := tt.want
		want.Port = tt.port
		if want.Host == "" {
			want.Host = tt.host
		}
		got := r.Resolve(context.Background(), tt.host, tt.port)
		if d := verdictDiff(got, want); d != "" {
			t.Errorf("Resolve(%q, %d): %s", tt.host, tt.port, d)
		}
	}
	if len(stub.calls) != 0 {
		t.Errorf("names looked up for refused or literal destinations: %q", stub.calls)
	}
}

func TestResolveHostsPins(t *testing.T) {
	r, stub := mustRules(t, Config{
		AllowDomains: []string{"pinned.example", "BÜCHER.example", "*.example"},
		AllowPrivate: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")},
		Hosts: map[string][]netip.Addr{
			"Pinned.Example.":       addrs(pub4b),
			"upstream.example":      addrs("127.0.0.1"),
			"loop.example":          addrs("127.0.0.2"),
			"bücher.example":        addrs("::ffff:" + pub4b),
			"mixed-pinned.example.": addrs("127.0.0.9", pub6),
		},
	}, nil)
	tests := []struct {
		host string
		want Verdict
	}{
		{"pinned.example", Verdict{Allowed: true, Addrs: addrs(pub4b), Rule: "pinned.example"}},
		{"PINNED.example.", Verdict{Host: "pinned.example", Allowed: true, Addrs: addrs(pub4b), Rule: "pinned.example"}},
		{"upstream.example", Verdict{Allowed: true, Addrs: addrs("127.0.0.1"), Rule: "*.example"}},
		{"loop.example", Verdict{Addr: netip.MustParseAddr("127.0.0.2"), Rule: "*.example", Reason: "resolves to 127.0.0.2 (loopback)"}},
		{"xn--bcher-kva.example", Verdict{Allowed: true, Addrs: addrs(pub4b), Rule: "BÜCHER.example"}},
		{"mixed-pinned.example", Verdict{Allowed: true, Addrs: addrs(pub6), Rule: "*.example"}},
		{"other.example", Verdict{Allowed: true, Addrs: addrs(pub4), Rule: "*.example"}},
	}
	for _, tt := range tests {
		want := tt.want
		want.Port = 443
		if want.Host == "" {
			want.Host = tt.host
		}
		got := r.Resolve(context.Background(), tt.host, 443)
		if d := verdictDiff(got, want); d != "" {
			t.Errorf("Resolve(%q, 443): %s", tt.host, d)
		}
	}
	if !slices.Equal(stub.calls, []string{"other.example"}) {
		t.Errorf("looked up %q; want only other.example", stub.calls)
	}
}

func TestResolveLookupGetsNormalizedName(t *testing.T) {
	r, stub := mustRules(t, Config{AllowDomains: []string{"*.example"}}, nil)
	for _, h := range []string{"WWW.Example.", "bücher.example", "[::1]", pub4} {
		r.Resolve(context.Background(), h, 443)
	}
	if want := []string{"www.example", "xn--bcher-kva.example"}; !slices.Equal(stub.calls, want) {
		t.Errorf("looked up %q; want %q", stub.calls, want)
	}
}

func TestRulesConcurrentUse(t *testing.T) {
	r, _ := mustRules(t, matchConfig, nil)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 100 {
				host := fmt.Sprintf("h%d-%d.example.org", i, j)
				if v := r.Resolve(context.Background(), host, 443); !v.Allowed {
					t.Errorf("Resolve(%q) = %+v", host, v)
				}
			}
		})
	}
	wg.Wait()
}
