package egress

import (
	"cmp"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/hutch-sandbox/hutch/internal/secrets"
)

// Timeouts and limits of the proxy protocols. The sandbox is not trusted:
// every read of a request header is bounded in size and time.
const (
	defaultDialTimeout = 10 * time.Second
	// handshakeTimeout bounds the reading of one request header (HTTP) or
	// of the whole handshake (SOCKS).
	handshakeTimeout = 30 * time.Second
	// idleTimeout is how long a kept-alive HTTP client connection may
	// wait for its next request.
	idleTimeout = 2 * time.Minute
	// lingerTimeout is how long a refused connection is drained after the
	// answer, so that closing it does not reset the answer away.
	lingerTimeout = 500 * time.Millisecond
	// lingerLimit is how much a refused connection is drained at most.
	lingerLimit = 256 << 10
	// maxEventText bounds the text that a client chose (host names, Host
	// headers) in events, answers and logs.
	maxEventText = 300
)

// Defaults of what the proxy holds for its sandbox: memory and
// descriptors of the process that runs it (the daemon), which the
// sandbox's own limits do not count.
const (
	// DefaultMaxConns is the default of Proxy.MaxConns.
	DefaultMaxConns = 512
	// DefaultMaxReadAhead is the default of Proxy.MaxReadAhead: 64 MiB.
	DefaultMaxReadAhead = 64 << 20
)

// Proxy serves one sandbox's proxy listeners: the HTTP proxy protocol
// (forwarding of http:// requests and CONNECT tunnels) and SOCKS5. Every
// destination goes through Rules.Resolve, and only the addresses of its
// Verdict are dialed.
//
// Set the fields before the first Serve call and do not change them
// afterwards; SetRules replaces the rules of a running proxy. A Proxy must not be copied after first use, nor reused
// after Close.
type Proxy struct {
	// Rules decides every destination; required.
	Rules *Rules
	// Sandbox is the sandbox's id, copied into events.
	Sandbox string
	// Record is called for every refusal (an Event with Action
	// "blocked"), from the goroutine of the connection, so it must be
	// safe for concurrent use; nil drops the events.
	Record func(Event)
	// Log receives debug records of connections and their errors, and an
	// info record for every refusal; nil discards them.
	Log *slog.Logger
	// DialTimeout bounds resolving and connecting to a destination over
	// all of its addresses; 0 means 10 s.
	DialTimeout time.Duration
	// CA is the sandbox's certificate authority: the proxy presents its
	// leaf certificates to the sandbox when it intercepts the TLS of a
	// destination that secrets are bound to (Config.Secrets). Required
	// when the rules have secrets; the sandbox must trust it.
	CA *secrets.CA
	// UpstreamRoots are the roots that the certificates of intercepted
	// destinations must chain to; nil means the system's roots. Other
	// destinations' TLS goes through untouched and is the sandbox's to
	// check.
	UpstreamRoots *x509.CertPool
	// MaxConns bounds the sandbox's connections to the proxy at once, on
	// all its listeners: one more is closed at once (the first of a run
	// of them is recorded). 0 means DefaultMaxConns.
	MaxConns int
	// MaxReadAhead bounds the bytes of request bodies the proxy holds at
	// once for the sandbox while it reads them ahead (see prepareBody). A
	// body that would go beyond streams instead, watched as it goes, as a
	// body over 16 MiB does; one whose length must be counted again is
	// refused (503). 0 means DefaultMaxReadAhead.
	MaxReadAhead int64
	// Hostname is the sandbox's host name, which ServeDNS answers with
	// the loopback addresses as it does localhost.
	Hostname string
	// Unknown, when set, is asked about a destination that no rule
	// allows (Verdict.Unknown: not one that a deny rule, the address
	// guard, a failed lookup or Config.Offline refuses, nor an invalid
	// name), on every path of every protocol: CONNECT, forwarded http://
	// requests and SOCKS5. The proxy holds the sandbox's connection until
	// it returns, holding none of its locks, and when it returns nil
	// resolves the destination again as approved (Rules.ResolveApproved:
	// the deny rules and the address guard still apply, so an approved
	// name that resolves to a loopback or private address is still
	// refused). An error refuses the connection as before, with the
	// reason "not approved: ERROR". host is the destination as the rules
	// normalized it (Verdict.Host). It is the hook of network.on_unknown:
	// ask (approve.Gate.Host), whose own timeout bounds the question, not
	// DialTimeout. It must honour ctx, which ends when the proxy closes
	// or the sandbox closes the connection it holds; it is called from
	// the goroutine of the connection, for each connection (MaxConns
	// bounds how many wait at once), so it must be safe for concurrent
	// use. An approved connection lasts until it ends: a forwarded
	// request's kept-alive upstream serves the requests after it on the
	// same client connection without asking again.
	Unknown func(ctx context.Context, host string, port int) error

	mu        sync.Mutex
	clients   int  // the sandbox's connections (p.mu)
	crowded   bool // a connection was refused since clients was last below MaxConns (p.mu)
	ahead     readBudget
	inited    bool
	closed    bool
	ctx       context.Context // canceled by Close
	cancel    context.CancelFunc
	listeners map[net.Listener]struct{}
	packets   map[net.PacketConn]struct{} // ServeDNS's sockets
	// conns are the open connections, the sandbox's and the upstream
	// ones, with where an upstream one goes (the zero dest for the
	// sandbox's).
	conns map[net.Conn]dest
	// set are the rules SetRules set last, nil for Rules.
	set       atomic.Pointer[Rules]
	wg        sync.WaitGroup
	transport *http.Transport // of intercepted requests, made on first use

	smu  sync.Mutex
	sets map[string]*secretSet // by the secrets bound and the scheme

	tmu     sync.Mutex
	traffic map[trafficKey]*Event
	order   []trafficKey
}

