package sandbox

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// TestRunReview: in review mode (Config.ReviewDir) the command sees its
// workspace read-write, but the workspace does not change: what it wrote
// is in the upper directory, as overlayfs keeps it with userxattr (new and
// changed files whole, a whiteout for a removed one, an opaque directory
// for one replaced), with the sandbox's host ids; its other writable areas are written as usual; and a
// protected name stays read-only there as in the workspace.
func TestRunReview(t *testing.T) {
	testutil.RequireRoot(t)
	uid := testutil.UnprivilegedUID
	ws := testutil.OwnedDir(t, uid)
	other := testutil.OwnedDir(t, uid)
	write := func(p, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		for q := p; q != ws; q = filepath.Dir(q) {
			if err := os.Chown(q, uid, uid); err != nil {
				t.Fatal(err)
			}
		}
	}
	write(filepath.Join(ws, "edit.txt"), "before\n")
	write(filepath.Join(ws, "gone.txt"), "bye\n")
	write(filepath.Join(ws, "d", "old"), "old\n")
	dir := t.TempDir()
	for _, d := range []string{"upper", "work"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(filepath.Join(dir, d), uid, uid); err != nil {
			t.Fatal(err)
		}
	}
	var s policy.Spec
	s.Filesystem.AllowWrite = []string{other}
	if err := s.Normalize(ws, t.TempDir()); err != nil {
		t.Fatal(err)
	}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	out, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	res, err := Run(context.Background(), Config{
		Spec: s, Environ: []string{"PATH=/usr/bin:/bin"}, ReviewDir: dir, Stdout: w, Stderr: w,
		Args: []string{"sh", "-c", `echo new > new.txt && echo after >> edit.txt && rm gone.txt && rm -r d && mkdir d && echo y > d/y &&
			echo there > ` + other + `/out && (echo x > .mcp.json) 2>/dev/null || echo protected`},
	})
	w.Close()
	if err != nil || res.ExitCode != 0 {
		b, _ := readAll(out)
		t.Fatalf("Run: %v, exit %d\n%s", err, res.ExitCode, b)
	}
	if b, _ := readAll(out); b != "protected\n" {
		t.Errorf("the command's output: %q, want a refused write to .mcp.json", b)
	}
	// The workspace is as it was.
	for p, want := range map[string]string{"edit.txt": "before\n", "gone.txt": "bye\n", "d/old": "old\n"} {
		if b, err := os.ReadFile(filepath.Join(ws, p)); err != nil || string(b) != want {
			t.Errorf("workspace %s: %q, %v; want %q", p, b, err, want)
		}
	}
	for _, p := range []string{"new.txt", "d/y", ".mcp.json"} {
		if _, err := os.Lstat(filepath.Join(ws, p)); !os.IsNotExist(err) {
			t.Errorf("workspace %s: made by the sandbox (%v)", p, err)
		}
	}
	// The other writable area is written as usual.
	if b, err := os.ReadFile(filepath.Join(other, "out")); err != nil || string(b) != "there\n" {
		t.Errorf("the other writable area: %q, %v", b, err)
	}
	// The upper directory holds the changes.
	up := filepath.Join(dir, "upper")
	for p, want := range map[string]string{"new.txt": "new\n", "edit.txt": "before\nafter\n", "d/y": "y\n"} {
		b, err := os.ReadFile(filepath.Join(up, p))
		if err != nil || string(b) != want {
			t.Errorf("upper %s: %q, %v; want %q", p, b, err, want)
			continue
		}
		// Root's sandbox keeps its host ids there (reviewLayer).
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(up, p), &st); err != nil || st.Uid != RootMappedID {
			t.Errorf("upper %s: owner %d, want the sandbox's %d (%v)", p, st.Uid, RootMappedID, err)
		}
	}
	var st unix.Stat_t
	if err := unix.Lstat(filepath.Join(up, "gone.txt"), &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Rdev != 0 {
		t.Errorf("upper gone.txt: want a whiteout (character device 0:0), got mode %o rdev %d (%v)", st.Mode, st.Rdev, err)
	}
	buf := make([]byte, 8)
	if n, err := unix.Lgetxattr(filepath.Join(up, "d"), "user.overlay.opaque", buf); err != nil || string(buf[:max(n, 0)]) != "y" {
		t.Errorf("upper d: want user.overlay.opaque=y, got %q (%v)", buf[:max(n, 0)], err)
	}
	if _, err := os.Lstat(filepath.Join(up, "d", "old")); !os.IsNotExist(err) {
		t.Errorf("upper d/old: %v", err)
	}
}

// readAll reads f to its end.
func readAll(f *os.File) (string, error) {
	b, err := io.ReadAll(f)
	return string(b), err
}
