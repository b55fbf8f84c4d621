package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestClassify(t *testing.T) {
	hostAddrs := addrs("10.0.0.5", "2001:4860::5", "::ffff:"+pub4b, "fe80::5%eth0")
	tests := []struct {
		addr string
		want string
	}{
		// Public unicast.
		{"8.8.8.8", ""},
		{"1.1.1.1", ""},
		{pub4, ""},
		{pub6, ""},
		{"2001:4860:4860::8888", ""},
		{"172.15.255.255", ""},
		{"172.32.0.0", ""},
		{"192.169.0.1", ""},
		{"100.63.255.255", ""},
		{"100.128.0.0", ""},
		{"198.20.0.0", ""},
		{"11.0.0.0", ""},
		{"223.255.255.255", ""},

		// The host's own addresses, checked first and compared unmapped.
		{"10.0.0.5", "this host"},
		{"::ffff:10.0.0.5", "this host"},
		{"2001:4860::5", "this host"},
		{pub4b, "this host"},
		{"fe80::5", "this host"},
		{"fe80::5%eth1", "this host"},
		{"64:ff9b::10.0.0.5", "this host"},
		{"10.0.0.6", "private"},

		// IPv4.
		{"0.0.0.0", "unspecified"},
		{"0.1.2.3", "unspecified"},
		{"127.0.0.1", "loopback"},
		{"127.255.255.254", "loopback"},
		{"10.0.0.1", "private"},
		{"10.255.255.255", "private"},
		{"172.16.0.1", "private"},
		{"172.31.255.255", "private"},
		{"192.168.1.1", "private"},
		{"100.64.0.1", "cgnat"},
		{"100.127.255.255", "cgnat"},
		{"169.254.169.254", "metadata"},
		{"169.254.170.2", "metadata"},
		{"100.100.100.200", "metadata"},
		{"169.254.1.1", "link-local"},
		{"169.254.169.253", "link-local"},
		{"169.254.170.3", "link-local"},
		{"100.100.100.201", "cgnat"},
		{"192.0.0.1", "reserved"},
		{"198.18.0.1", "reserved"},
		{"198.19.255.255", "reserved"},
		{"192.0.2.1", "reserved"},
		{"198.51.100.1", "reserved"},
		{"203.0.113.1", "reserved"},
		{"240.0.0.1", "reserved"},
		{"255.255.255.254", "reserved"},
		{"224.0.0.1", "multicast"},
		{"239.255.255.255", "multicast"},
		{"255.255.255.255", "broadcast"},

		// IPv6.
		{"::", "unspecified"},
		{"::1", "loopback"},
		{"::ffff:127.0.0.1", "loopback"},
		{"::ffff:169.254.169.254", "metadata"},
		{"::ffff:10.0.0.1", "private"},
		{"::ffff:8.8.8.8", ""},
		{"::127.0.0.1", "loopback"},
		{"::169.254.169.254", "metadata"},
		{"::8.8.8.8", ""},
		{"::2", "unspecified"},
		{"64:ff9b::8.8.8.8", ""},
		{"64:ff9b::808:808", ""},
		{"64:ff9b::127.0.0.1", "loopback"},
		{"64:ff9b::7f00:1", "loopback"},
		{"64:ff9b::169.254.169.254", "metadata"},
		{"64:ff9b::10.0.0.1", "private"},
		{"64:ff9b::255.255.255.255", "broadcast"},
		{"64:ff9b:1::1", "private"},
		{"64:ff9b:1:ffff::808:808", "private"},
		{"2002:7f00:1::", "loopback"},
		{"2002:7f00:1:2:3:4:5:6", "loopback"},
		{"2002:a9fe:a9fe::1", "metadata"},
		{"2002:a00:1::", "private"},
		{"2002:808:808::1", ""},
		{"fc00::1", "private"},
		{"fd12:3456::1", "private"},
		{"fd00:ec2::254", "metadata"},
		{"fd00:ec2::253", "metadata"}, // AWS's resolver: the whole fd00:ec2::/32 is AWS's platform
		{"fd00:ec3::1", "private"},
		{"168.63.129.16", "metadata"},
		{"192.0.0.192", "metadata"},
		{"192.0.0.193", "reserved"},
		{"fd20:ce::254", "metadata"},
		{"fe80::1", "link-local"},
		{"fe80::1%eth0", "link-local"},
		{"febf:ffff::1", "link-local"},
		{"fec0::1", "private"},
		{"feff::1", "private"},
		{"ff02::1", "multicast"},
		{"ff05::1:3", "multicast"},
		{"100::1", "reserved"},
		{"100::ffff:ffff:ffff:ffff", "reserved"},
		{"100:0:0:1::", ""},
		{"2001:db8::1", "reserved"},
		{"2001:db8:ffff::1", "reserved"},
		{"2001::1", "reserved"},
		{"2001:0:4136:e378:8000:63bf:3fff:fdd2", "reserved"},
		{"2001:1::1", ""},
	}
	for _, tt := range tests {
		a := netip.MustParseAddr(tt.addr)
		if got := Classify(a, hostAddrs); got != tt.want {
			t.Errorf("Classify(%s) = %q, want %q", tt.addr, got, tt.want)
		}
	}
	if got := Classify(netip.Addr{}, nil); got != "invalid" {
		t.Errorf("Classify(zero Addr) = %q, want invalid", got)
	}
	if got := Classify(netip.MustParseAddr("10.0.0.5"), nil); got != "private" {
		t.Errorf("Classify(10.0.0.5, nil) = %q, want private", got)
	}
}

