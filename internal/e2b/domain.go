package e2b

import (
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"

	"github.com/hutch-sandbox/hutch/internal/api"
)

// EnvdPort is the port of E2B's in-sandbox API in a sandbox's host name
// (49983-ID.DOMAIN), as E2B's SDKs build it.
const EnvdPort = 49983

// WithDomain makes the handler serve E2B's domain layout under domain
// (Domain routes the requests): creates and connects answer it as the
// sandbox's domain, so that E2B's SDKs reach envd at 49983-ID.domain and
// a sandbox's port at PORT-ID.domain (getHost). domain must have passed
// CheckDomain.
func WithDomain(domain string) Option {
	return func(h *Handler) { h.domain = domain }
}

// WithPublicTraffic makes sandboxes' ports public by default, as E2B's
// are: they answer without the traffic access token unless the create
// says network.allowPublicTraffic false. Without it they are private
// unless the create says allowPublicTraffic true.
func WithPublicTraffic() Option {
	return func(h *Handler) { h.publicTraffic = true }
}

// CheckDomain checks a domain for WithDomain (hutch serve --domain) and
// returns its normal form: lower case, without a trailing dot; at least
// two labels of letters, digits and hyphens.
func CheckDomain(domain string) (string, error) {
	d := strings.TrimSuffix(strings.ToLower(domain), ".")
	labels := strings.Split(d, ".")
	bad := fmt.Errorf("domain %q: want a DNS name of at least two labels (letters, digits, hyphens), such as sandbox.example.com", domain)
	if len(d) > 200 || len(labels) < 2 {
		return "", bad
	}
	for _, l := range labels {
		if l == "" || len(l) > 63 || strings.HasPrefix(l, "-") || strings.HasSuffix(l, "-") ||
			strings.Trim(l, "abcdefghijklmnopqrstuvwxyz0123456789-") != "" {
			return "", bad
		}
	}
	return d, nil
}

// domainJSON is the domain creates and connects answer, nil without one.
func (h *Handler) domainJSON() *string {
	if h.domain == "" {
		return nil
	}
	d := h.domain
	return &d
}

// answer is E2B's answer of create and connect for sandbox id, whose
// record rec is.
func (h *Handler) answer(id string, rec record) sandboxJSON {
	sb := sandboxJSON{
		TemplateID: rec.template, SandboxID: id, ClientID: rec.tenant,
		EnvdVersion: EnvdVersion, EnvdAccessToken: rec.token, Domain: h.domainJSON(),
	}
	if !h.public(rec) {
		t := rec.traffic
		sb.TrafficAccessToken = &t
	}
	return sb
}

// public reports whether the ports of the sandbox of rec answer without
// its traffic access token.
func (h *Handler) public(rec record) bool {
	if rec.network != nil && rec.network.AllowPublicTraffic != nil {
		return *rec.network.AllowPublicTraffic
	}
	return h.publicTraffic
}

// normalHost is a request's host as Domain compares it: lower case,
// without a port or a trailing dot.
func normalHost(host string) string {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	return strings.TrimSuffix(strings.ToLower(host), ".")
}

