package egress

import (
	"net/netip"
	"slices"
	"strings"
	"sync"
)

// The address guard refuses every address that is not public unicast:
// the host itself, loopback, private and carrier-grade NAT ranges,
// link-local, cloud metadata endpoints, reserved, documentation and
// multicast space. Classify names the class; Resolve lets an address of a
// class through only where AllowPrivate or an IP-literal rule says so.

// The classes Classify returns.
const (
	classThisHost    = "this host"
	classUnspecified = "unspecified"
	classLoopback    = "loopback"
	classPrivate     = "private"
	classCGNAT       = "cgnat"
	classMetadata    = "metadata"
	classLinkLocal   = "link-local"
	classReserved    = "reserved"
	classMulticast   = "multicast"
	classBroadcast   = "broadcast"
	classInvalid     = "invalid"
)

// addrRange is one non-public range and its class.
type addrRange struct {
	prefix netip.Prefix
	class  string
}

// rangeText is a range as written in the tables below: a CIDR and its class.
type rangeText struct{ cidr, class string }

// The tables below are parsed on first use (see tables): parsing them
// during package initialization would cost every start of hutch, though
// most of its commands never classify an address.

// v4RangeText are the non-public IPv4 ranges, most specific first: the
// first range that holds an address gives its class.
var v4RangeText = []rangeText{
	{"169.254.169.254/32", classMetadata}, // AWS, GCP, Azure, …
	{"169.254.170.2/32", classMetadata},   // ECS task credentials
	{"100.100.100.200/32", classMetadata}, // Alibaba Cloud
	{"168.63.129.16/32", classMetadata},   // Azure's platform endpoint (WireServer)
	{"192.0.0.192/32", classMetadata},     // Oracle Cloud
	{"255.255.255.255/32", classBroadcast},
	{"0.0.0.0/8", classUnspecified},
	{"127.0.0.0/8", classLoopback},
	{"10.0.0.0/8", classPrivate},
	{"172.16.0.0/12", classPrivate},
	{"192.168.0.0/16", classPrivate},
	{"100.64.0.0/10", classCGNAT},
	{"169.254.0.0/16", classLinkLocal},
	{"192.0.0.0/24", classReserved},    // IETF protocol assignments
	{"198.18.0.0/15", classReserved},   // benchmarking
	{"192.0.2.0/24", classReserved},    // TEST-NET-1
	{"198.51.100.0/24", classReserved}, // TEST-NET-2
	{"203.0.113.0/24", classReserved},  // TEST-NET-3
	{"224.0.0.0/4", classMulticast},
	{"240.0.0.0/4", classReserved},
}

// v6RangeText are the non-public IPv6 ranges that carry no IPv4 address,
// most specific first.
var v6RangeText = []rangeText{
	{"fd00:ec2::/32", classMetadata},          // AWS over IPv6 (fd00:ec2::254 and its other endpoints)
	{"fd20:ce::254/128", classMetadata},       // Google Cloud over IPv6
	{"fd00:c1::a9fe:a9fe/128", classMetadata}, // metadata over IPv6 (169.254.169.254 in a ULA)
	{"fd00:42::42/128", classMetadata},        // metadata over IPv6
	{"::/128", classUnspecified},
	{"::1/128", classLoopback},
	{"64:ff9b:1::/48", classPrivate}, // local-use NAT64
	{"fc00::/7", classPrivate},       // unique local
	{"fe80::/10", classLinkLocal},
	{"fec0::/10", classPrivate}, // site-local (deprecated)
	{"ff00::/8", classMulticast},
	{"100::/64", classReserved},      // discard-only
	{"2001:db8::/32", classReserved}, // documentation
	{"2001::/32", classReserved},     // Teredo
}

// embedding is an IPv6 range whose addresses carry an IPv4 address: an
// address in it is classified as the IPv4 address it carries, since that
// is where a translator or tunnel would deliver it.
type embedding struct {
	prefix netip.Prefix
	at     int // the byte offset of the IPv4 address
}

// v4EmbeddingText are the IPv6 ranges that carry an IPv4 address, with the
// byte offset of the IPv4 address in them.
var v4EmbeddingText = []struct {
	cidr string
	at   int
}{
	{"::ffff:0:0/96", 12}, // v4-mapped
	{"::/96", 12},         // v4-compatible (deprecated)
	{"64:ff9b::/96", 12},  // NAT64 well-known prefix
	{"2002::/16", 2},      // 6to4: bits 16–47
}

// rangeTables are the parsed tables: the IPv4 and IPv6 ranges and the
// IPv6 ranges that carry an IPv4 address.
type rangeTables struct {
	v4, v6       []addrRange
	v4Embeddings []embedding
}

var (
	tablesOnce   sync.Once
	parsedTables rangeTables
)

