package sandbox

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestCheckWorkspace: whether a workspace can be made in a root layer
// depends only on what the view shows of the host's root: below a hidden
// directory, or at or below a removed file, the host is not looked at.
func TestCheckWorkspace(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"hidden/dir", "visible/dir"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"hidden/file", "hidden/dir/file", "visible/file", "visible/secret"} {
		if err := os.WriteFile(filepath.Join(root, f), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("dir", filepath.Join(root, "visible/link")); err != nil {
		t.Fatal(err)
	}
	l := RootLayer{Hide: []string{"/hidden"}, Remove: []string{"/visible/secret"}}
	for ws, bad := range map[string]bool{
		"/hidden/file/x":     false, // a host file where the view shows nothing
		"/hidden/missing/x":  false,
		"/hidden/dir/file":   false,
		"/hidden":            false,
		"/visible/secret/x":  false, // a removed file
		"/visible/missing/x": false,
		"/visible/dir/x":     false,
		"/visible/file/x":    true, // the view shows a file there
		"/visible/file":      true,
		"/visible/link/x":    true, // and a symbolic link
	} {
		err := l.CheckWorkspace(root, ws)
		if bad != errors.Is(err, ErrNotDirInRoot) || (!bad && err != nil) {
			t.Errorf("CheckWorkspace(%s) = %v, want refused: %v", ws, err, bad)
		}
	}
}
