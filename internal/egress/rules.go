package egress

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/hutch-sandbox/hutch/internal/secrets"
	"golang.org/x/net/idna"
)

// Rules is a compiled Config; safe for concurrent use.
//
// A destination is refused when its host name is invalid, when a deny rule
// matches it, when no allow rule matches its host and port, when its name
// cannot be resolved, or when none of its addresses passes the address
// guard (see Classify). Resolve tells which.
type Rules struct {
	deny  []rule
	allow []rule // AllowDomains, then AllowCIDRs
	hosts map[string][]netip.Addr
	// lookup resolves names that hosts does not pin; nil means the system
	// resolver.
	lookup func(host string) ([]netip.Addr, error)
	guard  guard
	// secrets are Config.Secrets, and binds the destinations they are
	// bound to.
	secrets []*secrets.Secret
	binds   []binding
	// headers are Config.Headers.
	headers []headerBinding
	// lowerPlaceholders are the secrets' placeholders in lower case, in
	// the order of secrets, for host names (whose case DNS ignores).
	lowerPlaceholders []string
	// scrubber replaces every secret's real value, and its encoded forms
	// (secrets.RedactionPairs), by "[redacted]", for the text of errors
	// that the proxy logs or answers.
	scrubber *secrets.Replacer
	// offline is Config.Offline; operator is Config.OperatorRules, which
	// also says whose flags a refusal names (Verdict.Allow).
	offline, operator bool
}

// binding is one host entry of a secret: the destinations where the
// proxy puts the secret's real value in.
type binding struct {
	rule   rule  // the entry as an allow rule, its port 0 when none was given
	ports  []int // the ports bound: the entry's, else 443 (and 80)
	secret int   // index into Rules.secrets
}

// ruleKind says what a rule matches.
type ruleKind int

const (
	matchName     ruleKind = iota // one name
	matchSuffix                   // names below a domain ("*.example.com")
	matchPrefix                   // IP literals in a prefix (an IP-literal rule is a prefix of one address)
	matchEveryone                 // every destination ("*")
)

// rule is one compiled entry of AllowDomains, DenyDomains or AllowCIDRs.
type rule struct {
	raw    string // as the user wrote it; Verdict.Rule
	kind   ruleKind
	name   string       // matchName: the name; matchSuffix: ".example.com"
	prefix netip.Prefix // matchPrefix
	port   int          // 0: the default ports (80 and 443) in an allow rule, every port in a deny rule; anyPort: every port
	// lift is the class of the non-public range that holds all of prefix
	// (see prefixClass): an allow rule with a lift lets an IP-literal
	// destination of that class through the address guard, and a name
	// whose address it holds on a port it allows. An operator's rule for
	// localhost or *.localhost lifts loopback for those names.
	lift string
}

// defaultPorts are the ports an allow rule without a port allows.
var defaultPorts = []int{80, 443}