func TestClassifyPrefix(t *testing.T) {
	hostAddrs := addrs("10.0.0.5")
	tests := []struct {
		prefix string
		want   string
	}{
		{"10.0.0.0/8", "private"},
		{"10.1.0.0/16", "private"},
		{"10.0.0.5/32", "this host"},
		{"10.0.0.6/32", "private"},
		{"172.16.0.0/12", "private"},
		{"192.168.0.0/16", "private"},
		{"127.0.0.0/8", "loopback"},
		{"127.0.0.1/32", "loopback"},
		{"100.64.0.0/10", "cgnat"},
		{"169.254.0.0/16", "link-local"},
		{"169.254.169.254/32", "metadata"},
		{"169.254.169.0/24", "link-local"},
		{"240.0.0.0/4", "reserved"},
		{"255.255.255.255/32", "broadcast"},
		{"255.255.255.254/31", "reserved"},
		{"224.0.0.0/4", "multicast"},
		{"0.0.0.0/8", "unspecified"},
		{"0.0.0.0/0", ""},
		{"0.0.0.0/1", ""},
		{"10.0.0.0/7", ""},
		{"172.0.0.0/11", ""},
		{"224.0.0.0/3", ""},
		{"93.184.216.0/24", ""},
		{pub4 + "/32", ""},
		{"::/0", ""},
		{"2000::/3", ""},
		{"::1/128", "loopback"},
		{"::/128", "unspecified"},
		{"fc00::/7", "private"},
		{"fd00::/8", "private"},
		{"fd00:ec2::254/128", "metadata"},
		{"fd00:ec2::/64", "metadata"},
		{"fd00:ec3::/64", "private"},
		{"fe80::/10", "link-local"},
		{"fe80::/9", ""},
		{"ff00::/8", "multicast"},
		{"2001:db8::/32", "reserved"},
		{"2001:db8::/48", "reserved"},
		{"2001::/16", ""},
		{"::ffff:10.0.0.0/104", "private"},
		{"::ffff:0.0.0.0/96", ""},
		{"64:ff9b::/96", ""},
		{"64:ff9b::a00:0/104", "private"},
		{"64:ff9b::7f00:1/128", "loopback"},
		{"64:ff9b::/64", ""},
		{"2002::/16", ""},
		{"2002:a00::/24", "private"},
		{"2002:7f00::/24", "loopback"},
		{"2002:a9fe:a9fe::/48", "metadata"},
		{"2002:a9fe:a9fe::/64", "metadata"},
		{"::/96", ""},
	}
	for _, tt := range tests {
		p := netip.MustParsePrefix(tt.prefix)
		if got := prefixClass(p, hostAddrs); got != tt.want {
			t.Errorf("prefixClass(%s) = %q, want %q", tt.prefix, got, tt.want)
		}
	}
}

// guardCase is one destination of a guard test and the verdict wanted.
type guardCase struct {
	host string
	port int
	want Verdict
}

