package daemon

import (
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// TestScanClosed: the scan of a tree finds the files other users may not
// read and the directories they may not list or enter, at any depth, and
// nothing else: not links or fifos, not what is below a closed or skipped
// directory, not another filesystem mounted inside.
func TestScanClosed(t *testing.T) {
	root := t.TempDir()
	files := map[string]os.FileMode{
		"public": 0o644, "secret": 0o600, "group-only": 0o640, "owner-x": 0o711,
		"deep/a/b/c/secret": 0o600, "deep/a/b/c/public": 0o644,
		"private/inside": 0o644, "listable-only/inside": 0o600, "enterable-only/inside": 0o600,
		"skipped/secret": 0o600, "mnt/secret": 0o600,
	}
	for p, mode := range files {
		p = filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x"), mode); err != nil {
			t.Fatal(err)
		}
	}
	for dir, mode := range map[string]os.FileMode{"private": 0o700, "listable-only": 0o754, "enterable-only": 0o751} {
		if err := os.Chmod(filepath.Join(root, dir), mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("secret", filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(root, "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	wantFiles := []string{"deep/a/b/c/secret", "group-only", "mnt/secret", "owner-x", "secret"}
	// Another filesystem inside, which the scan leaves alone (root only).
	if os.Getuid() == 0 {
		mnt := filepath.Join(root, "mnt")
		if err := syscall.Mount("tmpfs", mnt, "tmpfs", 0, "mode=0755"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { syscall.Unmount(mnt, syscall.MNT_DETACH) })
		if err := os.WriteFile(filepath.Join(mnt, "secret"), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		wantFiles = slices.DeleteFunc(wantFiles, func(p string) bool { return p == "mnt/secret" })
	} else if testutil.Strict() {
		t.Fatal("the part with a filesystem mounted inside needs root")
	}

	dirs, got := scanClosed(root, []string{filepath.Join(root, "skipped")})
	rel := func(ps []string) []string {
		var out []string
		for _, p := range ps {
			r, err := filepath.Rel(root, p)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, r)
		}
		return out
	}
	if want := []string{"enterable-only", "listable-only", "private"}; !slices.Equal(rel(dirs), want) {
		t.Errorf("closed directories: %q, want %q", rel(dirs), want)
	}
	if !slices.Equal(rel(got), wantFiles) {
		t.Errorf("closed files: %q, want %q", rel(got), wantFiles)
	}
}

// BenchmarkScanClosed: a scan of the host's root, as a daemon does at its
// start.
func BenchmarkScanClosed(b *testing.B) {
	for b.Loop() {
		dirs, files := scanClosed("/", hiddenDirs)
		b.ReportMetric(float64(len(dirs)+len(files)), "closed")
	}
}
