package policy

import (
	"testing"
	"time"
)

func TestParseSize(t *testing.T) {
	tests := []struct {
		in      string
		want    int64
		wantErr string
	}{
		{"0", 0, ""},
		{"1048576", 1 << 20, ""},
		{"512b", 512, ""},
		{"1024k", 1 << 20, ""},
		{"1024K", 1 << 20, ""},
		{"1024kb", 1 << 20, ""},
		{"1024KiB", 1 << 20, ""},
		{"512m", 512 << 20, ""},
		{"512MB", 512 << 20, ""},
		{"2g", 2 << 30, ""},
		{"2Gi", 0, `invalid size "2Gi" (use e.g. 512m, 2g)`},
		{"2GiB", 2 << 30, ""},
		{"1.5g", 3 << 29, ""},
		{"0.5k", 512, ""},
		{"1.3k", 1331, ""}, // rounded down to a whole byte
		{"1t", 1 << 40, ""},
		{" 64m ", 64 << 20, ""},
		{"8388607t", 8388607 << 40, ""},
		{"8388608t", 0, `invalid size "8388608t": too large`},
		{"99999999999999999999", 0, `invalid size "99999999999999999999": too large`},
		{"12q", 0, `invalid size "12q" (use e.g. 512m, 2g)`},
		{"", 0, `invalid size "" (use e.g. 512m, 2g)`},
		{"m", 0, `invalid size "m" (use e.g. 512m, 2g)`},
		{"ib", 0, `invalid size "ib" (use e.g. 512m, 2g)`},
		{"1ib", 0, `invalid size "1ib" (use e.g. 512m, 2g)`},
		{"1.g", 0, `invalid size "1.g" (use e.g. 512m, 2g)`},
		{".5g", 0, `invalid size ".5g" (use e.g. 512m, 2g)`},
		{"1..5g", 0, `invalid size "1..5g" (use e.g. 512m, 2g)`},
		{"1e3", 0, `invalid size "1e3" (use e.g. 512m, 2g)`},
		{"1 g", 0, `invalid size "1 g" (use e.g. 512m, 2g)`},
		{"0x10", 0, `invalid size "0x10" (use e.g. 512m, 2g)`},
		{"1.5", 0, `invalid size "1.5": a fraction needs a unit (use e.g. 1.5g)`},
		{"-1g", 0, `invalid size "-1g": must not be negative`},
		{"-5", 0, `invalid size "-5": must not be negative`},
	}
	for _, tt := range tests {
		got, err := ParseSize(tt.in)
		if tt.wantErr != "" {
			if err == nil || err.Error() != tt.wantErr {
				t.Errorf("ParseSize(%q) = %d, %v; want error %s", tt.in, got, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
		}
	}
}

func TestFormatSize(t *testing.T) {
	tests := []struct {
		in   int64
		want string
	}{
		{0, "0"},
		{1, "1"},
		{1000, "1000"},
		{1024, "1k"},
		{1536, "1536"}, // 1.5k is not a whole number of k
		{512 << 20, "512m"},
		{3 << 29, "1536m"},
		{2 << 30, "2g"},
		{5 << 40, "5t"},
		{1<<40 + 1<<30, "1025g"},
	}
	for _, tt := range tests {
		got := FormatSize(tt.in)
		if got != tt.want {
			t.Errorf("FormatSize(%d) = %q, want %q", tt.in, got, tt.want)
		}
		if back, err := ParseSize(got); err != nil || back != tt.in {
			t.Errorf("ParseSize(FormatSize(%d)) = %d, %v", tt.in, back, err)
		}
	}
}

func TestParseTimeout(t *testing.T) {
	tests := []struct {
		in      string
		want    time.Duration
		wantErr string
	}{
		{"0", 0, ""},
		{"30", 30 * time.Second, ""},
		{"30s", 30 * time.Second, ""},
		{"2m", 2 * time.Minute, ""},
		{"1h30m", 90 * time.Minute, ""},
		{"1.5s", 1500 * time.Millisecond, ""},
		{"500ms", 500 * time.Millisecond, ""},
		{"-5", 0, `invalid timeout "-5": must not be negative`},
		{"-1m", 0, `invalid timeout "-1m": must not be negative`},
		{"10000000000", 0, `invalid timeout "10000000000": too large`},
		{"5x", 0, `invalid timeout "5x" (use e.g. 30s, 2m, or a number of seconds)`},
		{"", 0, `invalid timeout "" (use e.g. 30s, 2m, or a number of seconds)`},
	}
	for _, tt := range tests {
		got, err := ParseTimeout(tt.in)
		if tt.wantErr != "" {
			if err == nil || err.Error() != tt.wantErr {
				t.Errorf("ParseTimeout(%q) = %v, %v; want error %s", tt.in, got, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParseTimeout(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
}

func TestFormatTimeout(t *testing.T) {
	tests := []struct {
		in   time.Duration
		want string
	}{
		{30 * time.Second, "30s"},
		{2 * time.Minute, "2m"},
		{time.Hour, "1h"},
		{90 * time.Minute, "1h30m"},
		{time.Hour + time.Second, "1h0m1s"},
		{1500 * time.Millisecond, "1.5s"},
	}
	for _, tt := range tests {
		got := formatTimeout(tt.in)
		if got != tt.want {
			t.Errorf("formatTimeout(%v) = %q, want %q", tt.in, got, tt.want)
		}
		if back, err := ParseTimeout(got); err != nil || back != tt.in {
			t.Errorf("ParseTimeout(formatTimeout(%v)) = %v, %v", tt.in, back, err)
		}
	}
}
