package policy

import (
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// Bounds of network.headers.
const (
	MaxHeaderRules     = 64
	MaxHeadersPerRule  = 32
	MaxHeaderValueSize = 8 << 10
)

// refusedHeaders are the headers a header rule may not set: they belong to
// the connection or the message's framing, not to the request.
var refusedHeaders = []string{
	"Host", "Content-Length", "Transfer-Encoding", "Connection", "Keep-Alive",
	"Upgrade", "Te", "Trailer", "Proxy-Connection", "Proxy-Authorization", "Proxy-Authenticate",
	"Http2-Settings", "Expect",
}

// CheckHeader checks one header of a header rule: a valid field name that
// is not about the connection, and a value without line breaks or NUL
// bytes, whose secret references are well formed.
func CheckHeader(name, value string) error {
	switch {
	case !httpguts.ValidHeaderFieldName(name):
		return fmt.Errorf("invalid header name %q", name)
	case slices.Contains(refusedHeaders, http.CanonicalHeaderKey(name)):
		return fmt.Errorf("header %s: belongs to the connection, hutch sets it", http.CanonicalHeaderKey(name))
	case len(value) > MaxHeaderValueSize:
		return fmt.Errorf("header %s: value of %d bytes, more than %d", name, len(value), MaxHeaderValueSize)
	case !httpguts.ValidHeaderFieldValue(value):
		return fmt.Errorf("header %s: the value holds a line break or a control character", name)
	}
	if _, err := ParseHeaderValue(value); err != nil {
		return fmt.Errorf("header %s: %w", name, err)
	}
	return nil
}

// HeaderPart is a piece of a header rule's value: text as it is, or the
// real value of the secret Secret.
type HeaderPart struct {
	Text   string
	Secret string
}

// ParseHeaderValue splits a header rule's value into text and secret
// references ("${secrets.NAME}"; "$$" is a "$"). A "$" followed by
// anything else is an error, so that a value never means something else
// than it seems.
func ParseHeaderValue(v string) ([]HeaderPart, error) {
	var parts []HeaderPart
	var text strings.Builder
	for i := 0; i < len(v); {
		c := v[i]
		if c != '$' {
			text.WriteByte(c)
			i++
			continue
		}
		switch {
		case strings.HasPrefix(v[i:], "$$"):
			text.WriteByte('$')
			i += 2
		case strings.HasPrefix(v[i:], "${secrets."):
			end := strings.IndexByte(v[i:], '}')
			if end < 0 {
				return nil, fmt.Errorf("unclosed %q", v[i:])
			}
			name := v[i+len("${secrets.") : i+end]
			if err := checkEnvName(name, false); err != nil || strings.ContainsAny(name, "${} ") {
				return nil, fmt.Errorf("invalid secret name %q in %q", name, v[i:i+end+1])
			}
			if text.Len() > 0 {
				parts = append(parts, HeaderPart{Text: text.String()})
				text.Reset()
			}
			parts = append(parts, HeaderPart{Secret: name})
			i += end + 1
		default:
			return nil, errors.New(`"$" starts "${secrets.NAME}" or "$$" (a "$"), nothing else`)
		}
	}
	if text.Len() > 0 {
		parts = append(parts, HeaderPart{Text: text.String()})
	}
	return parts, nil
}

// CheckHeaderHost checks the host of a header rule: a host as a secret's
// is, never every host or every port.
func CheckHeaderHost(h string) error {
	if host, _, _ := strings.Cut(h, ":"); host == "*" {
		return errors.New(`"*" would set the headers on every request; name the hosts`)
	}
	if strings.HasSuffix(h, ":"+AnyPort) {
		return errors.New(`":*" would set the headers on every port; name the port, or none for 443`)
	}
	return checkDomain(h, false)
}

// EscapeHeaderText returns s as the text of a header rule's value: every
// "$" doubled.
func EscapeHeaderText(s string) string {
	return strings.ReplaceAll(s, "$", "$$")
}

// checkHeaderRules checks network.headers against the spec's secrets: a
// value may name only a secret of the policy bound to the rule's host.
func checkHeaderRules(s Spec, add func(string, ...any)) {
	if len(s.Network.Headers) > MaxHeaderRules {
		add("network.headers: %d rules, more than %d", len(s.Network.Headers), MaxHeaderRules)
	}
	if len(s.Network.Headers) > 0 && s.Network.Mode != "proxy" {
		add("network.headers: need network mode \"proxy\" (the proxy sets them), got %q", s.Network.Mode)
	}
	for i, hr := range s.Network.Headers {
		at := fmt.Sprintf("network.headers[%d]", i)
		if err := CheckHeaderHost(hr.Host); err != nil {
			add("%s.host: %v", at, err)
		}
		if len(hr.Set) == 0 {
			add("%s.set: no headers", at)
		}
		if len(hr.Set) > MaxHeadersPerRule {
			add("%s.set: %d headers, more than %d", at, len(hr.Set), MaxHeadersPerRule)
		}
		for _, name := range slices.Sorted(maps.Keys(hr.Set)) {
			value := hr.Set[name]
			if err := CheckHeader(name, value); err != nil {
				add("%s.set: %v", at, err)
				continue
			}
			parts, _ := ParseHeaderValue(value)
			for _, p := range parts {
				if p.Secret == "" {
					continue
				}
				j := slices.IndexFunc(s.Secrets, func(sec Secret) bool { return sec.Name == p.Secret })
				switch {
				case j < 0:
					add("%s.set.%s: the policy has no secret %s", at, name, p.Secret)
				case !slices.Contains(s.Secrets[j].Hosts, hr.Host):
					add("%s.set.%s: secret %s is not bound to %s (its hosts: %s)", at, name, p.Secret, hr.Host, strings.Join(s.Secrets[j].Hosts, ", "))
				}
			}
		}
	}
}
