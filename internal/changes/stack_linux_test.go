package changes

import (
	"bytes"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// layerOf makes a layer directory in overlayfs's upper form from files
// (as workspace), plus whiteouts (0/0 character devices), opaque
// directories and symbolic links (path → target).
func layerOf(t *testing.T, files map[string]string, whiteouts, opaques []string, links map[string]string) string {
	t.Helper()
	l := workspace(t, files)
	for _, w := range whiteouts {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(l, w)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mknod(filepath.Join(l, w), unix.S_IFCHR, 0); err != nil {
			t.Fatal(err)
		}
	}
	for _, o := range opaques {
		if err := os.MkdirAll(filepath.Join(l, o), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := unix.Setxattr(filepath.Join(l, o), "trusted.overlay.opaque", []byte("y"), 0); err != nil {
			t.Fatal(err)
		}
	}
	for p, target := range links {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(l, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, filepath.Join(l, p)); err != nil {
			t.Fatal(err)
		}
	}
	return l
}

// TestCompareStacks: two views of layers over one base compare as
// overlayfs shows them — whiteouts delete, opaque directories hide what is
// below, a file or link over a directory hides all of it — and the base's
// hidden directories show empty and its removed files not at all. A layer
// is hostile: a symbolic link in it is never followed, neither to read a
// file of the host through it nor to list a directory.
func TestCompareStacks(t *testing.T) {
	testutil.RequireRoot(t)
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("host secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := workspace(t, map[string]string{
		"etc/motd": "hello\n", "etc/closed": "closed\n", "home/u/.ssh/id": "key\n",
		"usr/bin/a": "a\n", "usr/bin/b": "b\n", "keep/x": "x\n", "opq/old": "old\n", "gone/f": "f\n",
	})
	hide, remove := []string{"/home"}, []string{"/etc/closed"}
	lower := layerOf(t, map[string]string{"usr/bin/c": "c\n"}, []string{"usr/bin/b"}, nil, nil)
	upper := layerOf(t, map[string]string{
		"etc/motd": "changed\n", "home/u/mine": "mine\n", "opq/new": "new\n", "moved": "x\n",
	}, []string{"keep/x", "etc/closed", "gone"}, []string{"opq"}, map[string]string{
		"usr/bin/a": secret, // a file replaced by a link out
	})
	// A directory replaced by a link to the host: nothing below it is
	// read through the link.
	if err := os.Mkdir(filepath.Join(upper, "sneaky"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Dir(secret), filepath.Join(upper, "sneaky", "dir")); err != nil {
		t.Fatal(err)
	}

	old := &Stack{Layers: []string{lower}, Base: base, Hide: hide, Remove: remove}
	now := &Stack{Layers: []string{upper, lower}, Base: base, Hide: hide, Remove: remove}
	got, err := Compare(old, now)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"etc/motd": "modified", "gone/f": "deleted", "gone": "deleted", "home/u": "added", "home/u/mine": "added",
		"moved": "renamed from keep/x", "opq/old": "deleted", "opq/new": "added",
		"sneaky": "added", "sneaky/dir": "added", "usr/bin/a": "type changed",
	}
	if gotK := kinds(got); !maps.Equal(gotK, want) {
		t.Errorf("changes:\n  %v\nwant\n  %v", gotK, want)
	}
	// Views: the lower layer's whiteout and addition, the hidden and
	// removed paths of the base.
	for rel, want := range map[string]Type{"usr/bin/b": Absent, "usr/bin/c": File, "home/u": Absent, "home": Dir, "etc/closed": Absent, "keep/x": File} {
		e, err := old.Lstat(rel)
		if err != nil || e.Type != want {
			t.Errorf("old Lstat(%s) = %q, %v; want %q", rel, e.Type, err, want)
		}
	}
	for rel, want := range map[string]Type{"keep/x": Absent, "keep": Dir, "sneaky/dir": Symlink, "sneaky/dir/secret": Absent} {
		e, err := now.Lstat(rel)
		if err != nil || e.Type != want {
			t.Errorf("Lstat(%s) = %q, %v; want %q", rel, e.Type, err, want)
		}
	}
	if names, err := old.ReadDir("home"); err != nil || len(names) != 0 {
		t.Errorf("the base's hidden directory lists %v (%v)", names, err)
	}
	if _, err := now.Open("sneaky/dir/secret"); err == nil {
		t.Error("a file opened through a layer's symbolic link")
	}
	var patch bytes.Buffer
	if err := (Sides{Old: old, New: now}).WriteDiff(&patch, got, ShowOptions{}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(patch.String(), "host secret") || strings.Contains(patch.String(), "key") || strings.Contains(patch.String(), "closed\n") {
		t.Errorf("the patch shows what the views hide:\n%s", patch.String())
	}
	if !strings.Contains(patch.String(), "-hello\n+changed\n") {
		t.Errorf("the patch of etc/motd:\n%s", patch.String())
	}
	if _, err := Compare(old, &Stack{Layers: []string{upper}, Base: t.TempDir()}); err != ErrUnrelated {
		t.Errorf("stacks over different bases: %v", err)
	}
}
