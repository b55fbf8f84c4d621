package egress

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/textproto"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const (
	// maxHeaderBytes bounds a request's line and header together.
	maxHeaderBytes = 64 << 10
	// writeGrace is how long a forwarded request may still be writing
	// its body upstream after the response has been passed on, before
	// both connections are given up.
	writeGrace = time.Second
)

// errHeaderTooLarge is peekHeader's answer to a header past maxHeaderBytes.
var errHeaderTooLarge = errors.New("request header too large")

// hopHeaders are the headers of one connection, never passed on (besides
// those that the Connection header names).
var hopHeaders = []string{
	"Connection",
	"Proxy-Connection",
	"Keep-Alive",
	"Proxy-Authenticate",
	"Proxy-Authorization",
	"TE",
	"Trailer",
	"Transfer-Encoding",
	"Upgrade",
}

// httpConn is one client connection of the HTTP proxy.
type httpConn struct {
	p    *Proxy
	conn net.Conn
	br   *bufio.Reader // its buffer bounds a request header
	cw   *countWriter  // counts the bytes passed on to the client
	bw   *bufio.Writer // over cw
	up   *upstream     // the upstream of the last forwarded request, kept alive
}

// upstream is an upstream connection of forwarded requests.
type upstream struct {
	conn net.Conn
	br   *bufio.Reader
	name string // the destination as the client named it, lower case
	port int
	host string // the destination as the rules normalized it (Traffic's)
}

// serveHTTPConn serves the requests of one client connection.
func (p *Proxy) serveHTTPConn(c net.Conn) {
	hc := &httpConn{p: p, conn: c, br: bufio.NewReaderSize(c, maxHeaderBytes)}
	hc.cw = &countWriter{w: c}
	hc.bw = bufio.NewWriter(hc.cw)
	defer hc.dropUpstream()
	for first := true; ; first = false {
		if !first {
			_ = c.SetReadDeadline(time.Now().Add(idleTimeout))
			if _, err := hc.br.Peek(1); err != nil {
				return
			}
		}
		_ = c.SetReadDeadline(time.Now().Add(handshakeTimeout))
		head, err := peekHeader(hc.br)
		if err != nil {
			if errors.Is(err, errHeaderTooLarge) {
				hc.answer(http.StatusRequestHeaderFieldsTooLarge, "", "hutch: the request header is larger than 64 KiB\n")
			} else if !errors.Is(err, io.EOF) {
				p.log().Debug("egress: reading request", "err", err)
			}
			return
		}
		hostHdr := hostHeader(head)
		req, err := http.ReadRequest(hc.br)
		if err != nil {
			hc.answer(http.StatusBadRequest, "", fmt.Sprintf("hutch: malformed request: %s\n", cleanText(err.Error(), maxEventText)))
			return
		}
		_ = c.SetReadDeadline(time.Time{})
		if req.Method == http.MethodConnect {
			hc.connect(req, hostHdr)
			return
		}
		if !hc.forward(req, hostHdr) {
			return
		}
	}
}

// peekHeader waits until br holds a whole request header, up to the empty
// line that ends it, and returns it without consuming it. A header that
// does not fit br's buffer is errHeaderTooLarge.
func peekHeader(br *bufio.Reader) ([]byte, error) {
	scanned := 0
	for {
		buf, _ := br.Peek(br.Buffered())
		if end := headerEnd(buf, scanned); end >= 0 {
			return buf[:end], nil
		}
		if len(buf) >= br.Size() {
			return nil, errHeaderTooLarge
		}
		scanned = max(0, len(buf)-2)
		if _, err := br.Peek(len(buf) + 1); err != nil {
			if errors.Is(err, bufio.ErrBufferFull) {
				return nil, errHeaderTooLarge
			}
			return nil, err
		}
	}
}

// headerEnd returns the length of the header in buf through the empty
// line that ends it ("\n\n" or "\n\r\n"), or -1 when buf holds no such
// line; from is where to resume a search that found none before.
func headerEnd(buf []byte, from int) int {
	for i := from; i < len(buf); {
		j := bytes.IndexByte(buf[i:], '\n')
		if j < 0 {
			return -1
		}
		j += i
		rest := buf[j+1:]
		switch {
		case len(rest) >= 1 && rest[0] == '\n':
			return j + 2
		case len(rest) >= 2 && rest[0] == '\r' && rest[1] == '\n':
			return j + 3
		}
		i = j + 1
	}
	return -1
}

