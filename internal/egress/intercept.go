package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// upstreamHeaderTimeout is how long an intercepted request may wait for
// its response's header: long, for APIs that answer only when they are
// done.
const upstreamHeaderTimeout = 10 * time.Minute

// intercepts reports whether the proxy intercepts the sandbox's
// connections to v: secrets are bound to it, or headers set on it.
func (p *Proxy) intercepts(v Verdict) bool {
	if p.CA == nil {
		return false
	}
	r := p.rules()
	return len(r.bound(v.Host, v.Port)) > 0 || len(r.headersFor(v.Host, v.Port)) > 0
}

// interception is one intercepted connection of the sandbox: a CONNECT
// tunnel or SOCKS5 stream to a destination that secrets are bound to,
// served by the proxy as HTTP/1.1, or as HTTP/2 when the sandbox's TLS
// client negotiated h2, and the proxy sends each request on itself.
type interception struct {
	p      *Proxy
	v      Verdict
	proto  string   // how the sandbox asked: "connect" or "socks5"
	scheme string   // what it speaks in the stream: "https" or "http"
	client net.Conn // the sandbox's connection, as accepted
	ss     *secretSet
	rp     *httputil.ReverseProxy
	// handlers are the requests being served.
	handlers sync.WaitGroup
}

// intercept serves the sandbox's stream to v after the proxy accepted it
// (the answer to CONNECT or SOCKS5 sent): br reads client, holding what
// the client sent already. A stream that starts with a TLS handshake is
// terminated with a leaf of p.CA for v's host; anything else is served as
// plain HTTP to v. Traffic counts the bytes of client.
func (p *Proxy) intercept(client net.Conn, br *bufio.Reader, proto string, v Verdict) {
	cc := &countedConn{Conn: client, r: br}
	defer func() { p.countBytes(v.Host, v.Port, cc.out.Load(), cc.in.Load()) }()
	_ = client.SetReadDeadline(time.Now().Add(handshakeTimeout))
	first, err := br.Peek(1)
	if err != nil {
		return
	}
	var conn net.Conn = cc
	scheme := "http"
	if first[0] == 0x16 { // a TLS handshake record
		tc := p.terminateTLS(cc, v)
		if tc == nil {
			return
		}
		defer tc.Close()
		conn, scheme = tc, "https"
	}
	_ = client.SetReadDeadline(time.Time{})
	p.log().Debug("egress: intercepting", "protocol", proto, "scheme", scheme, "host", v.Host, "port", v.Port)
	ic := &interception{
		p:      p,
		v:      v,
		proto:  proto,
		scheme: scheme,
		client: client,
		ss:     p.secretsFor(v.Host, v.Port, scheme == "http"),
	}
	ic.rp = &httputil.ReverseProxy{
		Transport:      p.upstreamTransport(),
		Rewrite:        ic.rewrite,
		ModifyResponse: ic.modifyResponse,
		ErrorHandler:   ic.errorHandler,
		ErrorLog:       p.errorLog(),
		FlushInterval:  -1,
	}
	ic.serve(conn)
}

// terminateTLS runs the server side of the sandbox's TLS handshake with
// the leaf of p.CA for v's host, whatever the client's SNI names: a
// client whose SNI names another host is refused. It returns nil when the
// handshake failed.
func (p *Proxy) terminateTLS(c net.Conn, v Verdict) *tls.Conn {
	cfg, err := p.CA.ServerConfig(v.Host)
	if err != nil {
		p.log().Warn("egress: no certificate to intercept with", "host", v.Host, "err", err)
		return nil
	}
	cfg.NextProtos = []string{http2Proto, "http/1.1"}
	var sni string
	next := cfg.GetConfigForClient
	cfg.GetConfigForClient = func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
		if hello.ServerName != "" && !sameServerName(hello.ServerName, v.Host) {
			sni = hello.ServerName
			return nil, errors.New("the TLS server name differs from the CONNECT target")
		}
		if next != nil {
			return next(hello)
		}
		return nil, nil
	}
	tc := tls.Server(c, cfg)
	ctx, cancel := context.WithTimeout(p.baseContext(), handshakeTimeout)
	defer cancel()
	if err := tc.HandshakeContext(ctx); err != nil {
		if sni != "" {
			p.block("https", v.Host, v.Port, nil, fmt.Sprintf("TLS server name %s differs from CONNECT target %s",
				cleanText(sni, maxEventText), hostPort(v.Host, v.Port)))
		} else {
			p.log().Debug("egress: TLS handshake with the sandbox failed", "host", v.Host, "port", v.Port, "err", err)
		}
		c.Close()
		return nil
	}
	return tc
}

