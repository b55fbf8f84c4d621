package mcprelay

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"testing"
)

// secretValue is the real value of the tests' secret TOKEN: with
// characters that JSON, URLs and base64 each encode their own way.
const secretValue = `tok-3f9a"b/c d+e&f=7c21`

// session is a relay with what it wrote to either side and recorded.
type session struct {
	r              *Relay
	client, server bytes.Buffer
	calls          []Call
	logs           []string
}

func newSession(t *testing.T, o Options) *session {
	t.Helper()
	s := &session{}
	o.Record = func(c Call) { s.calls = append(s.calls, c) }
	o.Log = func(l string) { s.logs = append(s.logs, l) }
	s.r = New(&s.client, &s.server, o)
	return s
}

// fromClient relays lines of the client's.
func (s *session) fromClient(t *testing.T, lines ...string) {
	t.Helper()
	if err := s.r.FromClient(strings.NewReader(strings.Join(lines, "\n") + "\n")); err != nil {
		t.Fatal(err)
	}
}

// fromServer relays lines of the server's.
func (s *session) fromServer(t *testing.T, lines ...string) {
	t.Helper()
	if err := s.r.FromServer(strings.NewReader(strings.Join(lines, "\n") + "\n")); err != nil {
		t.Fatal(err)
	}
}

