package egress

import (
	"net/netip"
	"testing"
)

func TestCovers(t *testing.T) {
	r, err := NewRules(Config{
		AllowDomains:  []string{"example.com", "*.example.org", "api.test:8443", "git.test:*", "localhost:3000", "203.0.113.7"},
		AllowCIDRs:    []string{"198.51.100.0/24", "10.1.0.0/16:5432"},
		OperatorRules: true,
		HostAddrs:     []netip.Addr{},
	})
	if err != nil {
		t.Fatal(err)
	}
	for entry, want := range map[string]bool{
		"example.com":      true,
		"EXAMPLE.com.":     true, // normalized like the rules
		"example.com:443":  true,
		"example.com:8080": false,
		"example.com:*":    false,
		"www.example.com":  false, // example.com is that name only
		"a.example.org":    true,
		"*.example.org":    true,
		"*.a.example.org":  true,
		"example.org":      false, // *.example.org: its subdomains only
		"*.org":            false,
		"api.test:8443":    true,
		"api.test":         false, // 80 and 443
		"git.test":         true,
		"git.test:22":      true,
		"git.test:*":       true,
		"*":                false,
		"localhost:3000":   true,
		"localhost":        false,
		"127.0.0.1:3000":   false, // loopback by address: not opened by the name's rule
		"203.0.113.7":      true,
		"203.0.113.7:22":   false,
		"198.51.100.9":     true,
		"10.1.2.3:5432":    true,
		"10.1.2.3":         false,
		"10.2.0.1:5432":    false,
		"other.test":       false,
		"[2001:db8::1]":    false,
	} {
		got, err := r.Covers(entry)
		if err != nil {
			t.Errorf("%q: %v", entry, err)
			continue
		}
		if got != want {
			t.Errorf("Covers(%q) = %v, want %v", entry, got, want)
		}
	}
	for _, bad := range []string{"exa mple.com", "http://example.com", "*example.com", "example.com:0"} {
		if _, err := r.Covers(bad); err == nil {
			t.Errorf("Covers(%q): no error", bad)
		}
	}
}

// TestCoversEveryone: "*" covers every public destination, but not what
// the guard refuses and an operator's rule would open (private addresses,
// loopback names).
func TestCoversEveryone(t *testing.T) {
	r, err := NewRules(Config{AllowDomains: []string{"*:*"}, OperatorRules: true, HostAddrs: []netip.Addr{}})
	if err != nil {
		t.Fatal(err)
	}
	for entry, want := range map[string]bool{
		"example.com":     true,
		"*.example.com:*": true,
		"*":               true,
		"192.0.2.1":       false, // a documentation range: refused by the guard
		"1.1.1.1:22":      true,
		"10.0.0.1":        false,
		"127.0.0.1":       false,
		"localhost":       false,
		"169.254.169.254": false,
	} {
		if got, err := r.Covers(entry); err != nil || got != want {
			t.Errorf("Covers(%q) = %v, %v; want %v", entry, got, err, want)
		}
	}
}

// TestCoversOffline: a proxy of network mode "none" covers nothing.
func TestCoversOffline(t *testing.T) {
	r, err := NewRules(Config{Offline: true, AllowDomains: []string{"*"}})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := r.Covers("example.com"); err != nil || got {
		t.Errorf("offline: Covers = %v, %v", got, err)
	}
}
