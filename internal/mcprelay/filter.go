package mcprelay

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"regexp/syntax"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/hutch-sandbox/hutch/internal/secrets"
)

// Secret is a real value that must never reach the client, by the name
// the operator knows it by (the variable of --secret).
type Secret struct {
	Name  string
	Value []byte
}

// SecretMarker is what a string holding secret name's value becomes.
func SecretMarker(name string) string { return "[redacted: secret " + name + "]" }

// PatternMarker is what a match of the i-th deny pattern (from 1)
// becomes.
func PatternMarker(i int) string { return "[redacted: pattern " + strconv.Itoa(i) + "]" }

// CheckPattern compiles a deny pattern (RE2 syntax): an error names what
// is wrong with it, also when it matches the empty string, which would
// mark every string.
func CheckPattern(expr string) (*regexp.Regexp, error) {
	re, err := regexp.Compile(expr)
	if err != nil {
		return nil, err
	}
	if re.MatchString("") {
		return nil, fmt.Errorf("%q matches the empty string", expr)
	}
	return re, nil
}

// Counts are the redactions made: for each secret by name, the strings
// replaced; for each deny pattern (in order), its matches replaced.
type Counts struct {
	Secrets  map[string]int
	Patterns []int
}

// Total is the number of redactions.
func (c Counts) Total() int {
	n := 0
	for _, v := range c.Secrets {
		n += v
	}
	for _, v := range c.Patterns {
		n += v
	}
	return n
}

// add adds o to c.
func (c *Counts) add(o Counts) {
	for k, v := range o.Secrets {
		if c.Secrets == nil {
			c.Secrets = map[string]int{}
		}
		c.Secrets[k] += v
	}
	for i, v := range o.Patterns {
		for len(c.Patterns) <= i {
			c.Patterns = append(c.Patterns, 0)
		}
		c.Patterns[i] += v
	}
}

// filter takes secrets and deny-pattern matches out of the server's
// messages.
type filter struct {
	// forms finds each secret's value and its encoded forms (JSON
	// escapes, percent-encoding, base64, also inside a larger base64
	// text: secrets.RedactionPairs); owner[k] is the secret of pattern k.
	forms    *secrets.Replacer
	owner    []string
	patterns []*regexp.Regexp
	// anchored[i] says that patterns[i] asserts something about what
	// surrounds a match (anchoredPattern).
	anchored []bool
}

func newFilter(list []Secret, patterns []*regexp.Regexp) *filter {
	f := &filter{patterns: patterns}
	for _, re := range patterns {
		f.anchored = append(f.anchored, anchoredPattern(re))
	}
	var pairs [][2][]byte
	for _, s := range list {
		marker := []byte(SecretMarker(s.Name))
		// The pairs' new halves are the value's forms too (the value is
		// its own placeholder here): each form becomes the marker.
		for _, p := range secrets.RedactionPairs(s.Value, s.Value) {
			pairs = append(pairs, [2][]byte{p[0], marker})
			f.owner = append(f.owner, s.Name)
		}
	}
	if len(pairs) > 0 {
		f.forms = secrets.NewReplacer(pairs...)
	}
	return f
}

// streamReplacer is a Replacer of every secret's forms by its marker,
// for a byte stream (the server's stderr); nil when there are no secrets.
func (f *filter) streamReplacer() *secrets.Replacer { return f.forms }

// errNotJSON is the error of apply for a line that is not one JSON value.
var errNotJSON = errors.New("not a JSON value")

// apply returns line with every string (object keys and numbers too)
// that holds a secret's value, in any form the filter knows, replaced by
// the secret's marker and, when scoped (the answer to a tools/call or a
// resources/read), every match of a deny pattern in the strings of its
// "result" or "error" replaced by the pattern's marker. Without any
// redaction it returns line itself, unchanged byte for byte; with one, a
// new encoding of the message (the same JSON but for the redactions: the
// order of object keys and the spelling of escapes may differ).
func (f *filter) apply(line []byte, scoped bool) ([]byte, Counts, error) {
	var c Counts
	if !f.mayRedact(line, scoped) {
		return line, c, nil
	}
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, c, errNotJSON
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, c, errNotJSON
	}
	w := walker{f: f, counts: &c}
	var changed bool
	if obj, ok := v.(map[string]any); ok && scoped {
		// Deny patterns apply to the answer, not to the envelope (the
		// version, the id).
		v, changed = w.object(obj, func(key string) bool { return key == "result" || key == "error" })
	} else {
		v, changed = w.value(v, false)
	}
	if !changed {
		return line, c, nil
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, c, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), c, nil
}

// mayRedact reports whether apply may find something to redact in line,
// a JSON value, looking at its bytes only: no form of a secret occurs in
// the line with its escapes undone (where every string of the message,
// decoded, is a run of bytes), nor, when scoped, a match of a pattern
// that asserts nothing about its surroundings (^, $, \b and the like,
// which a string's ends would satisfy where the line's do not), then
// none does in any string. A line that is not UTF-8 (whose decoding
// replaces bytes) is always decoded.
func (f *filter) mayRedact(line []byte, scoped bool) bool {
	patterns := scoped && len(f.patterns) > 0
	if f.forms == nil && !patterns {
		return false
	}
	if !utf8.Valid(line) {
		return true
	}
	plain := unescape(line)
	if f.forms != nil && f.forms.First(plain) >= 0 {
		return true
	}
	if patterns {
		for i, re := range f.patterns {
			if f.anchored[i] || re.Match(plain) {
				return true
			}
		}
	}
	return false
}

