// Package forward sends a request for a sandbox that another replica of
// hutch serve serves on to that replica, so that replicas behind one
// Service answer for every sandbox: the front ends' requests name their
// sandbox in the path (hutch's API, E2B's REST API), in a header or in
// the host name (E2B's envd and ports), and the daemon (Locator) says
// which replica serves it. The request goes on unchanged — its host, its
// credentials, which the serving replica checks itself — with streams
// and upgrades (WebSocket) relayed as they come.
package forward

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"sync/atomic"
)

// Locator says where a request for sandbox id is served: "" here, else
// the address (URL) of the replica that serves it; fresh asks as things
// are now, not from views a moment behind (the replica it named before
// did not answer).
type Locator interface {
	Locate(ctx context.Context, id string, fresh bool) (string, error)
}

// Header marks a request one replica sent to another, with the sender's
// name: it is answered where it arrives, never sent on again.
const Header = "X-Hutch-Forwarded-By"

// Config says how a Handler forwards.
type Config struct {
	// Self names this replica in Header.
	Self string
	// IDs find the sandbox a request names: the first id one of them
	// finds ("" for none).
	IDs []func(*http.Request) string
	// Here, when set, says which requests are answered here whatever
	// their sandbox: those whose caller is known only here (the unix
	// socket's operator, whose credentials are its connection's).
	Here func(*http.Request) bool
	// Log logs the replicas that do not answer.
	Log *slog.Logger
}

// Handler is a forwarding handler: see New.
type Handler struct {
	next   http.Handler
	loc    Locator
	cfg    Config
	mu     sync.Mutex
	byAddr map[string]*httputil.ReverseProxy
}

// New returns a handler that serves with next every request but those
// for a sandbox another replica serves, which it sends to that replica.
func New(next http.Handler, loc Locator, cfg Config) *Handler {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &Handler{next: next, loc: loc, cfg: cfg, byAddr: map[string]*httputil.ReverseProxy{}}
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get(Header) != "" || h.cfg.Here != nil && h.cfg.Here(r) {
		h.next.ServeHTTP(w, r)
		return
	}
	id := ""
	for _, f := range h.cfg.IDs {
		if id = f(r); id != "" {
			break
		}
	}
	if id == "" {
		h.next.ServeHTTP(w, r)
		return
	}
	fresh := false
	for {
		addr, err := h.loc.Locate(r.Context(), id, fresh)
		if err != nil || addr == "" {
			// Here, or where it is cannot be told now: the request's own
			// answer says what became of the sandbox.
			h.next.ServeHTTP(w, r)
			return
		}
		p, err := h.proxy(addr)
		if err != nil {
			h.cfg.Log.Error("a replica's address", "address", addr, "err", err)
			h.next.ServeHTTP(w, r)
			return
		}
		// A replica that cannot be reached (gone a moment ago, which a
		// view may not know yet) is asked about once more, as things are
		// now, if nothing of the request was sent: its body is kept for
		// that (closed by the server, not by the proxy).
		try := &attempt{last: fresh}
		req := r.WithContext(context.WithValue(r.Context(), attemptKey{}, try))
		if r.Body != nil && r.Body != http.NoBody {
			try.body = &keptBody{r: r.Body}
			req.Body = try.body
		}
		// The owner may answer before the request's body is all sent on
		// (its reader stops at the end of the message it wanted): without
		// full duplex, HTTP/1's server ends the body once the answer
		// starts, which fails the copy and closes the connection under
		// the answer.
		_ = http.NewResponseController(w).EnableFullDuplex()
		p.ServeHTTP(w, req)
		if !try.again {
			return
		}
		fresh = true
	}
}

// attempt is one try at sending a request on (ServeHTTP).
type attempt struct {
	last  bool      // no other try follows
	body  *keptBody // the request's body, if any
	again bool      // the replica was not reached: try again
}

type attemptKey struct{}

// keptBody is a request's body as a proxy reads it: not closed by it, and
// whether it was read at all.
type keptBody struct {
	r    io.ReadCloser
	read atomic.Bool
}

func (b *keptBody) Read(p []byte) (int, error) {
	b.read.Store(true)
	return b.r.Read(p)
}

func (b *keptBody) Close() error { return nil }

// unreached reports whether err, a proxy's, says the replica was not
// reached: nothing was sent.
func unreached(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// proxy is the reverse proxy to the replica at addr.
func (h *Handler) proxy(addr string) (*httputil.ReverseProxy, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if p := h.byAddr[addr]; p != nil {
		return p, nil
	}
	target, err := url.Parse(addr)
	if err != nil {
		return nil, err
	}
	p := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Host = pr.In.Host // E2B's domain routes by it
			pr.SetXForwarded()
			pr.Out.Header.Set(Header, h.cfg.Self)
		},
		FlushInterval: -1, // streams (events, exec output) as they come
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if try, ok := r.Context().Value(attemptKey{}).(*attempt); ok && !try.last && unreached(err) && (try.body == nil || !try.body.read.Load()) {
				h.cfg.Log.Debug("the replica serving a sandbox did not answer; asking again where it is", "address", addr, "err", err)
				try.again = true
				return
			}
			h.cfg.Log.Warn("send a request on to the replica serving its sandbox", "address", addr, "path", r.URL.Path, "err", err)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadGateway)
			_ = json.NewEncoder(w).Encode(map[string]any{
				"code":    "unavailable",
				"message": "the replica of hutch serve that serves this sandbox did not answer: try again",
			})
		},
	}
	h.byAddr[addr] = p
	return p, nil
}

// PathID returns the id finder of paths PREFIX/ID[/...] for each prefix
// (e.g. "/v1/sandboxes/").
func PathID(prefixes ...string) func(*http.Request) string {
	return func(r *http.Request) string {
		p := r.URL.Path
		for _, pre := range prefixes {
			if len(p) > len(pre) && p[:len(pre)] == pre {
				rest := p[len(pre):]
				for i := 0; i < len(rest); i++ {
					if rest[i] == '/' {
						return rest[:i]
					}
				}
				return rest
			}
		}
		return ""
	}
}