// lines splits what a side got into its lines.
func lines(b *bytes.Buffer) []string {
	s := strings.TrimSuffix(b.String(), "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

func secretOptions() Options {
	return Options{
		Secrets:  []Secret{{Name: "TOKEN", Value: []byte(secretValue)}},
		Patterns: []*regexp.Regexp{regexp.MustCompile(`AKIA[0-9A-Z]{16}`)},
	}
}

// jsonString is s as a JSON string literal.
func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// forms are the encodings of the secret a server might return.
func forms() map[string]string {
	esc, _ := json.Marshal(secretValue)
	return map[string]string{
		"raw":           secretValue,
		"json-escaped":  string(esc[1 : len(esc)-1]),
		"query-escaped": url.QueryEscape(secretValue),
		"path-escaped":  url.PathEscape(secretValue),
		"base64":        base64.StdEncoding.EncodeToString([]byte(secretValue)),
		"base64url":     base64.RawURLEncoding.EncodeToString([]byte(secretValue)),
		// Basic credentials: the value inside a larger base64 text.
		"basic": base64.StdEncoding.EncodeToString([]byte("user:" + secretValue)),
	}
}

// TestFilterSecrets: no form of a secret's value reaches the client, in
// any string of any message (nested in results, in keys, in a
// notification, in a request of the server's), and a string that held
// one says which secret it was.
func TestFilterSecrets(t *testing.T) {
	for name, form := range forms() {
		t.Run(name, func(t *testing.T) {
			s := newSession(t, secretOptions())
			s.fromClient(t, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read","arguments":{"path":"a"}}}`)
			text := "before " + form + " after"
			s.fromServer(t,
				`{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":`+jsonString(text)+`}],"structuredContent":{"deep":[[{"x":`+jsonString(text)+`}]],`+jsonString(form)+`:1}}}`,
				`{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":`+jsonString(text)+`}}`,
				`{"jsonrpc":"2.0","id":"s1","method":"sampling/createMessage","params":{"messages":[{"role":"user","content":{"type":"text","text":`+jsonString(text)+`}}]}}`,
			)
			got := lines(&s.client)
			if len(got) != 3 {
				t.Fatalf("the client got %d messages, want 3:\n%s", len(got), s.client.String())
			}
			for _, l := range got {
				for fname, f := range forms() {
					if strings.Contains(l, f) {
						t.Errorf("the client got the secret (%s form): %s", fname, l)
					}
				}
				if !strings.Contains(l, `[redacted: secret TOKEN]`) {
					t.Errorf("no marker in %s", l)
				}
				if !json.Valid([]byte(l)) {
					t.Errorf("not JSON: %s", l)
				}
			}
			var res struct {
				Result struct {
					Content           []struct{ Type, Text string }
					StructuredContent map[string]any
				}
			}
			if err := json.Unmarshal([]byte(got[0]), &res); err != nil {
				t.Fatal(err)
			}
			if len(res.Result.Content) != 1 || res.Result.Content[0].Type != "text" || res.Result.Content[0].Text != "[redacted: secret TOKEN]" {
				t.Errorf("content %+v, want the text block's string redacted whole", res.Result.Content)
			}
			if _, ok := res.Result.StructuredContent["[redacted: secret TOKEN]"]; !ok {
				t.Errorf("the key holding the secret was not redacted: %v", res.Result.StructuredContent)
			}
			if c := s.r.Redactions(); c.Secrets["TOKEN"] != 5 {
				t.Errorf("redactions %+v, want 5 of TOKEN (3 in the result, one in each other message)", c)
			}
			if len(s.calls) != 1 || s.calls[0].Redactions != 3 || s.calls[0].Outcome != OK {
				t.Errorf("calls %+v, want one, ok, with 3 redactions", s.calls)
			}
		})
	}
}

// TestFilterUnicodeEscapes: a server that spells the value with JSON's
// \u escapes on the wire does not get it past the filter, which judges
// the decoded strings.
func TestFilterUnicodeEscapes(t *testing.T) {
	s := newSession(t, secretOptions())
	var spelled strings.Builder
	for _, c := range secretValue {
		fmt.Fprintf(&spelled, `\u%04x`, c)
	}
	s.fromServer(t, `{"jsonrpc":"2.0","method":"notifications/message","params":{"data":"`+spelled.String()+`"}}`)
	if got := s.client.String(); strings.Contains(got, spelled.String()) || !strings.Contains(got, "[redacted: secret TOKEN]") {
		t.Errorf("the client got %s", got)
	}
}

// TestFilterNumber: a secret of digits that comes back as a number is
// redacted too.
func TestFilterNumber(t *testing.T) {
	s := newSession(t, Options{Secrets: []Secret{{Name: "PIN", Value: []byte("48151623")}}})
	s.fromServer(t, `{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":9948151623001}}`)
	if got := s.client.String(); strings.Contains(got, "48151623") || !strings.Contains(got, `"[redacted: secret PIN]"`) {
		t.Errorf("the client got %s", got)
	}
}

// TestPassUnchanged: a message with nothing to redact reaches the other
// side byte for byte (spacing, key order, escapes), in order, and what
// the client sends is never filtered.
func TestPassUnchanged(t *testing.T) {
	s := newSession(t, secretOptions())
	client := []string{
		`{"id":1,  "jsonrpc":"2.0","method":"tools/call","params":{"name":"echo","arguments":{"text":"` + secretValue[:3] + `\u00e9 AKIAABCDEFGHIJKLMNOP"}}}`,
		`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7}}`,
		`{"jsonrpc":"2.0","id":"s1","result":{"role":"assistant","content":{"type":"text","text":"` + strings.ReplaceAll(secretValue, `"`, `\"`) + `"}}}`,
	}
	s.fromClient(t, client...)
	if got := lines(&s.server); strings.Join(got, "\n") != strings.Join(client, "\n") {
		t.Errorf("the server got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(client, "\n"))
	}
	server := []string{
		`{"result":{"content":[{"type":"text","text":"caf\u00e9 \/ <b>"}]},"jsonrpc":"2.0","id":1}`,
		`{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}`,
		`{"jsonrpc":"2.0","id":"s2","method":"roots/list"}`,
	}
	s.fromServer(t, server...)
	if got := lines(&s.client); strings.Join(got, "\n") != strings.Join(server, "\n") {
		t.Errorf("the client got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(server, "\n"))
	}
}

// TestPatterns: --redact patterns redact their matches in the answers to
// tools/call and resources/read (and to requests the relay cannot
// place), not in other messages, nor in the envelope, nor in the
// content blocks' types and MIME types.
func TestPatterns(t *testing.T) {
	o := secretOptions()
	o.Patterns = append(o.Patterns, regexp.MustCompile(`text|2\.0`))
	s := newSession(t, o)
	key := "AKIAABCDEFGHIJKLMNOP"
	s.fromClient(t,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t"}}`,
		`{"jsonrpc":"2.0","id":2,"method":"resources/read","params":{"uri":"file:///a"}}`,
		`{"jsonrpc":"2.0","id":3,"method":"tools/list"}`,
	)
	s.fromServer(t,
		`{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"k=`+key+` and `+key+`"}],"isError":true}}`,
		`{"jsonrpc":"2.0","id":2,"result":{"contents":[{"uri":"file:///a","mimeType":"text/plain","text":"`+key+`"}]}}`,
		`{"jsonrpc":"2.0","id":3,"result":{"tools":[{"name":"t","description":"`+key+`"}]}}`,
		`{"jsonrpc":"2.0","id":99,"error":{"code":-32000,"message":"`+key+`"}}`,
	)
	got := lines(&s.client)
	if len(got) != 4 {
		t.Fatalf("the client got %d messages, want 4:\n%s", len(got), s.client.String())
	}
	want := []string{
		`{"id":1,"jsonrpc":"2.0","result":{"content":[{"text":"k=[redacted: pattern 1] and [redacted: pattern 1]","type":"text"}],"isError":true}}`,
		`{"id":2,"jsonrpc":"2.0","result":{"contents":[{"mimeType":"text/plain","text":"[redacted: pattern 1]","uri":"file:///a"}]}}`,
		`{"jsonrpc":"2.0","id":3,"result":{"tools":[{"name":"t","description":"` + key + `"}]}}`,
		`{"error":{"code":-32000,"message":"[redacted: pattern 1]"},"id":99,"jsonrpc":"2.0"}`,
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("message %d:\n got %s\nwant %s", i+1, got[i], want[i])
		}
	}
	if c := s.r.Redactions(); len(c.Patterns) != 1 || c.Patterns[0] != 4 {
		t.Errorf("pattern redactions %v, want 4 of the first, none of the second", c.Patterns)
	}
	if len(s.calls) != 1 || s.calls[0].Outcome != ToolError || s.calls[0].Redactions != 2 {
		t.Errorf("calls %+v, want one tool_error with 2 redactions", s.calls)
	}
}

// TestCheckPattern: a bad pattern, or one that matches the empty string,
// is an error naming it.
func TestCheckPattern(t *testing.T) {
	for _, expr := range []string{`(`, `a*`, `x|`} {
		if _, err := CheckPattern(expr); err == nil {
			t.Errorf("CheckPattern(%q): no error", expr)
		}
	}
	if _, err := CheckPattern(`ghp_[A-Za-z0-9]{36}`); err != nil {
		t.Error(err)
	}
}

// TestMalformedFromServer: what the server writes that is not a JSON-RPC
// message is dropped and logged (never its content), and the relay goes
// on.
func TestMalformedFromServer(t *testing.T) {
	s := newSession(t, secretOptions())
	s.fromServer(t,
		`Server running on stdio `+secretValue,
		`{"jsonrpc":"2.0","id":1,"result":`,
		`{"jsonrpc":"1.0","id":1,"result":{}}`,
		`[{"jsonrpc":"2.0","id":1,"result":{}}]`,
		`{"jsonrpc":"2.0","id":1,"result":{}} trailing`,
		"\xff\xfe",
		``,
		`{"jsonrpc":"2.0","method":"notifications/message","params":{"data":"ok"}}`,
	)
	if got := lines(&s.client); len(got) != 1 || !strings.Contains(got[0], `"data":"ok"`) {
		t.Errorf("the client got %q, want the one good message", got)
	}
	if len(s.logs) != 6 {
		t.Errorf("logs %q, want one line for each of the 6 bad lines", s.logs)
	}
	for _, l := range s.logs {
		if strings.Contains(l, secretValue) || strings.Contains(l, "Server running") {
			t.Errorf("a log line quotes the server: %s", l)
		}
	}
}

// TestOversize: a line longer than the limit is refused without being
// held: the client's request is answered with an error and never reaches
// the server; the server's answer to a tools/call is replaced by an
// error (its id found after the big result) and recorded so; the
// server's own request is answered; a notification is dropped. The
// session goes on after each.
func TestOversize(t *testing.T) {
	o := secretOptions()
	o.MaxMessage = 1000
	s := newSession(t, o)
	big := strings.Repeat("x", 5000)
	s.fromClient(t,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"big","arguments":{"a":"`+big+`"}}}`,
		`{"jsonrpc":"2.0","method":"notifications/message","params":{"a":"`+big+`"}}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"small","arguments":{}}}`,
	)
	srv := lines(&s.server)
	if len(srv) != 1 || !strings.Contains(srv[0], `"small"`) {
		t.Errorf("the server got %d lines, want the small call only", len(srv))
	}
	cl := lines(&s.client)
	if len(cl) != 1 || !strings.Contains(cl[0], `"id":1`) || !strings.Contains(cl[0], `"code":-32600`) || !strings.Contains(cl[0], "larger than the relay's limit of 1000 bytes") {
		t.Fatalf("the client got %q, want an error for request 1", cl)
	}
	s.client.Reset()
	s.server.Reset()
	s.fromServer(t,
		// The TypeScript SDK puts the id after the result.
		`{"result":{"content":[{"type":"text","text":"`+big+`","id":5,"nested":{"id":6}}]},"jsonrpc":"2.0","id":2}`,
		`{"jsonrpc":"2.0","id":"s\"1","method":"sampling/createMessage","params":{"a":"`+big+`"}}`,
		`{"jsonrpc":"2.0","method":"notifications/message","params":{"a":"`+big+`"}}`,
		`{"jsonrpc":"2.0","method":"notifications/message","params":{"data":"after"}}`,
	)
	cl = lines(&s.client)
	if len(cl) != 2 || !strings.Contains(cl[0], `"id":2`) || !strings.Contains(cl[0], `"code":-32603`) || !strings.Contains(cl[1], "after") {
		t.Errorf("the client got %q, want an error for request 2, then the last notification", cl)
	}
	srv = lines(&s.server)
	if len(srv) != 1 || !strings.Contains(srv[0], `"id":"s\"1"`) || !strings.Contains(srv[0], `"code":-32600`) {
		t.Errorf("the server got %q, want an error for its request", srv)
	}
	if len(s.calls) != 1 || s.calls[0].Tool != "small" || s.calls[0].Outcome != Error || s.calls[0].ErrorCode != -32603 {
		t.Errorf("calls %+v, want small ended with error -32603", s.calls)
	}
	if len(s.logs) != 5 {
		t.Errorf("logs %q, want one a refused line", s.logs)
	}
}

// TestTopScanner: the id and method of a line are found without holding
// it, whatever is around and inside them, in pieces of any size.
func TestTopScanner(t *testing.T) {
	for _, tc := range []struct {
		line, id, method string
	}{
		{`{"jsonrpc":"2.0","id":12,"method":"a/b","params":{"id":3,"method":"x"}}`, `12`, `"a/b"`},
		{`{"params":{"s":"\"id\":9,}{","method":"no"},"id" : "q\"}" }`, `"q\"}"`, ``},
		{`{"result":[{"id":1}],"id":null}`, `null`, ``},
		{`{"id":{"x":1},"method":"m"}`, ``, `"m"`},
	} {
		for _, step := range []int{1, 3, len(tc.line)} {
			var sc topScanner
			for i := 0; i < len(tc.line); i += step {
				sc.feed([]byte(tc.line[i:min(i+step, len(tc.line))]))
			}
			id := string(sc.id)
			if sc.idBad {
				id = ""
			}
			if id != tc.id || string(sc.method) != tc.method {
				t.Errorf("%s (pieces of %d): id %q method %q, want %q %q", tc.line, step, id, sc.method, tc.id, tc.method)
			}
		}
	}
}

// TestRecords: every tools/call is recorded when it ends — ok, a tool
// error, a JSON-RPC error with its code, cancelled by the client,
// unanswered at the end — with its tool, the size of its arguments and
// never the arguments themselves; other requests are not.
func TestRecords(t *testing.T) {
	s := newSession(t, Options{})
	args := `{"path":"/w/a.txt","n":1}`
	s.fromClient(t,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"ok","arguments":`+args+`}}`,
		`{"jsonrpc":"2.0","id":"two","method":"tools/call","params":{"name":"fails"}}`,
		`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"refused","arguments":{}}}`,
		`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"slow","arguments":{}}}`,
		`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"forever","arguments":{}}}`,
		`{"jsonrpc":"2.0","id":6,"method":"tools/list"}`,
		`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":4,"reason":"user"}}`,
	)
	s.fromServer(t,
		`{"jsonrpc":"2.0","id":"two","result":{"content":[],"isError":true}}`,
		`{"jsonrpc":"2.0","id":1,"result":{"content":[]}}`,
		`{"jsonrpc":"2.0","id":3,"error":{"code":-32602,"message":"bad"}}`,
		`{"jsonrpc":"2.0","id":6,"result":{"tools":[]}}`,
		`{"jsonrpc":"2.0","id":4,"result":{"content":[]}}`,
	)
	s.r.Finish()
	want := []struct {
		tool    string
		args    int
		outcome Outcome
		code    int64
	}{
		{"slow", 2, Cancelled, 0},
		{"fails", 0, ToolError, 0},
		{"ok", len(args), OK, 0},
		{"refused", 2, Error, -32602},
		{"forever", 2, NoAnswer, 0},
	}
	if len(s.calls) != len(want) {
		t.Fatalf("calls %+v, want %d", s.calls, len(want))
	}
	for i, w := range want {
		c := s.calls[i]
		if c.Tool != w.tool || c.ArgumentBytes != w.args || c.Outcome != w.outcome || c.ErrorCode != w.code || c.Start.IsZero() || c.Duration < 0 {
			t.Errorf("call %d: %+v, want %+v", i+1, c, w)
		}
	}
	// The late answer to the cancelled call still reaches the client.
	if n := len(lines(&s.client)); n != 5 {
		t.Errorf("the client got %d messages, want 5", n)
	}
}

