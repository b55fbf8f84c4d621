package changes

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// workspace makes a workspace holding files (path → content; a path
// ending in "/" is a directory).
func workspace(t *testing.T, files map[string]string) string {
	t.Helper()
	ws := t.TempDir()
	for p, content := range files {
		full := filepath.Join(ws, p)
		if p[len(p)-1] == '/' {
			if err := os.MkdirAll(full, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return ws
}

// review makes a set for ws in a fresh store and runs script (sh) in the
// workspace as hutch run --review shows it to a sandbox: overlayfs over
// ws with the set's upper directory, mounted with userxattr in a user and
// mount namespace of its own. It returns the ended set.
func review(t *testing.T, ws, script string) *Set {
	t.Helper()
	testutil.RequireRoot(t)
	st := NewStore(filepath.Join(t.TempDir(), "changes"))
	s, err := st.Create(ws)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeAll(s.Dir()) })
	runIn(t, s, script)
	return s
}

// runIn runs script on set s (Begin, the overlay, End).
func runIn(t *testing.T, s *Set, script string) {
	t.Helper()
	if err := s.Begin(); err != nil {
		t.Fatal(err)
	}
	mnt := t.TempDir()
	opts := "lowerdir=" + s.Workspace() + ",upperdir=" + s.Upper() + ",workdir=" + s.Work() + ",userxattr"
	cmd := exec.Command("unshare", "--user", "--map-root-user", "--mount", "sh", "-ec",
		`mount -t overlay overlay -o "$1" "$2" && cd "$2" && eval "$3"`, "sh", opts, mnt, script)
	out, err := cmd.CombinedOutput()
	testutil.Need(t, err == nil || cmd.ProcessState.ExitCode() != 32, "an overlay mount with userxattr in a user namespace: "+string(out))
	if err != nil {
		t.Fatalf("script: %v\n%s", err, out)
	}
	if err := s.End([]string{"sh", "-c", script}, 0); err != nil {
		t.Fatal(err)
	}
}
