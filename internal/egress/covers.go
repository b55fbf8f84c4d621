package egress

import (
	"fmt"
	"strings"
)

// Covers reports whether the allow rule entry (in the syntax of
// AllowDomains), as an operator's rule of another sandbox
// (OperatorRules), would let nothing through that r's allow rules do not:
// every host and port it matches is matched, on that port, by one of r's
// rules, and a class of addresses the guard refuses that it would open (an
// IP literal of a private or loopback range, localhost) is opened by that
// rule too. A proxy that is Offline covers nothing. r's deny rules are not
// consulted: a sandbox made narrower than r keeps them. It is an error
// when entry does not parse. hutch mcp checks with it that a sandbox an
// agent asks for is no wider than the flags it was started with.
func (r *Rules) Covers(entry string) (bool, error) {
	q, err := parseDomainRule(entry, false)
	if err != nil {
		return false, fmt.Errorf("%q: %w", entry, err)
	}
	if r.offline {
		return false, nil
	}
	switch {
	case q.kind == matchPrefix:
		q.lift = prefixClass(q.prefix, r.guard.hostAddrs)
	case q.kind == matchName && q.name == "localhost", q.kind == matchSuffix && q.name == ".localhost":
		q.lift = classLoopback
	}
	covered := func(port int) bool {
		for i := range r.allow {
			c := &r.allow[i]
			if !c.coversHost(&q) {
				continue
			}
			if (port == anyPort && c.port == anyPort) || (port != anyPort && c.allowsPort(port)) {
				return true
			}
		}
		return false
	}
	ports := defaultPorts
	if q.port != 0 {
		ports = []int{q.port}
	}
	for _, p := range ports {
		if !covered(p) {
			return false, nil
		}
	}
	return true, nil
}

// coversHost reports whether allow rule c matches every host q matches,
// and opens past the guard whatever q would.
func (c *rule) coversHost(q *rule) bool {
	if q.lift != "" && c.lift != q.lift {
		return false
	}
	switch c.kind {
	case matchEveryone:
		return true
	case matchName:
		return q.kind == matchName && q.name == c.name
	case matchSuffix:
		return (q.kind == matchName || q.kind == matchSuffix) && strings.HasSuffix(q.name, c.name)
	case matchPrefix:
		return q.kind == matchPrefix && c.prefix.Bits() <= q.prefix.Bits() && c.prefix.Contains(q.prefix.Addr())
	}
	return false
}
