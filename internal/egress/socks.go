package egress

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"time"
)

// SOCKS5 (RFC 1928) and SOCKS4 constants.
const (
	socks4Version = 0x04
	socks5Version = 0x05

	socksNoAuth       = 0x00
	socksNoAcceptable = 0xff

	socksConnect      = 0x01
	socksBind         = 0x02
	socksUDPAssociate = 0x03

	atypIPv4   = 0x01
	atypDomain = 0x03
	atypIPv6   = 0x04

	repSucceeded        = 0x00
	repGeneralFailure   = 0x01
	repNotAllowed       = 0x02
	repNetUnreachable   = 0x03
	repHostUnreachable  = 0x04
	repConnRefused      = 0x05
	repCmdNotSupported  = 0x07
	repAddrNotSupported = 0x08

	socks4Rejected = 0x5b
)

// errAddrType is a SOCKS5 request's unknown address type.
var errAddrType = errors.New("unknown SOCKS5 address type")

// serveSOCKSConn serves one SOCKS connection: a SOCKS5 CONNECT, or the
// refusal of anything else.
func (p *Proxy) serveSOCKSConn(c net.Conn) {
	_ = c.SetDeadline(time.Now().Add(handshakeTimeout))
	var ver [1]byte
	if _, err := io.ReadFull(c, ver[:]); err != nil {
		return
	}
	switch ver[0] {
	case socks4Version:
		p.socks4(c)
		return
	case socks5Version:
	default:
		p.log().Debug("egress: not a SOCKS request", "first_byte", ver[0])
		return
	}
	if !p.socks5Greeting(c) {
		return
	}
	p.socks5Request(c)
}

// socks5Greeting reads the client's authentication methods and chooses
// "no authentication", which the client must offer. It reports whether
// the handshake goes on.
func (p *Proxy) socks5Greeting(c net.Conn) bool {
	var n [1]byte
	if _, err := io.ReadFull(c, n[:]); err != nil {
		return false
	}
	methods := make([]byte, n[0])
	if _, err := io.ReadFull(c, methods); err != nil {
		return false
	}
	if bytes.IndexByte(methods, socksNoAuth) < 0 {
		p.log().Debug("egress: SOCKS5 client offers no method without authentication", "methods", methods)
		if _, err := c.Write([]byte{socks5Version, socksNoAcceptable}); err == nil {
			lingerClose(c)
		}
		return false
	}
	_, err := c.Write([]byte{socks5Version, socksNoAuth})
	return err == nil
}

// socks5Request serves the request that follows the greeting.
func (p *Proxy) socks5Request(c net.Conn) {
	var hdr [4]byte // VER CMD RSV ATYP
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		return
	}
	if hdr[0] != socks5Version {
		p.log().Debug("egress: bad SOCKS5 request version", "version", hdr[0])
		return
	}
	host, err := readSOCKS5Addr(c, hdr[3])
	if err != nil {
		if errors.Is(err, errAddrType) {
			p.socks5Fail(c, repAddrNotSupported)
		}
		return
	}
	var pb [2]byte
	if _, err := io.ReadFull(c, pb[:]); err != nil {
		return
	}
	port := int(binary.BigEndian.Uint16(pb[:]))

	switch hdr[1] {
	case socksConnect:
	case socksBind:
		p.block("socks5", host, port, nil, "SOCKS5 BIND is not supported")
		p.socks5Fail(c, repCmdNotSupported)
		return
	case socksUDPAssociate:
		p.block("socks5", host, port, nil, "SOCKS5 UDP ASSOCIATE is not supported")
		p.socks5Fail(c, repCmdNotSupported)
		return
	default:
		p.block("socks5", host, port, nil, fmt.Sprintf("SOCKS5 command %#02x is not supported", hdr[1]))
		p.socks5Fail(c, repCmdNotSupported)
		return
	}

	if s := p.rules().placeholderInName(host); s != nil {
		name := strings.ToLower(host)
		p.blockSecret("socks5", name, port, forbidden{secret: s})
		p.socks5Fail(c, repNotAllowed)
		return
	}
	br := bufio.NewReader(c)
	v := p.check(c, br, host, port)
	// A question's wait (Unknown) does not count against the handshake.
	_ = c.SetDeadline(time.Now().Add(handshakeTimeout))
	if !v.Allowed {
		p.block("socks5", host, port, &v, "")
		p.socks5Fail(c, repNotAllowed)
		return
	}
	if p.intercepts(v) {
		if err := socks5Reply(c, repSucceeded, netip.AddrPort{}); err != nil {
			return
		}
		_ = c.SetDeadline(time.Time{})
		p.intercept(c, br, "socks5", v)
		return
	}
	up, addr, err := p.dial(v)
	if err != nil {
		p.log().Debug("egress: SOCKS5 connect failed", "host", v.Host, "port", v.Port, "err", err)
		p.socks5Fail(c, dialReply(err))
		return
	}
	defer p.closeConn(up)
	p.countConn("socks5", v.Host, v.Port, addr)
	p.log().Debug("egress: SOCKS5 connect", "host", v.Host, "port", v.Port, "addr", addr)
	// The bound address stays 0.0.0.0:0: the proxy's end of the upstream
	// connection would tell the sandbox one of the host's addresses.
	if err := socks5Reply(c, repSucceeded, netip.AddrPort{}); err != nil {
		return
	}
	_ = c.SetDeadline(time.Time{})
	// What the client sent while its destination was asked about is the
	// stream's.
	ahead, err := forwardBuffered(up, br)
	if err != nil {
		p.countBytes(v.Host, v.Port, ahead, 0)
		return
	}
	out, in := p.pipe(c, up)
	p.countBytes(v.Host, v.Port, ahead+out, in)
}