// unescape returns b with every JSON string escape (\n, \", \u00e9, a
// surrogate pair) replaced by the character it stands for, as a decoder
// would (a lone surrogate as U+FFFD); b itself when it has none.
func unescape(b []byte) []byte {
	i := bytes.IndexByte(b, '\\')
	if i < 0 {
		return b
	}
	out := make([]byte, 0, len(b))
	for i >= 0 {
		out = append(out, b[:i]...)
		b = b[i:]
		if len(b) < 2 {
			break
		}
		n := 2
		switch c := b[1]; c {
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, ok := hex4(b[2:])
			if !ok {
				out = append(out, b[:2]...)
				break
			}
			n = 6
			if utf16.IsSurrogate(r) {
				r2, ok2 := rune(-1), false
				if len(b) >= 12 && b[6] == '\\' && b[7] == 'u' {
					r2, ok2 = hex4(b[8:])
				}
				if d := utf16.DecodeRune(r, r2); ok2 && d != utf8.RuneError {
					r, n = d, 12
				} else {
					r = utf8.RuneError
				}
			}
			out = utf8.AppendRune(out, r)
		default:
			out = append(out, c)
		}
		b = b[n:]
		i = bytes.IndexByte(b, '\\')
	}
	return append(out, b...)
}

// hex4 reads the 4 hex digits of a \u escape.
func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// anchoredPattern reports whether re asserts something about what
// surrounds a match (^, $, \A, \z, \b, \B): then a string's ends may
// satisfy it where the line around the string does not.
func anchoredPattern(re *regexp.Regexp) bool {
	parsed, err := syntax.Parse(re.String(), syntax.Perl)
	if err != nil {
		return true
	}
	var walk func(*syntax.Regexp) bool
	walk = func(x *syntax.Regexp) bool {
		switch x.Op {
		case syntax.OpBeginLine, syntax.OpEndLine, syntax.OpBeginText, syntax.OpEndText,
			syntax.OpWordBoundary, syntax.OpNoWordBoundary:
			return true
		}
		for _, sub := range x.Sub {
			if walk(sub) {
				return true
			}
		}
		return false
	}
	return walk(parsed)
}

// walker walks one decoded message.
type walker struct {
	f      *filter
	counts *Counts
}

// value returns v with its redactions made, and whether there were any;
// patterns says that deny patterns apply to v's strings.
func (w walker) value(v any, patterns bool) (any, bool) {
	switch x := v.(type) {
	case string:
		return w.str(x, patterns)
	case json.Number:
		// A secret of digits may come back as a number.
		if name, ok := w.secretIn(string(x)); ok {
			return w.secret(name), true
		}
		return x, false
	case []any:
		changed := false
		for i, e := range x {
			var ch bool
			x[i], ch = w.value(e, patterns)
			changed = changed || ch
		}
		return x, changed
	case map[string]any:
		return w.object(x, func(string) bool { return patterns })
	}
	return v, false
}

// object walks an object's keys (for secrets) and values; patterns(key)
// says whether deny patterns apply to the value at key. The string
// values of "type" (the discriminator of MCP's content blocks) and
// "mimeType" are left to secrets alone: a pattern that matched "text"
// there would break the result, not hide anything.
func (w walker) object(m map[string]any, patterns func(key string) bool) (any, bool) {
	changed := false
	var renamed map[string]any
	for k, e := range m {
		p := patterns(k)
		if _, isString := e.(string); isString && (k == "type" || k == "mimeType") {
			p = false
		}
		nv, ch := w.value(e, p)
		if ch {
			m[k] = nv
			changed = true
		}
		if name, ok := w.secretIn(k); ok {
			if renamed == nil {
				renamed = map[string]any{}
			}
			renamed[k] = w.secret(name)
		}
	}
	for old, marker := range renamed {
		v := m[old]
		delete(m, old)
		key := marker.(string)
		for i := 2; ; i++ {
			if _, taken := m[key]; !taken {
				break
			}
			key = fmt.Sprintf("%s (%d)", marker, i)
		}
		m[key] = v
		changed = true
	}
	return m, changed
}

// str redacts one string: wholly when it holds a secret, else each match
// of the deny patterns when they apply.
func (w walker) str(s string, patterns bool) (any, bool) {
	if name, ok := w.secretIn(s); ok {
		return w.secret(name), true
	}
	if !patterns {
		return s, false
	}
	changed := false
	for i, re := range w.f.patterns {
		locs := re.FindAllStringIndex(s, -1)
		if len(locs) == 0 {
			continue
		}
		marker := PatternMarker(i + 1)
		var b []byte
		last, n := 0, 0
		for _, l := range locs {
			if l[1] == l[0] {
				continue
			}
			b = append(append(b, s[last:l[0]]...), marker...)
			last = l[1]
			n++
		}
		if n == 0 {
			continue
		}
		s = string(append(b, s[last:]...))
		for len(w.counts.Patterns) <= i {
			w.counts.Patterns = append(w.counts.Patterns, 0)
		}
		w.counts.Patterns[i] += n
		changed = true
	}
	return s, changed
}

// secretIn names a secret whose value, in some form, s holds.
func (w walker) secretIn(s string) (string, bool) {
	if w.f.forms == nil || len(s) == 0 {
		return "", false
	}
	if k := w.f.forms.First([]byte(s)); k >= 0 {
		return w.f.owner[k], true
	}
	return "", false
}

// secret counts a redaction of secret name and returns its marker.
func (w walker) secret(name string) any {
	if w.counts.Secrets == nil {
		w.counts.Secrets = map[string]int{}
	}
	w.counts.Secrets[name]++
	return SecretMarker(name)
}
