package secrets

import (
	"bytes"
	"encoding/base64"
	"unicode/utf8"
)

// Redaction takes a secret's real value out of responses in the forms an
// upstream that echoes it is likely to use, not only as it is: the value
// JSON-escaped, percent-encoded, and in base64, also as part of a larger
// base64 text (the credentials of an echoed "Authorization: Basic"). Each
// form is replaced by the same form of the placeholder.
//
// The forms are a fixed list of common encoders' outputs (see the
// functions below), so a secret has at most MaxRedactionPairs of them,
// each at most 6 times as long as the value (JSON's \u00XX for every
// byte): a value of a few KiB makes patterns of some tens of KiB, which a
// streaming Replacer holds back at most once.

// MaxRedactionPairs bounds the number of pairs RedactionPairs returns.
const MaxRedactionPairs = 1 + 7 + 5*2*2 + 2*(2+3*2*2)

// minBase64Fragment is the shortest base64 fragment of a value inside a
// larger base64 text that redaction looks for: shorter ones (of values of
// a byte or two) would match ordinary base64 text everywhere.
const minBase64Fragment = 4

// RedactionPairs returns the pairs, for a Replacer, that take a secret's
// real value out of a response: the value itself by the placeholder, then
// each encoded form of the value that differs from the value (and from
// the forms before it) by the same encoding of the placeholder:
//
//   - JSON string escapes: `"` and `\` escaped (\" and \\), control
//     characters as \b \f \n \r \t or \u00xx, and `/`, `<`, `>`, `&`,
//     `'`, and characters beyond ASCII as their encoders escape them,
//     in the styles listed in jsonStyles;
//   - percent-encoding (URL query, form, path segment): the styles of
//     percentStyles, each with upper- and lower-case hex digits and with
//     `+` or %20 for a space;
//   - base64, standard and URL alphabets, padded and not: of the value
//     alone, and of the value inside a larger text, at each of the three
//     byte alignments (the value's offset modulo 3 in the encoded text).
//     There the form is the run of characters that the value's bits
//     alone determine (the characters at either end that mix in the
//     neighbouring bytes' bits are not part of it, so a few bits of the
//     value's first and last bytes stay), and, for a value that ends the
//     text, the run to the end, with or without padding.
//
// A placeholder as long as the value gives forms as long as the value's
// (its characters need no escaping beyond its prefix's), but the escaped
// forms of a value with characters to escape are longer than the
// placeholder's: replacing them changes lengths. So does every form when
// the placeholder is longer than the value (a short value).
func RedactionPairs(value, placeholder []byte) [][2][]byte {
	if len(value) == 0 {
		return nil
	}
	pairs := [][2][]byte{{bytes.Clone(value), bytes.Clone(placeholder)}}
	add := func(v, p []byte) {
		if len(v) == 0 || p == nil {
			return
		}
		for _, q := range pairs {
			if bytes.Equal(q[0], v) {
				return
			}
		}
		pairs = append(pairs, [2][]byte{v, p})
	}
	for _, st := range jsonStyles {
		v, okV := jsonEscape(value, st)
		p, okP := jsonEscape(placeholder, st)
		if okV && okP {
			add(v, p)
		}
	}
	for _, st := range percentStyles() {
		add(percentEscape(value, st), percentEscape(placeholder, st))
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding} {
		raw := enc.WithPadding(base64.NoPadding)
		add([]byte(enc.EncodeToString(value)), []byte(enc.EncodeToString(placeholder)))
		add([]byte(raw.EncodeToString(value)), []byte(raw.EncodeToString(placeholder)))
		for a := range 3 {
			for _, f := range []func(*base64.Encoding, []byte, int) []byte{base64AtEnd, base64Inside} {
				for _, e := range []*base64.Encoding{enc, raw} {
					v := f(e, value, a)
					if len(v) < minBase64Fragment {
						continue
					}
					add(v, f(e, placeholder, a))
				}
			}
		}
	}
	return pairs
}

// base64Inside returns the characters of the base64 of a text that holds
// b at offset a (modulo 3) that only b's bits determine.
func base64Inside(enc *base64.Encoding, b []byte, a int) []byte {
	s := alignedBase64(enc, b, a)
	start, end := (8*a+5)/6, 8*(a+len(b))/6
	if end <= start {
		return []byte{}
	}
	return s[start:end]
}

// base64AtEnd returns the characters of the base64 of a text that ends
// with b, at offset a (modulo 3), from the first that only b's bits
// determine to the end (the padding too with a padded encoding).
func base64AtEnd(enc *base64.Encoding, b []byte, a int) []byte {
	s := alignedBase64(enc, b, a)
	return s[min((8*a+5)/6, len(s)):]
}

// alignedBase64 returns the base64 of a zero bytes followed by b.
func alignedBase64(enc *base64.Encoding, b []byte, a int) []byte {
	in := make([]byte, a+len(b))
	copy(in[a:], b)
	out := make([]byte, enc.EncodedLen(len(in)))
	enc.Encode(out, in)
	return out
}