// trafficKey is one destination of Traffic.
type trafficKey struct {
	host string
	port int
}

// initLocked sets up the proxy's state on first use; p.mu is held.
func (p *Proxy) initLocked() {
	if p.inited {
		return
	}
	p.inited = true
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.listeners = make(map[net.Listener]struct{})
	p.conns = make(map[net.Conn]dest)
}

// baseContext returns the context that Close cancels.
func (p *Proxy) baseContext() context.Context {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.initLocked()
	return p.ctx
}

// log returns p.Log, or a logger that discards.
func (p *Proxy) log() *slog.Logger {
	if p.Log != nil {
		return p.Log
	}
	return slog.New(slog.DiscardHandler)
}

// dialTimeout returns p.DialTimeout or its default.
func (p *Proxy) dialTimeout() time.Duration {
	if p.DialTimeout > 0 {
		return p.DialTimeout
	}
	return defaultDialTimeout
}

// ServeHTTP serves the HTTP proxy protocol on l until Close: CONNECT
// tunnels and the forwarding of http:// requests given with an absolute
// URI. It returns nil after Close, else the error that ended accepting
// connections; it closes l in either case.
func (p *Proxy) ServeHTTP(l net.Listener) error {
	return p.serve(l, "http", p.serveHTTPConn)
}

// ServeSOCKS serves SOCKS5 (CONNECT only, no authentication) on l until
// Close. It returns nil after Close, else the error that ended accepting
// connections; it closes l in either case.
func (p *Proxy) ServeSOCKS(l net.Listener) error {
	return p.serve(l, "socks", p.serveSOCKSConn)
}

// serve accepts connections on l and hands each to handle in a goroutine
// of its own.
func (p *Proxy) serve(l net.Listener, name string, handle func(net.Conn)) error {
	if len(p.rules().secrets) > 0 && p.CA == nil {
		l.Close()
		return fmt.Errorf("egress: %s proxy: the rules bind secrets but the proxy has no CA", name)
	}
	p.mu.Lock()
	p.initLocked()
	if p.closed {
		p.mu.Unlock()
		l.Close()
		return nil
	}
	p.listeners[l] = struct{}{}
	p.wg.Add(1)
	p.mu.Unlock()
	defer p.wg.Done()
	defer func() {
		p.mu.Lock()
		delete(p.listeners, l)
		p.mu.Unlock()
		l.Close()
	}()

	var backoff time.Duration
	for {
		c, err := l.Accept()
		if err != nil {
			if p.isClosed() {
				return nil
			}
			if !temporaryAcceptError(err) {
				return fmt.Errorf("egress: %s proxy: accept: %w", name, err)
			}
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			p.log().Debug("egress: accept failed, retrying", "proxy", name, "err", err, "backoff", backoff)
			if !p.sleep(backoff) {
				return nil
			}
			continue
		}
		backoff = 0
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			c.Close()
			return nil
		}
		if max := cmp.Or(p.MaxConns, DefaultMaxConns); p.clients >= max {
			first := !p.crowded
			p.crowded = true
			p.mu.Unlock()
			c.Close()
			if first {
				p.record(Event{Time: time.Now(), Sandbox: p.Sandbox, Action: "blocked", Protocol: name, Reason: fmt.Sprintf("more than %d connections to the proxy at once", max)})
			}
			continue
		}
		p.clients++
		p.conns[c] = dest{}
		p.wg.Add(1)
		p.mu.Unlock()
		go func() {
			defer p.wg.Done()
			defer func() {
				p.mu.Lock()
				p.clients--
				if p.clients < cmp.Or(p.MaxConns, DefaultMaxConns) {
					p.crowded = false
				}
				p.mu.Unlock()
			}()
			defer p.closeConn(c)
			handle(c)
		}()
	}
}

