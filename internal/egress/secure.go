package egress

import (
	"bytes"
	"cmp"
	"compress/gzip"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/textproto"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hutch-sandbox/hutch/internal/secrets"
)

// Secrets on the requests that the proxy sees (S3): the sandbox holds
// placeholders; the proxy puts a secret's real value in for its
// placeholder only on requests to the destinations the secret is bound
// to, takes real values back out of their responses, and refuses every
// request that carries a placeholder anywhere else. The pieces here serve
// both the forwarding of http:// requests and the intercepted streams of
// intercept.go.

// maxResizedBody bounds a request body that the proxy reads whole to give
// it its new Content-Length, when substitution changes its length.
const maxResizedBody = 16 << 20

// forbidden is a placeholder that must not go to a destination: that of
// a secret not bound there, or of a bound one on a request in clear text
// that the secret does not allow.
type forbidden struct {
	secret *secrets.Secret
	plain  bool // bound, but not allowed over plain HTTP
}

// reason is the refusal's reason for a request to host:port.
func (f forbidden) reason(host string, port int) string {
	if f.plain {
		return fmt.Sprintf("secret %s is sent only over https (allow_plain_http is off)", f.secret.Name)
	}
	return fmt.Sprintf("secret %s is not bound to %s", f.secret.Name, hostPort(host, port))
}

// secretSet is what the proxy does about the secrets on the requests to
// one destination over one scheme (clear text or TLS). It is immutable; a
// nil *secretSet (a proxy without secrets) does nothing.
type secretSet struct {
	// bound are the secrets bound to the destination.
	bound []*secrets.Secret
	// forbid are the placeholders refused there; watch finds them (its
	// pair i is forbid[i]), and watchNames finds them in lower case in a
	// header name in lower case (header names lose their case).
	forbid            []forbidden
	watch, watchNames *secrets.Replacer
	// header, query and body put the real values in for the
	// placeholders, each nil when no secret is substituted there. query
	// puts in the values escaped for a URL query, for the placeholders as
	// they are and escaped; bodyResizes tells whether body changes
	// lengths.
	header, query, body *secrets.Replacer
	bodyResizes         bool
	// redact puts the bound secrets' placeholders back for their real
	// values in responses, also for the values' encoded forms (JSON,
	// percent-encoding, base64: secrets.RedactionPairs) by the
	// placeholders' same forms; redactResizes tells whether it changes
	// lengths. nil when no secret is bound.
	redact        *secrets.Replacer
	redactResizes bool
	// redactNames does what redact does in header and trailer names,
	// whose case is not kept (HTTP/2 lower-cases them, Go canonicalizes
	// them): its patterns are redact's in ASCII lower case, and it is
	// applied to names in lower case.
	redactNames *secrets.Replacer
}

// secretsFor returns what to do about secrets on requests to host:port
// (plain: in clear text), or nil when the rules have no secrets. The sets
// are cached by the secrets bound, so that their replacers are made once.
func (p *Proxy) secretsFor(host string, port int, plain bool) *secretSet {
	r := p.rules()
	if len(r.secrets) == 0 {
		return nil
	}
	idx := r.bound(host, port)
	key := fmt.Sprint(plain, idx)
	p.smu.Lock()
	defer p.smu.Unlock()
	if ss := p.sets[key]; ss != nil {
		return ss
	}
	ss := newSecretSet(r.secrets, idx, plain)
	if p.sets == nil {
		p.sets = make(map[string]*secretSet)
	}
	p.sets[key] = ss
	return ss
}

