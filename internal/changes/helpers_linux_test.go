package changes

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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
	st := NewStore(filepath.Join(t.TempDir(), "hutch", "changes"))
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
	cmd.Env = append(os.Environ(), "WS="+s.Workspace())
	out, err := cmd.CombinedOutput()
	testutil.Need(t, err == nil || cmd.ProcessState.ExitCode() != 32, "an overlay mount with userxattr in a user namespace: "+string(out))
	if err != nil {
		t.Fatalf("script: %v\n%s", err, out)
	}
	if err := s.End([]string{"sh", "-c", script}, 0); err != nil {
		t.Fatal(err)
	}
}

// tree describes every entry below dir: type, mode and content or target.
func tree(t *testing.T, dir string, skip ...string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == "." || slices.Contains(skip, rel) {
			return nil
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		desc := fmt.Sprintf("%v", fi.Mode())
		switch {
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			desc += " " + string(b)
		case fi.Mode()&os.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			desc += " -> " + target
		}
		out[rel] = desc
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// kinds maps each change's path to its kind (and a rename's source).
func kinds(ch []Change) map[string]string {
	m := map[string]string{}
	for _, c := range ch {
		k := string(c.Kind)
		if c.From != "" {
			k += " from " + c.From
		}
		m[c.Path] = k
	}
	return m
}