// sameServerName reports whether a TLS server name names host, a
// normalized host.
func sameServerName(sni, host string) bool {
	name, _, err := normalizeHost(sni)
	return err == nil && name == host
}

// serve serves HTTP/1.1 on conn, or HTTP/2 when conn is TLS that
// negotiated h2, until the client or the proxy ends it, and waits for the
// requests being served.
func (ic *interception) serve(conn net.Conn) {
	p := ic.p
	if tc, ok := conn.(*tls.Conn); ok && tc.ConnectionState().NegotiatedProtocol == http2Proto {
		ic.serveHTTP2(tc)
		return
	}
	srv := &http.Server{
		Handler:           ic,
		ReadHeaderTimeout: handshakeTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          p.errorLog(),
		BaseContext:       func(net.Listener) context.Context { return p.baseContext() },
	}
	_ = srv.Serve(newOneConnListener(conn))
	ic.handlers.Wait()
}

// http2Proto is HTTP/2's ALPN protocol name.
const http2Proto = "h2"

// Bounds of an intercepted HTTP/2 connection, whose frames come from the
// sandbox: the streams open at once, the largest frame read, the HPACK
// tables both ways, and the request bodies' bytes in flight (the flow
// control windows) per connection and per stream. Headers are bounded by
// maxHeaderBytes, as over HTTP/1.1.
const (
	h2MaxStreams   = 100
	h2MaxFrame     = 16 << 10
	h2HeaderTable  = 4 << 10
	h2ConnWindow   = 1 << 20
	h2StreamWindow = 256 << 10
)

// serveHTTP2 serves HTTP/2 on tc, which negotiated h2, until the client
// or the proxy ends it, and waits for the requests being served. Every
// stream is a request served by ServeHTTP, as over HTTP/1.1.
//
// The client's preface and its first frame are read here first, within
// handshakeTimeout as the TLS handshake was: Go's HTTP/2 server gives a
// client a fixed 10 s for its preface and then 2 s for its first
// SETTINGS, which a sandbox on a busy machine does not always meet (a
// microVM under emulation, whose client writes them as two TLS records,
// lost its connection under its first request). The server then finds
// them read already: it is given the decrypted stream (h2Conn), with
// those bytes put back, as HTTP/2 with prior knowledge — net/http serves
// HTTP/2 over TLS only on a *tls.Conn, which cannot be given back what
// was read from it.
func (ic *interception) serveHTTP2(tc *tls.Conn) {
	p := ic.p
	first, err := readH2Start(tc)
	if err != nil {
		p.log().Debug("egress: the sandbox's HTTP/2 connection did not start", "host", ic.v.Host, "port", ic.v.Port, "err", err)
		return
	}
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	srv := &http.Server{
		Handler:        ic,
		IdleTimeout:    idleTimeout,
		MaxHeaderBytes: maxHeaderBytes,
		ErrorLog:       p.errorLog(),
		BaseContext:    func(net.Listener) context.Context { return p.baseContext() },
		Protocols:      &protocols,
		HTTP2: &http.HTTP2Config{
			MaxConcurrentStreams:          h2MaxStreams,
			MaxReadFrameSize:              h2MaxFrame,
			MaxDecoderHeaderTableSize:     h2HeaderTable,
			MaxEncoderHeaderTableSize:     h2HeaderTable,
			MaxReceiveBufferPerConnection: h2ConnWindow,
			MaxReceiveBufferPerStream:     h2StreamWindow,
		},
	}
	_ = srv.Serve(newOneConnListener(&h2Conn{tls: tc, first: first}))
	ic.handlers.Wait()
}

// readH2Start reads an HTTP/2 client's preface and its first frame from
// c within handshakeTimeout, and returns both. A frame longer than
// h2MaxFrame is an error.
func readH2Start(c net.Conn) ([]byte, error) {
	_ = c.SetReadDeadline(time.Now().Add(handshakeTimeout))
	defer c.SetReadDeadline(time.Time{})
	b := make([]byte, len(h2Preface)+9, len(h2Preface)+9+64)
	if _, err := io.ReadFull(c, b[:len(h2Preface)]); err != nil {
		return nil, fmt.Errorf("preface: %w", err)
	}
	if string(b[:len(h2Preface)]) != h2Preface {
		return nil, errors.New("not HTTP/2's client preface")
	}
	hdr := b[len(h2Preface):]
	if _, err := io.ReadFull(c, hdr); err != nil {
		return nil, fmt.Errorf("first frame: %w", err)
	}
	n := int(hdr[0])<<16 | int(hdr[1])<<8 | int(hdr[2])
	if n > h2MaxFrame {
		return nil, fmt.Errorf("first frame of %d bytes", n)
	}
	b = append(b, make([]byte, n)...)
	if _, err := io.ReadFull(c, b[len(b)-n:]); err != nil {
		return nil, fmt.Errorf("first frame: %w", err)
	}
	return b, nil
}