// newSecretSet makes the secretSet of a destination that the secrets of
// all at the indexes bound are bound to.
func newSecretSet(all []*secrets.Secret, bound []int, plain bool) *secretSet {
	ss := &secretSet{}
	var watch, watchNames, header, query, body, redact, redactNames [][2][]byte
	seenNames := map[string]bool{}
	for i, s := range all {
		ph, val := []byte(s.Placeholder), s.Value.Bytes()
		if !slices.Contains(bound, i) {
			ss.forbid = append(ss.forbid, forbidden{secret: s})
			watch = append(watch, [2][]byte{ph, ph})
			watchNames = append(watchNames, [2][]byte{bytes.ToLower(ph), nil})
			continue
		}
		ss.bound = append(ss.bound, s)
		for _, pair := range secrets.RedactionPairs(val, ph) {
			redact = append(redact, pair)
			ss.redactResizes = ss.redactResizes || len(pair[0]) != len(pair[1])
			if lower := asciiLower(pair[0]); !seenNames[string(lower)] {
				seenNames[string(lower)] = true
				redactNames = append(redactNames, [2][]byte{lower, asciiLower(pair[1])})
			}
		}
		if plain && !s.AllowPlainHTTP {
			ss.forbid = append(ss.forbid, forbidden{secret: s, plain: true})
			watch = append(watch, [2][]byte{ph, ph})
			watchNames = append(watchNames, [2][]byte{bytes.ToLower(ph), nil})
			continue
		}
		header = append(header, [2][]byte{ph, val})
		if s.InQuery {
			escaped := []byte(url.QueryEscape(string(val)))
			query = append(query, [2][]byte{ph, escaped})
			if e := url.QueryEscape(s.Placeholder); e != s.Placeholder {
				query = append(query, [2][]byte{[]byte(e), escaped})
			}
		}
		if s.InBody {
			body = append(body, [2][]byte{ph, val})
			ss.bodyResizes = ss.bodyResizes || len(val) != len(ph)
		}
	}
	replacer := func(pairs [][2][]byte) *secrets.Replacer {
		if len(pairs) == 0 {
			return nil
		}
		return secrets.NewReplacer(pairs...)
	}
	ss.watch, ss.watchNames = replacer(watch), replacer(watchNames)
	ss.header, ss.query, ss.body, ss.redact = replacer(header), replacer(query), replacer(body), replacer(redact)
	ss.redactNames = replacer(redactNames)
	return ss
}

// asciiLower returns b with its ASCII letters in lower case (and every
// other byte as it is, so that positions are kept).
func asciiLower(b []byte) []byte {
	out := make([]byte, len(b))
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		out[i] = c
	}
	return out
}

// findHead returns the first forbidden placeholder (in the order of the
// secrets) that a request's URI, as sent or percent-decoded, or its
// header carries, in a name (whatever its case) or a value, the
// credentials of Basic authorization decoded; nil when there is none. Proxy-Authorization is
// not looked at: it is the proxy's, never passed on.
func (ss *secretSet) findHead(uri string, h http.Header) *forbidden {
	if ss == nil || ss.watch == nil {
		return nil
	}
	best := -1
	lookIn := func(w *secrets.Replacer, s string) {
		if found := w.Contains([]byte(s)); len(found) > 0 && (best < 0 || found[0] < best) {
			best = found[0]
		}
	}
	look := func(s string) { lookIn(ss.watch, s) }
	look(uri)
	if u, err := url.PathUnescape(uri); err == nil && u != uri {
		look(u)
	}
	for k, vs := range h {
		if k == "Proxy-Authorization" {
			continue
		}
		// Header names lose their case (canonical form).
		lookIn(ss.watchNames, strings.ToLower(k))
		for _, v := range vs {
			look(v)
			if creds, ok := basicCredentials(v); ok {
				look(creds)
			}
		}
	}
	if best < 0 {
		return nil
	}
	return &ss.forbid[best]
}

// basicCredentials returns the decoded "user:password" of a Basic
// authorization value.
func basicCredentials(v string) (string, bool) {
	scheme, rest, ok := strings.Cut(strings.TrimSpace(v), " ")
	if !ok || !strings.EqualFold(scheme, "Basic") {
		return "", false
	}
	rest = strings.TrimSpace(rest)
	b, err := base64.StdEncoding.DecodeString(rest)
	if err != nil {
		if b, err = base64.RawStdEncoding.DecodeString(rest); err != nil {
			return "", false
		}
	}
	return string(b), true
}

// substHeader puts the real values in for the placeholders in every value
// of h, except Proxy-Authorization; in Basic authorization it does so in
// the decoded user and password.
func (ss *secretSet) substHeader(h http.Header) {
	if ss == nil || ss.header == nil {
		return
	}
	for k, vs := range h {
		if k == "Proxy-Authorization" {
			continue
		}
		for i, v := range vs {
			if k == "Authorization" {
				if creds, ok := basicCredentials(v); ok {
					if user, pass, ok := strings.Cut(creds, ":"); ok {
						u, p := ss.header.Bytes([]byte(user)), ss.header.Bytes([]byte(pass))
						if string(u) != user || string(p) != pass {
							plain := make([]byte, 0, len(u)+1+len(p))
							plain = append(append(append(plain, u...), ':'), p...)
							vs[i] = "Basic " + base64.StdEncoding.EncodeToString(plain)
							clear(plain)
						}
						continue
					}
				}
			}
			vs[i] = string(ss.header.Bytes([]byte(v)))
		}
	}
}

