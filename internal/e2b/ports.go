package e2b

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"path"
	"strconv"
	"strings"

	"github.com/hutch-sandbox/hutch/internal/agent"
	"github.com/hutch-sandbox/hutch/internal/daemon"
	"github.com/hutch-sandbox/hutch/internal/interp"
	"github.com/hutch-sandbox/hutch/internal/portfwd"
)

// TrafficTokenHeader carries a sandbox's traffic access token in a request
// to one of its ports, as E2B's proxy reads it.
const TrafficTokenHeader = "E2b-Traffic-Access-Token"

// portPlaceholder in network.maskRequestHost stands for the port.
const portPlaceholder = "${PORT}"

// maxMask bounds network.maskRequestHost.
const maxMask = 255

// checkMask checks network.maskRequestHost: a host name or address, with
// an optional port, in which "${PORT}" may stand for the port.
func checkMask(mask string) error {
	probe := strings.ReplaceAll(mask, portPlaceholder, "1")
	if mask == "" || len(mask) > maxMask || strings.Trim(probe, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_:[]") != "" {
		return errorf(daemon.ErrInvalid, "network.maskRequestHost %.80q: want a host name, with an optional :port, of at most %d characters (letters, digits, '.', '-', '_', ':', '[', ']'; %s stands for the port)", mask, maxMask, portPlaceholder)
	}
	return nil
}

// portTarget is what a request to a sandbox's port carries to the proxy.
type portTarget struct {
	id    string
	port  int
	host  string // the Host header the server sees
	agent *agent.Client
}

type portTargetKey struct{}

// proxyError is the body of the port proxy's refusals, as E2B's proxy
// words them.
type proxyError struct {
	Code      int    `json:"code"`
	Message   string `json:"message"`
	SandboxID string `json:"sandboxId,omitempty"`
	Port      int    `json:"port,omitempty"`
}

// portProxy is the reverse proxy of ServePort: HTTP, upgrades (WebSocket)
// and streamed bodies, each connection made inside the sandbox
// (portfwd.Dial: to its own loopback, in its network namespace, never
// the host's).
func (h *Handler) portProxy() *httputil.ReverseProxy {
	tr := portfwd.NewTransport(func(ctx context.Context) portfwd.DialFunc {
		t, _ := ctx.Value(portTargetKey{}).(*portTarget)
		if t == nil {
			return nil
		}
		return func(ctx context.Context) (net.Conn, error) { return portfwd.Dial(ctx, t.agent, t.port) }
	})
	return &httputil.ReverseProxy{
		Transport:     tr,
		FlushInterval: -1,
		Rewrite: func(pr *httputil.ProxyRequest) {
			t := pr.In.Context().Value(portTargetKey{}).(*portTarget)
			// One URL host per sandbox port keeps their idle
			// connections apart.
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = t.id + "-" + strconv.Itoa(t.port) + ".sandbox.invalid"
			pr.SetXForwarded()
			pr.Out.Host = t.host
			pr.Out.Header.Del(TrafficTokenHeader)
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			t := r.Context().Value(portTargetKey{}).(*portTarget)
			if errors.Is(err, portfwd.ErrNotListening) {
				writeJSON(w, http.StatusBadGateway, proxyError{Code: http.StatusBadGateway, SandboxID: t.id, Port: t.port,
					Message: "The sandbox is running but port is not open"})
				return
			}
			if r.Context().Err() != nil {
				return // the client went away
			}
			h.log.Debug("sandbox port request failed", "sandbox", t.id, "port", t.port, "err", err)
			writeJSON(w, http.StatusBadGateway, proxyError{Code: http.StatusBadGateway, SandboxID: t.id, Port: t.port,
				Message: fmt.Sprintf("sandbox %s, port %d: %v", t.id, t.port, err)})
		},
	}
}

