package egress

import (
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/secrets"
)

// HeaderRule is a compiled policy.HeaderRule (Config.Headers): headers
// the proxy sets on the sandbox's HTTPS requests to Host.
type HeaderRule struct {
	// Host is the destination, in the syntax of a secret's hosts (443
	// when it names no port).
	Host string
	// Set are the headers, in the order of their names: a value holds a
	// secret's placeholder where the policy named the secret, which the
	// proxy swaps for the real value as for any header, the secret being
	// bound to Host.
	Set []Header
}

// Header is one header of a HeaderRule.
type Header struct{ Name, Value string }

// HeaderRules compiles a normalized policy's header rules with the
// sandbox's secrets (LoadSecrets): each "${secrets.NAME}" becomes the
// placeholder of secret NAME, which must be bound to the rule's host.
func HeaderRules(list []policy.HeaderRule, secs []*secrets.Secret) ([]HeaderRule, error) {
	var out []HeaderRule
	var errs []error
	for i, hr := range list {
		c := HeaderRule{Host: hr.Host}
		for _, name := range slices.Sorted(maps.Keys(hr.Set)) {
			parts, err := policy.ParseHeaderValue(hr.Set[name])
			if err != nil {
				errs = append(errs, fmt.Errorf("network.headers[%d].set.%s: %w", i, name, err))
				continue
			}
			var v strings.Builder
			for _, p := range parts {
				if p.Secret == "" {
					v.WriteString(p.Text)
					continue
				}
				j := slices.IndexFunc(secs, func(s *secrets.Secret) bool { return s.Name == p.Secret })
				switch {
				case j < 0:
					errs = append(errs, fmt.Errorf("network.headers[%d].set.%s: the sandbox has no secret %s", i, name, p.Secret))
				case !slices.Contains(secs[j].Hosts, hr.Host):
					errs = append(errs, fmt.Errorf("network.headers[%d].set.%s: secret %s is not bound to %s (its hosts: %s)", i, name, p.Secret, hr.Host, strings.Join(secs[j].Hosts, ", ")))
				default:
					v.WriteString(secs[j].Placeholder)
				}
			}
			c.Set = append(c.Set, Header{Name: http.CanonicalHeaderKey(name), Value: v.String()})
		}
		out = append(out, c)
	}
	return out, errors.Join(errs...)
}

// headerBinding is a compiled HeaderRule.
type headerBinding struct {
	rule rule
	port int
	set  []Header
}

// addHeaders compiles the header rules, and returns the problems found.
func (r *Rules) addHeaders(list []HeaderRule) []error {
	var errs []error
	for i, hr := range list {
		ru, err := parseDomainRule(hr.Host, false)
		switch {
		case err == nil && ru.kind == matchEveryone:
			err = errors.New(`"*" would set the headers on every request; name the hosts`)
		case err == nil && ru.port == anyPort:
			err = errors.New(`":*" would set the headers on every port; name the port, or none for 443`)
		case err == nil && len(hr.Set) == 0:
			err = errors.New("no headers")
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("header rule #%d: host %q: %w", i+1, hr.Host, err))
			continue
		}
		port := ru.port
		if port == 0 {
			port = 443
		}
		r.headers = append(r.headers, headerBinding{rule: ru, port: port, set: hr.Set})
	}
	return errs
}

// headersFor returns the headers to set on requests to host:port, in the
// order of the rules (a later rule's header wins); nil when none.
func (r *Rules) headersFor(host string, port int) []Header {
	if len(r.headers) == 0 {
		return nil
	}
	name, addr, err := normalizeHost(host)
	if err != nil {
		return nil
	}
	var out []Header
	for i := range r.headers {
		if b := &r.headers[i]; b.port == port && b.rule.matchesHost(name, addr) {
			out = append(out, b.set...)
		}
	}
	return out
}

// setHeaders sets hs on h, replacing what the sandbox sent under the same
// names.
func setHeaders(h http.Header, hs []Header) {
	for _, x := range hs {
		h.Del(x.Name)
	}
	for _, x := range hs {
		h.Add(x.Name, x.Value)
	}
}