// temporaryAcceptError reports whether accepting may succeed again after
// err: the process ran out of descriptors or memory, or a connection was
// aborted before it was accepted.
func temporaryAcceptError(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	for _, e := range []error{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM, syscall.ECONNABORTED, syscall.EINTR} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// sleep waits for d or until Close, and reports whether d passed.
func (p *Proxy) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-p.baseContext().Done():
		return false
	}
}

// isClosed reports whether Close was called.
func (p *Proxy) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

// dest is where an upstream connection goes: the destination the rules
// allowed and the address dialed.
type dest struct {
	host string
	port int
	addr netip.Addr
	// approved: a person's approval allowed it, not a rule (see
	// Verdict.Approved).
	approved bool
}

// track registers an upstream connection to d for Close and SetRules. It
// closes c and returns false when the proxy is closed already.
func (p *Proxy) track(c net.Conn, d dest) bool {
	p.mu.Lock()
	p.initLocked()
	if p.closed {
		p.mu.Unlock()
		c.Close()
		return false
	}
	p.conns[c] = d
	p.mu.Unlock()
	return true
}

// rules are the rules in force: those SetRules set last, else Rules.
func (p *Proxy) rules() *Rules {
	if r := p.set.Load(); r != nil {
		return r
	}
	return p.Rules
}

// SetRules makes r the rules of every connection from now on, and closes
// the open upstream connections that r would not have let through (the
// same host, port and address checked again, without a lookup): a tunnel
// or a kept-alive connection to a destination the new rules refuse ends
// at once, and the sandbox's next try is refused; one they still allow
// goes on. It returns how many it closed. r must bind the same secrets
// as the rules it replaces, which the proxy's cached secret sets stand
// for; rules with secrets need the proxy's CA.
func (p *Proxy) SetRules(r *Rules) (closed int, err error) {
	if r == nil {
		return 0, errors.New("egress: set rules: no rules")
	}
	if len(r.secrets) > 0 && p.CA == nil {
		return 0, errors.New("egress: set rules: the rules bind secrets but the proxy has no CA")
	}
	if !sameSecrets(r.secrets, p.rules().secrets) {
		return 0, errors.New("egress: set rules: the rules bind other secrets than the proxy's")
	}
	p.mu.Lock()
	p.set.Store(r)
	var cut []net.Conn
	for c, d := range p.conns {
		if d.host != "" && !r.admits(d.host, d.port, d.addr, d.approved) {
			cut = append(cut, c)
		}
	}
	p.mu.Unlock()
	for _, c := range cut {
		c.Close()
	}
	return len(cut), nil
}

// Secrets are the secrets the proxy's rules bind, for rules to replace
// them with (SetRules).
func (p *Proxy) Secrets() []*secrets.Secret { return slices.Clone(p.rules().secrets) }

// sameSecrets reports whether a and b are the same secrets, in order.
func sameSecrets(a, b []*secrets.Secret) bool {
	return slices.Equal(a, b)
}

// closeConn closes a tracked connection and forgets it.
func (p *Proxy) closeConn(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}

// goTracked runs f in a goroutine that Close waits for. The caller must
// run in such a goroutine itself.
func (p *Proxy) goTracked(f func()) {
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		f()
	}()
}

// Close stops the servers (HTTP, SOCKS5, DNS) and ends every open connection, the sandbox's
// and the upstream ones; it waits for the goroutines serving them. It
// returns nil; closing again does nothing.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.initLocked()
	if p.closed {
		p.mu.Unlock()
		p.wg.Wait()
		return nil
	}
	p.closed = true
	p.cancel()
	for l := range p.listeners {
		l.Close()
	}
	for c := range p.packets {
		c.Close()
	}
	for c := range p.conns {
		c.Close()
	}
	tr := p.transport
	p.mu.Unlock()
	p.wg.Wait()
	if tr != nil {
		tr.CloseIdleConnections()
	}
	return nil
}

