package secrets

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/url"
	"strings"
	"testing"
	"testing/iotest"
)

// encodeReal has every kind of character the encoders escape.
const encodeReal = "REAL/va\"l\\ue<&> +%=\t\x01é😀/tail0123456789"

// jsonString returns s JSON-encoded by encoding/json, without the quotes.
func jsonString(t *testing.T, s string, html bool) string {
	t.Helper()
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(html)
	if err := enc.Encode(s); err != nil {
		t.Fatal(err)
	}
	out := strings.TrimSpace(b.String())
	return out[1 : len(out)-1]
}

func TestRedactionPairsForms(t *testing.T) {
	ph, err := NewPlaceholder("hutch_", len(encodeReal))
	if err != nil {
		t.Fatal(err)
	}
	pairs := RedactionPairs([]byte(encodeReal), []byte(ph))
	if len(pairs) > MaxRedactionPairs || len(jsonStyles)+len(percentStyles()) != 7+20 {
		t.Fatalf("%d pairs, %d JSON and %d percent styles; the bound is %d", len(pairs), len(jsonStyles), len(percentStyles()), MaxRedactionPairs)
	}
	if string(pairs[0][0]) != encodeReal || string(pairs[0][1]) != ph {
		t.Errorf("the first pair is %q, want the value and the placeholder", pairs[0])
	}
	seen := map[string]bool{}
	for _, p := range pairs {
		if seen[string(p[0])] {
			t.Errorf("form %q twice", p[0])
		}
		seen[string(p[0])] = true
	}
	r := NewReplacer(pairs...)
	b64 := func(e *base64.Encoding, s string) string { return e.EncodeToString([]byte(s)) }
	// Each form, made by an encoder of the standard library or written
	// out, comes back as the placeholder's same form.
	for _, c := range []struct{ name, real, ph string }{
		{"literal", encodeReal, ph},
		{"go json", jsonString(t, encodeReal, true), ph},
		{"go json without html", jsonString(t, encodeReal, false), ph},
		{"php json", `REAL\/va\"l\\ue<&> +%=\t\u0001\u00e9\ud83d\ude00\/tail0123456789`, ph},
		{"python json", `REAL/va\"l\\ue<&> +%=\t\u0001\u00e9\ud83d\ude00/tail0123456789`, ph},
		{"all \\u00XX", `REAL\u002Fva\u0022l\u005Cue\u003C\u0026\u003E +%=\u0009\u0001\u00E9\uD83D\uDE00\u002Ftail0123456789`, ph},
		{"query", url.QueryEscape(encodeReal), ph},
		{"query lower", lowerHex(url.QueryEscape(encodeReal)), ph},
		{"path", url.PathEscape(encodeReal), ph},
		{"%20", strings.ReplaceAll(url.QueryEscape(encodeReal), "+", "%20"), ph},
		{"base64", b64(base64.StdEncoding, encodeReal), b64(base64.StdEncoding, ph)},
		{"base64 url", b64(base64.URLEncoding, encodeReal), b64(base64.URLEncoding, ph)},
		{"base64 raw", b64(base64.RawStdEncoding, encodeReal), b64(base64.RawStdEncoding, ph)},
		{"base64 url raw", b64(base64.RawURLEncoding, encodeReal), b64(base64.RawURLEncoding, ph)},
	} {
		in := "<" + c.real + ">"
		got := string(r.Bytes([]byte(in)))
		if want := "<" + c.ph + ">"; got != want {
			t.Errorf("%s: %q became %q, want %q", c.name, in, got, want)
		}
	}
}

// lowerHex lower-cases the hex digits of s's %XX escapes.
func lowerHex(s string) string {
	b := []byte(s)
	for i := 0; i+2 < len(b); i++ {
		if b[i] == '%' {
			b[i+1] = bytes.ToLower(b[i+1 : i+2])[0]
			b[i+2] = bytes.ToLower(b[i+2 : i+3])[0]
		}
	}
	return string(b)
}

