package daemon

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"strings"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/egress"
	"github.com/hutch-sandbox/hutch/internal/policy"
)

// TestTenantNetwork: a tenant's policy may not name loopback, private,
// link-local, metadata, CGNAT or this host's addresses in any rule kind,
// in any spelling; the error names each field. What the operator's
// configuration opened is allowed.
func TestTenantNetwork(t *testing.T) {
	m := &Manager{cfg: Config{AllowPrivate: []netip.Prefix{netip.MustParsePrefix("10.9.0.0/16")}}}
	spec := func(f func(*policy.Spec)) policy.Spec {
		var s policy.Spec
		f(&s)
		return s
	}
	for _, tc := range []struct {
		spec policy.Spec
		want []string // "" for none
	}{
		{spec(func(s *policy.Spec) {
			s.Network.AllowedDomains = []string{"example.com", "*", "*.example.org:8443", "8.8.8.8"}
		}), nil},
		{spec(func(s *policy.Spec) { s.Network.AllowedCIDRs = []string{"0.0.0.0/0", "::/0", "93.184.216.0/24"} }), nil},
		{spec(func(s *policy.Spec) { s.Network.Hosts = []string{"a.test:93.184.216.34", "b.test:10.9.1.1"} }), nil},
		{spec(func(s *policy.Spec) { s.Network.AllowedCIDRs = []string{"10.9.0.0/16"} }), nil},
		{spec(func(s *policy.Spec) {
			s.Network.AllowedDomains = []string{"example.com", "127.0.0.1", "[::1]:8080", "[::ffff:169.254.169.254]", "[64:ff9b::a00:1]", "localhost:3000", "0.0.0.0:80"}
		}), []string{
			`network.allowed_domains[1]: "127.0.0.1" names loopback`,
			`network.allowed_domains[2]: "[::1]:8080" names loopback`,
			`network.allowed_domains[3]: "[::ffff:169.254.169.254]" names metadata`,
			`network.allowed_domains[4]: "[64:ff9b::a00:1]" names private`,
			`network.allowed_domains[5]: "localhost:3000" names loopback`,
			`network.allowed_domains[6]: "0.0.0.0:80" names unspecified`,
		}},
		{spec(func(s *policy.Spec) {
			s.Network.AllowedCIDRs = []string{"127.0.0.0/8", "169.254.0.0/16", "100.64.0.0/10", "[fd00::/8]:443", "2002:a9fe::/32"}
		}), []string{
			`network.allowed_cidrs[0]: "127.0.0.0/8" names loopback`,
			`network.allowed_cidrs[1]: "169.254.0.0/16" names link-local`,
			`network.allowed_cidrs[2]: "100.64.0.0/10" names cgnat`,
			`network.allowed_cidrs[3]: "[fd00::/8]:443" names private`,
			`network.allowed_cidrs[4]: "2002:a9fe::/32" names link-local`,
		}},
		{spec(func(s *policy.Spec) {
			s.Network.Hosts = []string{"ok.test:93.184.216.34", "a.test:127.0.0.1", "b.test:[::ffff:10.0.0.1]", "c.test:169.254.169.254"}
		}), []string{
			`network.hosts[1]: "a.test:127.0.0.1" pins a name to a loopback address`,
			`network.hosts[2]: "b.test:[::ffff:10.0.0.1]" pins a name to a private address`,
			`network.hosts[3]: "c.test:169.254.169.254" pins a name to a metadata address`,
		}},
		{spec(func(s *policy.Spec) {
			s.Secrets = []policy.Secret{{Name: "A", Hosts: []string{"api.example.com"}}, {Name: "B", Hosts: []string{"x.test", "10.1.2.3:8080"}}}
		}), []string{`secrets[1].hosts[1]: "10.1.2.3:8080" names private`}},
		{spec(func(s *policy.Spec) { s.Network.AllowPrivate = []string{"127.0.0.1/32"} }), []string{"network.allow_private"}},
		{spec(func(s *policy.Spec) { s.Network.PrivateNames = []string{"10.0.0.0/8"} }), []string{"network.private_names"}},
	} {
		for i := range tc.spec.Secrets {
			tc.spec.Secrets[i].From = policy.SecretFromRequest
		}
		err := m.tenantNetwork(tc.spec)
		if len(tc.want) == 0 {
			if err != nil {
				t.Errorf("%+v: %v", tc.spec.Network, err)
			}
			continue
		}
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: %v, want ErrInvalid", tc.spec.Network, err)
			continue
		}
		for _, w := range append(tc.want, "only the daemon's operator may open") {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("error %q lacks %q", err, w)
			}
		}
	}
	// A secret whose value would come from the daemon's files or
	// environment.
	for _, from := range []string{"file:/etc/shadow", "env:HOME", ""} {
		var p policy.Spec
		p.Secrets = []policy.Secret{{Name: "A", Hosts: []string{"api.example.com"}, From: from}}
		if err := m.tenantNetwork(p); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "secrets[0].from") {
			t.Errorf("secret from %q: %v, want ErrInvalid naming secrets[0].from", from, err)
		}
	}
	// The host's own addresses, public or not.
	addrs, err := hostAddrsForTest()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		entry := a.String()
		if a.Is6() {
			entry = "[" + entry + "]"
		}
		if err := m.CheckTenantRule("rule", entry, false); !errors.Is(err, ErrInvalid) {
			t.Errorf("the host's address %s: %v, want refused", a, err)
		}
	}
}

// TestTenantProxy: the proxy of a tenant's sandbox opens nothing the
// address guard refuses, even for rules a front end let through; the
// operator's opens what its IP-literal rules and allow_private name, and
// the daemon's configuration opens its ranges for both.
func TestTenantProxy(t *testing.T) {
	nw := policy.Network{
		Mode:           "proxy",
		AllowedDomains: []string{"127.0.0.1:8080", "[::ffff:10.1.2.3]", "169.254.169.254", "*"},
		AllowedCIDRs:   []string{"192.168.0.0/16"},
		AllowPrivate:   []string{"172.16.0.0/12"},
		PrivateNames:   []string{"10.0.0.0/8"},
		Hosts:          []string{"intranet.test:10.7.7.7"},
	}
	log := slog.New(slog.DiscardHandler)
	dests := []struct {
		host string
		port int
	}{{"127.0.0.1", 8080}, {"10.1.2.3", 443}, {"169.254.169.254", 80}, {"192.168.1.1", 443}, {"172.16.0.1", 443}, {"intranet.test", 443}}
	for _, tc := range []struct {
		name     string
		open     []netip.Prefix
		operator bool
		allowed  []bool
	}{
		{"tenant", nil, false, []bool{false, false, false, false, false, false}},
		{"tenant, opened by the daemon", []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, false, []bool{true, false, false, false, false, false}},
		// 172.16.0.1 through "*" and the policy's allow_private;
		// intranet.test through "*" and private_names.
		{"operator", nil, true, []bool{true, true, true, true, true, true}},
	} {
		p, err := newProxy(nw, tc.open, tc.operator, "sb-test", log, nil, nil)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		for i, d := range dests {
			if v := p.Rules.Resolve(context.Background(), d.host, d.port); v.Allowed != tc.allowed[i] {
				t.Errorf("%s: %s:%d allowed %v (%s), want %v", tc.name, d.host, d.port, v.Allowed, v.Reason, tc.allowed[i])
			}
		}
	}
}

// hostAddrsForTest are this host's addresses, as the guard knows them.
func hostAddrsForTest() ([]netip.Addr, error) { return egress.HostAddrs() }