// tables returns the tables above, parsed once.
func tables() *rangeTables {
	tablesOnce.Do(func() {
		parse := func(ts []rangeText) []addrRange {
			rs := make([]addrRange, len(ts))
			for i, t := range ts {
				rs[i] = addrRange{netip.MustParsePrefix(t.cidr), t.class}
			}
			return rs
		}
		parsedTables.v4 = parse(v4RangeText)
		parsedTables.v6 = parse(v6RangeText)
		for _, e := range v4EmbeddingText {
			parsedTables.v4Embeddings = append(parsedTables.v4Embeddings, embedding{netip.MustParsePrefix(e.cidr), e.at})
		}
	})
	return &parsedTables
}

// Classify returns "" for an address the guard lets through by default (a
// public unicast address), else the class that refuses it: "this host"
// (a with its zone stripped and unmapped equals one of hostAddrs, checked
// first), "unspecified", "loopback", "private", "cgnat", "metadata",
// "link-local", "reserved", "multicast", "broadcast", or "invalid" for the
// zero Addr. An IPv6 address that carries an IPv4 address (v4-mapped,
// v4-compatible, NAT64 64:ff9b::/96, 6to4 2002::/16) has the class of the
// IPv4 address it carries.
func Classify(a netip.Addr, hostAddrs []netip.Addr) string {
	if !a.IsValid() {
		return classInvalid
	}
	a = a.WithZone("").Unmap()
	for _, h := range hostAddrs {
		if h.IsValid() && h.WithZone("").Unmap() == a {
			return classThisHost
		}
	}
	if a.Is4() {
		return rangeClass(tables().v4, a)
	}
	// :: and ::1 lie in the v4-compatible range but are classes of
	// their own.
	if a != netip.IPv6Unspecified() && a != netip.IPv6Loopback() {
		if v4, ok := embedded(a); ok {
			return Classify(v4, hostAddrs)
		}
	}
	return rangeClass(tables().v6, a)
}

// rangeClass returns the class of the first range of rs that holds a, or
// "" when none does.
func rangeClass(rs []addrRange, a netip.Addr) string {
	for _, r := range rs {
		if r.prefix.Contains(a) {
			return r.class
		}
	}
	return ""
}

// embedded returns the IPv4 address that the IPv6 address a carries, if a
// lies in one of the ranges of v4EmbeddingText.
func embedded(a netip.Addr) (netip.Addr, bool) {
	for _, e := range tables().v4Embeddings {
		if e.prefix.Contains(a) {
			b := a.As16()
			return netip.AddrFrom4([4]byte(b[e.at : e.at+4])), true
		}
	}
	return netip.Addr{}, false
}

// prefixClass returns the class of the non-public range that holds all of
// p (masked and unmapped), or "" when p is public or spans more than one
// range or class. A rule whose prefix has a class lifts the guard for
// addresses of that class only: "10.0.0.0/8" lets private 10.x addresses
// through but not a host address among them; "169.254.0.0/16" lets
// link-local addresses through but not 169.254.169.254 (metadata), which
// only a rule for that very address opens.
func prefixClass(p netip.Prefix, hostAddrs []netip.Addr) string {
	if !p.IsValid() {
		return ""
	}
	if p.IsSingleIP() {
		return Classify(p.Addr(), hostAddrs)
	}
	a := p.Addr()
	if a.Is4() {
		return containingClass(tables().v4, p)
	}
	for _, e := range tables().v4Embeddings {
		if e.prefix.Bits() <= p.Bits() && e.prefix.Contains(a) {
			v4, _ := embedded(a)
			return prefixClass(netip.PrefixFrom(v4, min(p.Bits()-e.prefix.Bits(), 32)).Masked(), hostAddrs)
		}
	}
	return containingClass(tables().v6, p)
}

// containingClass returns the class of the first range of rs that holds
// the whole of p, or "". A range of a single address cannot hold a wider
// p, so the specific classes (metadata, broadcast) never stand for a
// range that merely contains them.
func containingClass(rs []addrRange, p netip.Prefix) string {
	for _, r := range rs {
		if r.prefix.Bits() <= p.Bits() && r.prefix.Contains(p.Addr()) {
			return r.class
		}
	}
	return ""
}

// guard decides which addresses of a destination pass the address guard.
type guard struct {
	hostAddrs    []netip.Addr
	allowPrivate []netip.Prefix
	// privateNames are Config.PrivateNames: ranges where a name's private,
	// CGNAT or reserved addresses pass.
	privateNames []netip.Prefix
}

// nameClasses are the classes of addresses that Config.PrivateNames can
// let a name resolve to; loopback, link-local, metadata, multicast and this
// host's addresses it never opens.
var nameClasses = []string{classPrivate, classCGNAT, classReserved}

// passesName reports whether a, an address a name resolved to, of class,
// lies in one of the privateNames ranges that may hold it.
func (g *guard) passesName(a netip.Addr, class string) bool {
	if !slices.Contains(nameClasses, class) {
		return false
	}
	if v4, ok := embedded(a); ok && a.Is6() {
		a = v4 // a NAT64 or 6to4 spelling of an IPv4 address
	}
	return slices.ContainsFunc(g.privateNames, func(p netip.Prefix) bool { return p.Contains(a) })
}

