package secrets

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

// testSecret is a real value the tests look for in every output.
const testSecret = "s3cr3t-Value-8Qz"

// leaks reports how out reveals testSecret, or "" if it doesn't: as text
// (or its first five bytes), in hex, in base64, or as fmt prints a byte
// slice.
func leaks(out string) string {
	switch b := []byte(testSecret); {
	case strings.Contains(out, testSecret[:5]):
		return "text"
	case strings.Contains(strings.ToLower(out), hex.EncodeToString(b)):
		return "hex"
	case strings.Contains(out, base64.StdEncoding.EncodeToString(b)[:8]):
		return "base64"
	case strings.Contains(out, strings.Trim(fmt.Sprint(b[:4]), "[]")):
		return "decimal"
	}
	return ""
}

type exported struct {
	Name string
	V    Value
}

type unexported struct {
	name string
	v    Value
}

type nested struct {
	inner unexported
	list  []Value
	m     map[string]Value
	s     *Secret
}

func TestValueFmt(t *testing.T) {
	v := NewValue([]byte(testSecret))
	sec := &Secret{Name: "TOKEN", Hosts: []string{"api.example.com"}, Value: v, Placeholder: "ph_x"}
	args := []struct {
		name string
		arg  any
	}{
		{"value", v},
		{"pointer", &v},
		{"slice", []Value{v, v}},
		{"pointer slice", []*Value{&v}},
		{"array", [1]Value{v}},
		{"map", map[string]Value{"k": v}},
		{"map key pointer", map[*Value]int{&v: 1}},
		{"exported field", exported{"n", v}},
		{"exported field pointer", &exported{"n", v}},
		{"unexported field", unexported{"n", v}},
		{"unexported field pointer", &unexported{"n", v}},
		{"nested unexported", nested{unexported{"n", v}, []Value{v}, map[string]Value{"k": v}, sec}},
		{"nested unexported pointer", &nested{unexported{"n", v}, []Value{v}, map[string]Value{"k": v}, sec}},
		{"secret", *sec},
		{"secret pointer", sec},
		{"secrets", []*Secret{sec}},
		{"secret values", []Secret{*sec}},
		{"interface slice", []any{v, &v, sec}},
		{"anonymous struct", struct{ a, B any }{v, &v}},
	}
	verbs := []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d", "%t", "%p", "%10.3s", "%-8v", "%08x", "%T", "%c", "%U", "%e", "%b", "%o"}
	for _, a := range args {
		for _, verb := range verbs {
			out := fmt.Sprintf(verb, a.arg)
			if how := leaks(out); how != "" {
				t.Errorf("%s with %s leaks (%s): %s", a.name, verb, how, out)
			}
		}
		for _, f := range []func(...any) string{fmt.Sprint, fmt.Sprintln} {
			if out := f(a.arg); leaks(out) != "" {
				t.Errorf("%s with Sprint leaks: %s", a.name, out)
			}
		}
	}
	// Directly on the value, every verb gives just the redaction.
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d", "%10.3s", "%c"} {
		if out := fmt.Sprintf(verb, v); out != "[redacted]" {
			t.Errorf("Sprintf(%q, v) = %q, want [redacted]", verb, out)
		}
	}
	if s, g := v.String(), v.GoString(); s != "[redacted]" || g != "[redacted]" {
		t.Errorf("String, GoString = %q, %q", s, g)
	}
}

func TestValueErrors(t *testing.T) {
	v := NewValue([]byte(testSecret))
	base := errors.New("upstream refused")
	errs := []error{
		fmt.Errorf("%v", v),
		fmt.Errorf("token %s: %w", v, base),
		fmt.Errorf("secret %+v: %w", Secret{Name: "T", Value: v}, base),
		fmt.Errorf("outer: %w", fmt.Errorf("inner %q", &v)),
		errors.Join(base, fmt.Errorf("%x", v)),
	}
	for i, err := range errs {
		if how := leaks(err.Error()); how != "" {
			t.Errorf("error %d leaks (%s): %s", i, how, err)
		}
		if how := leaks(fmt.Sprintf("%+v", err)); how != "" {
			t.Errorf("error %d with %%+v leaks (%s)", i, how)
		}
	}
}

