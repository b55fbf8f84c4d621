package daemon

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// TestClosedScanShared: a daemon takes the scan of the host's closed
// paths another one shared only while it may be trusted and is recent:
// root's file in root's directory, of this boot, of the same hidden
// directories, younger than closedEvery.
func TestClosedScanShared(t *testing.T) {
	testutil.RequireRoot(t)
	dir := filepath.Join(t.TempDir(), "run")
	path := filepath.Join(dir, "closed-paths.json")
	at := time.Now()
	sc := closedScan{At: at, Skip: hiddenDirs, Dirs: []string{"/etc/closed-dir"}, Files: []string{"/etc/closed-file"}}
	saveClosed(path, sc)
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the shared scan: %v, %v; want a file of mode 0600", fi, err)
	}
	got, ok := loadClosed(path, at.Add(time.Minute))
	if !ok || !slices.Equal(got.Dirs, sc.Dirs) || !slices.Equal(got.Files, sc.Files) || !got.At.Equal(at) {
		t.Fatalf("a fresh shared scan: %+v, %v", got, ok)
	}

	refused := func(what string, now time.Time) {
		t.Helper()
		if got, ok := loadClosed(path, now); ok {
			t.Errorf("%s: the shared scan was taken: %+v", what, got)
		}
	}
	refused("older than closedEvery", at.Add(closedEvery+time.Second))
	refused("from the future", at.Add(-time.Minute))

	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	refused("readable by others", at)
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(path, testutil.UnprivilegedUID, testutil.UnprivilegedUID); err != nil {
		t.Fatal(err)
	}
	refused("another user's file", at)
	if err := os.Chown(path, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	refused("in a directory others may write", at)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}

	other := filepath.Join(dir, "other.json")
	saveClosed(other, closedScan{At: at, Skip: hiddenDirs[1:], Files: sc.Files})
	if err := os.Rename(other, path); err != nil {
		t.Fatal(err)
	}
	refused("of other hidden directories", at)

	saveClosed(other, sc)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(other, path); err != nil {
		t.Fatal(err)
	}
	refused("through a symbolic link", at)

	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(closedScan{Boot: "another-boot", At: at, Skip: hiddenDirs, Files: sc.Files})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	refused("of another boot", at)
	if err := os.WriteFile(path, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	refused("not JSON", at)
}
