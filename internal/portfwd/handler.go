package portfwd

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Handler bounds.
const (
	// MaxTargets is how many capability URLs a Handler keeps at once.
	MaxTargets = 1 << 16
	// MaxPortsPerSandbox is how many ports of one sandbox a Handler
	// publishes.
	MaxPortsPerSandbox = 16
)

// DialFunc connects to a sandbox's port, e.g. with Dial through the
// sandbox's agent (Dialer).
type DialFunc func(ctx context.Context) (net.Conn, error)

// Dialer is the DialFunc of port inside the sandbox whose agent client
// returns (looked up at each connection, so that a sandbox that ended is
// an error rather than a stale client).
func Dialer(client AgentFunc, port int) DialFunc {
	return func(ctx context.Context) (net.Conn, error) {
		c, err := client(ctx)
		if err != nil {
			return nil, err
		}
		conn, err := Dial(ctx, c, port)
		if err != nil {
			return nil, err
		}
		return conn, nil
	}
}

// NewTransport returns the http.Transport of a reverse proxy to sandbox
// ports: each connection is made by the DialFunc that dialer finds in the
// request's context (none: the request fails), never through the host's
// proxy or network. Requests for different sandbox ports must have
// different URL hosts, which keep their idle connections apart.
func NewTransport(dialer func(ctx context.Context) DialFunc) *http.Transport {
	return &http.Transport{
		Proxy: nil, // never the host's proxy: the dialer reaches the sandbox
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			dial := dialer(ctx)
			if dial == nil {
				return nil, errors.New("no sandbox port for this request")
			}
			return dial(ctx)
		},
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     30 * time.Second,
		DisableCompression:  true,
	}
}

// Handler reverse-proxies HTTP requests, upgrades (WebSocket) included,
// to servers listening inside sandboxes, each behind a capability URL:
// base + an unguessable token + "/", followed by the path on the server.
// It serves paths of the form /TOKEN/PATH: mount it with http.StripPrefix
// under base's path. Whoever holds a URL reaches the server, so a URL is
// handed only to who may use the sandbox; it lives until Forget.
//
// The server sees the request as a browser on its own machine would send
// it — Host localhost:PORT, the path after the token — without the
// Authorization and Proxy-Authorization headers (the caller's credentials
// for whatever serves the Handler are not the sandbox's to see). Redirects
// to its own address, or to a path of its own, are rewritten to the URL.
// A page that links to absolute paths ("/app.js") leaves the URL's
// prefix: servers reached this way should use relative links, or be told
// their base path.
type Handler struct {
	mu      sync.Mutex
	byToken map[string]*target
	byKey   map[forwardKey]string

	transport *http.Transport
	proxy     *httputil.ReverseProxy
}

// target is one published port.
type target struct {
	key     forwardKey
	base    *url.URL // base + token + "/"
	dial    DialFunc
	expires time.Time // zero: until Forget
}

// targetKey is what a request's context carries to the Transport's dialer.
type targetKey struct{}

// NewHandler returns a Handler with nothing published.
func NewHandler() *Handler {
	h := &Handler{byToken: map[string]*target{}, byKey: map[forwardKey]string{}}
	h.transport = NewTransport(func(ctx context.Context) DialFunc {
		if t, _ := ctx.Value(targetKey{}).(*target); t != nil {
			return t.dial
		}
		return nil
	})
	h.proxy = &httputil.ReverseProxy{
		Rewrite:        h.rewrite,
		Transport:      h.transport,
		ModifyResponse: h.modifyResponse,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			t, _ := r.Context().Value(targetKey{}).(*target)
			msg := err.Error()
			if t != nil && errors.Is(err, ErrNotListening) {
				msg = fmt.Sprintf("nothing listens on port %d in sandbox %s", t.key.port, t.key.sandbox)
			}
			http.Error(w, "hutch: "+msg, http.StatusBadGateway)
		},
	}
	return h
}

// URL returns the capability URL of port inside sandbox under base (an
// absolute URL whose path ends in "/", where the Handler is mounted),
// publishing it at the first call; dial connects to the port. A sandbox's
// port keeps its URL until Forget.
func (h *Handler) URL(base, sandbox string, port int, dial DialFunc) (string, error) {
	return h.URLUntil(base, sandbox, port, dial, time.Time{})
}

// URLUntil is URL for a port whose URL also ends at expires (the
// sandbox's end, as known when it is published; zero: only Forget ends
// it), for a publisher that is not told when its sandboxes end: a URL
// past its time answers 404, and the next call publishes a new one.
func (h *Handler) URLUntil(base, sandbox string, port int, dial DialFunc, expires time.Time) (string, error) {
	if err := CheckPort(port); err != nil {
		return "", err
	}
	u, err := url.Parse(base)
	if err != nil || !u.IsAbs() || !strings.HasSuffix(u.Path, "/") {
		return "", fmt.Errorf("port URL base %q: want an absolute URL whose path ends in /", base)
	}
	k := forwardKey{sandbox, port}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.expireLocked()
	if tok, ok := h.byKey[k]; ok {
		return h.byToken[tok].base.String(), nil
	}
	if len(h.byToken) >= MaxTargets {
		return "", fmt.Errorf("%d sandbox ports are published already, the most hutch keeps", MaxTargets)
	}
	n := 0
	for pk := range h.byKey {
		if pk.sandbox == sandbox {
			n++
		}
	}
	if n >= MaxPortsPerSandbox {
		return "", fmt.Errorf("%d ports of sandbox %s are published already, the most hutch publishes of one sandbox", n, sandbox)
	}
	var b [24]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	tok := hex.EncodeToString(b[:])
	t := &target{key: k, base: u.JoinPath(tok), dial: dial, expires: expires}
	t.base.Path += "/"
	h.byToken[tok] = t
	h.byKey[k] = tok
	return t.base.String(), nil
}

