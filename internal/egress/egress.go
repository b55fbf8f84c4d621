// Package egress is hutch's egress proxy: the only way out of a sandbox's
// network namespace (S6). It holds the rule matcher (domains, ports,
// CIDRs), the resolver with its address guard (no loopback, private,
// link-local, metadata or host addresses unless a rule allows them), the
// proxy protocols the sandbox speaks (HTTP forwarding, CONNECT, SOCKS5) and
// the events that record every refusal and every allowed host's traffic.
//
// The proxy resolves every name itself and dials exactly the address it
// checked, so a name that resolves differently a moment later (DNS
// rebinding) cannot send it elsewhere. It never calls package unix: the
// sandbox hands it listening sockets made inside the sandbox's network
// namespace, and it serves them like any net.Listener.
package egress

import (
	"net/netip"
	"time"
)

// Config is the network policy the proxy enforces.
type Config struct {
	// AllowDomains lists the destinations the sandbox may reach:
	// "example.com" (that name only), "*.example.com" (its subdomains
	// only, not example.com itself), an IP literal ("203.0.113.7",
	// "[2001:db8::1]"), each with an optional ":PORT". Without a port only
	// 80 and 443 are allowed.
	AllowDomains []string
	// DenyDomains lists destinations never reachable, in the same syntax
	// ("*" denies every name); deny wins over allow.
	DenyDomains []string
	// AllowCIDRs lists IP destinations the sandbox may reach by address
	// ("203.0.113.0/24", optionally ":PORT"; without a port 80 and 443).
	AllowCIDRs []string
	// AllowPrivate lists the address ranges that the address guard lets
	// through although they are loopback, private, link-local, … (tests use
	// 127.0.0.1/32 with loopback upstreams).
	AllowPrivate []netip.Prefix
	// Hosts pins names to addresses in the proxy's resolver, like curl's
	// --resolve: a pinned name is never looked up.
	Hosts map[string][]netip.Addr
	// Lookup resolves a name the hosts table does not pin; nil uses the
	// system resolver.
	Lookup func(host string) ([]netip.Addr, error)
	// HostAddrs are the host's own addresses, refused like loopback; nil
	// means the addresses of the host's interfaces, read once.
	HostAddrs []netip.Addr
}

// Verdict is what the rules say of one destination.
type Verdict struct {
	// Host is the destination's name as the rules saw it: lower case, no
	// trailing dot, internationalized names in their ASCII (punycode)
	// form; an IP literal in its canonical spelling.
	Host string
	// Port is the destination's port.
	Port int
	// Allowed says whether the sandbox may connect.
	Allowed bool
	// Addrs are the addresses that passed the address guard, in the order
	// to try; the proxy dials only these. Empty when !Allowed.
	Addrs []netip.Addr
	// Addr is the address the verdict is about when an address decided it
	// (the first refused address of a refused name), else invalid.
	Addr netip.Addr
	// Rule is the rule that decided, as the policy spells it
	// ("*.example.com", "evil.test:443", "10.0.0.0/8"), empty when none
	// matched.
	Rule string
	// Reason explains a refusal in a few words for people:
	// "not in allowedDomains", "port 22 not allowed for example.com",
	// "denied by deniedDomains", "resolves to 127.0.0.1 (loopback)",
	// "lookup failed: no such host".
	Reason string
}

// Event is one line of a report: a refused connection, or the traffic of
// an allowed destination.
type Event struct {
	Time     time.Time `json:"time"`
	Sandbox  string    `json:"sandbox"`
	Action   string    `json:"action"`   // "blocked" or "allowed"
	Protocol string    `json:"protocol"` // "http", "connect", "socks5", "socks4", "ssh"…
	Host     string    `json:"host"`
	Port     int       `json:"port"`
	Address  string    `json:"address,omitempty"` // the resolved address
	Rule     string    `json:"rule,omitempty"`
	Reason   string    `json:"reason,omitempty"`
	// Allowed destinations: connections, and bytes from the sandbox
	// (out) and to it (in), summed over the sandbox's life.
	Connections int64 `json:"connections,omitempty"`
	BytesOut    int64 `json:"bytes_out,omitempty"`
	BytesIn     int64 `json:"bytes_in,omitempty"`
}