// NewRules compiles c. A bad entry is an error naming the entry and the
// problem, e.g. `allow-domain "exa mple.com": invalid character ' '`, or
// `secret GITHUB_TOKEN: host "x y": invalid character ' '` for a host of
// a secret. A secret must have a name, a value, a placeholder of its own
// and at least one host.
// Domain entries and the names of c.Hosts are normalized like the hosts
// given to Resolve (lower case, no trailing dot, internationalized names
// in their ASCII form, IP literals canonical). When c.HostAddrs is nil,
// NewRules reads the addresses of the host's interfaces, except loopback
// addresses, which the guard refuses as loopback already.
func NewRules(c Config) (*Rules, error) {
	r := &Rules{lookup: c.Lookup, offline: c.Offline, operator: c.OperatorRules}
	var errs []error

	hostAddrs := c.HostAddrs
	if hostAddrs == nil && c.Offline {
		// Nothing is dialed: the host's addresses do not matter.
		hostAddrs = []netip.Addr{}
	}
	if hostAddrs == nil {
		var err error
		if hostAddrs, err = interfaceAddrs(); err != nil {
			return nil, fmt.Errorf("reading the host's addresses: %w", err)
		}
	}
	for _, a := range hostAddrs {
		if !a.IsValid() {
			errs = append(errs, errors.New("host address: the zero address is not an address"))
			continue
		}
		r.guard.hostAddrs = append(r.guard.hostAddrs, a.WithZone("").Unmap())
	}
	for _, p := range c.AllowPrivate {
		if !p.IsValid() {
			errs = append(errs, fmt.Errorf("allow-private %q: invalid prefix", p))
			continue
		}
		r.guard.allowPrivate = append(r.guard.allowPrivate, unmapPrefix(p.Masked()))
	}

	for _, s := range c.DenyDomains {
		ru, err := parseDomainRule(s, true)
		if err != nil {
			errs = append(errs, fmt.Errorf("deny-domain %q: %w", s, err))
			continue
		}
		r.deny = append(r.deny, ru)
	}
	for _, s := range c.AllowDomains {
		ru, err := parseDomainRule(s, false)
		if err != nil {
			errs = append(errs, fmt.Errorf("allow-domain %q: %w", s, err))
			continue
		}
		r.allow = append(r.allow, ru)
	}
	for _, s := range c.AllowCIDRs {
		ru, err := parseCIDRRule(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("allow-cidr %q: %w", s, err))
			continue
		}
		r.allow = append(r.allow, ru)
	}
	errs = append(errs, r.addSecrets(c.Secrets)...)
	errs = append(errs, r.addHeaders(c.Headers)...)
	if c.OperatorRules {
		for i := range r.allow {
			switch ru := &r.allow[i]; {
			case ru.kind == matchPrefix:
				ru.lift = prefixClass(ru.prefix, r.guard.hostAddrs)
			case ru.kind == matchName && ru.name == "localhost", ru.kind == matchSuffix && ru.name == ".localhost":
				// Names that are the loopback (RFC 6761): naming them
				// is asking for the loopback, as "127.0.0.1" is.
				ru.lift = classLoopback
			}
		}
	}
	for _, p := range c.PrivateNames {
		if !p.IsValid() {
			errs = append(errs, fmt.Errorf("private-names %q: invalid prefix", p))
			continue
		}
		r.guard.privateNames = append(r.guard.privateNames, unmapPrefix(p.Masked()))
	}

	if len(c.Hosts) > 0 {
		r.hosts = make(map[string][]netip.Addr, len(c.Hosts))
		seen := make(map[string]string, len(c.Hosts))
		for _, k := range slices.Sorted(maps.Keys(c.Hosts)) {
			name, addr, err := normalizeHost(k)
			switch {
			case err != nil:
				errs = append(errs, fmt.Errorf("hosts %q: %w", k, err))
				continue
			case addr.IsValid():
				errs = append(errs, fmt.Errorf("hosts %q: an IP address needs no pinning", k))
				continue
			case seen[name] != "":
				errs = append(errs, fmt.Errorf("hosts %q: %s is pinned twice (also as %q)", k, name, seen[name]))
				continue
			case len(c.Hosts[k]) == 0:
				errs = append(errs, fmt.Errorf("hosts %q: no addresses", k))
				continue
			}
			seen[name] = k
			addrs := make([]netip.Addr, 0, len(c.Hosts[k]))
			for _, a := range c.Hosts[k] {
				if !a.IsValid() {
					errs = append(errs, fmt.Errorf("hosts %q: the zero address is not an address", k))
					continue
				}
				addrs = append(addrs, a.WithZone("").Unmap())
			}
			r.hosts[name] = addrs
		}
	}

	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return r, nil
}