// hostHeader returns the Host header of a request header, which
// http.ReadRequest does not keep; "" when there is none or the header does
// not parse (ReadRequest then says why).
func hostHeader(head []byte) string {
	tp := textproto.NewReader(bufio.NewReaderSize(bytes.NewReader(head), len(head)))
	if _, err := tp.ReadLine(); err != nil {
		return ""
	}
	h, err := tp.ReadMIMEHeader()
	if err != nil {
		return ""
	}
	return h.Get("Host")
}

// connect serves a CONNECT request: it checks the target, dials it and
// then tunnels bytes both ways.
func (hc *httpConn) connect(req *http.Request, hostHdr string) {
	p := hc.p
	target := req.URL.Host
	if target == "" || req.URL.Path != "" {
		hc.answer(http.StatusBadRequest, "", "hutch: CONNECT needs a host:port target\n")
		return
	}
	name, port, err := splitTarget(target)
	if err != nil {
		hc.answer(http.StatusBadRequest, "", fmt.Sprintf("hutch: CONNECT target %s: %v\n", cleanText(target, maxEventText), err))
		return
	}
	if hostHdr != "" && !sameAuthority(hostHdr, name, port, port) {
		reason := fmt.Sprintf("Host header %s differs from CONNECT target %s", cleanText(hostHdr, maxEventText), cleanText(target, maxEventText))
		hc.refuse(http.StatusForbidden, p.block("connect", strings.ToLower(name), port, nil, reason))
		return
	}
	if s := p.rules().placeholderInName(name); s != nil {
		host := strings.ToLower(name)
		hc.refuse(http.StatusForbidden, p.blockSecret("connect", host, port, forbidden{secret: s}))
		return
	}
	v := p.check(hc.conn, hc.br, name, port)
	if !v.Allowed {
		hc.refuse(http.StatusForbidden, p.block("connect", name, port, &v, ""))
		return
	}
	if p.intercepts(v) {
		if _, err := io.WriteString(hc.conn, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
			return
		}
		p.intercept(hc.conn, hc.br, "connect", v)
		return
	}
	up, addr, err := p.dial(v)
	if err != nil {
		p.log().Debug("egress: connect failed", "host", v.Host, "port", v.Port, "err", err)
		hc.answer(http.StatusBadGateway, "", fmt.Sprintf("hutch: cannot connect to %s: %v\n", hostPort(v.Host, v.Port), err))
		return
	}
	defer p.closeConn(up)
	p.countConn("connect", v.Host, v.Port, addr)
	p.log().Debug("egress: connect", "host", v.Host, "port", v.Port, "addr", addr)
	if _, err := io.WriteString(hc.conn, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	// What the client sent right after its request is the tunnel's.
	out, err := forwardBuffered(up, hc.br)
	if err != nil {
		p.countBytes(v.Host, v.Port, out, 0)
		return
	}
	hc.br = nil
	o, in := p.pipe(hc.conn, up)
	p.countBytes(v.Host, v.Port, out+o, in)
}

// forwardBuffered writes to w the bytes that br has read ahead.
func forwardBuffered(w io.Writer, br *bufio.Reader) (int64, error) {
	n := br.Buffered()
	if n == 0 {
		return 0, nil
	}
	b, _ := br.Peek(n)
	m, err := w.Write(b)
	_, _ = br.Discard(m)
	return int64(m), err
}

// splitTarget splits a CONNECT target into its host (without brackets)
// and port.
func splitTarget(target string) (string, int, error) {
	host, ps, err := net.SplitHostPort(target)
	if err != nil {
		return "", 0, errors.New("want host:port")
	}
	if host == "" {
		return "", 0, errors.New("empty host")
	}
	port, err := strconv.Atoi(ps)
	if err != nil || port < 1 || port > 65535 {
		return "", 0, fmt.Errorf("invalid port %q", cleanText(ps, 20))
	}
	return host, port, nil
}

// sameAuthority reports whether a Host header names host:port; a Host
// header without a port stands for defPort.
func sameAuthority(hdr, host string, port, defPort int) bool {
	h, ps, err := net.SplitHostPort(hdr)
	hp := defPort
	if err != nil {
		h = hdr
		if len(h) > 2 && h[0] == '[' && h[len(h)-1] == ']' {
			h = h[1 : len(h)-1]
		}
	} else {
		if hp, err = strconv.Atoi(ps); err != nil {
			return false
		}
	}
	return hp == port && sameHost(h, host)
}

// sameHost reports whether two spellings of a host are the same name or
// address.
func sameHost(a, b string) bool {
	aa, errA := netip.ParseAddr(a)
	ab, errB := netip.ParseAddr(b)
	if errA == nil && errB == nil {
		return aa.Unmap() == ab.Unmap()
	}
	return strings.EqualFold(strings.TrimSuffix(a, "."), strings.TrimSuffix(b, "."))
}

// forward serves a request for an http:// URL given in absolute form. It
// reports whether the client connection may serve another request.
func (hc *httpConn) forward(req *http.Request, hostHdr string) bool {
	p := hc.p
	if !req.URL.IsAbs() || req.URL.Host == "" {
		hc.answer(http.StatusBadRequest, "", "hutch: this is hutch's egress proxy, not a web server: "+
			"send it requests for absolute http:// URLs (GET http://host/path), or tunnel with CONNECT host:port\n")
		return false
	}
	scheme := strings.ToLower(req.URL.Scheme)
	name := req.URL.Hostname()
	port, err := urlPort(req.URL.Port(), scheme)
	if err != nil || name == "" {
		hc.answer(http.StatusBadRequest, "", fmt.Sprintf("hutch: invalid URL host %s\n", cleanText(req.URL.Host, maxEventText)))
		return false
	}
	if scheme != "http" {
		reason := fmt.Sprintf("%s:// URLs are not forwarded (only http://; use CONNECT)", cleanText(scheme, 20))
		hc.refuse(http.StatusBadRequest, p.block("http", strings.ToLower(name), port, nil, reason))
		return false
	}
	if hostHdr != "" && !sameAuthority(hostHdr, name, port, 80) {
		reason := fmt.Sprintf("Host header %s differs from request target %s", cleanText(hostHdr, maxEventText), cleanText(req.URL.Host, maxEventText))
		hc.refuse(http.StatusForbidden, p.block("http", strings.ToLower(name), port, nil, reason))
		return false
	}
	ss, trip, ok := hc.secretsOfRequest(req, name, port)
	if !ok {
		return false
	}
	defer trip.end()
	upgrading := prepareRequest(req)
	key := strings.ToLower(name)
	for attempt := 0; ; attempt++ {
		reused := hc.up != nil && hc.up.name == key && hc.up.port == port
		if !reused {
			hc.dropUpstream()
			v := p.check(hc.conn, hc.br, name, port)
			if !v.Allowed {
				hc.refuse(http.StatusForbidden, p.block("http", name, port, &v, ""))
				return false
			}
			conn, addr, err := p.dial(v)
			if err != nil {
				p.log().Debug("egress: http dial failed", "host", v.Host, "port", v.Port, "err", err)
				hc.answer(http.StatusBadGateway, "", fmt.Sprintf("hutch: cannot connect to %s: %v\n", hostPort(v.Host, v.Port), err))
				return false
			}
			p.countConn("http", v.Host, v.Port, addr)
			hc.up = &upstream{conn: conn, br: bufio.NewReader(conn), name: key, port: port, host: v.Host}
		}
		keep, retry := hc.exchange(req, upgrading, reused && attempt == 0, ss, trip)
		if !retry {
			return keep
		}
		hc.dropUpstream()
	}
}

// secretsOfRequest applies the secrets to a request for name:port in
// clear text: it refuses the request when it carries a placeholder that
// may not go there, else puts the real values in where the secrets allow
// it, and returns what to do about secrets on the response and the
// body's tripwire. ok is false when the request was answered.
func (hc *httpConn) secretsOfRequest(req *http.Request, name string, port int) (ss *secretSet, trip *tripwire, ok bool) {
	p := hc.p
	if len(p.rules().secrets) == 0 {
		return nil, nil, true
	}
	host := strings.ToLower(name)
	if n, _, err := normalizeHost(name); err == nil {
		host = n
	}
	if s := p.rules().placeholderInName(name); s != nil {
		hc.refuse(http.StatusForbidden, p.blockSecret("http", host, port, forbidden{secret: s}))
		return nil, nil, false
	}
	ss = p.secretsFor(host, port, true)
	if f := ss.findHead(req.RequestURI, req.Header); f != nil {
		hc.refuse(http.StatusForbidden, p.blockSecret("http", host, port, *f))
		return nil, nil, false
	}
	trip = &tripwire{client: hc.conn}
	ss.substHeader(req.Header)
	ss.substQuery(req.URL)
	if len(ss.bound) > 0 {
		req.Header.Del("Accept-Encoding")
	}
	expect := func() {
		// The body is read before the upstream is asked: the client that
		// waits for "100 Continue" gets it from the proxy.
		if headerHasToken(req.Header, "Expect", "100-continue") {
			req.Header.Del("Expect")
			hc.bw.WriteString("HTTP/1.1 100 Continue\r\n\r\n")
			_ = hc.bw.Flush()
		}
	}
	ref, done := p.prepareBody(req, ss, trip, "http", host, port, expect)
	trip.done = done
	if ref != nil {
		done()
		if ref.event == nil {
			hc.answer(ref.status, "", "hutch: cannot read the request body\n")
		} else {
			hc.refuse(ref.status, *ref.event)
		}
		return nil, nil, false
	}
	return ss, trip, true
}

// urlPort returns the port of a URL: given, or the scheme's default.
func urlPort(ps, scheme string) (int, error) {
	if ps == "" {
		if scheme == "https" {
			return 443, nil
		}
		return 80, nil
	}
	port, err := strconv.Atoi(ps)
	if err != nil || port < 1 || port > 65535 {
		return 0, fmt.Errorf("invalid port %q", ps)
	}
	return port, nil
}

// prepareRequest turns a proxy request into the request for the origin
// server, written in origin form: it drops the hop-by-hop headers, except
// those of an upgrade (WebSocket), which it reports.
func prepareRequest(req *http.Request) (upgrading bool) {
	upgrade := req.Header.Get("Upgrade")
	upgrading = upgrade != "" && headerHasToken(req.Header, "Connection", "upgrade")
	removeHopByHop(req.Header)
	if upgrading {
		req.Header.Set("Connection", "Upgrade")
		req.Header.Set("Upgrade", upgrade)
	}
	req.RequestURI = ""
	req.Host = req.URL.Host
	if _, ok := req.Header["User-Agent"]; !ok {
		// Request.Write adds Go's own User-Agent to a request without one.
		req.Header["User-Agent"] = []string{""}
	}
	return upgrading
}

// removeHopByHop deletes from h the hop-by-hop headers and those that its
// Connection header names.
func removeHopByHop(h http.Header) {
	for _, v := range h["Connection"] {
		for tok := range strings.SplitSeq(v, ",") {
			if tok = textproto.TrimString(tok); tok != "" {
				h.Del(tok)
			}
		}
	}
	for _, k := range hopHeaders {
		h.Del(k)
	}
}

// headerHasToken reports whether a comma-separated header of h holds token
// (case-insensitively).
func headerHasToken(h http.Header, key, token string) bool {
	for _, v := range h[textproto.CanonicalMIMEHeaderKey(key)] {
		for tok := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(textproto.TrimString(tok), token) {
				return true
			}
		}
	}
	return false
}