// runGuardCases resolves each case with r and compares the verdicts. An
// empty want.Host stands for the host as given.
func runGuardCases(t *testing.T, r *Rules, tests []guardCase) {
	t.Helper()
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

// addr parses one address for test tables.
func addr(s string) netip.Addr { return netip.MustParseAddr(s) }

func TestGuardLiftedByIPRules(t *testing.T) {
	tests := []struct {
		cidrs   []string
		domains []string
		cases   []guardCase
	}{
		{
			// A private CIDR means private on purpose.
			cidrs: []string{"10.0.0.0/8"},
			cases: []guardCase{
				{"10.1.2.3", 443, Verdict{Allowed: true, Addrs: addrs("10.1.2.3"), Rule: "10.0.0.0/8"}},
				{"::ffff:10.1.2.3", 80, Verdict{Host: "10.1.2.3", Allowed: true, Addrs: addrs("10.1.2.3"), Rule: "10.0.0.0/8"}},
				// Not the host's own address inside it.
				{"10.0.0.5", 443, Verdict{Addr: addr("10.0.0.5"), Rule: "10.0.0.0/8", Reason: "10.0.0.5 is this host"}},
			},
		},
		{
			// The whole address space is not private on purpose.
			cidrs: []string{"0.0.0.0/0", "::/0"},
			cases: []guardCase{
				{"10.1.2.3", 443, Verdict{Addr: addr("10.1.2.3"), Rule: "0.0.0.0/0", Reason: "10.1.2.3 is private"}},
				{"127.0.0.1", 443, Verdict{Addr: addr("127.0.0.1"), Rule: "0.0.0.0/0", Reason: "127.0.0.1 is loopback"}},
				{"[::1]", 443, Verdict{Host: "::1", Addr: addr("::1"), Rule: "::/0", Reason: "::1 is loopback"}},
				{pub4, 443, Verdict{Allowed: true, Addrs: addrs(pub4), Rule: "0.0.0.0/0"}},
				{pub6, 443, Verdict{Allowed: true, Addrs: addrs(pub6), Rule: "::/0"}},
			},
		},
		{
			// With both, the rule that lifts the guard decides.
			cidrs: []string{"0.0.0.0/0", "10.0.0.0/8"},
			cases: []guardCase{
				{"10.1.2.3", 443, Verdict{Allowed: true, Addrs: addrs("10.1.2.3"), Rule: "10.0.0.0/8"}},
				{pub4, 443, Verdict{Allowed: true, Addrs: addrs(pub4), Rule: "0.0.0.0/0"}},
			},
		},
		{
			// A prefix spanning private and public space lifts nothing.
			cidrs: []string{"172.0.0.0/11", "10.0.0.0/7"},
			cases: []guardCase{
				{"172.16.0.1", 443, Verdict{Addr: addr("172.16.0.1"), Rule: "172.0.0.0/11", Reason: "172.16.0.1 is private"}},
				{"10.1.1.1", 443, Verdict{Addr: addr("10.1.1.1"), Rule: "10.0.0.0/7", Reason: "10.1.1.1 is private"}},
				{"11.1.1.1", 443, Verdict{Allowed: true, Addrs: addrs("11.1.1.1"), Rule: "10.0.0.0/7"}},
			},
		},
		{
			// Link-local on purpose is not metadata on purpose.
			cidrs: []string{"169.254.0.0/16", "100.64.0.0/10"},
			cases: []guardCase{
				{"169.254.1.1", 443, Verdict{Allowed: true, Addrs: addrs("169.254.1.1"), Rule: "169.254.0.0/16"}},
				{"169.254.169.254", 80, Verdict{Addr: addr("169.254.169.254"), Rule: "169.254.0.0/16", Reason: "169.254.169.254 is metadata"}},
				{"100.64.0.1", 443, Verdict{Allowed: true, Addrs: addrs("100.64.0.1"), Rule: "100.64.0.0/10"}},
				{"100.100.100.200", 80, Verdict{Addr: addr("100.100.100.200"), Rule: "100.64.0.0/10", Reason: "100.100.100.200 is metadata"}},
			},
		},
		{
			// Metadata only when named.
			cidrs: []string{"169.254.169.254/32:80"},
			cases: []guardCase{
				{"169.254.169.254", 80, Verdict{Allowed: true, Addrs: addrs("169.254.169.254"), Rule: "169.254.169.254/32:80"}},
			},
		},
		{
			// IP-literal domain rules lift the guard for their address.
			domains: []string{"127.0.0.1:8080", "[::1]:8080", "[fd00::7]", "[64:ff9b::7f00:2]"},
			cases: []guardCase{
				{"127.0.0.1", 8080, Verdict{Allowed: true, Addrs: addrs("127.0.0.1"), Rule: "127.0.0.1:8080"}},
				{"[::ffff:127.0.0.1]", 8080, Verdict{Host: "127.0.0.1", Allowed: true, Addrs: addrs("127.0.0.1"), Rule: "127.0.0.1:8080"}},
				{"::1", 8080, Verdict{Allowed: true, Addrs: addrs("::1"), Rule: "[::1]:8080"}},
				{"fd00::7", 443, Verdict{Allowed: true, Addrs: addrs("fd00::7"), Rule: "[fd00::7]"}},
				{"64:ff9b::7f00:2", 443, Verdict{Allowed: true, Addrs: addrs("64:ff9b::7f00:2"), Rule: "[64:ff9b::7f00:2]"}},
				{"127.0.0.2", 8080, Verdict{Reason: "not in allowedDomains"}},
			},
		},
		{
			// IPv6 CIDRs, and IPv4 ones written as v4-mapped.
			cidrs: []string{"[fd00::/8]:443", "::ffff:192.168.0.0/112", "2002:a00::/24", "64:ff9b::/96"},
			cases: []guardCase{
				{"fd12::1", 443, Verdict{Allowed: true, Addrs: addrs("fd12::1"), Rule: "[fd00::/8]:443"}},
				{"fd00:ec2::254", 443, Verdict{Addr: addr("fd00:ec2::254"), Rule: "[fd00::/8]:443", Reason: "fd00:ec2::254 is metadata"}},
				{"192.168.1.1", 80, Verdict{Allowed: true, Addrs: addrs("192.168.1.1"), Rule: "::ffff:192.168.0.0/112"}},
				{"2002:a01:203::1", 443, Verdict{Allowed: true, Addrs: addrs("2002:a01:203::1"), Rule: "2002:a00::/24"}},
				{"64:ff9b::a01:203", 443, Verdict{Addr: addr("64:ff9b::a01:203"), Rule: "64:ff9b::/96", Reason: "64:ff9b::a01:203 is private"}},
				{"64:ff9b::808:808", 443, Verdict{Allowed: true, Addrs: addrs("64:ff9b::808:808"), Rule: "64:ff9b::/96"}},
			},
		},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.cidrs, tt.domains), func(t *testing.T) {
			r, stub := mustRules(t, Config{AllowCIDRs: tt.cidrs, AllowDomains: tt.domains, OperatorRules: true}, nil)
			runGuardCases(t, r, tt.cases)
			if len(stub.calls) != 0 {
				t.Errorf("IP literals looked up: %q", stub.calls)
			}
		})
		// The same rules written by a tenant open nothing the guard
		// refuses: every non-public address is refused, by its class.
		t.Run(fmt.Sprint("tenant", tt.cidrs, tt.domains), func(t *testing.T) {
			r, _ := mustRules(t, Config{AllowCIDRs: tt.cidrs, AllowDomains: tt.domains}, nil)
			var cases []guardCase
			for _, c := range tt.cases {
				a, _ := netip.ParseAddr(strings.Trim(c.host, "[]"))
				class := Classify(a, r.guard.hostAddrs)
				if !c.want.Allowed || class == "" {
					cases = append(cases, c)
					continue
				}
				a = a.Unmap()
				want := Verdict{Host: c.want.Host, Addr: a, Reason: fmt.Sprintf("%s is %s", a, class)}
				// The first rule that matches the host and port
				// explains the refusal.
				want.Rule = r.firstAllow(a, c.port)
				cases = append(cases, guardCase{c.host, c.port, want})
			}
			runGuardCases(t, r, cases)
		})
	}
}