// substQuery puts the real values, escaped, in for the placeholders in
// u's query, for the secrets allowed there.
func (ss *secretSet) substQuery(u *url.URL) {
	if ss == nil || ss.query == nil || u.RawQuery == "" {
		return
	}
	u.RawQuery = string(ss.query.Bytes([]byte(u.RawQuery)))
}

// redactHeader puts the placeholders back for the bound secrets' real
// values (and their encoded forms) in every value of h, and in every name,
// whatever its case: a name that holds one is renamed, its values going
// to the new name (after those it may have already).
func (ss *secretSet) redactHeader(h http.Header) {
	if ss == nil || ss.redact == nil {
		return
	}
	var renamed []string
	for k, vs := range h {
		for i, v := range vs {
			if b := ss.redact.Bytes([]byte(v)); string(b) != v {
				vs[i] = string(b)
			}
		}
		lower := asciiLower([]byte(k))
		if b := ss.redactNames.Bytes(lower); !bytes.Equal(b, lower) {
			renamed = append(renamed, k)
		}
	}
	for _, k := range renamed {
		vs := h[k]
		delete(h, k)
		name := textproto.CanonicalMIMEHeaderKey(string(ss.redactNames.Bytes(asciiLower([]byte(k)))))
		h[name] = append(h[name], vs...)
	}
}

// redactHead puts the placeholders back for the bound secrets' real
// values in what a response says before its body: its status text, its
// header (names and values), and the names of the trailer it announces.
// It serves interim (1xx) responses as well as final ones.
func (ss *secretSet) redactHead(resp *http.Response) {
	if ss == nil || ss.redact == nil {
		return
	}
	if b := ss.redact.Bytes([]byte(resp.Status)); string(b) != resp.Status {
		resp.Status = string(b)
	}
	ss.redactHeader(resp.Header)
	ss.redactHeader(resp.Trailer)
}

// redactResponse puts the placeholders back for the bound secrets' real
// values (and their encoded forms) in a response: its header, its body as
// it streams, and its trailer. A body with Content-Encoding gzip (alone)
// is decompressed first and goes on without that encoding; bodies in
// other encodings go on as they are, unredacted. When redaction may change
// the body's length, the response loses its Content-Length and is sent in
// chunks. A 101 response's body, the upgraded connection, is left alone.
func (ss *secretSet) redactResponse(resp *http.Response) {
	if ss == nil || ss.redact == nil {
		return
	}
	ss.redactHead(resp)
	if resp.StatusCode == http.StatusSwitchingProtocols || !responseHasBody(resp) {
		return
	}
	var src io.Reader = resp.Body
	resize := ss.redactResizes
	if ce := strings.ToLower(strings.TrimSpace(resp.Header.Get("Content-Encoding"))); len(resp.Header.Values("Content-Encoding")) == 1 && (ce == "gzip" || ce == "x-gzip") {
		// The proxy asks for no compression; an upstream that compresses
		// anyway has its body decompressed, to be redacted.
		src = &gunzipReader{src: resp.Body}
		resp.Header.Del("Content-Encoding")
		resp.Uncompressed = true
		resize = true
	}
	resp.Body = &redactedBody{r: ss.redact.Reader(src), body: resp.Body, resp: resp, ss: ss}
	if resize && resp.ContentLength != 0 {
		resp.ContentLength = -1
		resp.Header.Del("Content-Length")
		resp.TransferEncoding = []string{"chunked"}
	}
}

// gunzipReader reads the gzip-decompressed bytes of src, starting the
// decompressor at the first read.
type gunzipReader struct {
	src io.Reader
	zr  *gzip.Reader
	err error
}

// Read implements io.Reader.
func (g *gunzipReader) Read(p []byte) (int, error) {
	if g.err != nil {
		return 0, g.err
	}
	if g.zr == nil {
		zr, err := gzip.NewReader(g.src)
		if err != nil {
			g.err = fmt.Errorf("gzip response body: %w", err)
			return 0, g.err
		}
		g.zr = zr
	}
	n, err := g.zr.Read(p)
	if err != nil && err != io.EOF {
		err = fmt.Errorf("gzip response body: %w", err)
	}
	if err != nil {
		g.err = err
	}
	return n, err
}

