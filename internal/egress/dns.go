package egress

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	"golang.org/x/net/dns/dnsmessage"
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

// What the answers hold. Messages are parsed and built with
// golang.org/x/net/dns/dnsmessage, which bounds names, labels and
// compression pointers in what the sandbox sends.
const (
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
	name  string // lower case, dotted, without the root's dot; "" for the root
	qtype dnsmessage.Type
	class dnsmessage.Class
}

// dnsAnswer parses query and returns the response to send (nil when none
// is due: not a query, or too short to answer) and the question, ok when
// the query was well-formed. local reports whether a name is one of the
// sandbox's loopback names, which are answered with the loopback
// addresses; every other name gets NXDOMAIN.
func dnsAnswer(query []byte, local func(string) bool) (resp []byte, q dnsQuestion, ok bool) {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil || h.Response {
		return nil, q, false // too short to answer, or a response: never answer one
	}
	reply := func(rcode dnsmessage.RCode, question *dnsmessage.Question, addr []byte) []byte {
		b := dnsmessage.NewBuilder(make([]byte, 0, 512), dnsmessage.Header{
			ID: h.ID, Response: true, OpCode: h.OpCode, Authoritative: true,
			RecursionDesired: h.RecursionDesired, RecursionAvailable: true, RCode: rcode,
		})
		b.EnableCompression()
		if question != nil {
			_ = b.StartQuestions()
			_ = b.Question(*question)
		}
		if addr != nil {
			_ = b.StartAnswers()
			rh := dnsmessage.ResourceHeader{Name: question.Name, Class: dnsmessage.ClassINET, TTL: dnsTTL}
			if len(addr) == 4 {
				_ = b.AResource(rh, dnsmessage.AResource{A: [4]byte(addr)})
			} else {
				_ = b.AAAAResource(rh, dnsmessage.AAAAResource{AAAA: [16]byte(addr)})
			}
		}
		out, err := b.Finish()
		if err != nil {
			return nil
		}
		return out
	}
	if h.OpCode != 0 {
		return reply(dnsmessage.RCodeNotImplemented, nil, nil), q, false
	}
	qs, err := p.AllQuestions()
	if err != nil || len(qs) != 1 {
		return reply(dnsmessage.RCodeFormatError, nil, nil), q, false
	}
	question := qs[0]
	q = dnsQuestion{name: cleanDNSName(question.Name.String()), qtype: question.Type, class: question.Class}
	if !local(q.name) || q.class != dnsmessage.ClassINET {
		return reply(dnsmessage.RCodeNameError, &question, nil), q, true
	}
	var addr []byte
	switch q.qtype {
	case dnsmessage.TypeA:
		addr = []byte{127, 0, 0, 1}
	case dnsmessage.TypeAAAA:
		addr = netip.IPv6Loopback().AsSlice()
	}
	return reply(dnsmessage.RCodeSuccess, &question, addr), q, true
}

// cleanDNSName returns name (dotted, with the root's dot) in lower case
// without the root's dot, its bytes that no host name has replaced by '?'.
func cleanDNSName(name string) string {
	b := []byte(strings.TrimSuffix(name, "."))
	for i, c := range b {
		switch {
		case c >= 'A' && c <= 'Z':
			b[i] = c + 'a' - 'A'
		case c < 0x21 || c > 0x7e:
			b[i] = '?'
		}
	}
	return string(b)
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
	types []dnsmessage.Type
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
		if lk != nil && now.Sub(lk.at) < dnsPairWindow && !slices.Contains(lk.types, q.qtype) {
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

// recordLookup passes the lookup of name to Record.
func (p *Proxy) recordLookup(name string) {
	e := Event{Time: time.Now(), Sandbox: p.Sandbox, Action: "lookup", Protocol: "dns", Host: cleanText(name, maxEventText)}
	var v Verdict
	e.Reason = "names are resolved by hutch's proxy only: use HTTP_PROXY, HTTPS_PROXY or ALL_PROXY"
	if p.rules().offline {
		e.Reason = OfflineReason
	}
	if n, a, err := normalizeHost(name); err == nil && !a.IsValid() && (p.rules().offline || !p.rules().allowsName(n)) {
		allowDomain(&v, n, netip.Addr{}, 443, false)
	}
	e.Allow, e.AllowField = cleanText(v.Allow, maxEventText), v.AllowField
	if p.Record != nil {
		p.Record(e)
	}
	p.log().Debug("egress: name lookup in the sandbox", "name", e.Host)
}
