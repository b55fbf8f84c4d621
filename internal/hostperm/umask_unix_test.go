//go:build unix

package hostperm

import (
	"io/fs"
	"syscall"
	"testing"
)

func TestUmask(t *testing.T) {
	old := syscall.Umask(0o027)
	defer syscall.Umask(old)
	if got := Umask(); got != 0o027 {
		t.Errorf("Umask() = %#o, want 027", got)
	}
	if got := syscall.Umask(0o027); got != 0o027 {
		t.Errorf("Umask changed the umask to %#o", got)
	}
	syscall.Umask(0o002)
	if got := Umask(); got != fs.FileMode(0o002) {
		t.Errorf("Umask() = %#o, want 002", got)
	}
}
