package policy

import (
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
	"time"
)

// Binary size units: 1k is 1024 bytes.
const (
	kib int64 = 1 << (10 * (iota + 1))
	mib
	gib
	tib
)

// sizeUnits maps a unit letter to its multiplier, largest first so that
// FormatSize picks the largest exact unit.
var sizeUnits = []struct {
	suffix string
	bytes  int64
}{
	{"t", tib},
	{"g", gib},
	{"m", mib},
	{"k", kib},
}

// ParseSize parses a size in bytes: a plain integer ("1048576") or a number
// with a binary unit k, m, g or t, case-insensitive and optionally followed
// by "b" or "ib" ("512m", "2G", "1.5g", "1024KiB"; 1k = 1024). A fractional
// result is rounded down to a whole byte. Negative sizes are refused.
func ParseSize(s string) (int64, error) {
	str := strings.ToLower(strings.TrimSpace(s))
	if strings.HasPrefix(str, "-") {
		return 0, fmt.Errorf("invalid size %q: must not be negative", s)
	}
	num := strings.TrimRight(str, "abcdefghijklmnopqrstuvwxyz")
	mult, ok := sizeSuffix(str[len(num):])
	if !ok || !validDecimal(num) {
		return 0, fmt.Errorf("invalid size %q (use e.g. 512m, 2g)", s)
	}
	if mult == 1 && strings.Contains(num, ".") {
		return 0, fmt.Errorf("invalid size %q: a fraction needs a unit (use e.g. 1.5g)", s)
	}
	r, ok := new(big.Rat).SetString(num)
	if !ok {
		return 0, fmt.Errorf("invalid size %q (use e.g. 512m, 2g)", s)
	}
	r.Mul(r, new(big.Rat).SetInt64(mult))
	n := new(big.Int).Quo(r.Num(), r.Denom())
	if !n.IsInt64() {
		return 0, fmt.Errorf("invalid size %q: too large", s)
	}
	return n.Int64(), nil
}

// sizeSuffix returns the multiplier of a lower-case unit suffix: "" or "b"
// for bytes, or a unit letter optionally followed by "b" or "ib".
func sizeSuffix(suffix string) (int64, bool) {
	if suffix == "" || suffix == "b" {
		return 1, true
	}
	for _, u := range sizeUnits {
		if suffix == u.suffix || suffix == u.suffix+"b" || suffix == u.suffix+"ib" {
			return u.bytes, true
		}
	}
	return 0, false
}

// validDecimal reports whether s is digits with at most one inner dot.
func validDecimal(s string) bool {
	intPart, frac, hasDot := strings.Cut(s, ".")
	if intPart == "" || (hasDot && frac == "") {
		return false
	}
	return strings.Trim(intPart, "0123456789") == "" && strings.Trim(frac, "0123456789") == ""
}

// FormatSize prints n bytes with the largest binary unit that represents it
// exactly ("512m", "1536m", "2g"), or as a plain integer. ParseSize reverses
// it.
func FormatSize(n int64) string {
	if n != 0 {
		for _, u := range sizeUnits {
			if n%u.bytes == 0 {
				return strconv.FormatInt(n/u.bytes, 10) + u.suffix
			}
		}
	}
	return strconv.FormatInt(n, 10)
}

// ParseTimeout parses a timeout: a Go duration ("30s", "2m", "1h30m") or a
// bare integer number of seconds ("90"). Negative timeouts are refused.
func ParseTimeout(s string) (time.Duration, error) {
	str := strings.TrimSpace(s)
	var d time.Duration
	if secs, err := strconv.ParseInt(str, 10, 64); err == nil {
		if secs > math.MaxInt64/int64(time.Second) || secs < math.MinInt64/int64(time.Second) {
			return 0, fmt.Errorf("invalid timeout %q: too large", s)
		}
		d = time.Duration(secs) * time.Second
	} else {
		var perr error
		d, perr = time.ParseDuration(str)
		if perr != nil {
			return 0, fmt.Errorf("invalid timeout %q (use e.g. 30s, 2m, or a number of seconds)", s)
		}
	}
	if d < 0 {
		return 0, fmt.Errorf("invalid timeout %q: must not be negative", s)
	}
	return d, nil
}

// formatTimeout prints d like time.Duration.String without trailing zero
// units: "30s", "2m", "1h30m", "1h". ParseTimeout reverses it.
func formatTimeout(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
