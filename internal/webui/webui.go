package webui

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"mime"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/hutch-sandbox/hutch/internal/api"
	"github.com/hutch-sandbox/hutch/internal/daemon"
	"github.com/hutch-sandbox/hutch/internal/store"
)

// The paths the handler serves.
const (
	// Path is the UI's root: the login form, or the pages once logged in.
	Path = "/ui/"
	// LoginPath takes the login form.
	LoginPath = "/ui/login"
	// LogoutPath clears the cookie.
	LogoutPath = "/ui/logout"
	// StaticPath is the prefix of the scripts, styles and icon.
	StaticPath = "/ui/static/"
	// APIPath is the prefix under which the pages reach hutch's API:
	// /ui/v1/X is the API's /v1/X.
	APIPath = "/ui/v1/"
)

// DefaultLifetime is how long the browser keeps the login cookie.
const DefaultLifetime = 12 * time.Hour

// maxForm bounds the login form's body.
const maxForm = 8 << 10

// securityHeaders are on every answer under /ui/.
var securityHeaders = map[string]string{
	// No inline script or style, nothing from another origin, no
	// framing, no plugins, forms only to the UI itself.
	"Content-Security-Policy": "default-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
	"X-Frame-Options":         "DENY",
	"X-Content-Type-Options":  "nosniff",
	// Not no-referrer: with it, Chromium sends the login form's POST
	// with Origin: null, which the origin check cannot tell from
	// another site's.
	"Referrer-Policy":              "same-origin",
	"Cross-Origin-Opener-Policy":   "same-origin",
	"Cross-Origin-Resource-Policy": "same-origin",
}

//go:embed assets
var assets embed.FS

// htmlText escapes text for an HTML element's content or a quoted
// attribute. Decision: not html/template, whose reflection keeps every
// method of the binary's types and adds 4 MB to hutch-serve, for two
// values put into two pages.
var htmlText = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&#34;", "'", "&#39;")

// Config configures a Handler.
type Config struct {
	// Store holds the daemon's tokens, which the login form checks.
	// Required.
	Store store.Backend
	// Hosts are the names besides a TCP listener's own address that a
	// request may give as its Host (hutch serve --mcp-allowed-host and
	// the public URL's host).
	Hosts api.Hosts
	// Secure marks the cookie Secure on every answer, not only on those
	// over TLS: the daemon is reached through a TLS proxy (its public
	// URL is https).
	Secure bool
	// Lifetime is how long the browser keeps the cookie
	// (DefaultLifetime when zero).
	Lifetime time.Duration
	// Log receives the handler's events; nil discards them.
	Log *slog.Logger
}

// Handler serves the UI. Safe for concurrent use.
type Handler struct {
	cfg    Config
	log    *slog.Logger
	static map[string]asset
	logins *limiter
}

// asset is a static file, with its ETag.
type asset struct {
	body  []byte
	ctype string
	etag  string
}

// New returns the handler.
func New(cfg Config) (*Handler, error) {
	if cfg.Store == nil {
		return nil, errors.New("webui: no token store")
	}
	if cfg.Lifetime < 0 {
		return nil, errors.New("webui: negative cookie lifetime")
	}
	if cfg.Lifetime == 0 {
		cfg.Lifetime = DefaultLifetime
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	h := &Handler{cfg: cfg, log: cfg.Log, static: map[string]asset{}, logins: newLimiter()}
	err := fs.WalkDir(assets, "assets", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || path.Ext(p) == ".html" {
			return err
		}
		b, err := assets.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		h.static[path.Base(p)] = asset{body: b, ctype: mime.TypeByExtension(path.Ext(p)), etag: `"` + hex.EncodeToString(sum[:12]) + `"`}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("webui: %w", err)
	}
	return h, nil
}

// Paths reports whether p is the handler's: /ui and everything under it.
func Paths(p string) bool {
	return p == "/ui" || strings.HasPrefix(p, Path)
}

// Mount returns a handler that serves the UI's paths, passes the pages'
// API requests (APIPath) to next as the API's own paths, and passes every
// other request to next as it is. next is the daemon's handler: the API
// authenticates the pages' requests (the cookie, api.CheckUIRequest).
func (h *Handler) Mount(next http.Handler) http.Handler {
	toAPI := http.StripPrefix("/ui", next)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !Paths(r.URL.Path) {
			next.ServeHTTP(w, r)
			return
		}
		api.Counted("ui", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			h.serve(w, r, toAPI)
		}), w, r)
	})
}