// Traffic returns one Event (Action "allowed") per destination host:port
// that the proxy connected to, in the order of their first connections:
// Time is that of the first connection, Protocol that of the first
// connection, Address the address of the last one; Connections counts
// the upstream connections, BytesOut the bytes from the sandbox to the
// destination and BytesIn those back. The bytes of a connection are
// counted when the connection ends (a CONNECT tunnel or SOCKS5 stream) or
// when the exchange ends (a forwarded request and its response), so call
// Traffic after Close for the final sums. For a destination whose TLS
// the proxy intercepts (secrets are bound to it), the bytes are those of
// the sandbox's connections, TLS and all, and Connections counts the
// proxy's own connections to the destination, which the sandbox's
// requests share.
func (p *Proxy) Traffic() []Event {
	p.tmu.Lock()
	defer p.tmu.Unlock()
	out := make([]Event, 0, len(p.order))
	for _, k := range p.order {
		out = append(out, *p.traffic[k])
	}
	return out
}

// countConn counts a new upstream connection to host:port at addr.
func (p *Proxy) countConn(proto, host string, port int, addr netip.Addr) {
	p.tmu.Lock()
	defer p.tmu.Unlock()
	k := trafficKey{host, port}
	e := p.traffic[k]
	if e == nil {
		if p.traffic == nil {
			p.traffic = make(map[trafficKey]*Event)
		}
		e = &Event{Time: time.Now(), Sandbox: p.Sandbox, Action: "allowed", Protocol: proto, Host: host, Port: port}
		p.traffic[k] = e
		p.order = append(p.order, k)
	}
	e.Connections++
	e.Address = addr.String()
}

// countBytes adds bytes to the traffic of host:port, which countConn
// has counted before.
func (p *Proxy) countBytes(host string, port int, out, in int64) {
	p.tmu.Lock()
	defer p.tmu.Unlock()
	if e := p.traffic[trafficKey{host, port}]; e != nil {
		e.BytesOut += out
		e.BytesIn += in
	}
}

// block records a refusal and returns its event. v, when not nil, is the
// verdict that refused; host and port are the destination as the client
// gave it, used when v has none.
func (p *Proxy) block(proto, host string, port int, v *Verdict, reason string) Event {
	return p.record(p.blockEvent(proto, host, port, v, reason))
}

// blockSecret records the refusal of a request to host:port that carried
// the forbidden placeholder f, and returns its event.
func (p *Proxy) blockSecret(proto, host string, port int, f forbidden) Event {
	e := p.blockEvent(proto, host, port, nil, f.reason(host, port))
	e.Secret = cleanText(f.secret.Name, maxEventText)
	if p.rules().placeholderInName(host) == nil {
		// A name that carries a placeholder is no host to bind.
		allow, field := secretFix(f.secret, host, port, f.plain)
		e.Allow, e.AllowField = cleanText(allow, maxEventText), field
	}
	return p.record(e)
}

// record logs a refusal and passes it to Record.
func (p *Proxy) record(e Event) Event {
	args := []any{"protocol", e.Protocol, "host", e.Host, "port", e.Port, "reason", e.Reason}
	if e.Secret != "" {
		args = append(args, "secret", e.Secret)
	}
	p.log().Info("egress: blocked", args...)
	if p.Record != nil {
		p.Record(e)
	}
	return e
}

// blockEvent returns the event of a refusal, as block describes it.
func (p *Proxy) blockEvent(proto, host string, port int, v *Verdict, reason string) Event {
	e := Event{
		Time:     time.Now(),
		Sandbox:  p.Sandbox,
		Action:   "blocked",
		Protocol: proto,
		Host:     host,
		Port:     port,
		Reason:   reason,
	}
	if v != nil {
		if v.Host != "" {
			e.Host = v.Host
		}
		e.Port = v.Port
		e.Rule = v.Rule
		if e.Reason == "" {
			e.Reason = v.Reason
			e.Allow, e.AllowField = v.Allow, v.AllowField
		}
		if v.Addr.IsValid() {
			e.Address = v.Addr.String()
		}
	}
	e.Host = cleanText(e.Host, maxEventText)
	e.Reason = cleanText(e.Reason, maxEventText)
	e.Allow = cleanText(e.Allow, maxEventText)
	if e.Reason == "" {
		e.Reason = "blocked"
	}
	return e
}

// resolve asks the rules about host:port, within the dial timeout:
// Rules.Resolve, or Rules.ResolveApproved when a person approved it.
func (p *Proxy) resolve(host string, port int, approved bool) Verdict {
	ctx, cancel := context.WithTimeout(p.baseContext(), p.dialTimeout())
	defer cancel()
	return p.rules().resolve(ctx, host, port, approved)
}

