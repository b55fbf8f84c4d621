package egress

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestRecorderJSONLines(t *testing.T) {
	var buf bytes.Buffer
	r := NewRecorder(&buf)
	when := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	events := []Event{
		{Time: when, Sandbox: "sb", Action: "blocked", Protocol: "connect", Host: "evil.test", Port: 443, Reason: "not in allowedDomains"},
		{Time: when, Sandbox: "sb", Action: "allowed", Protocol: "http", Host: "example.com", Port: 80, Address: "203.0.113.7",
			Rule: "example.com", Connections: 2, BytesOut: 100, BytesIn: 2000},
		{Time: when, Sandbox: "sb", Action: "blocked", Protocol: "socks5", Host: "example.com", Port: 22, Address: "203.0.113.7",
			Rule: "example.com", Reason: "port 22 not allowed for example.com"},
	}
	for _, e := range events {
		r.Record(e)
	}
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}

	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) != len(events) {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), len(events), buf.String())
	}
	wantFirst := `{"time":"2025-03-01T12:00:00Z","sandbox":"sb","action":"blocked","protocol":"connect","host":"evil.test","port":443,"reason":"not in allowedDomains"}`
	if lines[0] != wantFirst {
		t.Errorf("line 1:\n%s\nwant\n%s", lines[0], wantFirst)
	}
	for i, line := range lines {
		var e Event
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("line %d: %v", i+1, err)
		}
		if e != events[i] {
			t.Errorf("line %d decodes to %+v, want %+v", i+1, e, events[i])
		}
	}
	if b := r.Blocked(); len(b) != 2 || b[0] != events[0] || b[1] != events[2] {
		t.Errorf("Blocked = %+v, want the two blocked events", b)
	}
}

// failWriter fails every write.
type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestRecorderWriteError(t *testing.T) {
	r := NewRecorder(failWriter{})
	r.Record(Event{Action: "blocked", Host: "a.test", Port: 443, Reason: "r"})
	r.Record(Event{Action: "blocked", Host: "b.test", Port: 443, Reason: "r"})
	if err := r.Err(); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Errorf("Err = %v, want the write error", err)
	}
	if len(r.Blocked()) != 2 || r.Summary() == "" {
		t.Error("events were lost with the report")
	}
	if NewRecorder(nil).Err() != nil {
		t.Error("a Recorder without a writer has an error")
	}
}

func TestRecorderSummary(t *testing.T) {
	blocked := func(host string, port int, reason string) Event {
		return Event{Action: "blocked", Protocol: "connect", Host: host, Port: port, Reason: reason}
	}
	for _, tt := range []struct {
		name   string
		events []Event
		want   string
	}{
		{"nothing", nil, ""},
		{"only allowed", []Event{{Action: "allowed", Host: "example.com", Port: 443, Connections: 1}}, ""},
		{"one", []Event{blocked("evil.test", 443, "not in allowedDomains")},
			"blocked 1 connection: evil.test:443 (not in allowedDomains)"},
		{"two", []Event{
			blocked("evil.test", 443, "not in allowedDomains"),
			blocked("example.com", 22, "port 22 not allowed for example.com"),
		}, "blocked 2 connections: evil.test:443 (not in allowedDomains), example.com:22 (port 22 not allowed for example.com)"},
		{"identical counted once", []Event{
			blocked("evil.test", 443, "not in allowedDomains"),
			blocked("example.com", 22, "port 22 not allowed for example.com"),
			blocked("evil.test", 443, "not in allowedDomains"),
			{Action: "blocked", Protocol: "socks5", Host: "evil.test", Port: 443, Reason: "not in allowedDomains"},
		}, "blocked 4 connections: evil.test:443 (not in allowedDomains) ×3, example.com:22 (port 22 not allowed for example.com)"},
		{"same host, other reason", []Event{
			blocked("evil.test", 443, "not in allowedDomains"),
			blocked("evil.test", 443, "denied by deniedDomains"),
		}, "blocked 2 connections: evil.test:443 (not in allowedDomains), evil.test:443 (denied by deniedDomains)"},
		{"IPv6, unknown, control characters", []Event{
			blocked("2001:db8::1", 443, "resolves to 2001:db8::1 (reserved)"),
			{Action: "blocked", Protocol: "socks4", Reason: "SOCKS4 is not supported (use SOCKS5)"},
			blocked("evil\x1b[2J.test", 80, "bad\nreason"),
		}, "blocked 3 connections: [2001:db8::1]:443 (resolves to 2001:db8::1 (reserved)), an unknown destination (SOCKS4 is not supported (use SOCKS5)), evil?[2J.test:80 (bad?reason)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := NewRecorder(nil)
			for _, e := range tt.events {
				r.Record(e)
			}
			if got := r.Summary(); got != tt.want {
				t.Errorf("Summary:\n%s\nwant\n%s", got, tt.want)
			}
		})
	}

	t.Run("and N more", func(t *testing.T) {
		r := NewRecorder(nil)
		for i := range 8 {
			r.Record(blocked(fmt.Sprintf("h%d.test", i), 443, "not in allowedDomains"))
		}
		r.Record(blocked("h7.test", 443, "not in allowedDomains"))
		r.Record(blocked("h0.test", 443, "not in allowedDomains"))
		want := "blocked 10 connections: h0.test:443 (not in allowedDomains) ×2, h1.test:443 (not in allowedDomains), " +
			"h2.test:443 (not in allowedDomains), h3.test:443 (not in allowedDomains), h4.test:443 (not in allowedDomains), and 3 more"
		if got := r.Summary(); got != want {
			t.Errorf("Summary:\n%s\nwant\n%s", got, want)
		}
	})
}

func TestRecorderConcurrent(t *testing.T) {
	var buf bytes.Buffer
	r := NewRecorder(&buf)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 100 {
				r.Record(Event{Action: "blocked", Host: fmt.Sprintf("g%d.test", g), Port: i})
				_ = r.Summary()
			}
		})
	}
	wg.Wait()
	if n := len(r.Blocked()); n != 800 {
		t.Errorf("%d events kept, want 800", n)
	}
	sc := bufio.NewScanner(&buf)
	lines := 0
	for sc.Scan() {
		var e Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("line %d: %v", lines+1, err)
		}
		lines++
	}
	if lines != 800 {
		t.Errorf("%d lines, want 800", lines)
	}
	if !strings.HasPrefix(r.Summary(), "blocked 800 connections: ") {
		t.Errorf("Summary = %q", r.Summary())
	}
}
