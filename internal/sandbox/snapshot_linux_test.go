package sandbox

import (
	"archive/tar"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// layerTar is a tar of entries, as a guest's agent would export them.
func layerTar(t *testing.T, hdrs ...*tar.Header) *bytes.Buffer {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, h := range hdrs {
		if h.ModTime.IsZero() {
			h.ModTime = time.Unix(1_700_000_000, 0)
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write(bytes.Repeat([]byte("x"), int(h.Size))); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return &b
}

// TestSnapshotExported: a guest's exported layer becomes a snapshot layer
// with the guest's owners, whiteouts as 0/0 devices and opaque
// directories marked, the same digest whoever exports the same tree; what
// a hostile guest sends — names out of the layer, a link out, a device,
// set-id bits, more than the limit — writes nothing outside the layer,
// is refused or stripped.
func TestSnapshotExported(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	good := []*tar.Header{
		{Name: "etc/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "etc/.wh.motd", Typeflag: tar.TypeReg, Mode: 0o644},
		{Name: "opaque/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "opaque/.wh..wh..opq", Typeflag: tar.TypeReg, Mode: 0o644},
		{Name: "workspace/", Typeflag: tar.TypeDir, Mode: 0o755, Uid: 1000, Gid: 1000},
		{Name: "workspace/f", Typeflag: tar.TypeReg, Mode: 0o4755, Size: 10, Uid: 1000, Gid: 1000},
		{Name: "workspace/l", Typeflag: tar.TypeSymlink, Linkname: "/etc/shadow", Uid: 1000, Gid: 1000},
	}
	made, err := SnapshotExported(layerTar(t, good...), filepath.Join(dir, "tmp1"), filepath.Join(dir, "layer1"), 0)
	if err != nil {
		t.Fatal(err)
	}
	l := filepath.Join(dir, "layer1")
	var st unix.Stat_t
	if err := unix.Lstat(filepath.Join(l, "etc/motd"), &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Rdev != 0 {
		t.Errorf("the whiteout: %+v, %v; want a 0/0 character device", st, err)
	}
	if v, err := unix.Lgetxattr(filepath.Join(l, "opaque"), opaqueXattr, make([]byte, 8)); err != nil || v != 1 {
		t.Errorf("the opaque directory's mark: %d, %v", v, err)
	}
	if err := unix.Lstat(filepath.Join(l, "workspace/f"), &st); err != nil || st.Uid != 1000 || st.Gid != 1000 || st.Mode&0o7777 != 0o755 {
		t.Errorf("the guest's file: %+v, %v; want owned by 1000:1000, mode 0755 (set-uid stripped)", st, err)
	}
	if target, err := os.Readlink(filepath.Join(l, "workspace/l")); err != nil || target != "/etc/shadow" {
		t.Errorf("the guest's link: %q, %v", target, err)
	}
	again, err := SnapshotExported(layerTar(t, good...), filepath.Join(dir, "tmp2"), filepath.Join(dir, "layer2"), 0)
	if err != nil || again != made {
		t.Errorf("the same export again: %+v, %v; want %+v", again, err, made)
	}

	outside := filepath.Join(dir, "outside")
	for i, c := range []struct {
		name string
		hdrs []*tar.Header
	}{
		{"a name with ..", []*tar.Header{{Name: "../outside", Typeflag: tar.TypeReg, Mode: 0o644, Size: 1}}},
		{"a file through a link", []*tar.Header{
			{Name: "up", Typeflag: tar.TypeSymlink, Linkname: dir},
			{Name: "up/outside", Typeflag: tar.TypeReg, Mode: 0o644, Size: 1}}},
		{"a hard link out", []*tar.Header{{Name: "h", Typeflag: tar.TypeLink, Linkname: "../../layer1/workspace/f"}}},
		{"more than the limit", []*tar.Header{{Name: "big", Typeflag: tar.TypeReg, Mode: 0o644, Size: 4096}}},
	} {
		tmp, dst := filepath.Join(dir, "bad-tmp"), filepath.Join(dir, "bad-layer")
		_, err := SnapshotExported(layerTar(t, c.hdrs...), tmp, dst, 1024)
		if err == nil {
			t.Errorf("%d. %s: no error", i, c.name)
		}
		if c.name == "more than the limit" && !errors.Is(err, ErrLayerTooLarge) {
			t.Errorf("%s: %v, want ErrLayerTooLarge", c.name, err)
		}
		if _, err := os.Lstat(outside); err == nil {
			t.Fatalf("%s: written outside the layer", c.name)
		}
		os.RemoveAll(tmp)
		os.RemoveAll(dst)
	}
	// A device is never made.
	_, err = SnapshotExported(layerTar(t, &tar.Header{Name: "mem", Typeflag: tar.TypeChar, Mode: 0o666, Devmajor: 1, Devminor: 1}),
		filepath.Join(dir, "dev-tmp"), filepath.Join(dir, "dev-layer"), 0)
	if _, serr := os.Lstat(filepath.Join(dir, "dev-layer", "mem")); err == nil && serr == nil {
		t.Error("a guest's device node was made in the snapshot's layer")
	}
}