// sandboxLabel reads the first label of a sandbox's host name,
// PORT-ID: a port of 1 to 65535 written without leading zeros, and a
// sandbox id.
func sandboxLabel(label string) (port int, id string, ok bool) {
	p, id, ok := strings.Cut(label, "-")
	if !ok || p == "" || id == "" || p[0] == '0' || len(p) > 5 || strings.Trim(p, "0123456789") != "" {
		return 0, "", false
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 1 || port > 65535 {
		return 0, "", false
	}
	return port, id, true
}

// Domain returns the handler of E2B's domain layout under the handler's
// domain D (WithDomain; none: next itself), which routes by the request's
// host (r.Host: the Host header, or the host of an absolute request URI;
// compared in lower case, without port or trailing dot; X-Forwarded-Host
// and the like are never read):
//
//   - api.D: next (E2B's REST API, and all else the listener serves);
//   - 49983-ID.D: envd (the paths isEnvd accepts) for sandbox ID alone,
//     with its envd access token: an E2b-Sandbox-Id header is replaced
//     by ID;
//   - PORT-ID.D: sandbox ID's port PORT (ServePort);
//   - D and any other name under it: 404.
//
// A host outside D goes to next, so that clients that name the daemon
// by its address (E2B_API_URL, hutch's own CLI) work as before.
//
// Whatever the domain, a request to next that names a sandbox's port in
// an E2b-Sandbox-Port header (with E2b-Sandbox-Id) other than envd's goes
// to that port (PortHeader): E2B's SDKs send every request to one base
// URL when E2B_SANDBOX_URL is set, and tell the ports apart only so.
func (h *Handler) Domain(next http.Handler, isEnvd func(string) bool, envd http.Handler) http.Handler {
	next = h.PortHeader(next)
	if h.domain == "" {
		return next
	}
	suffix := "." + h.domain
	envdH := h.resolving(envd)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := normalHost(r.Host)
		if host == "api"+suffix || (host != h.domain && !strings.HasSuffix(host, suffix)) {
			next.ServeHTTP(w, r)
			return
		}
		port, id, ok := sandboxLabel(strings.TrimSuffix(host, suffix))
		if !ok || strings.Contains(id, ".") {
			api.Counted("ports", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				writeJSON(w, http.StatusNotFound, Error{Code: http.StatusNotFound,
					Message: fmt.Sprintf("no such host %q: this daemon serves api.%s and PORT-SANDBOXID.%s", host, h.domain, h.domain)})
			}), w, r)
			return
		}
		if port != EnvdPort {
			api.Counted("ports", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				h.ServePort(w, r, id, port)
			}), w, r)
			return
		}
		api.Counted("envd", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !isEnvd(r.URL.Path) {
				writeJSON(w, http.StatusNotFound, Error{Code: http.StatusNotFound, Message: fmt.Sprintf("%s %s: no such route of envd", r.Method, r.URL.Path)})
				return
			}
			r.Header.Set("E2b-Sandbox-Id", id)
			envdH.ServeHTTP(w, r)
		}), w, r)
	})
}

// SandboxPortHeader names the sandbox port a request is for, when E2B's
// SDKs send every port's requests to one URL (E2B_SANDBOX_URL); envd's
// port, or none, is the listener's own routes.
const SandboxPortHeader = "E2b-Sandbox-Port"

// PortHeader routes a request whose E2b-Sandbox-Port header names a port
// other than envd's to that port of the sandbox its E2b-Sandbox-Id header
// names (ServePort: the port's privacy holds as on PORT-ID.D); every
// other request goes to next. A malformed header is 400.
func (h *Handler) PortHeader(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v := r.Header.Get(SandboxPortHeader)
		if v == "" {
			next.ServeHTTP(w, r)
			return
		}
		port, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || port < 1 || port > 65535 {
			api.Counted("ports", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				writeJSON(w, http.StatusBadRequest, Error{Code: http.StatusBadRequest, Message: fmt.Sprintf("%s: %q is not a port (1-65535)", SandboxPortHeader, cleanHeader(v))})
			}), w, r)
			return
		}
		if port == EnvdPort {
			next.ServeHTTP(w, r)
			return
		}
		id := r.Header.Get("E2b-Sandbox-Id")
		api.Counted("ports", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if id == "" || strings.ContainsAny(id, "./ ") {
				writeJSON(w, http.StatusBadRequest, Error{Code: http.StatusBadRequest, Message: fmt.Sprintf("%s: %d names a sandbox's port; name the sandbox in the E2b-Sandbox-Id header", SandboxPortHeader, port)})
				return
			}
			h.ServePort(w, r, id, port)
		}), w, r)
	})
}

// cleanHeader bounds a header's value for a message and drops what is not
// printable ASCII.
func cleanHeader(v string) string {
	if len(v) > 64 {
		v = v[:64]
	}
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r > 0x7e {
			return -1
		}
		return r
	}, v)
}