// addSecrets compiles the secrets' host entries into bindings and allow
// rules, and returns the problems found.
func (r *Rules) addSecrets(list []*secrets.Secret) []error {
	var errs []error
	names := make(map[string]bool, len(list))
	placeholders := make(map[string]string, len(list))
	for i, s := range list {
		if s == nil {
			errs = append(errs, fmt.Errorf("secret #%d: nil", i+1))
			continue
		}
		var bad []error
		switch {
		case s.Name == "":
			bad = append(bad, fmt.Errorf("secret #%d: no name", i+1))
		case names[s.Name]:
			bad = append(bad, fmt.Errorf("secret %s: listed twice", s.Name))
		}
		names[s.Name] = true
		switch {
		case s.Placeholder == "":
			bad = append(bad, fmt.Errorf("secret %s: empty placeholder", s.Name))
		case placeholders[s.Placeholder] != "":
			bad = append(bad, fmt.Errorf("secret %s: same placeholder as secret %s", s.Name, placeholders[s.Placeholder]))
		default:
			placeholders[s.Placeholder] = s.Name
		}
		if s.Value.Len() == 0 {
			bad = append(bad, fmt.Errorf("secret %s: empty value", s.Name))
		}
		if len(s.Hosts) == 0 {
			bad = append(bad, fmt.Errorf("secret %s: bound to no host", s.Name))
		}
		var binds []binding
		for _, h := range s.Hosts {
			ru, err := parseDomainRule(h, false)
			switch {
			case err == nil && ru.kind == matchEveryone:
				err = errors.New(`"*" would send the secret anywhere; name its hosts`)
			case err == nil && ru.port == anyPort:
				err = errors.New(`":*" would send the secret to every port; name the port, or none for 443`)
			}
			if err != nil {
				bad = append(bad, fmt.Errorf("secret %s: host %q: %w", s.Name, h, err))
				continue
			}
			b := binding{rule: ru, ports: []int{ru.port}, secret: len(r.secrets)}
			if ru.port == 0 {
				b.ports = []int{443}
				if s.AllowPlainHTTP {
					b.ports = append(b.ports, 80)
				}
			}
			binds = append(binds, b)
		}
		if len(bad) > 0 {
			errs = append(errs, bad...)
			continue
		}
		r.secrets = append(r.secrets, s)
		r.lowerPlaceholders = append(r.lowerPlaceholders, strings.ToLower(s.Placeholder))
		r.binds = append(r.binds, binds...)
		for _, b := range binds {
			r.allow = append(r.allow, b.rule)
		}
	}
	if len(r.secrets) > 0 {
		var pairs [][2][]byte
		for _, s := range r.secrets {
			for _, p := range secrets.RedactionPairs(s.Value.Bytes(), []byte(s.Placeholder)) {
				pairs = append(pairs, [2][]byte{p[0], []byte("[redacted]")})
			}
			// Go's errors quote what they show (%q): the value as
			// strconv.Quote escapes it.
			v := string(s.Value.Bytes())
			if q := strconv.Quote(v); q[1:len(q)-1] != v {
				pairs = append(pairs, [2][]byte{[]byte(q[1 : len(q)-1]), []byte("[redacted]")})
			}
		}
		r.scrubber = secrets.NewReplacer(pairs...)
	}
	return errs
}

// scrub returns s with every secret's real value, and its encoded forms,
// replaced by "[redacted]".
func (r *Rules) scrub(s string) string {
	if r.scrubber == nil {
		return s
	}
	return string(r.scrubber.Bytes([]byte(s)))
}

// placeholderInName returns the first secret whose placeholder a host
// name holds, ignoring case as DNS does; nil when none does.
func (r *Rules) placeholderInName(name string) *secrets.Secret {
	if len(r.secrets) == 0 {
		return nil
	}
	lower := strings.ToLower(name)
	for i, ph := range r.lowerPlaceholders {
		if strings.Contains(lower, ph) {
			return r.secrets[i]
		}
	}
	return nil
}

// bound returns the indexes into r.secrets of the secrets bound to
// host:port, in increasing order; nil when none is, or when host is not a
// valid name or IP literal. host is normalized as Resolve normalizes it.
// Deny rules do not matter here: Resolve decides whether host:port may be
// reached at all.
func (r *Rules) bound(host string, port int) []int {
	if len(r.binds) == 0 {
		return nil
	}
	name, addr, err := normalizeHost(host)
	if err != nil {
		return nil
	}
	var out []int
	for i := range r.binds {
		b := &r.binds[i]
		if slices.Contains(out, b.secret) || !slices.Contains(b.ports, port) || !b.rule.matchesHost(name, addr) {
			continue
		}
		out = append(out, b.secret)
	}
	slices.Sort(out)
	return out
}

// interfaceAddrs returns the addresses of the host's interfaces, except
// loopback addresses.
func interfaceAddrs() ([]netip.Addr, error) {
	ifas, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	addrs := []netip.Addr{} // not nil: the host may have no address but loopback
	for _, ifa := range ifas {
		var ip net.IP
		switch v := ifa.(type) {
		case *net.IPNet:
			ip = v.IP
		case *net.IPAddr:
			ip = v.IP
		default:
			continue
		}
		a, ok := netip.AddrFromSlice(ip)
		if !ok {
			continue
		}
		if a = a.Unmap(); !a.IsLoopback() {
			addrs = append(addrs, a)
		}
	}
	return addrs, nil
}

