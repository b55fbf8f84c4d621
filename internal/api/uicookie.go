package api

import (
	"net/http"
	"net/url"
	"strings"
)

// The web UI's credentials (package webui): its login form keeps the
// tenant's token in an HttpOnly cookie, which the browser sends with the
// UI's own requests; its pages' scripts mark theirs with a header.
const (
	// UICookie is the cookie that holds the token.
	UICookie = "hutch_ui"
	// UIHeader is the header the UI's scripts set ("1") on every request
	// to the API. A page of another origin cannot set it without a CORS
	// preflight, which the daemon never grants.
	UIHeader = "X-Hutch-UI"
)

// CheckUIRequest refuses (403) a request carrying the UI's cookie that is
// not a request of the UI's own pages: one without UIHeader, or without
// Sec-Fetch-Site: same-origin or an Origin of the request's own Host — a
// form or a script of another site (cross-site request forgery) that got
// the browser to send the cookie. An Origin of another host, or a
// Sec-Fetch-Site other than same-origin, is refused whatever the other
// says.
func CheckUIRequest(r *http.Request) error {
	if r.Header.Get(UIHeader) != "1" {
		return errorf(ErrPermission, "a request with the web UI's cookie must come from the UI's pages (%s: 1): refused; other clients send Authorization: Bearer TOKEN", UIHeader)
	}
	origin := r.Header.Get("Origin")
	if origin != "" && !sameHost(origin, r.Host) {
		return errorf(ErrPermission, "a request with the web UI's cookie from Origin %q, not this daemon's (%s): refused", origin, r.Host)
	}
	site := r.Header.Get("Sec-Fetch-Site")
	if (site != "" && site != "same-origin") || (site == "" && origin == "") {
		return errorf(ErrPermission, "a request with the web UI's cookie must come from the UI's own origin (Sec-Fetch-Site: same-origin, or an Origin of %s): refused", r.Host)
	}
	return nil
}

// sameHost reports whether origin (scheme://host[:port]) names host, a
// request's Host.
func sameHost(origin, host string) bool {
	u, err := url.Parse(origin)
	return err == nil && u.Host != "" && (u.Scheme == "http" || u.Scheme == "https") && strings.EqualFold(u.Host, host)
}