// TestTooManyInFlight: the requests in flight the relay keeps are
// bounded; one beyond is refused with an error, not forgotten.
func TestTooManyInFlight(t *testing.T) {
	s := newSession(t, Options{})
	var b strings.Builder
	for i := range maxPending + 1 {
		fmt.Fprintf(&b, `{"jsonrpc":"2.0","id":%d,"method":"ping"}`+"\n", i)
	}
	if err := s.r.FromClient(strings.NewReader(b.String())); err != nil {
		t.Fatal(err)
	}
	if n := len(lines(&s.server)); n != maxPending {
		t.Errorf("the server got %d requests, want %d", n, maxPending)
	}
	cl := lines(&s.client)
	if len(cl) != 1 || !strings.Contains(cl[0], fmt.Sprintf(`"id":%d`, maxPending)) || !strings.Contains(cl[0], "requests in flight") {
		t.Errorf("the client got %q, want the last request refused", cl)
	}
}

// TestStderrFilter: the server's stderr loses the secret's value too.
func TestStderrFilter(t *testing.T) {
	r := New(&bytes.Buffer{}, &bytes.Buffer{}, secretOptions())
	var out bytes.Buffer
	if _, err := out.ReadFrom(r.StderrFilter(strings.NewReader("token: " + secretValue + "\nb64: " + forms()["base64"] + "\n"))); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); got != "token: [redacted: secret TOKEN]\nb64: [redacted: secret TOKEN]\n" {
		t.Errorf("stderr %q", got)
	}
}