// passes reports whether a, normalized, passes: it is public, lies in one
// of AllowPrivate, or has the class lift (the class of the IP-literal rule
// that allowed the destination; "" lifts nothing). It returns the class
// that refused a otherwise.
func (g *guard) passes(a netip.Addr, lift string) (bool, string) {
	class := Classify(a, g.hostAddrs)
	if class == "" || (lift != "" && class == lift) {
		return true, ""
	}
	if slices.ContainsFunc(g.allowPrivate, func(p netip.Prefix) bool { return p.Contains(a) }) {
		return true, ""
	}
	return false, class
}

// HostAddrs returns the addresses of this host's interfaces, loopback
// apart (Classify knows loopback): the "this host" addresses of Classify
// and SpecialRule.
func HostAddrs() ([]netip.Addr, error) {
	return interfaceAddrs()
}

// SpecialRule returns the class of the addresses that an allow rule asks
// for when the address guard refuses every one of them — "loopback",
// "private", "link-local", "metadata", "this host", … ("non-public" for
// a range of several such classes) — and "" when the rule names a host
// name, "*", or a range that holds public addresses (the guard still
// refuses the others at connect time). entry is in the syntax of
// AllowDomains and of a secret's hosts (cidr false) or of AllowCIDRs (cidr
// true). The names of the loopback interface, "localhost" and its
// subdomains (RFC 6761), count as loopback. A rule that lies wholly in one
// of open (ranges the operator opened, AllowPrivate) asks for nothing
// special. Only the operator may write a rule with a class
// (Config.OperatorRules): front ends refuse a tenant's. An entry that does
// not parse is an error, as NewRules words it.
func SpecialRule(entry string, cidr bool, hostAddrs []netip.Addr, open []netip.Prefix) (string, error) {
	var ru rule
	var err error
	if cidr {
		ru, err = parseCIDRRule(entry)
	} else {
		ru, err = parseDomainRule(entry, false)
	}
	if err != nil {
		return "", err
	}
	var p netip.Prefix
	switch ru.kind {
	case matchPrefix:
		p = ru.prefix
	case matchName, matchSuffix:
		name := strings.TrimPrefix(ru.name, ".")
		if name != "localhost" && !strings.HasSuffix(name, ".localhost") {
			return "", nil
		}
		p = netip.MustParsePrefix("127.0.0.1/32")
	default:
		return "", nil
	}
	if slices.ContainsFunc(open, func(o netip.Prefix) bool {
		o = unmapPrefix(o.Masked())
		return o.Addr().Is4() == p.Addr().Is4() && o.Bits() <= p.Bits() && o.Contains(p.Addr())
	}) {
		return "", nil
	}
	if class := prefixClass(p, hostAddrs); class != "" {
		return class, nil
	}
	if onlySpecial(p, hostAddrs) {
		return "non-public", nil
	}
	return "", nil
}

// onlySpecial reports whether the guard refuses every address of p: p
// lies in one non-public class, or each of its halves holds only
// non-public addresses. A half that overlaps no non-public range is
// public, which ends the search.
func onlySpecial(p netip.Prefix, hostAddrs []netip.Addr) bool {
	if prefixClass(p, hostAddrs) != "" {
		return true
	}
	if p.Bits() >= p.Addr().BitLen() || !mayHoldSpecial(p, hostAddrs) {
		return false
	}
	lo := netip.PrefixFrom(p.Addr(), p.Bits()+1)
	b := p.Addr().AsSlice()
	bit := p.Bits()
	b[bit/8] |= 0x80 >> (bit % 8)
	a, _ := netip.AddrFromSlice(b)
	hi := netip.PrefixFrom(a, p.Bits()+1)
	return onlySpecial(lo, hostAddrs) && onlySpecial(hi, hostAddrs)
}

// mayHoldSpecial reports whether p overlaps a non-public range, a host
// address or (IPv6) a range that carries IPv4 addresses.
func mayHoldSpecial(p netip.Prefix, hostAddrs []netip.Addr) bool {
	if p.Addr().Is6() {
		for _, e := range tables().v4Embeddings {
			if e.prefix.Bits() <= p.Bits() && e.prefix.Contains(p.Addr()) {
				v4, _ := embedded(p.Addr())
				return mayHoldSpecial(netip.PrefixFrom(v4, min(p.Bits()-e.prefix.Bits(), 32)).Masked(), hostAddrs)
			}
			if e.prefix.Overlaps(p) {
				return true
			}
		}
	}
	rs := tables().v6
	if p.Addr().Is4() {
		rs = tables().v4
	}
	for _, r := range rs {
		if r.prefix.Overlaps(p) {
			return true
		}
	}
	for _, h := range hostAddrs {
		if p.Contains(h.WithZone("").Unmap()) {
			return true
		}
	}
	return false
}