// firstAllow is the first allow rule matching IP literal a on port.
func (r *Rules) firstAllow(a netip.Addr, port int) string {
	for _, ru := range r.allow {
		if ru.matchesHost("", a) && ru.allowsPort(port) {
			return ru.raw
		}
	}
	return ""
}

// TestGuardNamesReachOpenedLiterals: a name is not lifted by its own
// rule, but an address it resolves to passes when an operator's IP-literal
// rule opens that address on that port (srt's rule: reaching it by name
// grants nothing the literal does not); a tenant's literal rules open
// nothing, and neither does a literal on another port. localhost is the
// loopback, never looked up, and an operator's rule naming it opens it.
func TestGuardNamesReachOpenedLiterals(t *testing.T) {
	names := map[string][]netip.Addr{
		"intranet.example": addrs("10.1.1.1"),
		"other.example":    addrs("10.2.2.2"),
		"db.example":       addrs("10.3.3.3"),
		"api.example":      addrs("10.1.2.2"),
		"loop.example":     addrs("127.0.0.1"),
		"localhost":        addrs(pub4), // never asked: localhost is the loopback
	}
	cfg := Config{
		AllowDomains:  []string{"*.example", "api.example:8443", "api.example:8444", "10.1.1.1", "10.3.3.3:5432", "localhost:3000", "*.localhost"},
		AllowCIDRs:    []string{"10.1.0.0/16:8443"},
		OperatorRules: true,
	}
	r, stub := mustRules(t, cfg, names)
	runGuardCases(t, r, []guardCase{
		{"intranet.example", 443, Verdict{Allowed: true, Addrs: addrs("10.1.1.1"), Rule: "*.example"}},
		{"api.example", 8443, Verdict{Allowed: true, Addrs: addrs("10.1.2.2"), Rule: "api.example:8443"}},
		{"api.example", 8444, Verdict{Addr: addr("10.1.2.2"), Rule: "api.example:8444", Reason: "resolves to 10.1.2.2 (private)"}},
		{"other.example", 443, Verdict{Addr: addr("10.2.2.2"), Rule: "*.example", Reason: "resolves to 10.2.2.2 (private)"}},
		{"db.example", 443, Verdict{Addr: addr("10.3.3.3"), Rule: "*.example", Reason: "resolves to 10.3.3.3 (private)"}},
		{"loop.example", 443, Verdict{Addr: addr("127.0.0.1"), Rule: "*.example", Reason: "resolves to 127.0.0.1 (loopback)"}},
		{"localhost", 3000, Verdict{Allowed: true, Addrs: addrs("127.0.0.1", "::1"), Rule: "localhost:3000"}},
		{"app.localhost", 443, Verdict{Allowed: true, Addrs: addrs("127.0.0.1", "::1"), Rule: "*.localhost"}},
		{"10.1.1.1", 443, Verdict{Allowed: true, Addrs: addrs("10.1.1.1"), Rule: "10.1.1.1"}},
	})
	if slices.Contains(stub.calls, "localhost") || slices.Contains(stub.calls, "app.localhost") {
		t.Errorf("localhost was looked up: %q", stub.calls)
	}

	cfg.OperatorRules = false
	r, _ = mustRules(t, cfg, names)
	runGuardCases(t, r, []guardCase{
		{"intranet.example", 443, Verdict{Addr: addr("10.1.1.1"), Rule: "*.example", Reason: "resolves to 10.1.1.1 (private)"}},
		{"localhost", 3000, Verdict{Addr: addr("127.0.0.1"), Rule: "localhost:3000", Reason: "resolves to 127.0.0.1 (loopback)"}},
	})
}

