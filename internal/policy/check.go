package policy

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
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
// each optionally followed by ":port". denied_domains also accepts "*"
// (every host) and "*:port".
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
	if port != "" || strings.HasSuffix(s, ":") {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 || port[0] == '0' {
			return fmt.Errorf("invalid domain %q: port must be a number from 1 to 65535", s)
		}
	}
	return nil
}

// checkHostPattern validates the host part of a domain entry.
func checkHostPattern(h string, denied bool) error {
	if h == "localhost" || (h == "*" && denied) {
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