// TestUnescape: with its escapes undone, a message holds each of its
// strings, decoded, as a run of bytes, however the strings were escaped
// (so that the filter's look at the bytes misses nothing).
func TestUnescape(t *testing.T) {
	strs := []string{"plain", `q"uo\te`, "tab\tnl\n\x01ctl", "caf\u00e9 \u2028 <&>", "emoji \U0001F600 end", "lone \xed\xa0\x80 surrogate"}
	for _, s := range strs {
		want := s
		var d string
		if err := json.Unmarshal([]byte(jsonString(s)), &d); err == nil {
			want = d // what a decoder gives (U+FFFD for what is not UTF-8)
		}
		var every strings.Builder
		for _, r := range want {
			if r > 0xffff {
				r -= 0x10000
				fmt.Fprintf(&every, `\u%04X\u%04x`, 0xd800+r>>10, 0xdc00+r&0x3ff)
			} else {
				fmt.Fprintf(&every, `\u%04x`, r)
			}
		}
		for _, enc := range []string{jsonString(s), `"` + every.String() + `"`} {
			line := []byte(`{"a":[` + enc + `],"b":"x\"y"}`)
			var v struct{ A []string }
			if err := json.Unmarshal(line, &v); err != nil || len(v.A) != 1 {
				t.Fatalf("%s: %v", line, err)
			}
			if !bytes.Contains(unescape(line), []byte(v.A[0])) {
				t.Errorf("unescape(%s) = %q, which does not hold %q", line, unescape(line), v.A[0])
			}
		}
	}
	if got := string(unescape([]byte(`"\ud83d\ude00 \ud83d x \u12"`))); got != "\"\U0001F600 \uFFFD x \\u12\"" {
		t.Errorf("unescape: %q", got)
	}
}

