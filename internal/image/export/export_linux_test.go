package export

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/validate"
	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/image"
	"github.com/hutch-sandbox/hutch/internal/image/fetch"
	"github.com/hutch-sandbox/hutch/internal/image/imagetest"
	"github.com/hutch-sandbox/hutch/internal/layer"
	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// overlayTree makes, below a new directory, a layer in overlayfs's form
// with one of everything: a whiteout, an opaque directory, a hard link,
// a symbolic link, a fifo, a device node, set-id bits, an owner, an
// extended attribute.
func overlayTree(t *testing.T) string {
	t.Helper()
	testutil.RequireRoot(t)
	dir := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	write := func(name, body string, mode os.FileMode) {
		t.Helper()
		must(os.WriteFile(filepath.Join(dir, name), []byte(body), mode))
		must(os.Chmod(filepath.Join(dir, name), mode))
	}
	must(os.MkdirAll(filepath.Join(dir, "etc"), 0o755))
	write("etc/motd", "edited\n", 0o644)
	must(unix.Mknod(filepath.Join(dir, "etc/group"), unix.S_IFCHR, 0)) // deleted
	must(os.Mkdir(filepath.Join(dir, "opq"), 0o750))
	must(unix.Setxattr(filepath.Join(dir, "opq"), "trusted.overlay.opaque", []byte("y"), 0))
	must(unix.Setxattr(filepath.Join(dir, "opq"), "trusted.overlay.impure", []byte("y"), 0))
	write("opq/new", "new\n", 0o600)
	write("h1", "linked\n", 0o640)
	must(os.Link(filepath.Join(dir, "h1"), filepath.Join(dir, "h2")))
	must(os.Symlink("/etc/motd", filepath.Join(dir, "link")))
	must(unix.Mkfifo(filepath.Join(dir, "fifo"), 0o600))
	must(unix.Mknod(filepath.Join(dir, "null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))
	write("suid", "#!/bin/sh\n", 0o755)
	must(os.Chmod(filepath.Join(dir, "suid"), 0o755|os.ModeSetuid))
	must(os.Lchown(filepath.Join(dir, "h1"), 1000, 1001))
	must(unix.Setxattr(filepath.Join(dir, "etc/motd"), "user.note", []byte("kept"), 0))
	ts := time.Unix(1_700_000_000, 0)
	for _, p := range []string{"etc/motd", "h1", "suid", "opq/new"} {
		must(os.Chtimes(filepath.Join(dir, p), ts, ts))
	}
	return dir
}

// TestWriteLayer: a layer in overlayfs's form becomes an OCI layer: a
// whiteout .wh.NAME, an opaque directory's .wh..wh..opq, a tar hard link,
// PAX extended attributes but not overlayfs's, set-id bits and owners as
// the tree has them, no device node; and the same bytes every time.
func TestWriteLayer(t *testing.T) {
	dir := overlayTree(t)
	var a, b bytes.Buffer
	if err := WriteLayer(&a, dir); err != nil {
		t.Fatal(err)
	}
	if err := WriteLayer(&b, dir); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Error("two writes of one tree differ")
	}
	entries := imagetest.ReadTar(t, &a)
	got := imagetest.TarHeaders(entries)
	var order []string
	for _, e := range entries {
		order = append(order, e.Name)
	}
	want := []string{"etc/", "etc/.wh.group", "etc/motd", "fifo", "h1", "h2", "link", "opq/", "opq/.wh..wh..opq", "opq/new", "suid"}
	if strings.Join(order, " ") != strings.Join(want, " ") {
		t.Errorf("entries:\n got %q\nwant %q", order, want)
	}
	check := func(name string, ok bool, what string) {
		t.Helper()
		if !ok {
			t.Errorf("%s: %s: %+v", name, what, got[name])
		}
	}
	h := got["h2"]
	check("h2", h != nil && h.Typeflag == tar.TypeLink && h.Linkname == "h1", "a hard link of h1")
	h = got["h1"]
	check("h1", h != nil && h.Typeflag == tar.TypeReg && h.Uid == 1000 && h.Gid == 1001 && h.Mode == 0o640 && h.Size == 7, "the file, its owner and mode")
	h = got["suid"]
	check("suid", h != nil && h.Mode == 0o4755, "set-uid kept")
	h = got["link"]
	check("link", h != nil && h.Typeflag == tar.TypeSymlink && h.Linkname == "/etc/motd", "a symbolic link")
	h = got["fifo"]
	check("fifo", h != nil && h.Typeflag == tar.TypeFifo, "a fifo")
	h = got["etc/motd"]
	check("etc/motd", h != nil && h.PAXRecords["SCHILY.xattr.user.note"] == "kept" && h.ModTime.Equal(time.Unix(1_700_000_000, 0)), "its extended attribute and time")
	h = got["opq/"]
	check("opq/", h != nil && h.Typeflag == tar.TypeDir && h.Mode == 0o750 && len(h.PAXRecords) == 0, "a directory without overlayfs's attributes")

	// The layer unpacks (as hutch's store unpacks) into the same tree.
	un := t.TempDir()
	if _, err := layer.Unpack(bytes.NewReader(b.Bytes()), un, layer.Options{OpaqueXattr: "trusted.overlay.opaque",
		Owner: func(u, g int) (int, int) { return u, g }}); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(filepath.Join(un, "etc/group"), &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Rdev != 0 {
		t.Errorf("the whiteout unpacked: %v %o", err, st.Mode)
	}
	if v, err := unix.Getxattr(filepath.Join(un, "opq"), "trusted.overlay.opaque", make([]byte, 8)); err != nil || v != 1 {
		t.Errorf("the opaque directory unpacked: %v", err)
	}
	var s1, s2 unix.Stat_t
	if unix.Lstat(filepath.Join(un, "h1"), &s1) != nil || unix.Lstat(filepath.Join(un, "h2"), &s2) != nil || s1.Ino != s2.Ino {
		t.Error("the hard link unpacked is not one")
	}
}

// TestWriteLayerRefuses: a name an OCI layer would read as a deletion.
func TestWriteLayerRefuses(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, ".wh.x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteLayer(io.Discard, dir); !errors.Is(err, ErrWhiteoutName) || !strings.Contains(err.Error(), ".wh.x") {
		t.Errorf("WriteLayer of a .wh. name: %v", err)
	}
}

// TestImage: Plan and WriteTo make a valid OCI image layout (every digest,
// size and diff ID checked by go-containerregistry's validation) and a
// docker save tarball of the same image, of the size Size says, the same
// bytes every time; hutch's store imports it; the base's configuration
// stays, with the new diff IDs and history; a layer changed between Plan
// and WriteTo breaks the stream.
func TestImage(t *testing.T) {
	top := overlayTree(t)
	base := t.TempDir()
	if err := os.WriteFile(filepath.Join(base, "hello"), []byte("hi\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := `{"architecture":"amd64","os":"linux","config":{"Env":["PATH=/bin"],"Labels":{"team":"a"}},"rootfs":{"type":"layers","diff_ids":["sha256:00"]},"history":[{"created_by":"ADD base"},{"created_by":"ENV","empty_layer":true}]}`
	src := Source{Base: &image.Image{Digest: "sha256:" + strings.Repeat("ab", 32), Platform: "linux/amd64"}, BaseConfig: []byte(cfg),
		BaseLayers: []string{base}, Layers: []string{top}, Created: time.Unix(1_800_000_000, 0), CreatedBy: "hutch snapshot snap-x", Name: "hutch.test/exported:1"}
	im, err := Plan(src)
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	for _, f := range []Format{OCI, Docker} {
		var a, b bytes.Buffer
		n, err := im.WriteTo(&a, f)
		if err != nil {
			t.Fatal(err)
		}
		size, _ := im.Size(f)
		if n != size || int64(a.Len()) != size {
			t.Errorf("format %d: wrote %d bytes, Size says %d", f, n, size)
		}
		again, err := Plan(src)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := again.WriteTo(&b, f); err != nil || !bytes.Equal(a.Bytes(), b.Bytes()) || again.Digest() != im.Digest() {
			t.Errorf("format %d: a second export differs (%v)", f, err)
		}
		p := filepath.Join(out, []string{"oci.tar", "docker.tar"}[f])
		if err := os.WriteFile(p, a.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The OCI layout, unpacked, validated.
	lay := t.TempDir()
	f, _ := os.Open(filepath.Join(out, "oci.tar"))
	_, err = layer.Unpack(f, lay, layer.Options{})
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	idx, err := layout.ImageIndexFromPath(lay)
	if err != nil {
		t.Fatal(err)
	}
	im2, err := idx.Image(mustHash(t, im.Digest()))
	if err != nil {
		t.Fatal(err)
	}
	// (validate reads layers as gzip: these are not; hutch's import below
	// checks their diff IDs.)
	if err := validate.Image(im2, validate.Fast); err != nil {
		t.Errorf("the OCI layout's image: %v", err)
	}
	ls, _ := im2.Layers()
	for _, l := range ls {
		d, _ := l.Digest()
		rc, err := l.Compressed()
		if err != nil {
			t.Fatal(err)
		}
		h, _, err := v1.SHA256(rc)
		rc.Close()
		if err != nil || h != d {
			t.Errorf("layer %s: its content is %s (%v)", d, h, err)
		}
	}
	cf, err := im2.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.Config.Labels["team"] != "a" || len(cf.RootFS.DiffIDs) != 2 || len(cf.History) != 3 ||
		cf.History[2].CreatedBy != "hutch snapshot snap-x" || !cf.Created.Time.Equal(time.Unix(1_800_000_000, 0)) {
		t.Errorf("configuration: %+v", cf)
	}
	// The docker save tarball.
	dimg, err := tarball.ImageFromPath(filepath.Join(out, "docker.tar"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := validate.Image(dimg); err != nil {
		t.Errorf("the docker save tarball's image: %v", err)
	}
	if cd, _ := dimg.ConfigName(); cd.String() != im.ConfigDigest() {
		t.Errorf("the docker save tarball's configuration is %s, want %s", cd, im.ConfigDigest())
	}
	// hutch's store takes it, under its name, with its digest.
	st, err := image.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	imgs, err := fetch.Import(st, filepath.Join(out, "oci.tar"), "", fetch.Options{Root: true})
	if err != nil || len(imgs) != 1 || imgs[0].Digest != im.Digest() || len(imgs[0].Refs) != 1 || imgs[0].Refs[0] != "hutch.test/exported:1" {
		t.Fatalf("import: %v %+v", err, imgs)
	}
	if raw, err := st.ConfigFile(im.Digest()); err != nil || !bytes.Contains(raw, []byte(`"team":"a"`)) {
		t.Errorf("the store keeps the configuration: %v %s", err, raw)
	}

	// A layer changed after Plan.
	if err := os.WriteFile(filepath.Join(top, "etc/motd"), []byte("EDITED\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := im.WriteTo(io.Discard, OCI); !errors.Is(err, ErrChanged) {
		t.Errorf("WriteTo after a change: %v", err)
	}
}

// TestPlanWithoutConfig: a base image the store keeps no configuration
// of gets one from its record.
func TestPlanWithoutConfig(t *testing.T) {
	base := t.TempDir()
	im, err := Plan(Source{Base: &image.Image{Digest: "sha256:" + strings.Repeat("cd", 32), Platform: "linux/arm64/v8",
		Config: image.Config{Env: []string{"A=1"}, Cmd: []string{"/bin/sh"}}}, BaseLayers: []string{base}, Layers: []string{t.TempDir()},
		Created: time.Unix(1_800_000_000, 0), CreatedBy: "hutch snapshot snap-y"})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"architecture":"arm64"`, `"variant":"v8"`, `"Env":["A=1"]`, `"Cmd":["/bin/sh"]`, `"created_by":"base image sha256:cdcd`, `"created_by":"hutch snapshot snap-y"`} {
		if !bytes.Contains(im.config, []byte(want)) {
			t.Errorf("configuration lacks %s: %s", want, im.config)
		}
	}
}

func mustHash(t *testing.T, s string) v1.Hash {
	t.Helper()
	h, err := v1.NewHash(s)
	if err != nil {
		t.Fatal(err)
	}
	return h
}