// exchange sends req upstream and passes the response on to the client.
// It reports whether the client connection may serve another request
// (keep), or that the request should be sent again on a new connection
// because the kept-alive one had been closed (retry, only when mayRetry).
//
// ss, when not nil, redacts the response; trip, when not nil, is the
// request body's tripwire.
func (hc *httpConn) exchange(req *http.Request, upgrading, mayRetry bool, ss *secretSet, trip *tripwire) (keep, retry bool) {
	p, up := hc.p, hc.up
	trip.setUpstream(up.conn)
	outW := &countWriter{w: up.conn}
	hc.cw.n = 0
	// The request is written while the response is read: the upstream
	// may answer "100 Continue" first, or answer before it read the body.
	writeDone := make(chan error, 1)
	p.goTracked(func() { writeDone <- req.Write(outW) })

	var resp *http.Response
	var err error
	for {
		resp, err = http.ReadResponse(up.br, req)
		if err != nil || resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			break
		}
		// An interim response (100 Continue, 103 Early Hints).
		removeHopByHop(resp.Header)
		ss.redactHead(resp)
		if trip.fired() != nil {
			err = errTripped
			break
		}
		if err = hc.writeHead(resp); err != nil {
			break
		}
	}
	if err == nil {
		if e := trip.begin(); e != nil {
			err = errTripped
		}
	}
	if e := trip.fired(); err != nil && e != nil {
		// The body carried a placeholder that may not go there.
		up.conn.Close()
		<-writeDone
		hc.refuse(http.StatusForbidden, *e)
		p.countBytes(up.host, up.port, outW.n, hc.cw.n)
		return false, false
	}
	if err != nil {
		up.conn.Close()
		if mayRetry && req.Body == http.NoBody && idempotent(req.Method) && connGone(err) {
			<-writeDone
			return false, true
		}
		// The error may quote the upstream, which may hold a real value.
		msg := p.rules().scrub(err.Error())
		p.log().Debug("egress: http upstream failed", "host", up.host, "port", up.port, "err", msg)
		hc.answer(http.StatusBadGateway, "", fmt.Sprintf("hutch: no response from %s: %s\n", hostPort(up.host, up.port), msg))
		hc.conn.Close()
		<-writeDone
		p.countBytes(up.host, up.port, outW.n, hc.cw.n)
		return false, false
	}

	if resp.StatusCode == http.StatusSwitchingProtocols {
		ss.redactHead(resp)
		hc.switchProtocols(resp, upgrading, writeDone, outW)
		return false, false
	}

	upstreamClose := resp.Close
	removeHopByHop(resp.Header)
	ss.redactResponse(resp)
	clientClose := req.Close
	resp.Proto, resp.ProtoMajor, resp.ProtoMinor = "HTTP/1.1", 1, 1
	if !req.ProtoAtLeast(1, 1) {
		// An HTTP/1.0 client reads no chunks: the body ends with the
		// connection.
		resp.Proto, resp.ProtoMinor = "HTTP/1.0", 0
		resp.TransferEncoding = nil
		clientClose = true
	}
	if resp.ContentLength < 0 && len(resp.TransferEncoding) == 0 {
		clientClose = true // as Response.Write decides
	}
	resp.Close = clientClose
	resp.Body = &flushBody{body: resp.Body, src: up.br, bw: hc.bw}
	werr := resp.Write(writerOnly{hc.bw})
	if werr == nil {
		werr = hc.bw.Flush()
	}

	wErr := hc.waitWrite(writeDone)
	p.countBytes(up.host, up.port, outW.n, hc.cw.n)
	if werr != nil || wErr != nil || upstreamClose || up.br.Buffered() > 0 {
		hc.dropUpstream()
	}
	if werr != nil {
		p.log().Debug("egress: http response failed", "host", up.host, "port", up.port, "err", p.rules().scrub(werr.Error()))
	}
	return werr == nil && wErr == nil && !clientClose, false
}

