//go:build unix

package hostperm

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestUmask: Umask is the umask /proc shows for the process (which the
// test has not changed), and reading the umask leaves it as it was.
func TestUmask(t *testing.T) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	_, after, ok := strings.Cut(string(b), "\nUmask:")
	if !ok {
		t.Skip("no Umask in /proc/self/status")
	}
	line, _, _ := strings.Cut(after, "\n")
	want, err := strconv.ParseUint(strings.TrimSpace(line), 8, 32)
	if err != nil {
		t.Fatal(err)
	}
	if got := Umask(); uint64(got) != want {
		t.Errorf("Umask() = %#o, /proc says %#o", got, want)
	}

	old := syscall.Umask(0o027)
	defer syscall.Umask(old)
	if got := current(); got != 0o027 {
		t.Errorf("current() = %#o, want 027", got)
	}
	if got := syscall.Umask(0o027); got != 0o027 {
		t.Errorf("reading the umask changed it to %#o", got)
	}
}