// readSOCKS5Addr reads a SOCKS5 DST.ADDR of type atyp and returns it as a
// host for Resolve: an IP address or the name as sent.
func readSOCKS5Addr(r io.Reader, atyp byte) (string, error) {
	switch atyp {
	case atypIPv4:
		var b [4]byte
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return "", err
		}
		return netip.AddrFrom4(b).String(), nil
	case atypIPv6:
		var b [16]byte
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return "", err
		}
		return netip.AddrFrom16(b).Unmap().String(), nil
	case atypDomain:
		var n [1]byte
		if _, err := io.ReadFull(r, n[:]); err != nil {
			return "", err
		}
		name := make([]byte, n[0])
		if _, err := io.ReadFull(r, name); err != nil {
			return "", err
		}
		return string(name), nil
	}
	return "", errAddrType
}

// socks5Fail answers a SOCKS5 request with a failure reply and ends the
// connection.
func (p *Proxy) socks5Fail(c net.Conn, rep byte) {
	if socks5Reply(c, rep, netip.AddrPort{}) == nil {
		lingerClose(c)
	}
}

// socks5Reply writes a SOCKS5 reply with the bound address (0.0.0.0:0 when
// invalid).
func socks5Reply(c net.Conn, rep byte, bound netip.AddrPort) error {
	b := []byte{socks5Version, rep, 0x00}
	a := bound.Addr().Unmap()
	switch {
	case a.Is4():
		b = append(b, atypIPv4)
		b = append(b, a.AsSlice()...)
	case a.Is6():
		b = append(b, atypIPv6)
		b = append(b, a.AsSlice()...)
	default:
		b = append(b, atypIPv4, 0, 0, 0, 0)
	}
	b = binary.BigEndian.AppendUint16(b, bound.Port())
	_, err := c.Write(b)
	return err
}

// dialReply returns the SOCKS5 reply for a failed dial.
func dialReply(err error) byte {
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return repConnRefused
	case errors.Is(err, syscall.ENETUNREACH):
		return repNetUnreachable
	case errors.Is(err, syscall.EHOSTUNREACH),
		errors.Is(err, context.DeadlineExceeded),
		errors.As(err, &ne) && ne.Timeout():
		return repHostUnreachable
	}
	return repGeneralFailure
}

// socks4 refuses a SOCKS4 or SOCKS4a request (its version byte read): it
// records the destination it could read and answers "rejected".
func (p *Proxy) socks4(c net.Conn) {
	br := bufio.NewReaderSize(c, 512)
	var host string
	var port int
	var hdr [7]byte // CD DSTPORT DSTIP
	if _, err := io.ReadFull(br, hdr[:]); err == nil {
		port = int(binary.BigEndian.Uint16(hdr[1:3]))
		host = netip.AddrFrom4([4]byte(hdr[3:7])).String()
		if _, err := readCString(br, 255); err == nil && // USERID
			hdr[3] == 0 && hdr[4] == 0 && hdr[5] == 0 && hdr[6] != 0 { // SOCKS4a: a name follows
			if name, err := readCString(br, 255); err == nil {
				host = name
			}
		}
	}
	p.block("socks4", host, port, nil, "SOCKS4 is not supported (use SOCKS5)")
	if _, err := c.Write([]byte{0x00, socks4Rejected, 0, 0, 0, 0, 0, 0}); err == nil {
		lingerClose(c)
	}
}

// readCString reads a NUL-terminated string of at most limit bytes.
func readCString(br *bufio.Reader, limit int) (string, error) {
	var b []byte
	for {
		c, err := br.ReadByte()
		if err != nil {
			return "", err
		}
		if c == 0 {
			return string(b), nil
		}
		if len(b) == limit {
			return "", errors.New("string too long")
		}
		b = append(b, c)
	}
}