// TestGuardPrivateNames: Config.PrivateNames lets a name resolve to the
// private, CGNAT and reserved addresses in its ranges, and to nothing
// else: not to loopback, link-local, metadata or this host's addresses in
// them, and IP literals stay refused.
func TestGuardPrivateNames(t *testing.T) {
	r, _ := mustRules(t, Config{
		AllowDomains: []string{"*.example"},
		AllowCIDRs:   []string{"0.0.0.0/0", "::/0"},
		PrivateNames: []netip.Prefix{
			netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("100.64.0.0/10"),
			netip.MustParsePrefix("192.0.2.0/24"), netip.MustParsePrefix("fc00::/7"),
			netip.MustParsePrefix("0.0.0.0/0"),
		},
	}, map[string][]netip.Addr{
		"intranet.example": addrs("10.1.1.1"),
		"cgnat.example":    addrs("100.64.1.1"),
		"doc.example":      addrs("192.0.2.7"),
		"ula.example":      addrs("fd00::7"),
		"self.example":     addrs("10.0.0.5"),
		"loop.example":     addrs("127.0.0.1"),
		"md.example":       addrs("169.254.169.254"),
		"ll.example":       addrs("169.254.1.1"),
		"v6md.example":     addrs("fd00:ec2::254"),
		"other.example":    addrs("172.16.0.1"),
	})
	runGuardCases(t, r, []guardCase{
		{"intranet.example", 443, Verdict{Allowed: true, Addrs: addrs("10.1.1.1"), Rule: "*.example"}},
		{"cgnat.example", 443, Verdict{Allowed: true, Addrs: addrs("100.64.1.1"), Rule: "*.example"}},
		{"doc.example", 443, Verdict{Allowed: true, Addrs: addrs("192.0.2.7"), Rule: "*.example"}},
		{"ula.example", 443, Verdict{Allowed: true, Addrs: addrs("fd00::7"), Rule: "*.example"}},
		{"other.example", 443, Verdict{Allowed: true, Addrs: addrs("172.16.0.1"), Rule: "*.example"}},
		{"self.example", 443, Verdict{Addr: addr("10.0.0.5"), Rule: "*.example", Reason: "resolves to 10.0.0.5 (this host)"}},
		{"loop.example", 443, Verdict{Addr: addr("127.0.0.1"), Rule: "*.example", Reason: "resolves to 127.0.0.1 (loopback)"}},
		{"md.example", 443, Verdict{Addr: addr("169.254.169.254"), Rule: "*.example", Reason: "resolves to 169.254.169.254 (metadata)"}},
		{"ll.example", 443, Verdict{Addr: addr("169.254.1.1"), Rule: "*.example", Reason: "resolves to 169.254.1.1 (link-local)"}},
		{"v6md.example", 443, Verdict{Addr: addr("fd00:ec2::254"), Rule: "*.example", Reason: "resolves to fd00:ec2::254 (metadata)"}},
		{"10.1.1.1", 443, Verdict{Addr: addr("10.1.1.1"), Rule: "0.0.0.0/0", Reason: "10.1.1.1 is private"}},
	})
}

func TestGuardAllowPrivate(t *testing.T) {
	r, _ := mustRules(t, Config{
		AllowDomains:  []string{"*.example", "0.0.0.0:8080"},
		AllowCIDRs:    []string{"0.0.0.0/0", "::/0"},
		OperatorRules: true,
		AllowPrivate: []netip.Prefix{
			netip.MustParsePrefix("10.1.0.0/16"),
			netip.MustParsePrefix("::ffff:127.0.0.1/128"),
			netip.MustParsePrefix("fd00::1:0/112"),
			netip.MustParsePrefix("169.254.169.0/24"),
		},
	}, map[string][]netip.Addr{
		"one.example":   addrs("10.1.1.1"),
		"two.example":   addrs("10.2.1.1"),
		"loop.example":  addrs("::ffff:127.0.0.1"),
		"loop2.example": addrs("127.0.0.2"),
		"ula.example":   addrs("fd00::1:5", "fd00::2:5"),
		"md.example":    addrs("169.254.169.254"),
	})
	runGuardCases(t, r, []guardCase{
		{"one.example", 443, Verdict{Allowed: true, Addrs: addrs("10.1.1.1"), Rule: "*.example"}},
		{"two.example", 443, Verdict{Addr: addr("10.2.1.1"), Rule: "*.example", Reason: "resolves to 10.2.1.1 (private)"}},
		{"loop.example", 443, Verdict{Allowed: true, Addrs: addrs("127.0.0.1"), Rule: "*.example"}},
		{"loop2.example", 443, Verdict{Addr: addr("127.0.0.2"), Rule: "*.example", Reason: "resolves to 127.0.0.2 (loopback)"}},
		{"ula.example", 443, Verdict{Allowed: true, Addrs: addrs("fd00::1:5"), Rule: "*.example"}},
		// AllowPrivate is a range the user named: it passes whatever the
		// class, metadata included.
		{"md.example", 80, Verdict{Allowed: true, Addrs: addrs("169.254.169.254"), Rule: "*.example"}},
		// It applies to IP literals too.
		{"10.1.9.9", 443, Verdict{Allowed: true, Addrs: addrs("10.1.9.9"), Rule: "0.0.0.0/0"}},
		{"127.0.0.1", 443, Verdict{Allowed: true, Addrs: addrs("127.0.0.1"), Rule: "0.0.0.0/0"}},
		{"0.0.0.0", 443, Verdict{Addr: addr("0.0.0.0"), Rule: "0.0.0.0/0", Reason: "0.0.0.0 is unspecified"}},
		// An IP-literal rule for a non-public address lifts the guard.
		{"0.0.0.0", 8080, Verdict{Allowed: true, Addrs: addrs("0.0.0.0"), Rule: "0.0.0.0:8080"}},
	})
}

