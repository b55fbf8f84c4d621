package sandbox

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

func TestIdentityAllows(t *testing.T) {
	me := identity{uid: 1000, gids: []uint32{100, 27}}
	tests := []struct {
		name     string
		uid, gid uint32
		mode     uint32
		want     uint32
		ok       bool
	}{
		{"owner may read 0600", 1000, 0, 0o600, 4, true},
		{"other may not read 0600", 0, 0, 0o600, 4, false},
		{"group member reads 0640", 0, 27, 0o640, 4, true},
		{"non-member may not read 0640", 0, 42, 0o640, 4, false},
		{"other enters 0711", 0, 0, 0o711, 1, true},
		{"other may not enter 0700", 0, 0, 0o700, 1, false},
		{"owner bits decide for the owner", 1000, 100, 0o077, 4, false},
	}
	for _, tt := range tests {
		st := unix.Stat_t{Uid: tt.uid, Gid: tt.gid, Mode: tt.mode}
		if got := me.allows(&st, tt.want); got != tt.ok {
			t.Errorf("%s: allows = %v, want %v", tt.name, got, tt.ok)
		}
	}
}

func TestIdentityReadable(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} { // t.TempDir makes them 0700
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	closed := filepath.Join(dir, "closed")
	open := filepath.Join(dir, "open")
	for _, d := range []string{closed, open} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "secret"), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(closed, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(open, "private"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	owner := st.Sys().(*syscall.Stat_t).Uid
	stranger := identity{uid: owner + 12345, gids: []uint32{owner + 12345}}
	got := stranger.readable([]string{
		filepath.Join(closed, "secret"), filepath.Join(open, "secret"),
		filepath.Join(open, "private"), filepath.Join(open, "missing"), closed,
	})
	want := []string{filepath.Join(open, "secret")}
	if len(got) != len(want) || got[0] != want[0] {
		t.Errorf("readable for a stranger = %q, want %q", got, want)
	}
	self := identity{uid: owner, gids: []uint32{owner}}
	if got := self.readable([]string{filepath.Join(closed, "secret"), filepath.Join(open, "private")}); len(got) != 2 {
		t.Errorf("readable for the owner = %q, want both", got)
	}
}
