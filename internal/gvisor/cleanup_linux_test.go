package gvisor

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// TestCleanupStopsAtMounts checks that removing a state directory never
// goes through a mount below it.
func TestCleanupStopsAtMounts(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	sb := filepath.Join(dir, "hutch-test")
	bound := filepath.Join(sb, "areas", "ws")
	if err := os.MkdirAll(bound, 0o700); err != nil {
		t.Fatal(err)
	}
	ws := t.TempDir()
	keep := filepath.Join(ws, "keep.txt")
	if err := os.WriteFile(keep, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(ws, bound, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(bound, unix.MNT_DETACH) })
	if got := mountsBelow(sb); !reflect.DeepEqual(got, []string{bound}) {
		t.Errorf("mountsBelow = %q, want %q", got, bound)
	}
	cleanup("/nonexistent/runsc", sb, "hutch-test", nil)
	if _, err := os.Stat(keep); err != nil {
		t.Fatalf("cleanup removed a file through a bind mount: %v", err)
	}
	_ = unix.Unmount(bound, unix.MNT_DETACH)
	cleanup("/nonexistent/runsc", sb, "hutch-test", nil)
	if _, err := os.Lstat(sb); err == nil {
		t.Errorf("cleanup left %s without a mount below it", sb)
	}
}