// Forget unpublishes every port of sandbox (which ended): their URLs
// answer 404 from now on, and the idle connections kept to it close.
func (h *Handler) Forget(sandbox string) {
	h.mu.Lock()
	for k, tok := range h.byKey {
		if k.sandbox == sandbox {
			delete(h.byKey, k)
			delete(h.byToken, tok)
		}
	}
	h.mu.Unlock()
	// Every target's: the Transport cannot close one host's alone.
	h.transport.CloseIdleConnections()
}

// expireLocked unpublishes the targets past their time; h.mu is held.
func (h *Handler) expireLocked() {
	now := time.Now()
	for tok, t := range h.byToken {
		if !t.expires.IsZero() && !now.Before(t.expires) {
			delete(h.byToken, tok)
			delete(h.byKey, t.key)
		}
	}
}

// Close closes the idle connections to the sandboxes.
func (h *Handler) Close() { h.transport.CloseIdleConnections() }

// ServeHTTP proxies a request for /TOKEN/PATH to PATH on the token's
// sandbox port; an unknown token is 404.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := strings.TrimPrefix(r.URL.Path, "/")
	tok, _, _ := strings.Cut(p, "/")
	h.mu.Lock()
	t := h.byToken[tok]
	h.mu.Unlock()
	if t != nil && !t.expires.IsZero() && !time.Now().Before(t.expires) {
		t = nil
	}
	if t == nil || strings.Trim(tok, "0123456789abcdef") != "" {
		http.Error(w, "no such sandbox port (its URL ends with its sandbox)", http.StatusNotFound)
		return
	}
	if !strings.HasPrefix(p, tok+"/") {
		// The URL itself, without its last slash: relative links resolve
		// under the token only with it.
		http.Redirect(w, r, t.base.Path, http.StatusPermanentRedirect)
		return
	}
	FullDuplex(w)
	h.proxy.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), targetKey{}, t)))
}

// rewrite makes the request the server sees.
func (h *Handler) rewrite(pr *httputil.ProxyRequest) {
	t := pr.In.Context().Value(targetKey{}).(*target)
	in := pr.In.URL
	_, rest, _ := strings.Cut(strings.TrimPrefix(in.Path, "/"), "/")
	out := pr.Out
	// One host name per target keeps the Transport's idle connections of
	// different sandboxes and ports apart.
	out.URL.Scheme = "http"
	out.URL.Host = t.key.sandbox + "-" + strconv.Itoa(t.key.port) + ".sandbox.invalid"
	out.URL.Path = "/" + rest
	out.URL.RawPath = ""
	if in.RawPath != "" {
		_, rawRest, _ := strings.Cut(strings.TrimPrefix(in.RawPath, "/"), "/")
		out.URL.RawPath = "/" + rawRest
	}
	out.Host = "localhost:" + strconv.Itoa(t.key.port)
	out.Header.Del("Authorization")
	out.Header.Del("Proxy-Authorization")
}

// modifyResponse rewrites a redirect to the server's own address, or to
// one of its paths, to the capability URL.
func (h *Handler) modifyResponse(resp *http.Response) error {
	loc := resp.Header.Get("Location")
	if loc == "" {
		return nil
	}
	t, _ := resp.Request.Context().Value(targetKey{}).(*target)
	if t == nil {
		return nil
	}
	u, err := url.Parse(loc)
	if err != nil {
		return nil
	}
	own := false
	switch {
	case u.Host == "" && u.Scheme == "" && strings.HasPrefix(u.Path, "/"):
		own = true
	case u.Scheme == "http" || u.Scheme == "https":
		host, port := u.Hostname(), u.Port()
		own = port == strconv.Itoa(t.key.port) && (host == "localhost" || host == "127.0.0.1" || host == "::1" || host == "0.0.0.0")
	}
	if !own {
		return nil
	}
	nu := *t.base
	nu.Path = strings.TrimSuffix(t.base.Path, "/") + u.Path
	nu.RawPath = ""
	nu.RawQuery, nu.Fragment = u.RawQuery, u.Fragment
	if u.Host == "" {
		// A path: the answer keeps the request's own host.
		nu.Scheme, nu.Host = "", ""
	}
	resp.Header.Set("Location", nu.String())
	return nil
}

// FullDuplex lets a proxy's handler go on reading the request's body after
// the answer began: a server in a sandbox may answer (and an answer be
// flushed through, as a streamed one is at once) before the request's
// body has all been sent on to it, and net/http's HTTP/1 server would
// otherwise close that body at the answer's first write — the request to
// the sandbox then breaks off mid-answer. It does nothing where the
// writer cannot (HTTP/2 is full duplex anyway).
func FullDuplex(w http.ResponseWriter) {
	_ = http.NewResponseController(w).EnableFullDuplex()
}
