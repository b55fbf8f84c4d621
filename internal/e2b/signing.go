package e2b

import (
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
		type candidate struct{ id, token string }
		all := make([]candidate, 0, len(h.records))
		for rid, rec := range h.records {
			all = append(all, candidate{rid, rec.token})
		}
		h.mu.Unlock()
		select {
		case h.signScan <- struct{}{}:
			for _, c := range all {
				if match(c.token) {
					found = c.id
				}
			}
			<-h.signScan
		case <-r.Context().Done():
		}
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
