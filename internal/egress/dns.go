package egress

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"
)

// The sandbox resolves no name itself: the proxy does, for the clients
// that use it. But programs look names up before they connect, and a
// lookup that gets no answer at all — no route to the host's nameserver —
// fails as "temporary failure in name resolution" (glibc's EAI_AGAIN),
// which clients retry: npm for over a minute. So hutch answers the
// sandbox's lookups itself, on a UDP socket at 127.0.0.1:53 of the
// sandbox's own loopback that its resolv.conf names, and every answer is
// final: an authoritative "no such name" (NXDOMAIN; glibc EAI_NONAME,
// Node's ENOTFOUND, Go's "no such host", curl's "could not resolve
// host"). REFUSED or SERVFAIL would be read as "try again". The names of
// the sandbox's own loopback (localhost, *.localhost and its hostname) get
// its loopback addresses, as a host's resolver gives them. Every other
// name is recorded: hutch says at exit which names the command looked up.

// DNS message constants (RFC 1035).
const (
	dnsHeaderLen = 12
	dnsFlagQR    = 1 << 15
	dnsFlagAA    = 1 << 10
	dnsFlagTC    = 1 << 9
	dnsFlagRD    = 1 << 8
	dnsFlagRA    = 1 << 7
	dnsOpcode    = 0xf << 11

	dnsRcodeOK       = 0
	dnsRcodeFormErr  = 1
	dnsRcodeNXDomain = 3
	dnsRcodeNotImp   = 4

	dnsTypeA    = 1
	dnsTypeAAAA = 28
	dnsClassIN  = 1

	// maxDNSName is the longest name in wire format.
	maxDNSName = 255
	// dnsTTL is the time to live of the loopback answers.
	dnsTTL = 60
)

// Bounds of what the sandbox's lookups cost hutch.
const (
	// maxDNSPacket is the largest query read; a longer one is cut and
	// answered as malformed.
	maxDNSPacket = 1500
	// maxDNSRecorded bounds the lookups recorded per proxy; later ones
	// are answered but not recorded.
	maxDNSRecorded = 10000
	// maxDNSNames bounds the names remembered to pair the A and AAAA
	// queries of one lookup.
	maxDNSNames = 1024
	// dnsPairWindow is how soon after a query of a name one of another
	// type counts as the same lookup.
	dnsPairWindow = time.Second
)

// dnsQuestion is the one question of a query.
type dnsQuestion struct {
	name         string // lower case, dotted, without the root's dot; "" for the root
	qtype, class uint16
}

// dnsAnswer parses query and returns the response to send (nil when none
// is due: not a query, or too short to answer) and the question, ok when
// the query was well-formed. local reports whether a name is one of the
// sandbox's loopback names, which are answered with the loopback
// addresses; every other name gets NXDOMAIN.
func dnsAnswer(query []byte, local func(string) bool) (resp []byte, q dnsQuestion, ok bool) {
	if len(query) < dnsHeaderLen {
		return nil, q, false
	}
	flags := binary.BigEndian.Uint16(query[2:])
	if flags&dnsFlagQR != 0 {
		return nil, q, false // a response: never answer one
	}
	hdr := func(rcode uint16, an uint16) []byte {
		h := make([]byte, dnsHeaderLen, 512)
		copy(h, query[:2])
		binary.BigEndian.PutUint16(h[2:], dnsFlagQR|flags&(dnsOpcode|dnsFlagRD)|dnsFlagAA|dnsFlagRA|rcode)
		binary.BigEndian.PutUint16(h[6:], an)
		return h
	}
	if flags&dnsOpcode != 0 {
		return hdr(dnsRcodeNotImp, 0), q, false
	}
	if binary.BigEndian.Uint16(query[4:]) != 1 {
		return hdr(dnsRcodeFormErr, 0), q, false
	}
	// The question: labels up to the root, then type and class. Names in
	// a question are never compressed.
	var name strings.Builder
	i := dnsHeaderLen
	for {
		if i >= len(query) {
			return hdr(dnsRcodeFormErr, 0), q, false
		}
		n := int(query[i])
		if n == 0 {
			i++
			break
		}
		if n&0xc0 != 0 || i+1+n > len(query) || i+1+n-dnsHeaderLen > maxDNSName-1 {
			return hdr(dnsRcodeFormErr, 0), q, false
		}
		if name.Len() > 0 {
			name.WriteByte('.')
		}
		for _, c := range query[i+1 : i+1+n] {
			switch {
			case c >= 'A' && c <= 'Z':
				c += 'a' - 'A'
			case c == '.' || c < 0x21 || c > 0x7e:
				c = '?' // not a name a host could have
			}
			name.WriteByte(c)
		}
		i += 1 + n
	}
	if i+4 > len(query) {
		return hdr(dnsRcodeFormErr, 0), q, false
	}
	q = dnsQuestion{name: name.String(), qtype: binary.BigEndian.Uint16(query[i:]), class: binary.BigEndian.Uint16(query[i+2:])}
	question := query[dnsHeaderLen : i+4]
	if !local(q.name) || q.class != dnsClassIN {
		resp = append(hdr(dnsRcodeNXDomain, 0), question...)
		binary.BigEndian.PutUint16(resp[4:], 1)
		return resp, q, true
	}
	var addr []byte
	switch q.qtype {
	case dnsTypeA:
		addr = []byte{127, 0, 0, 1}
	case dnsTypeAAAA:
		addr = netip.IPv6Loopback().AsSlice()
	}
	an := uint16(0)
	if addr != nil {
		an = 1
	}
	resp = append(hdr(dnsRcodeOK, an), question...)
	binary.BigEndian.PutUint16(resp[4:], 1)
	if addr != nil {
		// The answer's name points at the question's (offset 12).
		resp = append(resp, 0xc0, dnsHeaderLen)
		resp = binary.BigEndian.AppendUint16(resp, q.qtype)
		resp = binary.BigEndian.AppendUint16(resp, dnsClassIN)
		resp = binary.BigEndian.AppendUint32(resp, dnsTTL)
		resp = binary.BigEndian.AppendUint16(resp, uint16(len(addr)))
		resp = append(resp, addr...)
	}
	return resp, q, true
}