// responseHasBody reports whether resp may have a body.
func responseHasBody(resp *http.Response) bool {
	switch {
	case resp.Body == nil || resp.Body == http.NoBody:
		return false
	case resp.Request != nil && resp.Request.Method == http.MethodHead:
		return false
	case resp.StatusCode < 200 || resp.StatusCode == http.StatusNoContent || resp.StatusCode == http.StatusNotModified:
		return false
	}
	return true
}

// redactedBody is a response body with the real values replaced; it
// redacts the response's trailer once the body has ended.
type redactedBody struct {
	r    io.Reader
	body io.ReadCloser
	resp *http.Response
	ss   *secretSet
	once sync.Once
}

// Read reads the redacted body.
func (b *redactedBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err == io.EOF {
		b.redactTrailer()
	}
	return n, err
}

// Close closes the body.
func (b *redactedBody) Close() error {
	err := b.body.Close()
	b.redactTrailer()
	return err
}

// redactTrailer redacts the response's trailer, once.
func (b *redactedBody) redactTrailer() {
	b.once.Do(func() { b.ss.redactHeader(b.resp.Trailer) })
}

// readCloser reads from one reader and closes another.
type readCloser struct {
	io.Reader
	io.Closer
}

// closers closes both, in turn: the reader of a body read ahead (which
// ends the goroutine that passes the body on) and the body.
type closers [2]io.Closer

// Close closes both and returns the first error.
func (c closers) Close() error {
	err := c[0].Close()
	if err2 := c[1].Close(); err == nil {
		err = err2
	}
	return err
}

// refusal is the proxy's answer to a request it will not send on.
type refusal struct {
	status int
	event  *Event // nil: no event (the client broke off)
}

// prepareBody makes req's body what the destination host:port gets: the
// body is watched for forbidden placeholders (a find is recorded as a
// refusal of protocol proto, and trips trip), and the placeholders are
// replaced where the secrets allow it. A body that may carry a forbidden
// placeholder is read whole first, up to maxResizedBody, so that a refused
// request sends nothing upstream, not even its header; a longer one (of
// unknown length) is watched as it streams, and a find then cuts the
// upstream request. A body whose length substitution may change is read
// whole too, to announce the new length. Before reading ahead it calls
// expect, when not nil. It returns a refusal, or nil to go on.
// done, never nil, gives back what the body holds of the proxy's
// read-ahead budget (Proxy.MaxReadAhead) — which closing the body does as
// well — and must be called once the request has ended.
func (p *Proxy) prepareBody(req *http.Request, ss *secretSet, trip *tripwire, proto, host string, port int, expect func()) (ref *refusal, done func()) {
	done = func() {}
	if ss == nil || req.Body == nil || req.Body == http.NoBody {
		return nil, done
	}
	body := ss.wrapBody(req.Body, func(f forbidden) {
		trip.fire(p.blockSecret(proto, host, port, f))
	})
	resize := ss.bodyResizes && req.ContentLength > 0
	if !resize && ss.watch == nil {
		req.Body = body
		return nil, done
	}
	if req.ContentLength > maxResizedBody {
		if resize {
			e := p.block(proto, host, port, nil, fmt.Sprintf("request body of %d bytes: over 16 MiB, too large to count again after substituting secrets", req.ContentLength))
			return &refusal{status: http.StatusRequestEntityTooLarge, event: &e}, done
		}
		req.Body = body
		return nil, done
	}
	if expect != nil {
		expect()
	}
	wait := readAheadWait
	if resize {
		wait = 0 // the new length must be known
	}
	// What is read ahead counts against the proxy's budget until the
	// body is closed (sent, or the request ended).
	var held atomic.Int64
	max := cmp.Or(p.MaxReadAhead, DefaultMaxReadAhead)
	var short atomic.Bool
	take := func(n int) bool {
		if !p.ahead.take(int64(n), max) {
			short.Store(true)
			return false
		}
		held.Add(int64(n))
		return true
	}
	release := closerFunc(func() { p.ahead.give(held.Swap(0)) })
	done = func() { release.Close() }
	b, rest, err := readAhead(body, maxResizedBody, wait, take)
	if err != nil {
		release()
		if e := trip.fired(); e != nil {
			return &refusal{status: http.StatusForbidden, event: e}, done
		}
		p.log().Debug("egress: reading a request body", "host", host, "port", port, "err", p.rules().scrub(err.Error()))
		return &refusal{status: http.StatusBadRequest}, done
	}
	if rest != nil && resize && short.Load() {
		rest.Close()
		release()
		e := p.block(proto, host, port, nil, fmt.Sprintf("request bodies held for the sandbox: over %d KiB, too many to count this one's length again after substituting secrets", max>>10))
		return &refusal{status: http.StatusServiceUnavailable, event: &e}, done
	}
	if rest != nil {
		// Longer than the limit or the budget, or still streaming:
		// watched from here on.
		req.Body = readCloser{rest, closers{rest, closers{req.Body, release}}}
		return nil, done
	}
	req.Body = readCloser{bytes.NewReader(b), closers{req.Body, release}}
	req.ContentLength = int64(len(b))
	req.TransferEncoding = nil
	if req.Header.Get("Content-Length") != "" {
		req.Header.Set("Content-Length", strconv.Itoa(len(b)))
	}
	return nil, done
}

