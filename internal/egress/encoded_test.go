package egress

import (
	"bytes"
	"compress/gzip"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/secrets"
)

// realEncoded is a real value whose JSON, percent and base64 forms all
// differ from it: it has "/" and `"` (JSON), "\", "<", "&", a space, "+",
// "%" and a character beyond ASCII.
const realEncoded = `REAL/enc"oded\val<ue>&+ %tok=ü0123456789`

// realAlnum is a real value that only base64 changes.
const realAlnum = "REALalnumVALUE0123456789abcdefghijklmn"

// echoForms returns the forms in which the test upstream echoes real,
// made by the standard library's encoders (and simple variations of
// them), by name.
func echoForms(real string) map[string]string {
	jsonOf := func(html bool) string {
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(html)
		if err := enc.Encode(real); err != nil {
			panic(err)
		}
		s := strings.TrimSpace(b.String())
		return s[1 : len(s)-1]
	}
	lowerHex := regexp.MustCompile(`%[0-9A-F]{2}`)
	lower := func(s string) string { return lowerHex.ReplaceAllStringFunc(s, strings.ToLower) }
	forms := map[string]string{
		"literal":      real,
		"json-go":      jsonOf(true),
		"json-plain":   jsonOf(false),
		"json-slash":   strings.ReplaceAll(jsonOf(false), "/", `\/`),
		"query":        url.QueryEscape(real),
		"query-lower":  lower(url.QueryEscape(real)),
		"query-%20":    strings.ReplaceAll(url.QueryEscape(real), "+", "%20"),
		"path":         url.PathEscape(real),
		"b64-std":      base64.StdEncoding.EncodeToString([]byte(real)),
		"b64-url":      base64.URLEncoding.EncodeToString([]byte(real)),
		"b64-std-raw":  base64.RawStdEncoding.EncodeToString([]byte(real)),
		"b64-url-raw":  base64.RawURLEncoding.EncodeToString([]byte(real)),
		"basic-u":      "Basic " + base64.StdEncoding.EncodeToString([]byte("u:"+real)),
		"basic-us":     "Basic " + base64.StdEncoding.EncodeToString([]byte("us:"+real)),
		"basic-usr":    "Basic " + base64.StdEncoding.EncodeToString([]byte("usr:"+real)),
		"inside-0":     base64.StdEncoding.EncodeToString([]byte(real + "~tail")),
		"inside-1":     base64.URLEncoding.EncodeToString([]byte("x" + real + "~tail")),
		"inside-2":     base64.RawStdEncoding.EncodeToString([]byte("xy" + real + "~tail")),
		"inside-1-end": base64.RawURLEncoding.EncodeToString([]byte("x" + real)),
	}
	return forms
}

// echoNames are echoForms' names in a fixed order.
func echoNames(forms map[string]string) []string {
	names := make([]string, 0, len(forms))
	for n := range forms {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// startEncodingUpstream starts a TLS upstream (HTTP/2 too when h2) that
// echoes real in every form of echoForms: in the header X-Form-NAME, in
// the body as lines "NAME=FORM", and, at /chunked, in the trailer
// X-Trailer-NAME. At /length the body has a Content-Length; at /gzip it
// is gzip-compressed (Content-Encoding gzip) though nobody asked for it.
func startEncodingUpstream(t *testing.T, pki *testPKI, h2 bool, real string) int {
	t.Helper()
	forms := echoForms(real)
	names := echoNames(forms)
	var body bytes.Buffer
	for _, n := range names {
		fmt.Fprintf(&body, "%s=%s\n", n, forms[n])
	}
	u := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		for _, n := range names {
			h.Set("X-Form-"+n, forms[n])
		}
		switch r.URL.Path {
		case "/length":
			h.Set("Content-Length", strconv.Itoa(body.Len()))
			w.Write(body.Bytes())
		case "/gzip":
			h.Set("Content-Encoding", "gzip")
			zw := gzip.NewWriter(w)
			zw.Write(body.Bytes())
			zw.Close()
		default:
			for _, n := range names {
				h.Add("Trailer", "X-Trailer-"+n)
			}
			w.WriteHeader(http.StatusOK)
			// Small pieces, flushed: forms span the chunks.
			b := body.Bytes()
			for len(b) > 0 {
				k := min(7, len(b))
				w.Write(b[:k])
				w.(http.Flusher).Flush()
				b = b[k:]
			}
			for _, n := range names {
				h.Set("X-Trailer-"+n, forms[n])
			}
		}
	}))
	u.Config.ErrorLog = log.New(io.Discard, "", 0)
	u.TLS = &tls.Config{Certificates: []tls.Certificate{pki.issue(t, "bound.test")}}
	u.EnableHTTP2 = h2
	u.StartTLS()
	t.Cleanup(u.Close)
	return portOf(t, u.Listener.Addr().String())
}