// dial connects to port on the verdict's addresses in order, with the dial
// timeout spread over them as net.Dialer does, and returns the tracked
// connection and the address it reached. It dials addresses only, never a
// name.
func (p *Proxy) dial(v Verdict) (net.Conn, netip.Addr, error) {
	if len(v.Addrs) == 0 {
		return nil, netip.Addr{}, fmt.Errorf("dial %s: no address to connect to", hostPort(v.Host, v.Port))
	}
	deadline := time.Now().Add(p.dialTimeout())
	ctx, cancel := context.WithDeadline(p.baseContext(), deadline)
	defer cancel()
	var firstErr error
	for i, a := range v.Addrs {
		timeout := time.Until(deadline) / time.Duration(len(v.Addrs)-i)
		if left := time.Until(deadline); timeout < 2*time.Second && left > 2*time.Second {
			timeout = 2 * time.Second
		}
		d := net.Dialer{Timeout: timeout}
		c, err := d.DialContext(ctx, "tcp", netip.AddrPortFrom(a, uint16(v.Port)).String())
		if err == nil {
			if !p.track(c, dest{v.Host, v.Port, a, v.Approved}) {
				return nil, netip.Addr{}, errors.New("egress proxy closed")
			}
			return c, a, nil
		}
		if firstErr == nil {
			firstErr = err
		}
		if ctx.Err() != nil {
			break
		}
	}
	return nil, netip.Addr{}, firstErr
}

// halfCloser is a connection that can end its sending side alone.
type halfCloser interface {
	CloseWrite() error
}

// closeWrite ends c's sending side, or all of c when it cannot half-close.
func closeWrite(c net.Conn) {
	if hc, ok := c.(halfCloser); ok {
		if hc.CloseWrite() == nil {
			return
		}
	}
	c.Close()
}

// pipe copies bytes both ways between the sandbox's connection client and
// upstream until both directions have ended, passing each direction's end
// on as a half-close. It returns the bytes copied from the client (out)
// and to it (in). Both connections are handed to io.Copy as they are, so
// that TCP connections are spliced in the kernel.
func (p *Proxy) pipe(client, upstream net.Conn) (out, in int64) {
	done := make(chan struct{})
	p.goTracked(func() {
		defer close(done)
		var err error
		in, err = io.Copy(client, upstream)
		if err != nil {
			// A broken direction ends the other one too.
			client.Close()
			upstream.Close()
			return
		}
		closeWrite(client)
	})
	out, err := io.Copy(upstream, client)
	if err != nil {
		client.Close()
		upstream.Close()
	} else {
		closeWrite(upstream)
	}
	<-done
	return out, in
}

// lingerClose ends a refused connection after its answer: it half-closes
// c and reads what the client still sends for a moment, so that closing
// with unread data does not reset the connection before the client has
// read the answer. The caller closes c.
func lingerClose(c net.Conn) {
	hc, ok := c.(halfCloser)
	if !ok || hc.CloseWrite() != nil {
		return
	}
	_ = c.SetReadDeadline(time.Now().Add(lingerTimeout))
	_, _ = io.CopyN(io.Discard, c, lingerLimit)
}

// hostPort joins host and port, bracketing IPv6 addresses.
func hostPort(host string, port int) string {
	return net.JoinHostPort(host, fmt.Sprint(port))
}

// cleanText makes text that a client chose safe to show: control and
// other unprintable characters become '?', and text longer than max
// bytes is cut, ending in "…".
func cleanText(s string, limit int) string {
	clean := true
	for _, r := range s {
		if r == utf8.RuneError || !unicode.IsPrint(r) {
			clean = false
			break
		}
	}
	if !clean {
		s = strings.Map(func(r rune) rune {
			if r == utf8.RuneError || !unicode.IsPrint(r) {
				return '?'
			}
			return r
		}, s)
	}
	if len(s) > limit {
		cut := limit
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}

// readBudget is what the proxy may hold of request bodies it reads ahead,
// for all of its sandbox's requests at once.
type readBudget struct {
	mu   sync.Mutex
	used int64
}

// take takes n bytes from the budget of max, unless that would exceed it.
func (b *readBudget) take(n, max int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used+n > max {
		return false
	}
	b.used += n
	return true
}

// give returns n bytes to the budget.
func (b *readBudget) give(n int64) {
	b.mu.Lock()
	b.used -= n
	b.mu.Unlock()
}