// TestAnchoredPattern: a pattern anchored to a string's start or end, or
// to a word's edge, still redacts where the string is in the middle of
// the line, and one that is not looks at the bytes only.
func TestAnchoredPattern(t *testing.T) {
	for _, expr := range []string{`^AKIA[0-9A-Z]{16}$`, `\bAKIA[0-9A-Z]{16}\b`, `(?m)^AKIA`} {
		re := regexp.MustCompile(expr)
		if !anchoredPattern(re) {
			t.Errorf("%s: not anchored", expr)
		}
		s := newSession(t, Options{Patterns: []*regexp.Regexp{re}})
		s.fromClient(t, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t"}}`)
		s.fromServer(t, `{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"AKIAABCDEFGHIJKLMNOP"}]}}`)
		if got := s.client.String(); !strings.Contains(got, "[redacted: pattern 1]") {
			t.Errorf("%s: the client got %s", expr, got)
		}
	}
	if anchoredPattern(regexp.MustCompile(`AKIA[0-9A-Z]{16}|ghp_\w+`)) {
		t.Error("an unanchored pattern is taken as anchored")
	}
}

// TestOneValue: a line with anything after its JSON value is not one
// message.
func TestOneValue(t *testing.T) {
	for line, want := range map[string]bool{
		`{"a":"}\"{"}`:              true,
		`{"a":"\\"}  `:              true,
		`{"a":[1,{"b":"]"}]}`:       true,
		`{"a":1} {"b":2}`:           false,
		`{"a":1}x`:                  false,
		`{"a":"\\\"}`:               false,
		`{"a":"unterminated`:        false,
		`[{"jsonrpc":"2.0"}]` + " ": true,
	} {
		if got := oneValue([]byte(line)); got != want {
			t.Errorf("oneValue(%s) = %v, want %v", line, got, want)
		}
	}
}
