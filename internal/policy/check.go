package policy

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// checkPath validates a path as written in a policy file, before Normalize
// expands "~" and makes it absolute. Paths are literal: hutch has no
// wildcards, so a pattern would silently match nothing.
func checkPath(p string) error {
	switch {
	case p == "":
		return errors.New("must not be empty")
	case strings.ContainsRune(p, 0):
		return errors.New("must not contain a NUL byte")
	case strings.HasPrefix(p, "~") && p != "~" && !strings.HasPrefix(p, "~/"):
		return fmt.Errorf("cannot expand %q: only \"~\" and \"~/\" are expanded, not \"~user\"", p)
	case strings.ContainsAny(p, "*?"):
		return fmt.Errorf("%q is a pattern; hutch takes literal paths only", p)
	}
	return nil
}

// checkDomain validates an entry of allowed_domains (denied false) or
// denied_domains (denied true): a host name with at least one dot,
// "localhost", "*.example.com", an IPv4 address or a bracketed IPv6 address,
// each optionally followed by ":port" or ":*" (every port). denied_domains
// also accepts "*" (every host) and "*:port".
func checkDomain(s string, denied bool) error {
	if strings.Contains(s, "/") {
		return fmt.Errorf("invalid domain %q: give a host name, not a URL", s)
	}
	host, port := s, ""
	if strings.HasPrefix(s, "[") {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return fmt.Errorf("invalid domain %q: unclosed \"[\"", s)
		}
		host, port = s[1:end], s[end+1:]
		if port != "" && !strings.HasPrefix(port, ":") {
			return fmt.Errorf("invalid domain %q: unexpected text after \"]\"", s)
		}
		port = strings.TrimPrefix(port, ":")
		if a, err := netip.ParseAddr(host); err != nil || !a.Is6() {
			return fmt.Errorf("invalid domain %q: %q is not an IPv6 address", s, host)
		}
	} else {
		switch strings.Count(s, ":") {
		case 0:
		case 1:
			host, port, _ = strings.Cut(s, ":")
		default:
			return fmt.Errorf("invalid domain %q: write IPv6 addresses in brackets, e.g. [::1]:443", s)
		}
		if err := checkHostPattern(host, denied); err != nil {
			return fmt.Errorf("invalid domain %q: %v", s, err)
		}
	}
	if port == AnyPort {
		return nil
	}
	if port != "" || strings.HasSuffix(s, ":") {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 || port[0] == '0' {
			return fmt.Errorf("invalid domain %q: port must be a number from 1 to 65535, or * for every port", s)
		}
	}
	return nil
}

// AnyPort is the port of a domain entry that matches every port
// ("example.com:*"); an entry without a port matches 80 and 443 only.
const AnyPort = "*"

// checkHostPattern validates the host part of a domain entry.
func checkHostPattern(h string, denied bool) error {
	if h == "localhost" || h == "*" {
		return nil
	}
	if _, err := netip.ParseAddr(h); err == nil {
		return nil
	}
	rest := strings.TrimPrefix(h, "*.")
	if strings.Contains(rest, "*") {
		return errors.New(`wildcards are allowed only as a leading "*." (e.g. *.example.com)`)
	}
	labels := strings.Split(rest, ".")
	if last := labels[len(labels)-1]; last != "" && strings.Trim(strings.ToLower(last), "0123456789abcdefx") == "" && (strings.Trim(last, "0123456789") == "" || strings.HasPrefix(strings.ToLower(last), "0x")) {
		return errors.New("a numeric last label reads as an IP address; write addresses in dotted form (e.g. 127.0.0.1)")
	}
	if len(labels) < 2 {
		if rest != h {
			return errors.New("too broad: a wildcard needs at least two labels after \"*.\"")
		}
		return errors.New("a host name needs at least one dot (or use localhost)")
	}
	for _, l := range labels {
		if l == "" || len(l) > 63 {
			return errors.New("empty or overlong label")
		}
		for _, c := range l {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return fmt.Errorf("invalid character %q", c)
			}
		}
	}
	return nil
}

// checkEnvName validates a variable name. With pattern, a trailing "*"
// makes it a prefix (e.g. "MYAPP_*"); the prefix must not be empty.
func checkEnvName(name string, pattern bool) error {
	switch {
	case name == "":
		return errors.New("empty variable name")
	case strings.ContainsRune(name, '='):
		return fmt.Errorf("invalid variable name %q: names cannot contain \"=\"", name)
	case strings.ContainsRune(name, 0):
		return fmt.Errorf("invalid variable name %q: names cannot contain a NUL byte", name)
	case !pattern && strings.Contains(name, "*"):
		return fmt.Errorf("invalid variable name %q: \"*\" is not allowed here", name)
	case pattern && name == "*":
		return errors.New(`"*" would pass every variable; name them, or a prefix like "MYAPP_*"`)
	case pattern && strings.Contains(strings.TrimSuffix(name, "*"), "*"):
		return fmt.Errorf("invalid variable name %q: \"*\" is allowed only at the end", name)
	}
	return nil
}