func TestGuardMixedResolution(t *testing.T) {
	r, _ := mustRules(t, Config{AllowDomains: []string{"*.example"}}, map[string][]netip.Addr{
		"mixed.example":   addrs("10.0.0.1", pub4, "127.0.0.1", pub6, "fe80::1%eth0", "::ffff:"+pub4b, pub4, "169.254.169.254"),
		"v6first.example": addrs("::1", pub6, "::ffff:169.254.169.254"),
		"private.example": addrs("127.0.0.1", "10.0.0.1", "::1"),
		"host.example":    addrs("10.0.0.5", "::ffff:10.0.0.1"),
		"meta.example":    addrs("::ffff:169.254.169.254"),
		"nat64.example":   addrs("64:ff9b::7f00:1", "64:ff9b::808:808"),
		"nat64lo.example": addrs("64:ff9b::127.0.0.1"),
		"6to4.example":    addrs("2002:a9fe:a9fe::1"),
		"compat.example":  addrs("::127.0.0.1"),
		"ec2.example":     addrs("fd00:ec2::254"),
		"zero.example":    addrs("0.0.0.0"),
		"bcast.example":   addrs("255.255.255.255"),
		"zoned.example":   addrs("fe80::1%eth0"),
	})
	runGuardCases(t, r, []guardCase{
		// Refused addresses are dropped; the rest keep the resolver's
		// order, unmapped and without repeats.
		{"mixed.example", 443, Verdict{Allowed: true, Addrs: addrs(pub4, pub6, pub4b), Rule: "*.example"}},
		{"v6first.example", 443, Verdict{Allowed: true, Addrs: addrs(pub6), Rule: "*.example"}},
		// When none passes, the first refused address explains why.
		{"private.example", 443, Verdict{Addr: addr("127.0.0.1"), Rule: "*.example", Reason: "resolves to 127.0.0.1 (loopback)"}},
		{"host.example", 443, Verdict{Addr: addr("10.0.0.5"), Rule: "*.example", Reason: "resolves to 10.0.0.5 (this host)"}},
		{"meta.example", 80, Verdict{Addr: addr("169.254.169.254"), Rule: "*.example", Reason: "resolves to 169.254.169.254 (metadata)"}},
		{"nat64lo.example", 443, Verdict{Addr: addr("64:ff9b::7f00:1"), Rule: "*.example", Reason: "resolves to 64:ff9b::7f00:1 (loopback)"}},
		{"nat64.example", 443, Verdict{Allowed: true, Addrs: addrs("64:ff9b::808:808"), Rule: "*.example"}},
		{"6to4.example", 443, Verdict{Addr: addr("2002:a9fe:a9fe::1"), Rule: "*.example", Reason: "resolves to 2002:a9fe:a9fe::1 (metadata)"}},
		{"compat.example", 443, Verdict{Addr: addr("::7f00:1"), Rule: "*.example", Reason: "resolves to ::7f00:1 (loopback)"}},
		{"ec2.example", 443, Verdict{Addr: addr("fd00:ec2::254"), Rule: "*.example", Reason: "resolves to fd00:ec2::254 (metadata)"}},
		{"zero.example", 443, Verdict{Addr: addr("0.0.0.0"), Rule: "*.example", Reason: "resolves to 0.0.0.0 (unspecified)"}},
		{"bcast.example", 443, Verdict{Addr: addr("255.255.255.255"), Rule: "*.example", Reason: "resolves to 255.255.255.255 (broadcast)"}},
		{"zoned.example", 443, Verdict{Addr: addr("fe80::1"), Rule: "*.example", Reason: "resolves to fe80::1 (link-local)"}},
	})
}

func TestGuardLiteralSpellings(t *testing.T) {
	// Rules that match every literal but lift nothing.
	r, _ := mustRules(t, Config{AllowCIDRs: []string{"0.0.0.0/0", "::/0"}}, nil)
	runGuardCases(t, r, []guardCase{
		{"127.0.0.1", 443, Verdict{Addr: addr("127.0.0.1"), Rule: "0.0.0.0/0", Reason: "127.0.0.1 is loopback"}},
		{"127.0.0.1.", 443, Verdict{Host: "127.0.0.1", Addr: addr("127.0.0.1"), Rule: "0.0.0.0/0", Reason: "127.0.0.1 is loopback"}},
		{"[::ffff:127.0.0.1]", 443, Verdict{Host: "127.0.0.1", Addr: addr("127.0.0.1"), Rule: "0.0.0.0/0", Reason: "127.0.0.1 is loopback"}},
		{"::ffff:7f00:1", 443, Verdict{Host: "127.0.0.1", Addr: addr("127.0.0.1"), Rule: "0.0.0.0/0", Reason: "127.0.0.1 is loopback"}},
		{"[::ffff:169.254.169.254]", 80, Verdict{Host: "169.254.169.254", Addr: addr("169.254.169.254"), Rule: "0.0.0.0/0", Reason: "169.254.169.254 is metadata"}},
		{"[64:ff9b::7f00:1]", 443, Verdict{Host: "64:ff9b::7f00:1", Addr: addr("64:ff9b::7f00:1"), Rule: "::/0", Reason: "64:ff9b::7f00:1 is loopback"}},
		{"64:ff9b::169.254.169.254", 80, Verdict{Host: "64:ff9b::a9fe:a9fe", Addr: addr("64:ff9b::a9fe:a9fe"), Rule: "::/0", Reason: "64:ff9b::a9fe:a9fe is metadata"}},
		{"[2002:7f00:1::1]", 443, Verdict{Host: "2002:7f00:1::1", Addr: addr("2002:7f00:1::1"), Rule: "::/0", Reason: "2002:7f00:1::1 is loopback"}},
		{"[2002:a9fe:a9fe::]", 80, Verdict{Host: "2002:a9fe:a9fe::", Addr: addr("2002:a9fe:a9fe::"), Rule: "::/0", Reason: "2002:a9fe:a9fe:: is metadata"}},
		{"[::127.0.0.1]", 443, Verdict{Host: "::7f00:1", Addr: addr("::7f00:1"), Rule: "::/0", Reason: "::7f00:1 is loopback"}},
		{"[fd00:ec2::254]", 80, Verdict{Host: "fd00:ec2::254", Addr: addr("fd00:ec2::254"), Rule: "::/0", Reason: "fd00:ec2::254 is metadata"}},
		{"[::]", 443, Verdict{Host: "::", Addr: addr("::"), Rule: "::/0", Reason: ":: is unspecified"}},
		{"0.0.0.0", 443, Verdict{Addr: addr("0.0.0.0"), Rule: "0.0.0.0/0", Reason: "0.0.0.0 is unspecified"}},
		{"10.0.0.5", 443, Verdict{Addr: addr("10.0.0.5"), Rule: "0.0.0.0/0", Reason: "10.0.0.5 is this host"}},
		{"[2001:4860::5]", 443, Verdict{Host: "2001:4860::5", Addr: addr("2001:4860::5"), Rule: "::/0", Reason: "2001:4860::5 is this host"}},
		{"[64:ff9b::808:808]", 443, Verdict{Host: "64:ff9b::808:808", Allowed: true, Addrs: addrs("64:ff9b::808:808"), Rule: "::/0"}},
		{"[2002:808:808::1]", 443, Verdict{Host: "2002:808:808::1", Allowed: true, Addrs: addrs("2002:808:808::1"), Rule: "::/0"}},
		{"8.8.8.8", 443, Verdict{Allowed: true, Addrs: addrs("8.8.8.8"), Rule: "0.0.0.0/0"}},
		// Spellings netip does not read are names, and refused as such.
		{"127.1", 443, Verdict{Reason: "invalid host name"}},
		{"0x7f000001", 443, Verdict{Reason: "invalid host name"}},
		{"2130706433", 443, Verdict{Reason: "invalid host name"}},
		{"[fe80::1%eth0]", 443, Verdict{Reason: "invalid host name"}},
	})
}