// readAheadWait is how long prepareBody waits for a watched body to end
// before it lets the body stream (a client that waits for the response
// before it sends the rest of its body).
const readAheadWait = time.Second

// readAhead reads r to its end if it ends within limit bytes and, when
// wait > 0, within wait, taking each piece it holds from take (when not
// nil): when take refuses, it stops as when over the limit. Then it returns the body whole and a nil rest.
// Otherwise it returns rest, a reader of everything r gives (what was read
// ahead first, at once, even while r has nothing more yet: a client may
// wait for an answer to what it sent), and b is nil. An error of r while
// reading ahead is returned as err.
func readAhead(r io.Reader, limit int64, wait time.Duration, take func(n int) bool) (b []byte, rest io.ReadCloser, err error) {
	type result struct {
		b      []byte
		err    error
		stream bool // the body goes on through pr
	}
	pr, pw := io.Pipe()
	var (
		mu        sync.Mutex
		handedOff bool // rest's reader takes over
		finished  bool // the goroutine has sent its result
	)
	done := make(chan result, 1)
	// stream passes on what was read ahead and then the rest of r.
	stream := func(buf []byte, rerr error) {
		if _, werr := pw.Write(buf); werr != nil {
			return
		}
		if rerr == nil {
			_, rerr = io.Copy(pw, r)
		}
		if rerr == io.EOF {
			rerr = nil
		}
		pw.CloseWithError(rerr)
	}
	// buf is what was read ahead; once handedOff, rest's reader owns it
	// and the goroutine streams what it reads next.
	var buf bytes.Buffer
	go func() {
		chunk := make([]byte, 32<<10)
		for {
			n, rerr := r.Read(chunk)
			mu.Lock()
			if handedOff {
				mu.Unlock()
				stream(chunk[:n], rerr)
				return
			}
			over := int64(buf.Len()+n) > limit || (take != nil && n > 0 && !take(n))
			buf.Write(chunk[:n])
			end := rerr != nil || over
			if !end {
				mu.Unlock()
				continue
			}
			finished = true
			mu.Unlock()
			switch {
			case rerr == io.EOF:
				done <- result{b: buf.Bytes()}
			case rerr != nil:
				done <- result{err: rerr}
			default: // over the limit
				done <- result{stream: true}
				stream(buf.Bytes(), nil)
			}
			return
		}
	}()
	var timeout <-chan time.Time
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		timeout = t.C
	}
	var res result
	select {
	case res = <-done:
	case <-timeout:
		mu.Lock()
		if !finished {
			handedOff = true
			head := buf.Bytes()
			mu.Unlock()
			return nil, readCloser{io.MultiReader(bytes.NewReader(head), pr), pr}, nil
		}
		mu.Unlock()
		res = <-done
	}
	switch {
	case res.err != nil:
		return nil, nil, res.err
	case res.stream:
		return nil, pr, nil
	}
	return res.b, nil, nil
}