func TestValueSlog(t *testing.T) {
	v := NewValue([]byte(testSecret))
	sec := Secret{Name: "TOKEN", Value: v, Placeholder: "ph_x"}
	calls := []struct {
		name string
		log  func(*slog.Logger)
	}{
		{"attr", func(l *slog.Logger) { l.Info("m", "token", v) }},
		{"pointer attr", func(l *slog.Logger) { l.Info("m", slog.Any("token", &v)) }},
		{"group", func(l *slog.Logger) { l.Info("m", slog.Group("g", "token", v, "n", 1)) }},
		{"with group", func(l *slog.Logger) { l.WithGroup("g").With("token", v).Info("m") }},
		{"secret", func(l *slog.Logger) { l.Info("m", "secret", sec) }},
		{"secret pointer", func(l *slog.Logger) { l.Info("m", "secret", &sec) }},
		{"struct", func(l *slog.Logger) { l.Info("m", "s", exported{"n", v}) }},
		{"unexported struct", func(l *slog.Logger) { l.Info("m", "s", unexported{"n", v}) }},
		{"slice", func(l *slog.Logger) { l.Info("m", "s", []Value{v}) }},
		{"message", func(l *slog.Logger) { l.Info(fmt.Sprint("token ", v)) }},
		{"error", func(l *slog.Logger) { l.Error("m", "err", fmt.Errorf("bad %v", v)) }},
	}
	handlers := map[string]func(*bytes.Buffer) slog.Handler{
		"text": func(b *bytes.Buffer) slog.Handler { return slog.NewTextHandler(b, nil) },
		"json": func(b *bytes.Buffer) slog.Handler { return slog.NewJSONHandler(b, nil) },
	}
	for hname, h := range handlers {
		for _, c := range calls {
			var buf bytes.Buffer
			c.log(slog.New(h(&buf)))
			if how := leaks(buf.String()); how != "" {
				t.Errorf("%s handler, %s leaks (%s): %s", hname, c.name, how, buf.String())
			}
			if !strings.Contains(buf.String(), "[redacted]") && c.name != "unexported struct" {
				t.Errorf("%s handler, %s: no [redacted] in %s", hname, c.name, buf.String())
			}
		}
	}
	if got := v.LogValue(); got.String() != "[redacted]" {
		t.Errorf("LogValue = %v", got)
	}
}

func TestValueMarshal(t *testing.T) {
	v := NewValue([]byte(testSecret))
	vals := []struct {
		name string
		arg  any
	}{
		{"value", v},
		{"pointer", &v},
		{"field", exported{"n", v}},
		{"secret", Secret{Name: "T", Value: v}},
		{"slice", []Value{v}},
		{"map", map[string]any{"v": v}},
	}
	for _, a := range vals {
		j, err := json.Marshal(a.arg)
		if err != nil {
			t.Fatalf("json %s: %v", a.name, err)
		}
		if how := leaks(string(j)); how != "" || !bytes.Contains(j, []byte(`"[redacted]"`)) {
			t.Errorf("json %s = %s", a.name, j)
		}
		x, err := xml.Marshal(a.arg)
		if err == nil && leaks(string(x)) != "" {
			t.Errorf("xml %s = %s", a.name, x)
		}
	}
	if j, _ := json.Marshal(exported{"n", v}); string(j) != `{"Name":"n","V":"[redacted]"}` {
		t.Errorf("json field = %s", j)
	}
	if tx, err := v.MarshalText(); err != nil || string(tx) != "[redacted]" {
		t.Errorf("MarshalText = %q, %v", tx, err)
	}
}

func TestValueBytes(t *testing.T) {
	src := []byte(testSecret)
	v := NewValue(src)
	src[0] = 'X'
	if string(v.Bytes()) != testSecret || v.Len() != len(testSecret) {
		t.Errorf("Bytes, Len = %q, %d: NewValue must copy", v.Bytes(), v.Len())
	}
	w := v
	if &w.Bytes()[0] != &v.Bytes()[0] {
		t.Error("copies of a Value should share its bytes")
	}
	var zero Value
	if zero.Bytes() != nil || zero.Len() != 0 || fmt.Sprint(zero) != "[redacted]" {
		t.Errorf("zero Value: %q, %d, %s", zero.Bytes(), zero.Len(), zero)
	}
	if e := NewValue(nil); e.Len() != 0 || len(e.Bytes()) != 0 {
		t.Errorf("NewValue(nil): %q", e.Bytes())
	}
}