// parseDomainRule compiles an entry of AllowDomains (deny false) or
// DenyDomains (deny true): "example.com", "*.example.com", "localhost",
// "203.0.113.7", "[2001:db8::1]", "*" (every destination), each with an
// optional ":PORT" or ":*" (every port).
func parseDomainRule(s string, deny bool) (rule, error) {
	ru := rule{raw: s}
	if strings.Contains(s, "/") {
		return ru, errors.New(`give a host name, not a URL or a CIDR (CIDRs go in allow-cidr)`)
	}
	host, port, err := splitHostPort(s)
	if err != nil {
		return ru, err
	}
	if ru.port, err = parsePort(port); err != nil {
		return ru, err
	}
	switch {
	case host == "*":
		// Every destination; an allowed one is still checked by the
		// address guard (no loopback, private, metadata … addresses).
		ru.kind = matchEveryone
		return ru, nil
	case strings.HasPrefix(host, "*."):
		if strings.Contains(host[2:], "*") {
			return ru, errors.New(`"*" is allowed only as a leading "*." (e.g. *.example.com)`)
		}
		name, addr, err := normalizeHost(host[2:])
		if err != nil {
			return ru, err
		}
		if addr.IsValid() {
			return ru, errors.New(`"*." needs a domain name, not an IP address`)
		}
		ru.kind, ru.name = matchSuffix, "."+name
		return ru, nil
	case strings.Contains(host, "*"):
		return ru, errors.New(`"*" is allowed only as a leading "*." (e.g. *.example.com)`)
	}
	name, addr, err := normalizeHost(host)
	if err != nil {
		return ru, err
	}
	if addr.IsValid() {
		ru.kind, ru.prefix = matchPrefix, netip.PrefixFrom(addr, addr.BitLen())
		return ru, nil
	}
	ru.kind, ru.name = matchName, name
	return ru, nil
}

// parseCIDRRule compiles an entry of AllowCIDRs: "10.0.0.0/8",
// "10.0.0.0/8:5432", "2001:db8::/32", "[2001:db8::/32]:443"; a bare
// address stands for the prefix of that address alone.
func parseCIDRRule(s string) (rule, error) {
	ru := rule{raw: s, kind: matchPrefix}
	var cidr, port string
	switch {
	case strings.HasPrefix(s, "["):
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return ru, errors.New(`unclosed "["`)
		}
		cidr, port = s[1:end], s[end+1:]
		if port != "" {
			var ok bool
			if port, ok = strings.CutPrefix(port, ":"); !ok {
				return ru, errors.New(`unexpected text after "]"`)
			}
			if port == "" {
				return ru, errors.New("empty port")
			}
		}
	default:
		// The port follows the prefix length ("10.0.0.0/8:5432"); an
		// entry without a length is an address, and an IPv6 address
		// with a port needs brackets.
		addr, bits, hasBits := strings.Cut(s, "/")
		cidr = s
		if hasBits {
			if b, p, ok := strings.Cut(bits, ":"); ok {
				cidr, port = addr+"/"+b, p
				if port == "" {
					return ru, errors.New("empty port")
				}
			}
		} else if strings.Count(s, ":") == 1 {
			cidr, port, _ = strings.Cut(s, ":")
			if port == "" {
				return ru, errors.New("empty port")
			}
		}
	}
	var err error
	if ru.port, err = parsePort(port); err != nil {
		return ru, err
	}
	var p netip.Prefix
	if strings.Contains(cidr, "/") {
		if p, err = netip.ParsePrefix(cidr); err != nil {
			return ru, fmt.Errorf("invalid CIDR %q", cidr)
		}
	} else {
		a, err := netip.ParseAddr(cidr)
		if err != nil {
			return ru, fmt.Errorf("invalid CIDR %q", cidr)
		}
		p = netip.PrefixFrom(a, a.BitLen())
	}
	if p.Addr().Zone() != "" {
		return ru, fmt.Errorf("invalid CIDR %q: zones are not allowed", cidr)
	}
	if p.Addr().Is4() && strings.HasPrefix(s, "[") {
		return ru, errors.New("brackets are for IPv6 addresses only")
	}
	if m := p.Masked(); m != p {
		return ru, fmt.Errorf("%s has host bits set (did you mean %s?)", p, m)
	}
	ru.prefix = unmapPrefix(p)
	return ru, nil
}

