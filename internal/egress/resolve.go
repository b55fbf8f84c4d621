package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"time"
)

// lookupTimeout bounds a lookup by the system resolver when the caller's
// context has no deadline.
const lookupTimeout = 5 * time.Second

// Resolve decides whether the sandbox may connect to host:port: it
// normalizes host, matches the deny and allow rules, resolves the name
// (Config.Hosts pins first, else Config.Lookup, else the system resolver
// via net.DefaultResolver.LookupNetIP with a 5 s timeout taken from ctx or
// added), runs the address guard on every address, and returns the
// Verdict. It never dials.
//
// An IP-literal destination is not looked up: its one address is guarded
// as it is. A name is looked up as a rooted name (with a trailing dot), so
// the system resolver does not try it under the search domains of
// resolv.conf: the proxy connects to the name the rules saw. A deny rule
// that is an IP literal also drops that address from the addresses of a
// name.
//
// Verdict.Rule is the deny rule that refused the destination or one of
// its addresses, else the allow rule that matched its host and port
// (also when the lookup or the address guard then refused it), else the
// allow rule that matched its host on another port, else empty. For an
// invalid host name, Verdict.Host is host as given. Verdict.Allow names
// what would let a refused destination through. With Config.Offline every
// valid destination is refused (OfflineReason), and nothing is looked up.
// A destination refused only because no allow rule matches it is
// Verdict.Unknown.
func (r *Rules) Resolve(ctx context.Context, host string, port int) Verdict {
	return r.resolve(ctx, host, port, false)
}

// ResolveApproved is Resolve for a destination that a person approved
// (Proxy.Unknown, network.on_unknown: ask): where no allow rule matches
// host:port, the approval stands in for one (Verdict.Approved, Rule
// empty), and everything else still holds: the deny rules, the lookup
// and the address guard. The guard lets an approved name through to
// public addresses, AllowPrivate's ranges and the addresses an
// operator's IP-literal rule opens, but not to PrivateNames' ranges: a
// person approves a name, not whatever the sandbox's choice of name
// resolves to. A refusal of an approved destination says so in its
// Reason ("approved, but resolves to 127.0.0.1 (loopback)").
func (r *Rules) ResolveApproved(ctx context.Context, host string, port int) Verdict {
	return r.resolve(ctx, host, port, true)
}

// resolve is Resolve, and ResolveApproved when approved is set.
func (r *Rules) resolve(ctx context.Context, host string, port int, approved bool) (v Verdict) {
	v = Verdict{Host: host, Port: port}
	name, literal, err := normalizeHost(host)
	if err != nil {
		v.Reason = "invalid host name"
		return v
	}
	v.Host = name
	if port < 1 || port > 65535 {
		v.Reason = fmt.Sprintf("invalid port %d", port)
		return v
	}
	if r.offline {
		v.Reason = OfflineReason
		allowDomain(&v, name, literal, port, false)
		return v
	}
	if ru := r.denied(name, literal, port); ru != nil {
		v.Rule, v.Reason = ru.raw, "denied by deniedDomains"
		notDenied(&v, ru.raw)
		return v
	}
	allow, hostRule := r.allowed(name, literal, port)
	if allow == nil && approved {
		// The approval is the allow rule: it lifts no class of the guard.
		allow, v.Approved = &rule{}, true
		defer func() {
			if !v.Allowed {
				v.Reason = "approved, but " + v.Reason
			}
		}()
	}
	switch {
	case allow == nil && hostRule == nil:
		v.Reason, v.Unknown = "not in allowedDomains", r.askable(literal, port)
		allowDomain(&v, name, literal, port, false)
		return v
	case allow == nil:
		v.Rule, v.Reason, v.Unknown = hostRule.raw, fmt.Sprintf("port %d not allowed for %s", port, name), r.askable(literal, port)
		allowDomain(&v, name, literal, port, true)
		return v
	}

	v.Rule = allow.raw
	var addrs []netip.Addr
	lift := allow.lift
	if literal.IsValid() {
		addrs = []netip.Addr{literal}
	} else {
		addrs, err = r.resolveName(ctx, name)
		if err != nil {
			v.Reason = "lookup failed: " + shortLookupError(err)
			pinHost(&v, name)
			return v
		}
	}

	// The first refused address explains the refusal when none passes.
	var refused bool
	for _, a := range addrs {
		a = a.WithZone("").Unmap()
		if ru := r.deniedAddr(a, port); ru != nil {
			if !refused {
				refused = true
				v.Addr, v.Rule, v.Reason = a, ru.raw, "denied by deniedDomains"
				notDenied(&v, ru.raw)
			}
			continue
		}
		if ok, class := r.addrPasses(a, port, lift, literal.IsValid(), v.Approved); !ok {
			if !refused {
				refused = true
				v.Addr = a
				if literal.IsValid() {
					v.Reason = fmt.Sprintf("%s is %s", a, class)
				} else {
					v.Reason = fmt.Sprintf("resolves to %s (%s)", a, class)
				}
				r.openPrivate(&v, a)
			}
			continue
		}
		if !slices.Contains(v.Addrs, a) {
			v.Addrs = append(v.Addrs, a)
		}
	}
	if len(v.Addrs) == 0 {
		if !refused {
			v.Reason = "lookup failed: no addresses"
			pinHost(&v, name)
		}
		return v
	}
	v.Allow, v.AllowField = "", ""
	v.Allowed, v.Addr, v.Rule, v.Reason = true, netip.Addr{}, allow.raw, ""
	return v
}

