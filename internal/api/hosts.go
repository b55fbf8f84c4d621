package api

import (
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
)

// Hosts are the names (host names or addresses, lower case, as HostName
// returns them) that a request on a TCP listener may give as its Host
// besides the address it reached, and that an Origin may have: the
// daemon's DNS names (hutch serve --mcp-allowed-host). The front ends
// that browsers may reach (/mcp, /ui/) check every request with them,
// against DNS rebinding and pages of other origins.
type Hosts map[string]bool

// CheckHost refuses a request on a TCP listener whose Host is neither the
// address it reached (a loopback name, for a loopback address) nor one of
// hs: a page of a name that an attacker rebound to the daemon's address
// would send its own name. Requests on the unix socket, which no browser
// reaches, pass.
func (hs Hosts) CheckHost(r *http.Request) error {
	if OriginOf(r.Context()) == OriginLocal {
		return nil
	}
	name := HostName(r.Host)
	if hs[name] {
		return nil
	}
	var local netip.Addr
	if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		if ap, err := netip.ParseAddrPort(a.String()); err == nil {
			local = ap.Addr().Unmap()
		}
	}
	if ip, err := netip.ParseAddr(name); err == nil {
		if local.IsValid() && ip.Unmap() == local {
			return nil
		}
	} else if name == "localhost" && local.IsLoopback() {
		return nil
	}
	return errorf(ErrPermission, "Host %q names neither the address this request reached nor a name this daemon answers to (hutch serve --mcp-allowed-host NAME): refused, as a DNS rebinding would be", r.Host)
}

// CheckOrigin refuses a request from a browser page of another origin:
// an Origin other than the request's own (its Host) or one of hs's, or,
// without one, a Sec-Fetch-Site saying another site.
func (hs Hosts) CheckOrigin(r *http.Request) error {
	o := r.Header.Get("Origin")
	if o == "" {
		if s := r.Header.Get("Sec-Fetch-Site"); s == "cross-site" || s == "same-site" {
			return errorf(ErrPermission, "a request from a page of another site (Sec-Fetch-Site: %s) is refused", s)
		}
		return nil
	}
	if u, err := url.Parse(o); err == nil && u.Host != "" && (strings.EqualFold(u.Host, r.Host) || hs[HostName(u.Host)]) {
		return nil
	}
	return errorf(ErrPermission, "Origin %q is not this daemon's (%s): a request from a page of another origin is refused", o, r.Host)
}

// HostName is the host of a Host header or URL host, without its port or
// brackets, in lower case and without a trailing dot.
func HostName(hostport string) string {
	h := hostport
	if host, _, err := net.SplitHostPort(hostport); err == nil {
		h = host
	}
	return strings.TrimSuffix(strings.ToLower(strings.Trim(h, "[]")), ".")
}