// wrapBody returns body watched for the forbidden placeholders (found is
// called with the first one, and reading fails) and with the real values
// put in for the placeholders where the secrets allow it.
func (ss *secretSet) wrapBody(body io.ReadCloser, found func(forbidden)) io.ReadCloser {
	var r io.Reader = body
	if ss.watch != nil {
		r = &scanReader{src: r, watch: ss.watch, found: func(i int) { found(ss.forbid[i]) }}
	}
	if ss.body != nil {
		r = ss.body.Reader(r)
	}
	if r == io.Reader(body) {
		return body
	}
	return readCloser{r, body}
}

// errForbiddenPlaceholder ends a request body that carried a forbidden
// placeholder.
var errForbiddenPlaceholder = errors.New("the request body carries a secret's placeholder that may not go there")

// scanReader passes a stream on while it watches it for the patterns of
// watch: it holds back the bytes at the end of what it read that may
// begin a pattern (at most the longest pattern less one,
// secrets.Replacer.Undecided) until it has seen what follows them, so
// that no byte of a pattern is passed on, and a stream that pauses (a
// bidirectional stream waiting for its answer) is passed on up to where
// it paused unless it paused inside what may be a pattern. When a
// pattern turns up, it calls found with its index and fails with
// errForbiddenPlaceholder from then on.
type scanReader struct {
	src   io.Reader
	watch *secrets.Replacer
	found func(int)
	buf   []byte
	// buf[off:ready] is checked and may be returned; buf[ready:n] is
	// checked but held back.
	off, ready, n int
	err           error
}

// scanChunk is how much a scanReader reads at a time.
const scanChunk = 32 << 10

// Read returns what was checked and need not be held back.
func (s *scanReader) Read(p []byte) (int, error) {
	for empty := 0; ; {
		if s.off < s.ready {
			n := copy(p, s.buf[s.off:s.ready])
			s.off += n
			return n, nil
		}
		if s.err != nil {
			return 0, s.err
		}
		if s.buf == nil {
			s.buf = make([]byte, scanChunk+s.watch.MaxLen())
		}
		s.n = copy(s.buf, s.buf[s.ready:s.n])
		s.off, s.ready = 0, 0
		k, err := s.src.Read(s.buf[s.n:])
		s.n += k
		if k > 0 {
			if found := s.watch.Contains(s.buf[:s.n]); len(found) > 0 {
				s.err, s.n = errForbiddenPlaceholder, 0
				s.found(found[0])
				return 0, s.err
			}
		}
		switch {
		case err == io.EOF:
			s.ready, s.err = s.n, err
		case err != nil:
			s.n, s.err = 0, err
		default:
			s.ready = s.watch.Undecided(s.buf[:s.n])
			if k == 0 {
				if empty++; empty >= 100 {
					s.err = io.ErrNoProgress
				}
			}
		}
	}
}

// tripwire is the state of one request whose body is watched for
// forbidden placeholders, which turn up only while the body streams to
// the destination. When one does (fire), the upstream connection is
// closed, and the client's too once the response has begun; before that,
// the proxy answers with the refusal instead of the response (begin).
// A nil *tripwire never fires.
type tripwire struct {
	mu       sync.Mutex
	event    *Event
	started  bool
	upstream io.Closer // closed when it fires, when not nil
	client   io.Closer // closed when it fires after the response began
	// done ends what the request's body holds of the proxy (prepareBody),
	// once the request has ended (end).
	done func()
}

// end calls done, if set, once the request has ended.
func (t *tripwire) end() {
	if t != nil && t.done != nil {
		t.done()
	}
}

// fire records e as the request's refusal, the first time only.
func (t *tripwire) fire(e Event) {
	if t == nil {
		return
	}
	t.mu.Lock()
	if t.event != nil {
		t.mu.Unlock()
		return
	}
	t.event = &e
	up, client := t.upstream, t.client
	if !t.started {
		client = nil
	}
	t.mu.Unlock()
	if up != nil {
		up.Close()
	}
	if client != nil {
		client.Close()
	}
}

// setUpstream sets the connection that fire closes.
func (t *tripwire) setUpstream(c io.Closer) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.upstream = c
}

// begin marks the response begun, unless the tripwire fired: then it
// returns the refusal's event.
func (t *tripwire) begin() *Event {
	if t == nil {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.event != nil {
		e := *t.event
		return &e
	}
	t.started = true
	return nil
}

// fired returns the refusal's event, or nil when it did not fire.
func (t *tripwire) fired() *Event {
	if t == nil {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.event == nil {
		return nil
	}
	e := *t.event
	return &e
}