// jsonStyle is how one family of JSON encoders escapes a string's
// characters beyond `"`, `\` and the control characters, which all escape.
type jsonStyle struct {
	// slash escapes `/` as `\/` (PHP's json_encode, some Java ones).
	slash bool
	// html escapes `<`, `>` and `&` as \u003c, \u003e, \u0026, and
	// U+2028 and U+2029 as \u2028 and \u2029 (Go's encoding/json).
	html bool
	// ascii escapes every character beyond ASCII as \uXXXX, with
	// surrogate pairs beyond the BMP (Python's json.dumps, PHP).
	ascii bool
	// allU escapes every character it escapes as \u00XX (also `"`, `\`,
	// the control characters, `/`, `<`, `>`, `&` and `'`), upper-case hex
	// digits with upper.
	allU, upper bool
}

// jsonStyles are the JSON escaping styles redaction covers: the minimal
// one (JavaScript's JSON.stringify, Python with ensure_ascii off, Rust's
// serde_json), Python's default, Go's, PHP's with and without its
// escaping of characters beyond ASCII, and every special character as
// \u00XX in lower and upper case.
var jsonStyles = []jsonStyle{
	{},
	{ascii: true},
	{html: true},
	{slash: true},
	{slash: true, ascii: true},
	{allU: true, ascii: true},
	{allU: true, ascii: true, upper: true},
}

// jsonEscape returns b as the inside of a JSON string in style st, and
// false when st escapes characters beyond ASCII and b is not UTF-8 (an
// encoder would not have kept its bytes).
func jsonEscape(b []byte, st jsonStyle) ([]byte, bool) {
	hex := "0123456789abcdef"
	if st.upper {
		hex = "0123456789ABCDEF"
	}
	var out []byte
	u := func(r rune) {
		out = append(out, '\\', 'u', hex[r>>12&0xf], hex[r>>8&0xf], hex[r>>4&0xf], hex[r&0xf])
	}
	for i := 0; i < len(b); {
		c := b[i]
		if c >= utf8.RuneSelf {
			r, n := utf8.DecodeRune(b[i:])
			switch {
			case (st.ascii || st.allU) && r == utf8.RuneError && n == 1:
				return nil, false
			case st.ascii || st.allU:
				if r > 0xffff {
					r -= 0x10000
					u(0xd800 + r>>10)
					u(0xdc00 + r&0x3ff)
				} else {
					u(r)
				}
			case st.html && (r == '\u2028' || r == '\u2029'):
				u(r)
			default:
				out = append(out, b[i:i+n]...)
			}
			i += n
			continue
		}
		i++
		special := c < 0x20 || c == '"' || c == '\\'
		if st.allU {
			if special || c == '/' || c == '<' || c == '>' || c == '&' || c == '\'' {
				u(rune(c))
			} else {
				out = append(out, c)
			}
			continue
		}
		switch {
		case c == '"' || c == '\\' || (st.slash && c == '/'):
			out = append(out, '\\', c)
		case c == '\b':
			out = append(out, '\\', 'b')
		case c == '\f':
			out = append(out, '\\', 'f')
		case c == '\n':
			out = append(out, '\\', 'n')
		case c == '\r':
			out = append(out, '\\', 'r')
		case c == '\t':
			out = append(out, '\\', 't')
		case c < 0x20 || (st.html && (c == '<' || c == '>' || c == '&')):
			u(rune(c))
		default:
			out = append(out, c)
		}
	}
	return out, true
}

// percentStyle is one way of percent-encoding: which bytes beyond the
// letters and digits stay as they are, how a space is written, and the
// case of the hex digits.
type percentStyle struct {
	keep  string
	plus  bool // a space as "+"
	lower bool // lower-case hex digits
}

// percentKeeps are the sets of bytes beyond letters and digits that
// common encoders keep: RFC 3986's unreserved ones (Go's QueryEscape,
// Python's quote_plus and quote with safe=""), those and "/" (Python's
// quote), JavaScript's encodeURIComponent, the WHATWG form encoding
// (application/x-www-form-urlencoded), and Go's PathEscape.
var percentKeeps = []string{"-._~", "-._~/", "-._~!'()*", "-._*", "-._~$&+,:;=@"}

// percentStyles returns the percent-encodings redaction covers: each of
// percentKeeps with a space as "+" and as %20, in upper- and lower-case
// hex. (Built at each call, not during package initialization: that runs
// at every start of hutch.)
func percentStyles() []percentStyle {
	out := make([]percentStyle, 0, 4*len(percentKeeps))
	for _, keep := range percentKeeps {
		for _, plus := range []bool{true, false} {
			for _, lower := range []bool{false, true} {
				out = append(out, percentStyle{keep: keep, plus: plus, lower: lower})
			}
		}
	}
	return out
}

// percentEscape returns b percent-encoded in style st.
func percentEscape(b []byte, st percentStyle) []byte {
	hex := "0123456789ABCDEF"
	if st.lower {
		hex = "0123456789abcdef"
	}
	out := make([]byte, 0, len(b))
	for _, c := range b {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9',
			bytes.IndexByte([]byte(st.keep), c) >= 0:
			out = append(out, c)
		case c == ' ' && st.plus:
			out = append(out, '+')
		default:
			out = append(out, '%', hex[c>>4], hex[c&0xf])
		}
	}
	return out
}
