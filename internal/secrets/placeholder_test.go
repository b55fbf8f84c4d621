package secrets

import (
	"strings"
	"testing"
)

func TestNewPlaceholder(t *testing.T) {
	tests := []struct {
		prefix  string
		realLen int
		wantLen int
	}{
		{"", 0, 24},
		{"", 23, 24},
		{"", 24, 24},
		{"", 40, 40},
		{"ghp_", 40, 40},      // GitHub token shape: same length
		{"ghp_", 27, 28},      // 23 random would be too few
		{"ghp_", 28, 28},      // exactly 24 random
		{"sk-ant-", 108, 108}, // long keys keep their length
		{"hutch_", 5, 30},
		{"x", 4096, 4096},
		{strings.Repeat("p", 64), 10, 88},
		{strings.Repeat("p", 64), 200, 200},
		{"!~{}", 1, 28},
	}
	for _, tt := range tests {
		p, err := NewPlaceholder(tt.prefix, tt.realLen)
		if err != nil {
			t.Errorf("NewPlaceholder(%q, %d): %v", tt.prefix, tt.realLen, err)
			continue
		}
		if len(p) != tt.wantLen {
			t.Errorf("NewPlaceholder(%q, %d) has length %d, want %d", tt.prefix, tt.realLen, len(p), tt.wantLen)
		}
		rest, ok := strings.CutPrefix(p, tt.prefix)
		if !ok {
			t.Errorf("NewPlaceholder(%q, %d) = %q: no prefix", tt.prefix, tt.realLen, p)
		}
		if i := strings.IndexFunc(rest, func(r rune) bool {
			return !('A' <= r && r <= 'Z' || 'a' <= r && r <= 'z' || '0' <= r && r <= '9')
		}); i >= 0 {
			t.Errorf("NewPlaceholder(%q, %d) = %q: %q is not in [A-Za-z0-9]", tt.prefix, tt.realLen, p, rest[i])
		}
	}
}

func TestNewPlaceholderRandom(t *testing.T) {
	const n = 2000
	seen := make(map[string]bool, n)
	counts := map[rune]int{}
	for range n {
		p, err := NewPlaceholder("ph_", 0)
		if err != nil {
			t.Fatal(err)
		}
		if seen[p] {
			t.Fatalf("placeholder %q made twice", p)
		}
		seen[p] = true
		for _, r := range p[3:] {
			counts[r]++
		}
	}
	// 48000 characters over 62: about 774 each. Every character shows up,
	// and none is far off (a bias such as c%62 without rejection would
	// still pass this; it checks gross errors, not uniformity).
	if len(counts) != len(placeholderChars) {
		t.Errorf("%d distinct characters, want %d", len(counts), len(placeholderChars))
	}
	for r, c := range counts {
		if c < 500 || c > 1100 {
			t.Errorf("character %q appeared %d times in %d", r, c, n*24)
		}
	}
}

func TestNewPlaceholderErrors(t *testing.T) {
	tests := []struct {
		prefix  string
		realLen int
		err     string
	}{
		{"a b", 10, `placeholder prefix "a b": byte 0x20 at 1 is not printable ASCII without space`},
		{"tab\t", 10, `byte 0x09 at 3`},
		{"nl\n", 10, `byte 0x0a`},
		{"del\x7f", 10, `byte 0x7f`},
		{"é", 10, `byte 0xc3 at 0`},
		{"\x00", 10, `byte 0x00`},
		{strings.Repeat("p", 65), 10, "longer than 64 bytes"},
		{"ok", -1, "negative length -1"},
	}
	for _, tt := range tests {
		p, err := NewPlaceholder(tt.prefix, tt.realLen)
		if err == nil || !strings.Contains(err.Error(), tt.err) {
			t.Errorf("NewPlaceholder(%q, %d) = %q, %v; want error with %q", tt.prefix, tt.realLen, p, err, tt.err)
		}
	}
}