// checkCIDR validates an address range such as "10.0.0.0/8" or "::1/128".
func checkCIDR(s string) error {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return fmt.Errorf("invalid CIDR %q: want an address range like 10.0.0.0/8 or fd00::/8", s)
	}
	if p != p.Masked() {
		return fmt.Errorf("invalid CIDR %q: %s has bits set after the prefix (did you mean %s?)", s, p, p.Masked())
	}
	return nil
}

// SplitCIDRPort splits an allowed CIDR entry into its range and port (0
// when it has none): "10.0.0.0/8", "10.0.0.0/8:5432", "[fd00::/8]:443".
func SplitCIDRPort(s string) (netip.Prefix, int, error) {
	cidr, port := s, ""
	if strings.HasPrefix(s, "[") {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return netip.Prefix{}, 0, fmt.Errorf("invalid CIDR %q: unclosed \"[\"", s)
		}
		cidr, port = s[1:end], s[end+1:]
		if port != "" && !strings.HasPrefix(port, ":") {
			return netip.Prefix{}, 0, fmt.Errorf("invalid CIDR %q: unexpected text after \"]\"", s)
		}
		port = strings.TrimPrefix(port, ":")
		if port == "" && strings.HasSuffix(s, ":") {
			port = "x"
		}
	} else if strings.Count(s, ":") == 1 {
		cidr, port, _ = strings.Cut(s, ":")
		if port == "" {
			port = "x"
		}
	}
	p, err := netip.ParsePrefix(cidr)
	if a, aerr := netip.ParseAddr(cidr); err != nil && aerr == nil && a.Zone() == "" {
		p, err = a.Prefix(a.BitLen()) // one address
	}
	if err != nil {
		return netip.Prefix{}, 0, fmt.Errorf("invalid CIDR %q: want an address range like 10.0.0.0/8, optionally with :PORT (IPv6 in brackets: [fd00::/8]:443)", s)
	}
	if p != p.Masked() {
		return netip.Prefix{}, 0, fmt.Errorf("invalid CIDR %q: %s has bits set after the prefix (did you mean %s?)", s, p, p.Masked())
	}
	n := 0
	if port != "" {
		if n, err = strconv.Atoi(port); err != nil || n < 1 || n > 65535 || port[0] == '0' {
			return netip.Prefix{}, 0, fmt.Errorf("invalid CIDR %q: port must be a number from 1 to 65535", s)
		}
	}
	return p, n, nil
}

func checkCIDRPort(s string) error {
	_, _, err := SplitCIDRPort(s)
	return err
}

// SplitHostPin splits a "NAME:ADDRESS" pin of network.hosts.
func SplitHostPin(s string) (string, netip.Addr, error) {
	name, addr, ok := strings.Cut(s, ":")
	if !ok {
		return "", netip.Addr{}, fmt.Errorf("invalid host pin %q: want NAME:ADDRESS, e.g. api.example.com:203.0.113.7", s)
	}
	if err := checkHostPattern(name, false); err != nil || strings.Contains(name, "*") {
		if err == nil {
			err = errors.New("wildcards cannot be pinned")
		}
		return "", netip.Addr{}, fmt.Errorf("invalid host pin %q: %v", s, err)
	}
	a, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(addr, "["), "]"))
	if err != nil {
		return "", netip.Addr{}, fmt.Errorf("invalid host pin %q: %q is not an IP address", s, addr)
	}
	return strings.ToLower(name), a, nil
}

func checkHostPin(s string) error {
	_, _, err := SplitHostPin(s)
	return err
}

// checkSecretSource validates a secret's "from": env:NAME or file:PATH.
func checkSecretSource(from string) error {
	if from == SecretFromRequest {
		return nil
	}
	if kind, rest, _ := strings.Cut(from, ":"); rest != "" {
		switch kind {
		case "env":
			return checkEnvName(rest, false)
		case "file":
			return checkPath(rest)
		}
	}
	return fmt.Errorf("invalid source %q: want env:NAME, file:PATH or request", from)
}

// Printable reports whether s is valid UTF-8 without control characters
// (names and labels a person reads).
func Printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, c := range s {
		if unicode.IsControl(c) {
			return false
		}
	}
	return true
}

// checkSecretHost validates a host a secret is bound to: a domain entry,
// but never "*", which would send the secret anywhere.
func checkSecretHost(h string) error {
	if host, _, _ := strings.Cut(h, ":"); host == "*" {
		return errors.New(`"*" would send the secret anywhere; name its hosts`)
	}
	if strings.HasSuffix(h, ":"+AnyPort) {
		return errors.New(`":*" would send the secret to every port; name the port, or none for 443`)
	}
	return checkDomain(h, false)
}

// SecretFromRequest is the source of a secret whose real value comes with
// the request that creates the sandbox (hutch serve).
const SecretFromRequest = "request"

// checkPlaceholderPrefix validates a placeholder prefix: printable ASCII
// without spaces, at most 64 bytes.
func checkPlaceholderPrefix(p string) error {
	if len(p) > 64 {
		return fmt.Errorf("placeholder prefix %q is longer than 64 bytes", p)
	}
	for i := 0; i < len(p); i++ {
		if p[i] < 0x21 || p[i] > 0x7e {
			return fmt.Errorf("placeholder prefix %q: only printable ASCII without spaces", p)
		}
	}
	return nil
}