// askable reports whether a destination that no allow rule matches is
// Verdict.Unknown: a name, whose addresses are not looked up before a
// person approves it, or an IP literal (addr) that the address guard
// would let through once approved. A person is never asked about an
// address the guard refuses anyway.
func (r *Rules) askable(addr netip.Addr, port int) bool {
	if !addr.IsValid() {
		return true
	}
	ok, _ := r.addrPasses(addr.WithZone("").Unmap(), port, "", true, true)
	return ok
}

// addrPasses reports whether the address guard lets a, an address of the
// destination on port that the allow rule with lift matched, through
// (literal: the destination is a itself, not a name; approved: a person's
// approval stood in for the allow rule, which PrivateNames does not
// cover), and else the class of addresses that refused it.
func (r *Rules) addrPasses(a netip.Addr, port int, lift string, literal, approved bool) (bool, string) {
	ok, class := r.guard.passes(a, lift)
	if !ok && !literal && (r.literalAllows(a, port, class) || !approved && r.guard.passesName(a, class)) {
		ok = true
	}
	return ok, class
}

// admits reports whether the rules would let a connection to host
// (normalized, as a Verdict's Host) on port through at address a, which
// its name resolved to: Resolve's checks, but with the address already
// known; ResolveApproved's when approved.
func (r *Rules) admits(host string, port int, a netip.Addr, approved bool) bool {
	name, literal, err := normalizeHost(host)
	if err != nil || r.offline || r.denied(name, literal, port) != nil || r.deniedAddr(a, port) != nil {
		return false
	}
	allow, _ := r.allowed(name, literal, port)
	byApproval := allow == nil
	if byApproval {
		if !approved {
			return false
		}
		allow = &rule{}
	}
	ok, _ := r.addrPasses(a, port, allow.lift, literal.IsValid(), byApproval)
	return ok
}

// deniedAddr returns the first IP-literal deny rule that denies address a
// on port.
func (r *Rules) deniedAddr(a netip.Addr, port int) *rule {
	for i := range r.deny {
		if ru := &r.deny[i]; ru.kind == matchPrefix && ru.prefix.Contains(a) && ru.deniesPort(port) {
			return ru
		}
	}
	return nil
}

// resolveName returns the addresses of a normalized name: its pin in
// Config.Hosts, the loopback for localhost and the names below it (RFC
// 6761, never looked up), else what Config.Lookup or the system resolver
// says.
func (r *Rules) resolveName(ctx context.Context, name string) ([]netip.Addr, error) {
	if addrs, ok := r.hosts[name]; ok {
		return addrs, nil
	}
	if isLocalhost(name) {
		return []netip.Addr{netip.AddrFrom4([4]byte{127, 0, 0, 1}), netip.IPv6Loopback()}, nil
	}
	if r.lookup != nil {
		return r.lookup(name)
	}
	ctx, cancel := withLookupTimeout(ctx)
	defer cancel()
	return net.DefaultResolver.LookupNetIP(ctx, "ip", name+".")
}

// withLookupTimeout returns ctx if it has a deadline, else ctx with one
// lookupTimeout from now.
func withLookupTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, lookupTimeout)
}

// shortLookupError returns the gist of a lookup error for Verdict.Reason:
// "no such host", "timeout", or the error's own short text, without the
// name and server that the resolver's message repeats.
func shortLookupError(err error) string {
	var dnsErr *net.DNSError
	switch {
	case errors.As(err, &dnsErr):
		switch {
		case dnsErr.IsNotFound:
			return "no such host"
		case dnsErr.IsTimeout:
			return "timeout"
		case dnsErr.Err != "":
			return dnsErr.Err
		}
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	}
	return err.Error()
}