// h2Preface is what an HTTP/2 client sends first.
const h2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// h2Conn is the decrypted stream of an HTTP/2 connection over TLS whose
// first bytes were read already: reads return them first. It hides the
// TLS connection's state, which would make net/http take it for HTTP/1
// over TLS.
type h2Conn struct {
	tls   *tls.Conn
	first []byte
}

func (c *h2Conn) Read(b []byte) (int, error) {
	if len(c.first) > 0 {
		n := copy(b, c.first)
		c.first = c.first[n:]
		return n, nil
	}
	return c.tls.Read(b)
}

func (c *h2Conn) Write(b []byte) (int, error)        { return c.tls.Write(b) }
func (c *h2Conn) Close() error                       { return c.tls.Close() }
func (c *h2Conn) LocalAddr() net.Addr                { return c.tls.LocalAddr() }
func (c *h2Conn) RemoteAddr() net.Addr               { return c.tls.RemoteAddr() }
func (c *h2Conn) SetDeadline(t time.Time) error      { return c.tls.SetDeadline(t) }
func (c *h2Conn) SetReadDeadline(t time.Time) error  { return c.tls.SetReadDeadline(t) }
func (c *h2Conn) SetWriteDeadline(t time.Time) error { return c.tls.SetWriteDeadline(t) }

// closerFunc is a function as an io.Closer.
type closerFunc func()

// Close calls f.
func (f closerFunc) Close() error {
	f()
	return nil
}

// reqInfoKey is the context key of a request's reqInfo.
type reqInfoKey struct{}

// reqInfo is what the transport and the reverse proxy's hooks need to
// know of an intercepted request.
type reqInfo struct {
	v     Verdict // the checked destination, the only one dialed
	proto string  // for Traffic
	trip  *tripwire
}

// reqInfoOf returns the reqInfo of a request's context, or nil.
func reqInfoOf(ctx context.Context) *reqInfo {
	ri, _ := ctx.Value(reqInfoKey{}).(*reqInfo)
	return ri
}

// ServeHTTP serves one request of the intercepted stream: it checks the
// Host header and the placeholders, puts the real values in, and sends
// the request on through the reverse proxy.
func (ic *interception) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ic.handlers.Add(1)
	defer ic.handlers.Done()
	// The response may begin while the request's body still streams.
	_ = http.NewResponseController(w).EnableFullDuplex()
	p, v := ic.p, ic.v
	defPort := 80
	if ic.scheme == "https" {
		defPort = 443
	}
	if r.Host != "" && !sameAuthority(r.Host, v.Host, v.Port, defPort) {
		reason := fmt.Sprintf("Host header %s differs from CONNECT target %s", cleanText(r.Host, maxEventText), hostPort(v.Host, v.Port))
		writeRefusal(w, http.StatusForbidden, p.block(ic.scheme, v.Host, v.Port, nil, reason), r.ProtoMajor >= 2)
		return
	}
	if f := ic.ss.findHead(r.RequestURI, r.Header); f != nil {
		writeRefusal(w, http.StatusForbidden, p.blockSecret(ic.scheme, v.Host, v.Port, *f), r.ProtoMajor >= 2)
		return
	}
	trip := &tripwire{client: ic.client}
	if r.ProtoMajor == 2 {
		// A stream of a connection that carries others: a refusal found
		// after the response began resets that stream only.
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		r = r.WithContext(ctx)
		trip.client = closerFunc(cancel)
	}
	if ic.scheme == "https" {
		// The rules of now: a change of the sandbox's network applies
		// to its next request.
		setHeaders(r.Header, p.rules().headersFor(v.Host, v.Port))
	}
	ic.ss.substHeader(r.Header)
	ic.ss.substQuery(r.URL)
	r.Header.Del("Accept-Encoding")
	ref, done := p.prepareBody(r, ic.ss, trip, ic.scheme, v.Host, v.Port, nil)
	defer done()
	if ref != nil {
		if ref.event == nil {
			if r.ProtoMajor < 2 {
				w.Header().Set("Connection", "close")
			}
			http.Error(w, "hutch: cannot read the request body", ref.status)
			return
		}
		writeRefusal(w, ref.status, *ref.event, r.ProtoMajor >= 2)
		return
	}
	r = r.WithContext(context.WithValue(r.Context(), reqInfoKey{}, &reqInfo{v: v, proto: ic.proto, trip: trip}))
	ic.rp.ServeHTTP(&interceptWriter{ResponseWriter: w, ss: ic.ss, trip: trip, keepConn: r.ProtoMajor >= 2}, r)
}

