package hostperm

import (
	"io/fs"
	"testing"
)

func TestRule(t *testing.T) {
	tests := []struct {
		umask, withheld, sandbox fs.FileMode
		in, out                  fs.FileMode
	}{
		{0o022, 0o022, 0o022, 0o777, 0o755},
		{0o022, 0o022, 0o022, 0o644, 0o644},
		{0o022, 0o022, 0o022, 0o666 | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky, 0o644},
		{0o002, 0o002, 0o002, 0o777, 0o775},
		{0o002, 0o002, 0o002, 0o4755, 0o755}, // a raw setuid bit is not a permission
		{0o000, 0o002, 0o002, 0o777, 0o775},
		{0o077, 0o022, 0o077, 0o777, 0o700},
		{0o027, 0o022, 0o027, 0o775, 0o750},
		{0o020, 0o022, 0o022, 0o666, 0o644},
	}
	for _, tt := range tests {
		if got := Withheld(tt.umask); got != tt.withheld {
			t.Errorf("Withheld(%#o) = %#o, want %#o", tt.umask, got, tt.withheld)
		}
		if got := SandboxUmask(tt.umask); got != tt.sandbox {
			t.Errorf("SandboxUmask(%#o) = %#o, want %#o", tt.umask, got, tt.sandbox)
		}
		if got := Mode(tt.in, tt.umask); got != tt.out {
			t.Errorf("Mode(%v, %#o) = %v, want %v", tt.in, tt.umask, got, tt.out)
		}
	}
}