// checkNoForm fails if text holds real in a form of echoForms, or a
// base64 run in it decodes to bytes that hold real's inner part (all but
// its first and last bytes, which a base64 text mixes with their
// neighbours).
func checkNoForm(t *testing.T, what, text, real string) {
	t.Helper()
	forms := echoForms(real)
	for _, n := range echoNames(forms) {
		if strings.Contains(text, forms[n]) {
			t.Errorf("%s holds the real value %s: %q", what, n, text)
		}
	}
	for _, pairs := range secrets.RedactionPairs([]byte(real), []byte("unused")) {
		if strings.Contains(text, string(pairs[0])) {
			t.Errorf("%s holds a form %q of the real value", what, pairs[0])
		}
	}
	inner := real[1 : len(real)-1]
	for _, run := range regexp.MustCompile(`[A-Za-z0-9+/_-]{8,}`).FindAllString(text, -1) {
		for _, enc := range []*base64.Encoding{base64.RawStdEncoding, base64.RawURLEncoding} {
			for a := range 4 {
				if a > len(run) {
					break
				}
				s := run[a:]
				s = s[:len(s)/4*4]
				if b, err := enc.DecodeString(s); err == nil && strings.Contains(string(b), inner) {
					t.Errorf("%s: %q decodes to the real value", what, run)
				}
			}
		}
	}
}

func TestRedactEncodedForms(t *testing.T) {
	pki := newTestPKI(t)
	for _, real := range []string{realEncoded, realAlnum} {
		for _, h2 := range []bool{false, true} {
			port := startEncodingUpstream(t, pki, h2, real)
			sec := newSecret(t, "TOKEN", real, fmt.Sprintf("bound.test:%d", port))
			env := startSecretProxy(t, secretConfig([]*secrets.Secret{sec}), pki.pool)
			client := env.client(env.caPool)
			ph := sec.Placeholder
			for _, path := range []string{"/chunked", "/length", "/gzip"} {
				what := fmt.Sprintf("%q h2 %v %s", real[:8], h2, path)
				resp, body := do(t, client, mustRequest(t, "GET", fmt.Sprintf("https://bound.test:%d%s", port, path)))
				mustOK(t, resp, body)
				if resp.ContentLength >= 0 && resp.ContentLength != int64(len(body)) {
					t.Errorf("%s: Content-Length %d, body of %d bytes", what, resp.ContentLength, len(body))
				}
				if ce := resp.Header.Get("Content-Encoding"); ce != "" {
					t.Errorf("%s: Content-Encoding %q, want none (decompressed)", what, ce)
				}
				// With no form changing length, a Content-Length stays.
				if real == realAlnum && path == "/length" && resp.ContentLength != int64(len(body)) {
					t.Errorf("%s: Content-Length %d, want %d kept", what, resp.ContentLength, len(body))
				}
				checkNoForm(t, what+" body", body, real)
				for k, vs := range resp.Header {
					checkNoForm(t, what+" header "+k, strings.Join(vs, "\n"), real)
				}
				for k, vs := range resp.Trailer {
					checkNoForm(t, what+" trailer "+k, strings.Join(vs, "\n"), real)
				}
				if path == "/chunked" && resp.Trailer.Get("X-Trailer-literal") != ph {
					t.Errorf("%s: trailer %q, want the placeholder", what, resp.Trailer.Get("X-Trailer-literal"))
				}
				// The forms come back as the placeholder's same forms.
				if got := resp.Header.Get("X-Form-literal"); got != ph {
					t.Errorf("%s: X-Form-literal %q, want the placeholder", what, got)
				}
				pforms := echoForms(ph)
				for _, n := range []string{"json-go", "query", "b64-std", "b64-url-raw"} {
					if got := resp.Header.Get("X-Form-" + n); got != pforms[n] {
						t.Errorf("%s: X-Form-%s %q, want the placeholder's %q", what, n, got, pforms[n])
					}
				}
				if !strings.Contains(body, "json-plain="+ph+"\n") {
					t.Errorf("%s: body %q lacks the placeholder JSON-escaped", what, body)
				}
				// Basic credentials at each alignment decode to the user and
				// the placeholder, its first byte mixed with the user's bits
				// unless the value starts a group of three bytes.
				for _, user := range []string{"u", "us", "usr"} {
					v := resp.Header.Get("X-Form-basic-" + user)
					b, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(v, "Basic "))
					if err != nil || !strings.HasPrefix(string(b), user) || !strings.HasSuffix(string(b), ph[1:]) || len(b) != len(user)+1+len(ph) {
						t.Errorf("%s: Basic for %s %q decodes to %q (%v), want %s:%s", what, user, v, b, err, user, ph)
					}
				}
			}
		}
	}
}