// waitWrite waits for the request's writer to finish; when it takes
// longer than writeGrace after the response, both connections are closed
// to end it.
func (hc *httpConn) waitWrite(writeDone <-chan error) error {
	t := time.NewTimer(writeGrace)
	defer t.Stop()
	select {
	case err := <-writeDone:
		return err
	case <-t.C:
		hc.up.conn.Close()
		hc.conn.Close()
		<-writeDone
		return errors.New("request still being written after the response")
	}
}

// switchProtocols passes a 101 Switching Protocols response on and then
// copies bytes both ways.
func (hc *httpConn) switchProtocols(resp *http.Response, upgrading bool, writeDone <-chan error, outW *countWriter) {
	p, up := hc.p, hc.up
	defer hc.dropUpstream()
	if !upgrading {
		up.conn.Close()
		hc.answer(http.StatusBadGateway, "", "hutch: the upstream switched protocols unasked\n")
		hc.conn.Close()
		<-writeDone
		return
	}
	if err := hc.waitWrite(writeDone); err != nil {
		p.countBytes(up.host, up.port, outW.n, hc.cw.n)
		return
	}
	upgrade := resp.Header.Get("Upgrade")
	removeHopByHop(resp.Header)
	resp.Header.Set("Connection", "Upgrade")
	if upgrade != "" {
		resp.Header.Set("Upgrade", upgrade)
	}
	err := hc.writeHead(resp)
	out, in := outW.n, hc.cw.n
	if err == nil {
		var n int64
		n, err = forwardBuffered(hc.conn, up.br)
		in += n
	}
	if err == nil {
		var n int64
		n, err = forwardBuffered(up.conn, hc.br)
		out += n
	}
	if err == nil {
		o, i := p.pipe(hc.conn, up.conn)
		out, in = out+o, in+i
	}
	p.countBytes(up.host, up.port, out, in)
}