// rewrite aims the outgoing request at the checked destination. It keeps
// what the reverse proxy would change of the sandbox's request otherwise:
// the query as sent and the forwarding headers.
func (ic *interception) rewrite(pr *httputil.ProxyRequest) {
	pr.Out.URL.Scheme = ic.scheme
	pr.Out.URL.Host = hostPort(ic.v.Host, ic.v.Port)
	pr.Out.URL.RawQuery = pr.In.URL.RawQuery
	for _, k := range []string{"Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto"} {
		if vs, ok := pr.In.Header[k]; ok {
			pr.Out.Header[k] = vs
		}
	}
}

// errTripped stops a response whose request turned out to carry a
// forbidden placeholder.
var errTripped = errors.New("the request carried a forbidden placeholder")

// modifyResponse redacts the response, unless its request tripped.
func (ic *interception) modifyResponse(resp *http.Response) error {
	if ri := reqInfoOf(resp.Request.Context()); ri != nil && ri.trip.fired() != nil {
		return errTripped
	}
	ic.ss.redactResponse(resp)
	return nil
}

// errorHandler answers a request that got no response: the refusal when
// its body carried a forbidden placeholder, else 502.
func (ic *interception) errorHandler(w http.ResponseWriter, r *http.Request, err error) {
	if ri := reqInfoOf(r.Context()); ri != nil {
		if e := ri.trip.fired(); e != nil {
			writeRefusal(w, http.StatusForbidden, *e, r.ProtoMajor >= 2)
			return
		}
	}
	p, v := ic.p, ic.v
	msg := p.rules().scrub(err.Error())
	if !errors.Is(err, context.Canceled) {
		p.log().Debug("egress: intercepted request failed", "host", v.Host, "port", v.Port, "err", msg)
	}
	clear(w.Header())
	writeText(w, http.StatusBadGateway, fmt.Sprintf("hutch: no response from %s: %s\n", hostPort(v.Host, v.Port), cleanText(msg, maxEventText)))
}

// writeRefusal answers a refused request: status, the reason in the
// X-Hutch-Blocked header, what would allow it in X-Hutch-Allow, the same
// as text, and the connection's end unless
// keepConn (an HTTP/2 stream, which ends by itself without the
// connection's other streams).
func writeRefusal(w http.ResponseWriter, status int, e Event, keepConn bool) {
	h := w.Header()
	clear(h)
	h.Set("X-Hutch-Blocked", headerText(e.Reason))
	if e.Allow != "" {
		h.Set("X-Hutch-Allow", headerText(e.Allow))
	}
	if !keepConn {
		h.Set("Connection", "close")
	}
	writeText(w, status, refusalText(e))
}

// writeText writes a response of the proxy's own, with the header set so
// far: status, and body as plain text.
func writeText(w http.ResponseWriter, status int, body string) {
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = io.WriteString(w, body)
}

// interceptWriter is the response writer of an intercepted request: it
// redacts the header of interim responses (which the reverse proxy
// passes on without modifyResponse, which redacts the final one), and
// when the request tripped before the response began, it writes the
// refusal instead and drops what follows.
type interceptWriter struct {
	http.ResponseWriter
	ss       *secretSet
	trip     *tripwire
	keepConn bool // an HTTP/2 stream: a refusal does not end the connection
	wrote    bool
	refused  bool
}

// WriteHeader writes the response's status and header (an interim one
// redacted), or the refusal.
func (w *interceptWriter) WriteHeader(code int) {
	if w.wrote {
		return
	}
	if code >= 100 && code < 200 {
		if w.trip.fired() == nil {
			w.ss.redactHeader(w.Header())
			w.ResponseWriter.WriteHeader(code)
		}
		return
	}
	w.wrote = true
	if e := w.trip.begin(); e != nil {
		w.refused = true
		writeRefusal(w.ResponseWriter, http.StatusForbidden, *e, w.keepConn)
		return
	}
	w.ResponseWriter.WriteHeader(code)
}

