package audit

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// writeLog appends n entries to a new log and returns its path.
func writeLog(t *testing.T, n int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), FileName)
	l, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		code := i
		e := Entry{Tenant: "t", Action: "exec", Sandbox: fmt.Sprintf("sb-%d", i), Command: []string{"echo", "hi"}, ExitCode: &code, DurationMS: 3, BytesOut: 3}
		if err := l.Append(e); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

func readLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.SplitAfter(string(b), "\n")[:bytes.Count(b, []byte("\n"))]
}

func verifyString(s string) (int, error) { return Verify(strings.NewReader(s)) }

func TestAuditAppendVerify(t *testing.T) {
	path := writeLog(t, 5)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", fi.Mode().Perm())
	}
	lines := readLines(t, path)
	if len(lines) != 5 {
		t.Fatalf("%d lines, want 5", len(lines))
	}
	if !strings.HasPrefix(lines[0], `{"seq":1,"prev":"`+zeroHash+`"`) {
		t.Errorf("first line %q", lines[0])
	}
	n, err := verifyString(strings.Join(lines, ""))
	if err != nil || n != 5 {
		t.Fatalf("Verify = %d, %v; want 5, nil", n, err)
	}
	if n, err := verifyString(""); err != nil || n != 0 {
		t.Errorf("Verify(empty) = %d, %v", n, err)
	}
}

func TestAuditTamper(t *testing.T) {
	lines := readLines(t, writeLog(t, 5))
	edit := func(i int, f func(string) string) []string {
		out := append([]string(nil), lines...)
		out[i] = f(out[i])
		return out
	}
	cases := []struct {
		name  string
		lines []string
		line  int
	}{
		{"edit a field", edit(2, func(s string) string { return strings.Replace(s, `"tenant":"t"`, `"tenant":"u"`, 1) }), 3},
		{"edit the first line", edit(0, func(s string) string { return strings.Replace(s, `"sb-0"`, `"sb-9"`, 1) }), 1},
		{"insert a line", append(append(append([]string(nil), lines[:2]...), lines[1]), lines[2:]...), 3},
		{"remove a line", append(append([]string(nil), lines[:1]...), lines[2:]...), 2},
		{"swap lines", []string{lines[0], lines[1], lines[3], lines[2], lines[4]}, 3},
		{"truncate the last line", edit(4, func(s string) string { return s[:len(s)/2] }), 5},
		{"not JSON", edit(1, func(string) string { return "garbage\n" }), 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n, err := verifyString(strings.Join(c.lines, ""))
			var ve *VerifyError
			if !errors.As(err, &ve) {
				t.Fatalf("Verify = %d, %v; want a VerifyError", n, err)
			}
			if ve.Line != c.line {
				t.Errorf("Verify named line %d (%v), want %d", ve.Line, err, c.line)
			}
			if n != c.line-1 {
				t.Errorf("Verify counted %d good lines, want %d", n, c.line-1)
			}
		})
	}
}

func TestAuditReopen(t *testing.T) {
	path := writeLog(t, 3)
	l, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Append(Entry{Tenant: "t", Action: "destroy", Sandbox: "sb-1"}); err != nil {
		t.Fatal(err)
	}
	l.Close()
	f, _ := os.Open(path)
	defer f.Close()
	if n, err := Verify(f); err != nil || n != 4 {
		t.Fatalf("Verify = %d, %v; want 4, nil", n, err)
	}
	if err := l.Append(Entry{}); err == nil {
		t.Error("Append after Close succeeded")
	}
}

func TestAuditOpenBroken(t *testing.T) {
	path := writeLog(t, 2)
	b, _ := os.ReadFile(path)
	if err := os.WriteFile(path, b[:len(b)-5], 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(path); err == nil {
		t.Error("Open of a log whose last line is cut succeeded")
	}
	if err := os.WriteFile(path, append(b, "junk\n"...), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(path); err == nil {
		t.Error("Open of a log whose last line is junk succeeded")
	}
}

func TestAuditLongLastLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	l, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	long := []string{strings.Repeat("x", 10000), strings.Repeat("y", 5000)}
	for range 2 {
		if err := l.Append(Entry{Tenant: "t", Action: "exec", Command: long}); err != nil {
			t.Fatal(err)
		}
	}
	l.Close()
	if l, err = Open(path); err != nil {
		t.Fatal(err)
	}
	if err := l.Append(Entry{Tenant: "t", Action: "destroy"}); err != nil {
		t.Fatal(err)
	}
	l.Close()
	b, _ := os.ReadFile(path)
	if n, err := Verify(bytes.NewReader(b)); err != nil || n != 3 {
		t.Fatalf("Verify = %d, %v; want 3, nil", n, err)
	}
}

func TestAuditConcurrent(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	l, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := range 20 {
		wg.Go(func() {
			for i := range 10 {
				if err := l.Append(Entry{Tenant: fmt.Sprint("t", g), Action: "exec", Sandbox: fmt.Sprint("sb-", i)}); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	l.Close()
	b, _ := os.ReadFile(path)
	if n, err := Verify(bytes.NewReader(b)); err != nil || n != 200 {
		t.Fatalf("Verify = %d, %v; want 200, nil", n, err)
	}
}
