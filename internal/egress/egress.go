// Package egress is hutch's egress proxy: the only way out of a sandbox's
// network namespace (S6). It holds the rule matcher (domains, ports,
// CIDRs), the resolver with its address guard (no loopback, private,
// link-local, metadata or host addresses unless a rule allows them), the
// proxy protocols the sandbox speaks (HTTP forwarding, CONNECT, SOCKS5) and
// the events that record every refusal and every allowed host's traffic.
// Every refusal names what would allow it (Verdict.Allow). The proxy also
// answers the sandbox's own name lookups, on a DNS socket of its loopback,
// with a final "no such host" (ServeDNS), and can refuse everything at
// once for a sandbox without a network (Config.Offline).
//
// The proxy also keeps real secrets out of the sandbox (S3): the sandbox
// holds placeholders, and for a destination that secrets are bound to
// (Config.Secrets) the proxy terminates the sandbox's TLS with a leaf of
// the sandbox's CA, puts the real values in for the placeholders on the
// way out and takes them back out of the responses. Every other tunnel
// stays opaque. A request that carries a placeholder where its secret is
// not bound is refused, on every request the proxy can read.
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

	"github.com/hutch-sandbox/hutch/internal/secrets"
)

// Config is the network policy the proxy enforces.
type Config struct {
	// AllowDomains lists the destinations the sandbox may reach:
	// "example.com" (that name only), "*.example.com" (its subdomains
	// only, not example.com itself), an IP literal ("203.0.113.7",
	// "[2001:db8::1]"), each with an optional ":PORT", or ":*" for every
	// port. Without a port only 80 and 443 are allowed.
	AllowDomains []string
	// DenyDomains lists destinations never reachable, in the same syntax
	// ("*" denies every name); deny wins over allow.
	DenyDomains []string
	// AllowCIDRs lists IP destinations the sandbox may reach by address
	// ("203.0.113.0/24", optionally ":PORT"; without a port 80 and 443).
	AllowCIDRs []string
	// AllowPrivate lists the address ranges that the address guard lets
	// through although they are loopback, private, link-local, … (tests use
	// 127.0.0.1/32 with loopback upstreams). Only the operator sets it.
	AllowPrivate []netip.Prefix
	// OperatorRules says that the allow rules are the operator's (hutch
	// run's user; hutch serve's admin on its unix socket), who may open
	// what the address guard refuses with them: an IP-literal rule of
	// AllowDomains, AllowCIDRs or a secret's hosts that lies wholly in one
	// non-public class ("127.0.0.1:8080", "10.0.0.0/8") lets addresses of
	// that class through. Without it (the zero value: a tenant's rules),
	// no rule opens anything the guard refuses; only AllowPrivate does.
	OperatorRules bool
	// Hosts pins names to addresses in the proxy's resolver, like curl's
	// --resolve: a pinned name is never looked up.
	Hosts map[string][]netip.Addr
	// Lookup resolves a name the hosts table does not pin; nil uses the
	// system resolver.
	Lookup func(host string) ([]netip.Addr, error)
	// HostAddrs are the host's own addresses, refused like loopback; nil
	// means the addresses of the host's interfaces, read once.
	HostAddrs []netip.Addr
	// Secrets are the sandbox's secrets (S3). Each one's Hosts, in the
	// syntax of AllowDomains, are where its real value may go: without a
	// port it is bound to 443, and to 80 too when AllowPlainHTTP is set.
	// A secret's hosts are allowed destinations as if listed in
	// AllowDomains (deny rules still win). The proxy intercepts the TLS of
	// bound destinations to swap the placeholder for the real value, and
	// refuses requests that carry a placeholder anywhere else.
	Secrets []*secrets.Secret
	// Headers are headers the proxy sets on the sandbox's HTTPS requests
	// to some hosts (HeaderRules makes them of a policy's). Like secrets'
	// hosts, their destinations are intercepted; unlike them, they are not
	// allowed by being named here.
	Headers []HeaderRule
	// PrivateNames lists ranges of private-use, CGNAT or reserved
	// addresses that allowed names may resolve to (srt's default, which
	// hutch's import of srt's settings keeps): an intranet name allowed on
	// purpose. Unlike AllowPrivate it opens nothing to IP-literal
	// destinations, and never loopback, link-local, metadata, multicast or
	// this host's addresses, whatever the range. Only the operator sets
	// it.
	PrivateNames []netip.Prefix
	// Offline says that the sandbox has no network (network mode
	// "none"): every destination is refused, without a lookup, with the
	// reason OfflineReason, and the rules above do not matter. The proxy
	// then only answers: clients that honour the proxy variables get a
	// refusal they treat as final at once, and hutch can say where they
	// tried to go.
	Offline bool
}

// OfflineReason is the reason of every refusal of an Offline proxy.
const OfflineReason = "the sandbox has no network (--net none)"

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
	// Allow names what would let a refused destination through, in the
	// words of hutch's flags: "--allow-domain evil.test",
	// "--allow-domain example.com:22", "--allow-private 10.0.0.5/32";
	// for a tenant's sandbox of hutch serve, what only the daemon's
	// operator can do ("hutch serve --allow-private 10.0.0.5/32"). Empty
	// when no setting allows it (an invalid name, a malformed request).
	Allow string
	// AllowField is the policy field behind Allow
	// ("network.allowed_domains", "network.allow_private",
	// "network.denied_domains", "secrets[].hosts", …), or empty.
	AllowField string
	// Unknown says that the destination was refused only because no
	// allow rule matches its host and port (Reason "not in
	// allowedDomains" or "port N not allowed for HOST"): not by a deny
	// rule, the address guard, a failed lookup or Config.Offline. It is
	// what network.on_unknown: ask asks a person about (Proxy.Unknown).
	Unknown bool
	// Approved says that a person's approval stood in for an allow rule
	// (Rules.ResolveApproved); the destination may still be refused by
	// the lookup or the address guard.
	Approved bool
}

// Event is one line of a report: a refused connection, a name the sandbox
// looked up itself, or the traffic of an allowed destination.
type Event struct {
	Time    time.Time `json:"time"`
	Sandbox string    `json:"sandbox"`
	// Action is "blocked" (a refused connection), "lookup" (a name the
	// sandbox looked up, answered "no such host"; Protocol "dns", Port 0)
	// or "allowed".
	Action   string `json:"action"`
	Protocol string `json:"protocol"` // "http", "connect", "socks5", "socks4", "dns"…
	Host     string `json:"host"`
	Port     int    `json:"port"`
	Address  string `json:"address,omitempty"` // the resolved address
	Rule     string `json:"rule,omitempty"`
	Reason   string `json:"reason,omitempty"`
	// Allow and AllowField name what would let a refused destination
	// through: a flag of hutch run and hutch create, and the policy field
	// it sets (see Verdict).
	Allow      string `json:"allow,omitempty"`
	AllowField string `json:"allow_field,omitempty"`
	// Secret is the name of the secret whose placeholder a refused
	// request carried (never its value).
	Secret string `json:"secret,omitempty"`
	// Allowed destinations: connections, and bytes from the sandbox
	// (out) and to it (in), summed over the sandbox's life.
	Connections int64 `json:"connections,omitempty"`
	BytesOut    int64 `json:"bytes_out,omitempty"`
	BytesIn     int64 `json:"bytes_in,omitempty"`
}