// TestRedactionPairsBase64Inside redacts the value inside larger base64
// texts at each alignment, also while streaming a byte at a time.
func TestRedactionPairsBase64Inside(t *testing.T) {
	for _, real := range []string{encodeReal, "REALalnum0123456789abcdefghijkl", "REALalnum0123456789abcdefghijklm", "REALalnum0123456789abcdefghijklmn"} {
		ph, err := NewPlaceholder("hutch_", len(real))
		if err != nil {
			t.Fatal(err)
		}
		r := NewReplacer(RedactionPairs([]byte(real), []byte(ph))...)
		inner := real[1 : len(real)-1]
		for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding, base64.RawURLEncoding} {
			for _, user := range []string{"u", "us", "usr", "user"} {
				for _, tail := range []string{"", "~and more"} {
					plain := user + ":" + real + tail
					in := "Basic " + enc.EncodeToString([]byte(plain)) + "\r\n"
					for _, stream := range []bool{false, true} {
						var out []byte
						if stream {
							out, err = io.ReadAll(r.Reader(iotest.OneByteReader(strings.NewReader(in))))
							if err != nil {
								t.Fatal(err)
							}
						} else {
							out = r.Bytes([]byte(in))
						}
						if len(out) != len(in) {
							t.Errorf("%q: %d bytes became %d; the placeholder is as long as the value", plain, len(in), len(out))
						}
						dec, err := enc.DecodeString(strings.TrimSuffix(strings.TrimPrefix(string(out), "Basic "), "\r\n"))
						if err != nil {
							t.Errorf("%q: the redacted %q is not base64: %v", plain, out, err)
							continue
						}
						if bytes.Contains(dec, []byte(inner)) || !bytes.HasPrefix(dec, []byte(user+":")) || !bytes.Contains(dec, []byte(ph[1:len(ph)-1])) {
							t.Errorf("%q: redacted, it decodes to %q; want %s: and the placeholder", plain, dec, user)
						}
						if tail == "" && !bytes.HasSuffix(dec, []byte(ph[1:])) {
							t.Errorf("%q: redacted, it decodes to %q; want it to end with the placeholder", plain, dec)
						}
					}
				}
			}
		}
	}
}

// TestRedactionPairsPlain: a value of letters and digits has no JSON or
// percent forms; its base64 forms keep lengths.
func TestRedactionPairsPlain(t *testing.T) {
	real := "REALplainVALUE0123456789abcdefghij"
	ph, err := NewPlaceholder("hutch_", len(real))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range RedactionPairs([]byte(real), []byte(ph)) {
		if len(p[0]) != len(p[1]) {
			t.Errorf("form %q by %q changes lengths", p[0], p[1])
		}
		if strings.ContainsAny(string(p[0]), `\%`) {
			t.Errorf("form %q of a value of letters and digits", p[0])
		}
	}
	if RedactionPairs(nil, []byte(ph)) != nil {
		t.Error("an empty value has forms")
	}
}

// TestRedactionPairsShortValue: a value shorter than its placeholder
// still goes, and the base64 of tiny values makes no fragments that would
// match any base64 text.
func TestRedactionPairsShortValue(t *testing.T) {
	real := "s/3"
	ph, err := NewPlaceholder("hutch_", len(real))
	if err != nil {
		t.Fatal(err)
	}
	pairs := RedactionPairs([]byte(real), []byte(ph))
	for _, p := range pairs {
		if len(p[0]) < len(real) {
			t.Errorf("form %q is shorter than the value", p[0])
		}
	}
	r := NewReplacer(pairs...)
	in := "x " + url.QueryEscape(real) + " " + base64.StdEncoding.EncodeToString([]byte("ab:"+real)) + " " + jsonString(t, real, false)
	out := string(r.Bytes([]byte(in)))
	if strings.Contains(out, real) || strings.Contains(out, url.QueryEscape(real)) || strings.Contains(out, base64.StdEncoding.EncodeToString([]byte("ab:"+real))) {
		t.Errorf("%q became %q, which holds the value", in, out)
	}
	b, err := base64.StdEncoding.DecodeString(strings.Fields(out)[2])
	if err != nil || string(b) != "ab:"+ph {
		t.Errorf("the Basic credentials became %q (%v), want ab:%s", b, err, ph)
	}
	// Credentials that end with the value, at each alignment, become
	// the placeholder's, longer, and still decode.
	for _, user := range []string{"a", "ab", "abc"} {
		in := base64.StdEncoding.EncodeToString([]byte(user + ":" + real))
		b, err := base64.StdEncoding.DecodeString(string(r.Bytes([]byte(in))))
		if err != nil || !strings.HasPrefix(string(b), user+":") || !strings.HasSuffix(string(b), ph[1:]) || strings.Contains(string(b), real) {
			t.Errorf("%s:%s became %q (%v), want %s: and the placeholder", user, real, b, err, user)
		}
	}
}