// splitHostPort splits a domain entry into its host and port ("" when
// none). IPv6 literals are bracketed; the brackets stay on the host.
func splitHostPort(s string) (host, port string, err error) {
	if strings.HasPrefix(s, "[") {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return "", "", errors.New(`unclosed "["`)
		}
		host, rest := s[:end+1], s[end+1:]
		if rest == "" {
			return host, "", nil
		}
		port, ok := strings.CutPrefix(rest, ":")
		if !ok {
			return "", "", errors.New(`unexpected text after "]"`)
		}
		if port == "" {
			return "", "", errors.New("empty port")
		}
		return host, port, nil
	}
	switch strings.Count(s, ":") {
	case 0:
		return s, "", nil
	case 1:
		host, port, _ = strings.Cut(s, ":")
		if port == "" {
			return "", "", errors.New("empty port")
		}
		return host, port, nil
	default:
		return "", "", errors.New("write IPv6 addresses in brackets, e.g. [2001:db8::1]:443")
	}
}

// anyPort is the port of a rule that matches every port ("example.com:*").
const anyPort = -1

// parsePort parses the port of a rule: "" is 0 (no port given), "*" is
// anyPort, else a decimal number from 1 to 65535 without sign or leading
// zero.
func parsePort(s string) (int, error) {
	switch s {
	case "":
		return 0, nil
	case "*":
		return anyPort, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 65535 || s[0] < '1' || s[0] > '9' {
		return 0, fmt.Errorf("invalid port %q: want a number from 1 to 65535, or *", s)
	}
	return n, nil
}

// unmapPrefix turns a prefix of v4-mapped addresses into the IPv4 prefix
// they map.
func unmapPrefix(p netip.Prefix) netip.Prefix {
	if p.Addr().Is4In6() && p.Bits() >= 96 {
		return netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
	}
	return p
}

// Limits of a DNS name in its ASCII form.
const (
	maxName  = 253
	maxLabel = 63
)

// normalizeHost normalizes a host name or IP literal, for rules and
// requests alike. It returns the name (an IP literal in canonical form)
// and, for an IP literal, its address, unmapped when v4-mapped. A name
// is lower-cased, loses one trailing dot and is converted to its ASCII
// form (IDNA lookup profile); it must then consist of labels of letters,
// digits, '-' and '_' of at most 63 bytes, at most 253 bytes in all, and
// must not end in a numeric label (which resolvers might take for an
// IPv4 address in a spelling netip does not accept, such as "127.1").
func normalizeHost(s string) (string, netip.Addr, error) {
	if s == "" {
		return "", netip.Addr{}, errors.New("empty host")
	}
	if strings.HasPrefix(s, "[") || strings.HasSuffix(s, "]") {
		if len(s) < 2 || s[0] != '[' || s[len(s)-1] != ']' {
			return "", netip.Addr{}, errors.New("unbalanced brackets")
		}
		inner := s[1 : len(s)-1]
		a, err := netip.ParseAddr(inner)
		switch {
		case err != nil || !a.Is6():
			return "", netip.Addr{}, fmt.Errorf("%q is not an IPv6 address", inner)
		case a.Zone() != "":
			return "", netip.Addr{}, errors.New("invalid character '%'")
		}
		a = a.Unmap()
		return a.String(), a, nil
	}
	name := s
	if !isASCII(name) {
		a, err := idna.Lookup.ToASCII(name)
		if err != nil {
			return "", netip.Addr{}, fmt.Errorf("invalid internationalized name: %s", strings.TrimPrefix(err.Error(), "idna: "))
		}
		name = a
	}
	name = strings.ToLower(name)
	name = strings.TrimSuffix(name, ".")
	if a, err := netip.ParseAddr(name); err == nil {
		if a.Zone() != "" {
			return "", netip.Addr{}, errors.New("invalid character '%'")
		}
		a = a.Unmap()
		return a.String(), a, nil
	}
	if err := checkName(name); err != nil {
		return "", netip.Addr{}, err
	}
	return name, netip.Addr{}, nil
}

// checkName validates a lower-case ASCII name without trailing dot.
func checkName(name string) error {
	if name == "" {
		return errors.New("empty host")
	}
	if len(name) > maxName {
		return fmt.Errorf("name longer than %d bytes", maxName)
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return fmt.Errorf("invalid character %q", c)
		}
	}
	labels := strings.Split(name, ".")
	for _, l := range labels {
		switch {
		case l == "":
			return errors.New("empty label")
		case len(l) > maxLabel:
			return fmt.Errorf("label %q longer than %d bytes", l, maxLabel)
		}
	}
	if numericLabel(labels[len(labels)-1]) {
		return errors.New("ends in a number but is not an IP address")
	}
	return nil
}

