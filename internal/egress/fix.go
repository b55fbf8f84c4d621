package egress

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/hutch-sandbox/hutch/internal/secrets"
)

// Every refusal that a setting could lift names it (Verdict.Allow and
// AllowField, Event, the proxy's answers, hutch run's summary), so that
// whoever reads the refusal knows what to change without reading the
// documentation. The words are hutch's flags, which hutch run and hutch
// create share, and the policy fields they set. What only the daemon's
// operator may open (loopback, private, metadata … addresses for a
// tenant's sandbox) is named as the operator's flag.

// destArg spells a destination as an entry of --allow-domain: the host
// (an IPv6 literal in brackets), with ":PORT" unless the port is one that
// an entry without a port allows (80, 443).
func destArg(host string, addr netip.Addr, port int) string {
	h := host
	if addr.IsValid() && addr.Is6() {
		h = "[" + addr.String() + "]"
	}
	if port == 80 || port == 443 {
		return h
	}
	return h + ":" + strconv.Itoa(port)
}

// allowDomain sets v's fix to an --allow-domain entry for the
// destination; withPort keeps the port even when it is 80 or 443 (a rule
// for the host exists but names another port).
func allowDomain(v *Verdict, name string, addr netip.Addr, port int, withPort bool) {
	arg := destArg(name, addr, port)
	if withPort && (port == 80 || port == 443) {
		arg += ":" + strconv.Itoa(port)
	}
	v.Allow, v.AllowField = "--allow-domain "+arg, "network.allowed_domains"
}

// notDenied sets v's fix for a destination that the deny rule raw refused.
func notDenied(v *Verdict, raw string) {
	v.Allow, v.AllowField = "without --deny-domain "+raw, "network.denied_domains"
}

// pinHost sets v's fix for a name the proxy could not resolve.
func pinHost(v *Verdict, name string) {
	v.Allow, v.AllowField = "--add-host "+name+":ADDRESS", "network.hosts"
}

// openPrivate sets v's fix for an address the guard refused: the range of
// that one address opened with --allow-private, which for a tenant's
// sandbox only the daemon's operator can do.
func (r *Rules) openPrivate(v *Verdict, a netip.Addr) {
	p := netip.PrefixFrom(a, a.BitLen()).String()
	if r.operator {
		v.Allow, v.AllowField = "--allow-private "+p, "network.allow_private"
		return
	}
	v.Allow, v.AllowField = "hutch serve --allow-private "+p+" (the daemon's operator)", ""
}

// secretFix returns the fix of a request that carried secret s's
// placeholder to host:port where s is not bound (plain: over plain http
// to a bound host, which only allow_plain_http permits).
func secretFix(s *secrets.Secret, host string, port int, plain bool) (allow, field string) {
	if plain {
		return fmt.Sprintf("allow_plain_http: true for secret %s (a policy file)", s.Name), "secrets[].allow_plain_http"
	}
	name, addr, err := normalizeHost(host)
	if err != nil {
		return "", ""
	}
	hosts := append(append([]string(nil), s.Hosts...), secretHostArg(name, addr, port))
	return fmt.Sprintf("--secret %s@%s", s.Name, strings.Join(hosts, ",")), "secrets[].hosts"
}

// secretHostArg spells a destination as a host of a secret: without a
// port it means 443 (and 80 with allow_plain_http).
func secretHostArg(name string, addr netip.Addr, port int) string {
	h := name
	if addr.IsValid() && addr.Is6() {
		h = "[" + addr.String() + "]"
	}
	if port == 443 {
		return h
	}
	return h + ":" + strconv.Itoa(port)
}

// fixText words a refusal's fix for the proxy's answers and hutch's
// summary: "--allow-domain evil.test (network.allowed_domains)", or ""
// when nothing allows it.
func fixText(allow, field string) string {
	switch {
	case allow == "":
		return ""
	case field == "":
		return allow
	}
	return allow + " (" + field + ")"
}
