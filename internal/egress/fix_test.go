package egress

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/secrets"
)

// TestRefusalsNameTheFix: every refusal that a setting lifts says which,
// in hutch's flags and the policy field behind them; for a tenant's
// sandbox, the address guard's refusals name the operator's flag.
func TestRefusalsNameTheFix(t *testing.T) {
	answers := map[string][]netip.Addr{
		"intranet.test": addrs("10.1.2.3"),
		"v6.test":       addrs("fd00::7"),
		"public.test":   addrs("203.0.114.1"),
		"nowhere.test":  {},
	}
	cfg := Config{
		AllowDomains: []string{"*.test", "example.com:8443"},
		DenyDomains:  []string{"evil.test", "public.test:25"},
	}
	for _, operator := range []bool{true, false} {
		cfg.OperatorRules = operator
		r, _ := mustRules(t, cfg, answers)
		private := func(p string) [2]string {
			if operator {
				return [2]string{"--allow-private " + p, "network.allow_private"}
			}
			return [2]string{"hutch serve --allow-private " + p + " (the daemon's operator)", ""}
		}
		for _, tt := range []struct {
			host string
			port int
			want [2]string
		}{
			{"other.example", 443, [2]string{"--allow-domain other.example", "network.allowed_domains"}},
			{"other.example", 5432, [2]string{"--allow-domain other.example:5432", "network.allowed_domains"}},
			{"example.com", 443, [2]string{"--allow-domain example.com:443", "network.allowed_domains"}},
			{"192.0.2.10", 80, [2]string{"--allow-domain 192.0.2.10", "network.allowed_domains"}},
			{"2001:db8::1", 8080, [2]string{"--allow-domain [2001:db8::1]:8080", "network.allowed_domains"}},
			{"evil.test", 443, [2]string{"without --deny-domain evil.test", "network.denied_domains"}},
			{"public.test", 25, [2]string{"without --deny-domain public.test:25", "network.denied_domains"}},
			{"intranet.test", 443, private("10.1.2.3/32")},
			{"v6.test", 443, private("fd00::7/128")},
			{"nowhere.test", 443, [2]string{"--add-host nowhere.test:ADDRESS", "network.hosts"}},
			{"public.test", 443, [2]string{"", ""}},
			{"bad name", 443, [2]string{"", ""}},
		} {
			v := r.Resolve(context.Background(), tt.host, tt.port)
			if got := [2]string{v.Allow, v.AllowField}; got != tt.want {
				t.Errorf("operator %v: Resolve(%s, %d) = %q (%s): fix %q, want %q", operator, tt.host, tt.port, v.Reason, v.Allow, got, tt.want)
			}
		}
	}

	r, _ := mustRules(t, Config{Offline: true, AllowDomains: []string{"*"}}, nil)
	v := r.Resolve(context.Background(), "registry.npmjs.org", 443)
	if v.Allowed || v.Reason != OfflineReason || v.Allow != "--allow-domain registry.npmjs.org" {
		t.Errorf("offline: %+v", v)
	}
}

func TestSecretFix(t *testing.T) {
	s := &secrets.Secret{Name: "GH_TOKEN", Hosts: []string{"api.github.com"}}
	for _, tt := range []struct {
		host  string
		port  int
		plain bool
		want  [2]string
	}{
		{"evil.test", 443, false, [2]string{"--secret GH_TOKEN@api.github.com,evil.test", "secrets[].hosts"}},
		{"Evil.Test", 8443, false, [2]string{"--secret GH_TOKEN@api.github.com,evil.test:8443", "secrets[].hosts"}},
		{"::1", 443, false, [2]string{"--secret GH_TOKEN@api.github.com,[::1]", "secrets[].hosts"}},
		{"api.github.com", 80, true, [2]string{"allow_plain_http: true for secret GH_TOKEN (a policy file)", "secrets[].allow_plain_http"}},
	} {
		allow, field := secretFix(s, tt.host, tt.port, tt.plain)
		if got := [2]string{allow, field}; got != tt.want {
			t.Errorf("secretFix(%s, %d, %v) = %q, want %q", tt.host, tt.port, tt.plain, got, tt.want)
		}
	}
}

// TestRecorderLines: the connections, the lookups and the fixes, each
// once.
func TestRecorderLines(t *testing.T) {
	r := NewRecorder(nil)
	if lines := r.Lines(); len(lines) != 0 {
		t.Errorf("nothing recorded: %q", lines)
	}
	r.Record(Event{Action: "allowed", Host: "ok.test", Port: 443, Connections: 3})
	if lines := r.Lines(); len(lines) != 0 {
		t.Errorf("only traffic: %q", lines)
	}
	r.Record(Event{Action: "blocked", Host: "a.test", Port: 443, Reason: "not in allowedDomains", Allow: "--allow-domain a.test"})
	if got, want := strings.Join(r.Lines(), "|"), "blocked 1 connection: a.test:443 (not in allowedDomains)|to allow it: --allow-domain a.test"; got != want {
		t.Errorf("Lines:\n%s\nwant\n%s", got, want)
	}
	r.Record(Event{Action: "blocked", Host: "a.test", Port: 443, Reason: "not in allowedDomains", Allow: "--allow-domain a.test"})
	r.Record(Event{Action: "lookup", Protocol: "dns", Host: "b.test", Reason: "why", Allow: "--allow-domain b.test"})
	r.Record(Event{Action: "lookup", Protocol: "dns", Host: "b.test", Reason: "why", Allow: "--allow-domain b.test"})
	r.Record(Event{Action: "lookup", Protocol: "dns", Host: "c.test", Reason: "why"})
	r.Record(Event{Action: "blocked", Host: "d.test", Port: 22, Reason: "denied by deniedDomains", Allow: "without --deny-domain d.test"})
	r.SetFixPrefix("--net proxy")
	want := []string{
		"blocked 3 connections: a.test:443 (not in allowedDomains) ×2, d.test:22 (denied by deniedDomains)",
		`3 name lookups answered "no such host" (why): b.test ×2, c.test`,
		"to allow them: --net proxy; --allow-domain a.test; --allow-domain b.test; without --deny-domain d.test",
	}
	if got := r.Lines(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("Lines:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