// serve answers a request under /ui.
func (h *Handler) serve(w http.ResponseWriter, r *http.Request, toAPI http.Handler) {
	for k, v := range securityHeaders {
		w.Header().Set(k, v)
	}
	p := r.URL.Path
	isAPI := strings.HasPrefix(p, APIPath)
	if err := h.cfg.Hosts.CheckHost(r); err != nil {
		h.refuse(w, r, isAPI, err)
		return
	}
	// A page is shown to a link from anywhere (the cookie, SameSite=Strict,
	// comes only with the UI's own navigations); what acts or reads data
	// must come from the UI's own pages.
	if isAPI || (r.Method != http.MethodGet && r.Method != http.MethodHead) {
		if err := h.cfg.Hosts.CheckOrigin(r); err != nil {
			h.refuse(w, r, isAPI, err)
			return
		}
	}
	switch {
	case isAPI && path.Clean(p) != p:
		// The API's own paths are clean; no ".." climbs out of /ui/v1/
		// to another front end.
		api.WriteError(w, r, h.log, api.Errorf(daemon.ErrNotFound, "%s %s: no such route", r.Method, p))
	case isAPI:
		w.Header().Set("Cache-Control", "no-store")
		toAPI.ServeHTTP(w, r)
	case p == "/ui":
		http.Redirect(w, r, Path, http.StatusMovedPermanently)
	case p == Path:
		if !h.method(w, r, http.MethodGet, http.MethodHead) {
			return
		}
		h.home(w, r)
	case p == LoginPath:
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			http.Redirect(w, r, Path, http.StatusSeeOther)
			return
		}
		if !h.method(w, r, http.MethodPost) {
			return
		}
		h.login(w, r)
	case p == LogoutPath:
		if !h.method(w, r, http.MethodPost) {
			return
		}
		h.setCookie(w, r, "", -1)
		http.Redirect(w, r, Path, http.StatusSeeOther)
	case strings.HasPrefix(p, StaticPath):
		if !h.method(w, r, http.MethodGet, http.MethodHead) {
			return
		}
		h.serveStatic(w, r, strings.TrimPrefix(p, StaticPath))
	default:
		http.Error(w, "no such page of hutch's UI: "+p, http.StatusNotFound)
	}
}

// refuse answers a request the host or origin checks refused: as the API
// answers under APIPath, in plain text elsewhere.
func (h *Handler) refuse(w http.ResponseWriter, r *http.Request, isAPI bool, err error) {
	if isAPI {
		api.WriteError(w, r, h.log, err)
		return
	}
	h.log.Debug("UI request refused", "path", r.URL.Path, "err", err)
	http.Error(w, err.Error(), http.StatusForbidden)
}

// method reports whether r's method is one of methods, else answers 405.
func (h *Handler) method(w http.ResponseWriter, r *http.Request, methods ...string) bool {
	for _, m := range methods {
		if r.Method == m {
			return true
		}
	}
	w.Header().Set("Allow", strings.Join(methods, ", "))
	http.Error(w, r.Method+" "+r.URL.Path+": method not allowed", http.StatusMethodNotAllowed)
	return false
}