// numericLabel reports whether l reads as a number in the notations that
// inet_aton accepts: decimal, octal with a leading 0, hexadecimal with 0x.
func numericLabel(l string) bool {
	if h, ok := strings.CutPrefix(l, "0x"); ok {
		return strings.Trim(h, "0123456789abcdef") == ""
	}
	return strings.Trim(l, "0123456789") == ""
}

// isASCII reports whether s holds only ASCII bytes.
func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// matchesHost reports whether ru matches the normalized host name (addr
// invalid) or IP literal addr, whatever the port.
func (ru *rule) matchesHost(name string, addr netip.Addr) bool {
	switch ru.kind {
	case matchEveryone:
		return true
	case matchName:
		return !addr.IsValid() && name == ru.name
	case matchSuffix:
		return !addr.IsValid() && strings.HasSuffix(name, ru.name)
	case matchPrefix:
		return addr.IsValid() && ru.prefix.Contains(addr)
	}
	return false
}

// allowsPort reports whether an allow rule matching the host allows port.
func (ru *rule) allowsPort(port int) bool {
	switch ru.port {
	case 0:
		return slices.Contains(defaultPorts, port)
	case anyPort:
		return true
	}
	return ru.port == port
}

// deniesPort reports whether a deny rule matching the host denies port.
func (ru *rule) deniesPort(port int) bool {
	return ru.port == 0 || ru.port == anyPort || ru.port == port
}

// denied returns the first deny rule that matches the destination.
func (r *Rules) denied(name string, addr netip.Addr, port int) *rule {
	for i := range r.deny {
		if ru := &r.deny[i]; ru.matchesHost(name, addr) && ru.deniesPort(port) {
			return ru
		}
	}
	return nil
}

// allowed returns the allow rule that lets the destination through: the
// first one that matches its host and port, preferring, for an IP literal
// of a non-public class, one that lifts the guard for that class. When no
// rule allows it, hostRule is the first rule that matches the host alone
// (nil when none does).
func (r *Rules) allowed(name string, addr netip.Addr, port int) (allow, hostRule *rule) {
	class := ""
	if addr.IsValid() {
		class = Classify(addr, r.guard.hostAddrs)
	}
	for i := range r.allow {
		ru := &r.allow[i]
		if !ru.matchesHost(name, addr) {
			continue
		}
		if hostRule == nil {
			hostRule = ru
		}
		if !ru.allowsPort(port) {
			continue
		}
		if allow == nil {
			allow = ru
		}
		if class == "" || ru.lift == class {
			return ru, hostRule
		}
	}
	return allow, hostRule
}

// allowsName reports whether an allow rule matches the normalized name on
// any port.
func (r *Rules) allowsName(name string) bool {
	for i := range r.allow {
		if r.allow[i].matchesHost(name, netip.Addr{}) {
			return true
		}
	}
	return false
}

// literalAllows reports whether an IP-literal allow rule that lifts the
// guard for class holds address a and allows port: a name that resolves
// to a then reaches nothing the rule does not open by address.
func (r *Rules) literalAllows(a netip.Addr, port int, class string) bool {
	for i := range r.allow {
		ru := &r.allow[i]
		if ru.kind == matchPrefix && ru.lift != "" && ru.lift == class && ru.prefix.Contains(a) && ru.allowsPort(port) {
			return true
		}
	}
	return false
}

// isLocalhost reports whether the normalized name is localhost or below
// it, which are the loopback (RFC 6761).
func isLocalhost(name string) bool {
	return name == "localhost" || strings.HasSuffix(name, ".localhost")
}