func TestGuardDeniedAddresses(t *testing.T) {
	r, _ := mustRules(t, Config{
		AllowDomains: []string{"*.example"},
		DenyDomains:  []string{pub4, "[" + pub6 + "]:443"},
	}, map[string][]netip.Addr{
		"both.example": addrs(pub4, pub4b),
		"one.example":  addrs("::ffff:" + pub4),
		"six.example":  addrs(pub6),
		"mix.example":  addrs("127.0.0.1", pub4),
	})
	runGuardCases(t, r, []guardCase{
		{"both.example", 443, Verdict{Allowed: true, Addrs: addrs(pub4b), Rule: "*.example"}},
		{"one.example", 443, Verdict{Addr: addr(pub4), Rule: pub4, Reason: "denied by deniedDomains"}},
		{"six.example", 443, Verdict{Addr: addr(pub6), Rule: "[" + pub6 + "]:443", Reason: "denied by deniedDomains"}},
		{"six.example", 80, Verdict{Allowed: true, Addrs: addrs(pub6), Rule: "*.example"}},
		{"mix.example", 443, Verdict{Addr: addr("127.0.0.1"), Rule: "*.example", Reason: "resolves to 127.0.0.1 (loopback)"}},
	})
}

func TestResolveLookupErrors(t *testing.T) {
	stub := &stubLookup{
		answers: map[string][]netip.Addr{
			"empty.example": {},
			"zero.example":  {{}},
		},
		errs: map[string]error{
			"nx.example":       &net.DNSError{Err: "no such host", Name: "nx.example", Server: "192.0.2.53:53", IsNotFound: true},
			"slow.example":     &net.DNSError{Err: "i/o timeout", Name: "slow.example", Server: "192.0.2.53:53", IsTimeout: true},
			"servfail.example": &net.DNSError{Err: "server misbehaving", Name: "servfail.example", Server: "192.0.2.53:53", IsTemporary: true},
			"wrapped.example":  fmt.Errorf("resolving: %w", &net.DNSError{Err: "no such host", IsNotFound: true}),
			"ctx.example":      fmt.Errorf("resolving: %w", context.DeadlineExceeded),
			"cancel.example":   context.Canceled,
			"other.example":    errors.New("resolver exploded"),
		},
	}
	r, _ := mustRules(t, Config{AllowDomains: []string{"*.example"}, Lookup: stub.lookup}, nil)
	runGuardCases(t, r, []guardCase{
		{"nx.example", 443, Verdict{Rule: "*.example", Reason: "lookup failed: no such host"}},
		{"slow.example", 443, Verdict{Rule: "*.example", Reason: "lookup failed: timeout"}},
		{"servfail.example", 443, Verdict{Rule: "*.example", Reason: "lookup failed: server misbehaving"}},
		{"wrapped.example", 443, Verdict{Rule: "*.example", Reason: "lookup failed: no such host"}},
		{"ctx.example", 443, Verdict{Rule: "*.example", Reason: "lookup failed: timeout"}},
		{"cancel.example", 443, Verdict{Rule: "*.example", Reason: "lookup failed: canceled"}},
		{"other.example", 443, Verdict{Rule: "*.example", Reason: "lookup failed: resolver exploded"}},
		{"empty.example", 443, Verdict{Rule: "*.example", Reason: "lookup failed: no addresses"}},
		{"zero.example", 443, Verdict{Rule: "*.example", Reason: "resolves to invalid IP (invalid)"}},
	})
}