// home shows the pages to a browser whose cookie holds a valid token,
// the login form to any other.
func (h *Handler) home(w http.ResponseWriter, r *http.Request) {
	c, err := r.Cookie(api.UICookie)
	if err != nil {
		h.loginForm(w, http.StatusOK, "")
		return
	}
	tenant, err := api.TenantForToken(r.Context(), h.cfg.Store, c.Value)
	if err != nil {
		if api.ErrorCode(err) != api.CodeUnauthorized {
			h.log.Error("check the UI's cookie", "err", err)
			h.loginForm(w, http.StatusInternalServerError, "The token could not be checked; the daemon's log says why.")
			return
		}
		h.setCookie(w, r, "", -1)
		h.loginForm(w, http.StatusOK, "Your token is no longer valid: log in again.")
		return
	}
	// The operator — a request on the daemon's unix socket, as through a
	// forwarded socket — may give apply's word for a path it refuses
	// (allow); a tenant may not, and the pages offer it only to the
	// operator.
	operator := "false"
	if api.OriginOf(r.Context()) == api.OriginLocal {
		operator = "true"
	}
	h.page(w, http.StatusOK, "app.html", "<!--tenant-->", htmlText.Replace(tenant), `data-operator="false"`, `data-operator="`+operator+`"`)
}

// login checks the form's token as the API checks tokens and, when it is
// valid, keeps it in the cookie.
func (h *Handler) login(w http.ResponseWriter, r *http.Request) {
	client := clientKey(r)
	if !h.logins.allowed(client) {
		h.loginForm(w, http.StatusTooManyRequests, "Too many failed logins from your address: wait a minute, then try again.")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxForm)
	if err := r.ParseForm(); err != nil {
		h.loginForm(w, http.StatusBadRequest, "The form could not be read.")
		return
	}
	token := strings.TrimSpace(r.PostForm.Get("token"))
	if token == "" {
		h.loginForm(w, http.StatusBadRequest, "Enter a token.")
		return
	}
	tenant, err := api.TenantForToken(r.Context(), h.cfg.Store, token)
	if err != nil {
		if api.ErrorCode(err) != api.CodeUnauthorized {
			h.log.Error("check a token of the UI's login form", "err", err)
			h.loginForm(w, http.StatusInternalServerError, "The token could not be checked; the daemon's log says why.")
			return
		}
		h.logins.failed(client)
		h.log.Info("UI login refused: the token is not valid", "client", r.RemoteAddr)
		h.loginForm(w, http.StatusUnauthorized, "That token is not valid.")
		return
	}
	h.log.Debug("UI login", "tenant", tenant, "client", r.RemoteAddr)
	h.setCookie(w, r, token, int(h.cfg.Lifetime/time.Second))
	http.Redirect(w, r, Path, http.StatusSeeOther)
}

// setCookie sets the cookie to value for maxAge seconds (a negative
// maxAge clears it).
func (h *Handler) setCookie(w http.ResponseWriter, r *http.Request, value string, maxAge int) {
	http.SetCookie(w, &http.Cookie{
		Name:     api.UICookie,
		Value:    value,
		Path:     "/ui",
		MaxAge:   maxAge,
		HttpOnly: true,
		SameSite: http.SameSiteStrictMode,
		Secure:   h.cfg.Secure || r.TLS != nil,
	})
}

// loginForm answers with the login form, and message, if any, saying why
// it is shown again.
func (h *Handler) loginForm(w http.ResponseWriter, status int, message string) {
	if message != "" {
		message = `<p class="message" id="message" role="alert">` + htmlText.Replace(message) + `</p>`
	}
	h.page(w, status, "login.html", "<!--message-->", message)
}

// page answers with the HTML page name, each mark of marks (mark, value
// pairs) replaced by its value (HTML already).
func (h *Handler) page(w http.ResponseWriter, status int, name string, marks ...string) {
	b, err := assets.ReadFile("assets/" + name)
	if err != nil {
		h.log.Error("read a UI page", "page", name, "err", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	for i := 0; i+1 < len(marks); i += 2 {
		b = bytes.Replace(b, []byte(marks[i]), []byte(marks[i+1]), 1)
	}
	_, _ = w.Write(b)
}

// serveStatic answers with the static file name.
func (h *Handler) serveStatic(w http.ResponseWriter, r *http.Request, name string) {
	a, ok := h.static[name]
	if !ok {
		http.Error(w, "no such file of hutch's UI: "+name, http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", a.ctype)
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("ETag", a.etag)
	if r.Header.Get("If-None-Match") == a.etag {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	_, _ = w.Write(a.body)
}
