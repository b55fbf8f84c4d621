package e2b

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Signed file URLs. E2B's SDKs make, for a sandbox with an envd access
// token, URLs of /files that need no header (downloadUrl, uploadUrl): the
// query carries signature=v1_B, B the unpadded base64 of the SHA-256 of
// "PATH:OPERATION:USER:TOKEN" or, with signature_expiration=T (unix
// seconds), "PATH:OPERATION:USER:TOKEN:T"; PATH and USER are the query's
// path and username ("" when absent) as they are, OPERATION is "read" for
// GET and HEAD and "write" for POST. A signature is thus valid only for
// its sandbox (the token), that path, operation and user, and until T if
// given; envd's own rules, and its messages.

// maxSignature bounds the signature hutch reads: v1_ and 43 characters.
const maxSignature = 64

// signature returns the signature of a /files request for token.
func signature(path, op, user, token, exp string) string {
	raw := path + ":" + op + ":" + user + ":" + token
	if exp != "" {
		raw += ":" + exp
	}
	sum := sha256.Sum256([]byte(raw))
	return "v1_" + base64.RawStdEncoding.EncodeToString(sum[:])
}

// signedOperation is the operation a signature of r must be for: "read"
// or "write" for /files, "" for anything a signature cannot grant.
func signedOperation(r *http.Request) string {
	if r.URL.Path != "/files" {
		return ""
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		return "read"
	case http.MethodPost:
		return "write"
	}
	return ""
}

// signedScan is the sandbox whose envd access token match accepts, ""
// for none: of the sandboxes the handler holds and those of its store
// that are not stopped (another daemon's; from the view of a cluster's
// records, without a read, when it is current), one scan at a time
// (h.signScan). The one found is held once it returns.
func (h *Handler) signedScan(ctx context.Context, match func(token string) bool) string {
	select {
	case h.signScan <- struct{}{}:
	case <-ctx.Done():
		return ""
	}
	defer func() { <-h.signScan }()
	h.mu.Lock()
	ids := make(map[string]bool, len(h.records))
	for id := range h.records {
		ids[id] = true
	}
	h.mu.Unlock()
	if h.m != nil { // else the handler's own only
		if more, err := h.m.NotStopped(ctx); err == nil {
			for _, id := range more {
				ids[id] = true
			}
		}
	}
	found := ""
	for id := range ids {
		if match(h.derive("envd", id)) {
			found = id
		}
	}
	h.load(ctx, found)
	return found
}

// SandboxOf is the sandbox an E2B request names (the package's
// SandboxOf) or, for a signed URL of envd's /files that names none (E2B's
// SDKs with E2B_SANDBOX_URL), the one whose token signed it — which the
// request then names in its E2b-Sandbox-Id header, so that whatever
// serves it checks the signature against that sandbox alone.
func (h *Handler) SandboxOf(r *http.Request) string {
	if id := SandboxOf(r); id != "" || r.URL.Path != "/files" || r.Header.Get("X-Access-Token") != "" {
		return id
	}
	op := signedOperation(r)
	q := r.URL.Query()
	sig, exp := q.Get("signature"), q.Get("signature_expiration")
	if op == "" || sig == "" || len(sig) > maxSignature {
		return ""
	}
	path, user := q.Get("path"), q.Get("username")
	id := h.signedScan(r.Context(), func(token string) bool {
		return subtle.ConstantTimeCompare([]byte(signature(path, op, user, token, exp)), []byte(sig)) == 1
	})
	if id != "" {
		r.Header.Set("E2b-Sandbox-Id", id)
	}
	return id
}

// resolveSigned returns the sandbox a signed /files request is for: id if
// the request names one (E2b-Sandbox-Id, the host name), else the one whose
// token makes the signature. Under h.mu. Every candidate's signature is
// computed and compared in constant time, so that timing tells neither a
// token nor which sandbox matched; an unknown id is compared with noToken.
// A request that names no sandbox (E2B_SANDBOX_URL's layout) costs a hash
// per sandbox: that scan runs with h.mu released, one at a time
// (h.signScan), so that unauthenticated requests can neither hold the
// handler's lock nor take more than one core.
func (h *Handler) resolveSigned(r *http.Request, id, op string) (string, *record, error) {
	q := r.URL.Query()
	sig := q.Get("signature")
	if sig == "" {
		return "", nil, errorf(ErrUnauthenticated, "missing signature query parameter (or X-Access-Token header)")
	}
	if len(sig) > maxSignature {
		return "", nil, errorf(ErrUnauthenticated, "invalid signature")
	}
	exp := q.Get("signature_expiration")
	var expires int64
	if exp != "" {
		var err error
		if expires, err = strconv.ParseInt(exp, 10, 64); err != nil || strings.HasPrefix(exp, "+") {
			return "", nil, errorf(ErrUnauthenticated, "invalid signature_expiration %.32q: not a unix time in seconds", exp)
		}
	}
	path, user := q.Get("path"), q.Get("username")
	match := func(token string) bool {
		return subtle.ConstantTimeCompare([]byte(signature(path, op, user, token, exp)), []byte(sig)) == 1
	}
	var found string
	if id != "" {
		rec := h.records[id]
		want := noToken
		if rec != nil {
			want = rec.token
		}
		if match(want) && rec != nil {
			found = id
		}
	} else {
		h.mu.Unlock()
		found = h.signedScan(r.Context(), match)
		h.mu.Lock()
		if rec := h.records[found]; found != "" && (rec == nil || !match(rec.token)) {
			found = "" // gone, or another sandbox by now
		}
	}
	if found == "" {
		return "", nil, errorf(ErrUnauthenticated, "invalid signature")
	}
	if exp != "" && expires < time.Now().Unix() {
		return "", nil, errorf(ErrUnauthenticated, "signature is already expired")
	}
	return found, h.records[found], nil
}
