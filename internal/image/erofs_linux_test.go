package image

import (
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// testLayer makes a layer directory of diff ID id in s, with fill.
func testLayer(t *testing.T, s *Store, id string, fill func(dir string)) {
	t.Helper()
	d, err := s.LayerDir(id)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	fill(d)
}

func digestOf(s string) string { return fmt.Sprintf("sha256:%x", sha256.Sum256([]byte(s))) }

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// mountEROFS mounts the EROFS image file (file-backed, Linux 6.12) as a
// detached mount and returns a path to it.
func mountEROFS(t *testing.T, file string) string {
	t.Helper()
	fs, err := unix.Fsopen("erofs", unix.FSOPEN_CLOEXEC)
	if err != nil {
		t.Fatalf("erofs: %v", err)
	}
	defer unix.Close(fs)
	must(t, unix.FsconfigSetString(fs, "source", file))
	if err := unix.FsconfigCreate(fs); err != nil {
		t.Fatalf("mount %s: %v", file, err)
	}
	mnt, err := unix.Fsmount(fs, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(mnt) })
	return fmt.Sprintf("/proc/self/fd/%d", mnt)
}

// TestEROFS: an image's EROFS root is its layers as stacked — a file of a
// lower layer deleted above (whiteout) is absent, an opaque directory
// hides what is below it, owners, modes, times, links and extended
// attributes are kept — built once, and held in use.
func TestEROFS(t *testing.T) {
	testutil.RequireRoot(t)
	_, err := exec.LookPath(mkfsEROFS)
	testutil.Need(t, err == nil, "mkfs.erofs (Debian's erofs-utils; scripts/test.sh installs it)")
	s, err := Open(t.TempDir())
	must(t, err)
	mtime := time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)
	bottom, top := digestOf("bottom"), digestOf("top")
	testLayer(t, s, bottom, func(d string) {
		must(t, os.MkdirAll(filepath.Join(d, "etc"), 0o755))
		must(t, os.WriteFile(filepath.Join(d, "etc/os-release"), []byte("ID=test\n"), 0o644))
		must(t, os.WriteFile(filepath.Join(d, "etc/gone"), []byte("deleted above\n"), 0o644))
		must(t, os.MkdirAll(filepath.Join(d, "opt/old"), 0o755))
		must(t, os.WriteFile(filepath.Join(d, "opt/old/file"), []byte("hidden by an opaque directory\n"), 0o644))
		must(t, os.WriteFile(filepath.Join(d, "app"), []byte("#!/bin/sh\n"), 0o4750))
		must(t, os.Lchown(filepath.Join(d, "app"), 1000, 1001))
		must(t, os.Chmod(filepath.Join(d, "app"), 0o4750|os.ModeSetuid)) // chown cleared it
		must(t, os.Chtimes(filepath.Join(d, "app"), mtime, mtime))
		must(t, unix.Setxattr(filepath.Join(d, "app"), "user.kept", []byte("yes"), 0))
		must(t, os.Symlink("etc/os-release", filepath.Join(d, "link")))
	})
	testLayer(t, s, top, func(d string) {
		must(t, os.MkdirAll(filepath.Join(d, "etc"), 0o755))
		must(t, unix.Mknod(filepath.Join(d, "etc/gone"), unix.S_IFCHR, 0)) // a whiteout
		must(t, os.MkdirAll(filepath.Join(d, "opt"), 0o755))
		must(t, os.Mkdir(filepath.Join(d, "opt/old"), 0o700))
		must(t, unix.Setxattr(filepath.Join(d, "opt/old"), "trusted.overlay.opaque", []byte("y"), 0))
		must(t, os.WriteFile(filepath.Join(d, "opt/old/new"), []byte("above\n"), 0o600))
	})
	img := &Image{Digest: digestOf("image"), Layers: []string{bottom, top}}
	must(t, s.Put(img, "test/erofs:1"))

	// Two at once build it once.
	var wg sync.WaitGroup
	paths := make([]string, 2)
	errs := make([]error, 2)
	releases := make([]func(), 2)
	for i := range 2 {
		wg.Go(func() { paths[i], releases[i], errs[i] = s.EROFS(img) })
	}
	wg.Wait()
	for i := range 2 {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		defer releases[i]()
	}
	if paths[0] != paths[1] {
		t.Errorf("two paths for one image: %s, %s", paths[0], paths[1])
	}
	fi, err := os.Stat(paths[0])
	must(t, err)
	root := mountEROFS(t, paths[0])

	if b, err := os.ReadFile(filepath.Join(root, "etc/os-release")); err != nil || string(b) != "ID=test\n" {
		t.Errorf("etc/os-release: %q, %v", b, err)
	}
	for _, p := range []string{"etc/gone", "opt/old/file"} {
		if _, err := os.Lstat(filepath.Join(root, p)); !os.IsNotExist(err) {
			t.Errorf("%s: %v, want it absent", p, err)
		}
	}
	if b, err := os.ReadFile(filepath.Join(root, "opt/old/new")); err != nil || string(b) != "above\n" {
		t.Errorf("opt/old/new: %q, %v", b, err)
	}
	var st unix.Stat_t
	must(t, unix.Lstat(filepath.Join(root, "app"), &st))
	if st.Uid != 1000 || st.Gid != 1001 || st.Mode&0o7777 != 0o4750 || st.Mtim.Sec != mtime.Unix() {
		t.Errorf("app: uid %d gid %d mode %o mtime %d; want 1000 1001 4750 %d", st.Uid, st.Gid, st.Mode&0o7777, st.Mtim.Sec, mtime.Unix())
	}
	buf := make([]byte, 16)
	if n, err := unix.Getxattr(filepath.Join(root, "app"), "user.kept", buf); err != nil || string(buf[:n]) != "yes" {
		t.Errorf("app's user.kept: %q, %v", buf[:n], err)
	}
	if l, err := os.Readlink(filepath.Join(root, "link")); err != nil || l != "etc/os-release" {
		t.Errorf("link: %q, %v", l, err)
	}
	must(t, unix.Lstat(filepath.Join(root, "opt/old"), &st))
	if st.Mode&0o777 != 0o700 {
		t.Errorf("opt/old: mode %o, want 700", st.Mode&0o777)
	}
	n, err := unix.Getxattr(filepath.Join(root, "opt/old"), "trusted.overlay.opaque", buf)
	if err == nil {
		t.Errorf("opt/old keeps the layer's own overlay attribute: %q", buf[:n])
	}

	// Found again, not built again.
	p, release, err := s.EROFS(img)
	must(t, err)
	release()
	if fi2, err := os.Stat(p); err != nil || !os.SameFile(fi, fi2) {
		t.Errorf("built again: %v", err)
	}

	// A one-layer image, and an image whose layer is missing.
	one := &Image{Digest: digestOf("one"), Layers: []string{bottom}}
	must(t, s.Put(one))
	p, release, err = s.EROFS(one)
	must(t, err)
	defer release()
	if b, err := os.ReadFile(filepath.Join(mountEROFS(t, p), "etc/gone")); err != nil || string(b) != "deleted above\n" {
		t.Errorf("one layer: etc/gone %q, %v", b, err)
	}
	if _, _, err := s.EROFS(&Image{Digest: digestOf("missing"), Layers: []string{digestOf("nowhere")}}); err == nil {
		t.Error("an image whose layer is missing: no error")
	}
	// Without mkfs.erofs: an error that names the package, at once.
	other := &Image{Digest: digestOf("other"), Layers: []string{top, bottom}}
	must(t, s.Put(other))
	t.Setenv("PATH", t.TempDir())
	if _, _, err := s.EROFS(other); err == nil || !strings.Contains(err.Error(), "erofs-utils") {
		t.Errorf("without mkfs.erofs: %v", err)
	}

	// Counted in the store's usage; pruned once its image is gone and
	// no sandbox uses it.
	u, err := s.Usage()
	must(t, err)
	if u < fi.Size() {
		t.Errorf("usage %d bytes, less than the EROFS root's %d", u, fi.Size())
	}
	must(t, s.Remove("test/erofs:1"))
	_, err = s.Prune()
	must(t, err)
	if _, err := os.Stat(paths[0]); err != nil {
		t.Errorf("pruned while in use: %v", err)
	}
	for _, r := range releases {
		r()
	}
	_, err = s.Prune()
	must(t, err)
	if _, err := os.Stat(paths[0]); !os.IsNotExist(err) {
		t.Errorf("not pruned once unused: %v", err)
	}
}