// isLoopbackName reports whether name (lower case, no trailing dot) is
// localhost, a name below it (RFC 6761), or host.
func isLoopbackName(name, host string) bool {
	return name == "localhost" || strings.HasSuffix(name, ".localhost") || (host != "" && name == host)
}

// isReverseName reports whether name asks for the name of an address
// (PTR lookups), which says nothing about where the sandbox meant to go.
func isReverseName(name string) bool {
	return strings.HasSuffix(name, ".in-addr.arpa") || strings.HasSuffix(name, ".ip6.arpa") ||
		name == "in-addr.arpa" || name == "ip6.arpa"
}

// dnsLookup is the last lookup of one name: the A and AAAA queries of
// one getaddrinfo (from one socket, or two at once as Go's resolver asks)
// count as one lookup; the same type asked again is another.
type dnsLookup struct {
	at    time.Time
	types []uint16
}

// ServeDNS answers the sandbox's name lookups on c, the UDP socket at
// 127.0.0.1:53 of its loopback that its resolv.conf names, until Close;
// it closes c. Every name gets an authoritative "no such name" (NXDOMAIN),
// which resolvers take as final, except localhost, its subdomains and
// Proxy.Hostname, which get the loopback addresses. Each lookup of another
// name (the A and AAAA queries of one lookup count once; reverse lookups
// are not counted) is passed to Record as an Event with Action
// "lookup", Protocol "dns", the name as Host, and what would let the
// sandbox reach it as Allow. It returns nil after Close, else the error
// that ended reading.
func (p *Proxy) ServeDNS(c net.PacketConn) error {
	p.mu.Lock()
	p.initLocked()
	if p.closed {
		p.mu.Unlock()
		c.Close()
		return nil
	}
	if p.packets == nil {
		p.packets = make(map[net.PacketConn]struct{})
	}
	p.packets[c] = struct{}{}
	p.wg.Add(1)
	p.mu.Unlock()
	defer p.wg.Done()
	defer func() {
		p.mu.Lock()
		delete(p.packets, c)
		p.mu.Unlock()
		c.Close()
	}()

	host := strings.ToLower(p.Hostname)
	local := func(name string) bool { return isLoopbackName(name, host) }
	lookups := make(map[string]*dnsLookup)
	recorded := 0
	buf := make([]byte, maxDNSPacket)
	for {
		n, from, err := c.ReadFrom(buf)
		if err != nil {
			if p.isClosed() {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return fmt.Errorf("egress: dns: %w", err)
		}
		resp, q, ok := dnsAnswer(buf[:n], local)
		if resp != nil {
			_, _ = c.WriteTo(resp, from)
		}
		if !ok || local(q.name) || isReverseName(q.name) || q.name == "" || recorded >= maxDNSRecorded {
			continue
		}
		// One lookup, or another query of one?
		now := time.Now()
		lk := lookups[q.name]
		if lk != nil && now.Sub(lk.at) < dnsPairWindow && !containsType(lk.types, q.qtype) {
			lk.types = append(lk.types, q.qtype)
			continue
		}
		if lk == nil {
			if len(lookups) >= maxDNSNames {
				clear(lookups)
			}
			lk = &dnsLookup{}
			lookups[q.name] = lk
		}
		lk.at, lk.types = now, append(lk.types[:0], q.qtype)
		recorded++
		p.recordLookup(q.name)
	}
}

// containsType reports whether ts holds t.
func containsType(ts []uint16, t uint16) bool {
	for _, x := range ts {
		if x == t {
			return true
		}
	}
	return false
}

// recordLookup passes the lookup of name to Record.
func (p *Proxy) recordLookup(name string) {
	e := Event{Time: time.Now(), Sandbox: p.Sandbox, Action: "lookup", Protocol: "dns", Host: cleanText(name, maxEventText)}
	var v Verdict
	e.Reason = "names are resolved by hutch's proxy only: use HTTP_PROXY, HTTPS_PROXY or ALL_PROXY"
	if p.Rules.offline {
		e.Reason = OfflineReason
	}
	if n, a, err := normalizeHost(name); err == nil && !a.IsValid() && (p.Rules.offline || !p.Rules.allowsName(n)) {
		allowDomain(&v, n, netip.Addr{}, 443, false)
	}
	e.Allow, e.AllowField = cleanText(v.Allow, maxEventText), v.AllowField
	if p.Record != nil {
		p.Record(e)
	}
	p.log().Debug("egress: name lookup in the sandbox", "name", e.Host)
}