func TestResolveLookupTimeout(t *testing.T) {
	ctx, cancel := withLookupTimeout(context.Background())
	defer cancel()
	deadline, ok := ctx.Deadline()
	if !ok {
		t.Fatal("no deadline added")
	}
	if d := time.Until(deadline); d <= 0 || d > lookupTimeout {
		t.Errorf("deadline in %v, want within %v", d, lookupTimeout)
	}

	want := time.Now().Add(time.Minute)
	parent, cancelParent := context.WithDeadline(context.Background(), want)
	defer cancelParent()
	ctx, cancel2 := withLookupTimeout(parent)
	defer cancel2()
	if got, _ := ctx.Deadline(); !got.Equal(want) {
		t.Errorf("deadline %v, want the caller's %v", got, want)
	}
}

func TestSpecialRule(t *testing.T) {
	host := addrs("10.0.0.5", "2001:4860::5", "198.18.0.1", "8.8.4.4")
	open := []netip.Prefix{netip.MustParsePrefix("10.9.0.0/16"), netip.MustParsePrefix("::ffff:127.0.0.9/128")}
	tests := []struct {
		entry string
		cidr  bool
		class string
	}{
		// Names ask for nothing special (the guard checks what they
		// resolve to), except the loopback interface's.
		{"example.com", false, ""},
		{"*.example.com:8443", false, ""},
		{"*", false, ""},
		{"*:22", false, ""},
		{"localhost", false, "loopback"},
		{"LocalHost.:8080", false, "loopback"},
		{"a.localhost", false, "loopback"},
		{"*.localhost", false, "loopback"},
		{"localhost.example.com", false, ""},
		// IP literals, in every spelling.
		{"127.0.0.1", false, "loopback"},
		{"127.0.0.1:8080", false, "loopback"},
		{"[::1]:22", false, "loopback"},
		{"[::ffff:127.0.0.1]", false, "loopback"},
		{"[::ffff:7f00:1]:80", false, "loopback"},
		{"[64:ff9b::7f00:1]", false, "loopback"},
		{"[2002:7f00:1::]", false, "loopback"},
		{"[::127.0.0.1]", false, "loopback"},
		{"169.254.169.254", false, "metadata"},
		{"[::ffff:169.254.169.254]", false, "metadata"},
		{"[fd00:ec2::254]", false, "metadata"},
		{"169.254.1.1", false, "link-local"},
		{"[fe80::1]", false, "link-local"},
		{"10.1.2.3", false, "private"},
		{"192.168.0.1:443", false, "private"},
		{"[fd00::7]", false, "private"},
		{"100.64.0.1", false, "cgnat"},
		{"0.0.0.0:8080", false, "unspecified"},
		{"[::]", false, "unspecified"},
		{"10.0.0.5", false, "this host"},
		{"8.8.4.4", false, "this host"},
		{"[2001:4860::5]", false, "this host"},
		{"[::ffff:8.8.4.4]", false, "this host"},
		{"224.0.0.1", false, "multicast"},
		{"8.8.8.8", false, ""},
		{"[2606:4700::1111]", false, ""},
		{"[64:ff9b::808:808]", false, ""},
		// CIDRs: wholly non-public is special, anything with public
		// addresses is not.
		{"127.0.0.0/8", true, "loopback"},
		{"127.0.0.1", true, "loopback"},
		{"127.0.0.1:80", true, "loopback"},
		{"::ffff:127.0.0.0/104", true, "loopback"},
		{"[::1/128]:22", true, "loopback"},
		{"10.0.0.0/8:5432", true, "private"},
		{"169.254.0.0/16", true, "link-local"},
		{"169.254.169.254/32", true, "metadata"},
		{"100.64.0.0/10", true, "cgnat"},
		{"0.0.0.0/8", true, "unspecified"},
		{"fc00::/7", true, "private"},
		{"64:ff9b::a00:0/104", true, "private"},
		{"2002:a9fe::/32", true, "link-local"},
		{"224.0.0.0/3", true, "non-public"},
		{"10.0.0.4/30", true, "private"},
		{"8.8.4.4/32", true, "this host"},
		{"0.0.0.0/0", true, ""},
		{"::/0", true, ""},
		{"10.0.0.0/7", true, ""},
		{"8.8.4.0/24", true, ""},
		{"::ffff:0:0/96", true, ""},
		{"64:ff9b::/96", true, ""},
		{"2002::/16", true, ""},
		// What the operator opened is no longer special.
		{"10.9.1.1", false, ""},
		{"10.9.0.0/16", true, ""},
		{"10.8.0.0/15", true, "private"},
		{"127.0.0.9", false, ""},
		{"127.0.0.8/31", true, "loopback"},
	}
	for _, tt := range tests {
		got, err := SpecialRule(tt.entry, tt.cidr, host, open)
		if err != nil || got != tt.class {
			t.Errorf("SpecialRule(%q, %v) = %q, %v; want %q", tt.entry, tt.cidr, got, err, tt.class)
		}
	}
	for _, bad := range []string{"", "exa mple.com", "10.0.0.1/8", "http://x/"} {
		if _, err := SpecialRule(bad, strings.Contains(bad, "/"), host, nil); err == nil {
			t.Errorf("SpecialRule(%q): no error", bad)
		}
	}
}