// ServePort proxies r to port of sandbox id (PORT-ID.DOMAIN, Domain):
// the sandbox must be known to the handler (made or connected through
// E2B's API) and live, and, unless its ports are public, r must carry its
// traffic access token (TrafficTokenHeader) — no API key or other
// sandbox's token opens it. The server sees the request with the host the
// client asked for, or the sandbox's network.maskRequestHost, and without
// the traffic token. A paused sandbox is resumed by resumeForTraffic,
// or the request refused. Refusals are E2B's: 502 for a sandbox that is
// gone or paused or a port nothing listens on, 403 without the token.
// The code interpreter's /execute (interp.Port) takes the sandbox's envd
// access token in X-Access-Token too (401 without it), as E2B's SDKs
// send it; its other routes are the port's, as on E2B.
func (h *Handler) ServePort(w http.ResponseWriter, r *http.Request, id string, port int) {
	notFound := proxyError{Code: http.StatusBadGateway, Message: "The sandbox was not found", SandboxID: id}
	h.load(r.Context(), id)
	h.mu.Lock()
	var rec record
	found := false
	if p := h.records[id]; p != nil && p.ended.IsZero() {
		rec, found = *p, true
	}
	h.mu.Unlock()
	if !found {
		writeJSON(w, http.StatusBadGateway, notFound)
		return
	}
	if !h.public(rec) {
		tok := r.Header.Get(TrafficTokenHeader)
		if subtle.ConstantTimeCompare([]byte(rec.traffic), []byte(tok)) != 1 {
			msg := "missing traffic access token: this sandbox's ports are private; send its trafficAccessToken in the " + TrafficTokenHeader + " header"
			if tok != "" {
				msg = "invalid traffic access token for sandbox " + id
			}
			writeJSON(w, http.StatusForbidden, proxyError{Code: http.StatusForbidden, Message: msg, SandboxID: id})
			return
		}
	}
	if port == interp.Port && path.Clean("/"+r.URL.Path) == "/execute" {
		// The code interpreter runs what /execute is sent: as on envd,
		// the sandbox's envd access token must come with it (E2B's SDKs
		// send it there, and only there).
		if subtle.ConstantTimeCompare([]byte(rec.token), []byte(r.Header.Get("X-Access-Token"))) != 1 {
			msg := "missing X-Access-Token header: the code interpreter's /execute takes the sandbox's envd access token"
			if r.Header.Get("X-Access-Token") != "" {
				msg = "invalid X-Access-Token for sandbox " + id
			}
			writeJSON(w, http.StatusUnauthorized, proxyError{Code: http.StatusUnauthorized, Message: msg, SandboxID: id, Port: port})
			return
		}
	}
	ctx := r.Context()
	c, err := h.m.Agent(ctx, rec.tenant, id)
	if errors.Is(err, daemon.ErrConflict) {
		// Paused, perhaps, as envd's Resolve finds it: resumed if its
		// create asked for it (autoResume, Wake); else E2B's answer for a
		// paused sandbox. Only then is its state looked at.
		switch werr := h.Wake(ctx, rec.tenant, id); {
		case werr == nil:
			c, err = h.m.Agent(ctx, rec.tenant, id)
		case errors.Is(werr, daemon.ErrNotFound):
			err = werr
		default:
			msg := "The sandbox is paused: connect to it (Sandbox.connect) to resume it"
			if !errors.Is(werr, ErrNoAutoResume) {
				msg = "The sandbox is paused and could not be resumed: " + werr.Error()
			}
			writeJSON(w, http.StatusBadGateway, proxyError{Code: http.StatusBadGateway, SandboxID: id, Message: msg})
			return
		}
	}
	switch {
	case errors.Is(err, daemon.ErrNotFound):
		h.ended(id)
		writeJSON(w, http.StatusBadGateway, notFound)
		return
	case err != nil:
		status := classify(err)
		msg := err.Error()
		if status == http.StatusInternalServerError {
			h.log.Error("sandbox port request failed", "sandbox", id, "port", port, "err", err)
			msg = internalMessage
		}
		writeJSON(w, http.StatusBadGateway, proxyError{Code: http.StatusBadGateway, SandboxID: id, Port: port, Message: msg})
		return
	}
	host := r.Host
	if rec.network != nil && rec.network.MaskRequestHost != nil {
		host = strings.ReplaceAll(*rec.network.MaskRequestHost, portPlaceholder, strconv.Itoa(port))
	}
	t := &portTarget{id: id, port: port, host: host, agent: c}
	portfwd.FullDuplex(w)
	h.ports.ServeHTTP(w, r.WithContext(context.WithValue(ctx, portTargetKey{}, t)))
}