// writeHead writes a response's status line and header to the client.
func (hc *httpConn) writeHead(resp *http.Response) error {
	text := strings.TrimPrefix(resp.Status, strconv.Itoa(resp.StatusCode)+" ")
	if text == "" || text == resp.Status {
		text = http.StatusText(resp.StatusCode)
	}
	fmt.Fprintf(hc.bw, "HTTP/1.1 %03d %s\r\n", resp.StatusCode, text)
	if err := resp.Header.Write(hc.bw); err != nil {
		return err
	}
	hc.bw.WriteString("\r\n")
	return hc.bw.Flush()
}

// idempotent reports whether a request with method may be sent twice.
func idempotent(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	return false
}

// connGone reports whether err says that a connection was closed by the
// other end.
func connGone(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// dropUpstream closes the kept-alive upstream connection, if any.
func (hc *httpConn) dropUpstream() {
	if hc.up != nil {
		hc.p.closeConn(hc.up.conn)
		hc.up = nil
	}
}

// refuse answers a refusal: status, the reason in the X-Hutch-Blocked
// header, what would allow it in X-Hutch-Allow, and both as text.
func (hc *httpConn) refuse(status int, e Event) {
	hc.answerAllow(status, e.Reason, e.Allow, refusalText(e))
}

// refusalText is the body of a refusal: what was blocked and why, and what
// would allow it.
func refusalText(e Event) string {
	s := fmt.Sprintf("hutch: blocked %s: %s\n", hostPort(e.Host, e.Port), e.Reason)
	if fix := fixText(e.Allow, e.AllowField); fix != "" {
		s += "hutch: to allow it: " + fix + "\n"
	}
	return s
}

// answer writes a response of the proxy's own, closing the connection:
// status, the X-Hutch-Blocked header when blocked is not empty, and body as
// plain text.
func (hc *httpConn) answer(status int, blocked, body string) {
	hc.answerAllow(status, blocked, "", body)
}

// answerAllow is answer with the X-Hutch-Allow header when allow is not
// empty.
func (hc *httpConn) answerAllow(status int, blocked, allow, body string) {
	var b strings.Builder
	fmt.Fprintf(&b, "HTTP/1.1 %d %s\r\n", status, http.StatusText(status))
	b.WriteString("Content-Type: text/plain; charset=utf-8\r\n")
	if blocked != "" {
		fmt.Fprintf(&b, "X-Hutch-Blocked: %s\r\n", headerText(blocked))
	}
	if allow != "" {
		fmt.Fprintf(&b, "X-Hutch-Allow: %s\r\n", headerText(allow))
	}
	fmt.Fprintf(&b, "Content-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
	_ = hc.conn.SetWriteDeadline(time.Now().Add(handshakeTimeout))
	if _, err := io.WriteString(hc.conn, b.String()); err == nil {
		lingerClose(hc.conn)
	}
}

// headerText makes s fit a header value: printable ASCII only.
func headerText(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r >= 0x7f {
			return '?'
		}
		return r
	}, s)
}

// countWriter counts the bytes written through it.
type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n += int64(n)
	return n, err
}

// writerOnly hides a writer's other methods (bufio.Writer's ReadFrom,
// which must not run while flushBody flushes).
type writerOnly struct{ io.Writer }

// flushBody is a response body that flushes what was written to the
// client before it waits for more of the body, so that streamed
// responses reach the client as they come.
type flushBody struct {
	body io.ReadCloser
	src  *bufio.Reader // what body reads from
	bw   *bufio.Writer
}

func (b *flushBody) Read(p []byte) (int, error) {
	if b.bw.Buffered() > 0 && b.src.Buffered() == 0 {
		if err := b.bw.Flush(); err != nil {
			return 0, err
		}
	}
	return b.body.Read(p)
}

func (b *flushBody) Close() error { return b.body.Close() }