// Write writes to the response's body, or drops b after a refusal.
func (w *interceptWriter) Write(b []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	if w.refused {
		return len(b), nil
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap returns the server's writer, for http.ResponseController.
func (w *interceptWriter) Unwrap() http.ResponseWriter {
	return w.ResponseWriter
}

// upstreamTransport returns the proxy's transport of intercepted
// requests, made on first use. It dials only the addresses of the
// verdict that its request carries (see dialChecked); it checks the
// upstream's certificate against UpstreamRoots for the destination's
// host, which the transport takes from the request's URL; it speaks
// HTTP/2 where the upstream offers it; and it asks for no compression,
// so that responses reach redaction as they are.
func (p *Proxy) upstreamTransport() *http.Transport {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.transport == nil {
		p.transport = &http.Transport{
			DialContext:            p.dialChecked,
			ForceAttemptHTTP2:      true,
			DisableCompression:     true,
			TLSClientConfig:        &tls.Config{RootCAs: p.UpstreamRoots, MinVersion: tls.VersionTLS12},
			TLSHandshakeTimeout:    p.dialTimeout(),
			ResponseHeaderTimeout:  upstreamHeaderTimeout,
			ExpectContinueTimeout:  time.Second,
			IdleConnTimeout:        90 * time.Second,
			MaxIdleConnsPerHost:    4,
			MaxResponseHeaderBytes: 1 << 20,
		}
	}
	return p.transport
}

// dialChecked is the transport's dialer: it dials the addresses of the
// verdict in the request's context, as the proxy's own dial does, and
// only when the transport asks for that verdict's host:port. It never
// resolves a name.
func (p *Proxy) dialChecked(ctx context.Context, _, addr string) (net.Conn, error) {
	ri := reqInfoOf(ctx)
	if ri == nil || addr != hostPort(ri.v.Host, ri.v.Port) {
		return nil, fmt.Errorf("egress: no checked destination for %s", addr)
	}
	c, a, err := p.dial(ri.v)
	if err != nil {
		return nil, err
	}
	p.countConn(ri.proto, ri.v.Host, ri.v.Port, a)
	p.log().Debug("egress: intercepted destination connected", "host", ri.v.Host, "port", ri.v.Port, "addr", a)
	return &upstreamConn{Conn: c, p: p}, nil
}

// upstreamConn is an upstream connection of the transport; closing it
// forgets it in the proxy.
type upstreamConn struct {
	net.Conn
	p *Proxy
}

// Close closes the connection and forgets it.
func (c *upstreamConn) Close() error {
	c.p.closeConn(c.Conn)
	return nil
}

// countedConn is the sandbox's connection of an intercepted stream: it
// reads through the buffer that read the request before, and counts the
// bytes both ways.
type countedConn struct {
	net.Conn
	r       io.Reader
	out, in atomic.Int64
}

// Read reads from the sandbox, counting.
func (c *countedConn) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.out.Add(int64(n))
	return n, err
}

// Write writes to the sandbox, counting.
func (c *countedConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.in.Add(int64(n))
	return n, err
}

// oneConnListener hands one connection to an http.Server; its next
// Accept waits until that connection is closed, and then fails, so
// that Serve returns.
type oneConnListener struct {
	mu   sync.Mutex
	conn net.Conn
	done chan struct{}
	addr net.Addr
}

// newOneConnListener returns a listener of c.
func newOneConnListener(c net.Conn) *oneConnListener {
	l := &oneConnListener{done: make(chan struct{}), addr: c.LocalAddr()}
	l.conn = &doneConn{Conn: c, done: l.done}
	return l
}

// Accept returns the connection, then waits for its end and fails.
func (l *oneConnListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	c := l.conn
	l.conn = nil
	l.mu.Unlock()
	if c != nil {
		return c, nil
	}
	<-l.done
	return nil, net.ErrClosed
}

// Close does nothing: the connection ends by itself.
func (l *oneConnListener) Close() error { return nil }

// Addr is the connection's local address.
func (l *oneConnListener) Addr() net.Addr { return l.addr }

// doneConn closes done when it is closed.
type doneConn struct {
	net.Conn
	once sync.Once
	done chan struct{}
}

// Close closes the connection and signals its end.
func (c *doneConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { close(c.done) })
	return err
}

// errorLog returns a logger for net/http's error messages: debug records
// of p.Log, with real values scrubbed.
func (p *Proxy) errorLog() *log.Logger {
	return log.New(logWriter{p}, "", 0)
}

// logWriter writes each message as a debug record.
type logWriter struct{ p *Proxy }

// Write logs one message.
func (w logWriter) Write(b []byte) (int, error) {
	w.p.log().Debug("egress: intercepted http", "msg", strings.TrimSpace(w.p.rules().scrub(string(b))))
	return len(b), nil
}
