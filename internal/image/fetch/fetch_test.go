package fetch

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/image"
	"github.com/hutch-sandbox/hutch/internal/image/imagetest"
	"github.com/hutch-sandbox/hutch/internal/layer"
	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// tarOf builds a layer's tar of "name=content" entries: a trailing "/"
// makes a directory, content "->target" a symbolic link.
func tarOf(t *testing.T, entries ...string) []byte {
	t.Helper()
	var es []imagetest.Entry
	for _, e := range entries {
		n, body, _ := strings.Cut(e, "=")
		switch {
		case strings.HasSuffix(n, "/"):
			es = append(es, imagetest.Dir(n))
		case strings.HasPrefix(body, "->"):
			es = append(es, imagetest.Symlink(n, body[2:]))
		default:
			es = append(es, imagetest.File(n, body, 0o644))
		}
	}
	return imagetest.Tar(t, es...)
}

func layerOf(t *testing.T, b []byte) v1.Layer { return imagetest.Layer(t, b) }

// testImage is two layers: the second deletes a file of the first, makes
// a directory opaque and adds files.
func testImage(t *testing.T) v1.Image {
	t.Helper()
	l1 := tarOf(t, "bin/", "bin/hello=#!/bin/sh\necho hello\n", "etc/", "etc/os-release=ID=box\n", "gone=x", "opq/", "opq/old=old", "lib=->bin")
	l2 := tarOf(t, ".wh.gone=", "opq/", "opq/.wh..wh..opq=", "opq/new=new", "etc/added=added")
	return imagetest.Image(t, "amd64", func(c *v1.Config) {
		c.Env = []string{"PATH=/bin", "GREETING=hi"}
		c.Cmd = []string{"/bin/hello"}
		c.WorkingDir = "/etc"
	}, layerOf(t, l1), layerOf(t, l2))
}

func newStore(t *testing.T) *image.Store {
	t.Helper()
	dir := t.TempDir()
	t.Cleanup(func() { _ = image.RemoveTree(dir) })
	s, err := image.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func opts() Options { return Options{Root: os.Geteuid() == 0} }

func dockerSave(t *testing.T, img v1.Image, tag string) string {
	t.Helper()
	return imagetest.DockerSave(t, img, tag, t.TempDir())
}

// checkImage checks what the store holds of testImage.
func checkImage(t *testing.T, s *image.Store, ref string) {
	t.Helper()
	img, err := s.Get(ref)
	if err != nil {
		t.Fatal(err)
	}
	if len(img.Layers) != 2 || img.Platform != "linux/amd64" || img.Config.WorkingDir != "/etc" ||
		len(img.Config.Cmd) != 1 || img.Config.Env[1] != "GREETING=hi" {
		t.Errorf("record %+v", img)
	}
	l1, _ := s.LayerDir(img.Layers[0])
	l2, _ := s.LayerDir(img.Layers[1])
	if b, err := os.ReadFile(filepath.Join(l1, "bin/hello")); err != nil || !strings.Contains(string(b), "echo hello") {
		t.Errorf("layer 1: %q, %v", b, err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(filepath.Join(l2, "gone"), &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Rdev != 0 {
		t.Errorf("the whiteout of gone: %v mode %o", err, st.Mode)
	}
	attr := "user.overlay.opaque"
	if os.Geteuid() == 0 {
		attr = "trusted.overlay.opaque"
	}
	v := make([]byte, 8)
	if n, err := unix.Lgetxattr(filepath.Join(l2, "opq"), attr, v); err != nil || string(v[:n]) != "y" {
		t.Errorf("opaque: %v", err)
	}
	if fi, err := os.Stat(l1); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("the layer's top: %v %v", fi.Mode(), err)
	}
}

// TestImportDockerSave: a `docker save` tarball comes in under its tag,
// each layer unpacked with its whiteouts and opaque directories, its
// configuration recorded; importing it again reads no layer again.
func TestImportDockerSave(t *testing.T) {
	s := newStore(t)
	p := dockerSave(t, testImage(t), "hutch.test/box:1")
	imgs, err := Import(s, p, "", opts())
	if err != nil || len(imgs) != 1 {
		t.Fatalf("%v, %v", imgs, err)
	}
	checkImage(t, s, "hutch.test/box:1")
	if imgs[0].Refs[0] != "hutch.test/box:1" {
		t.Errorf("refs %v", imgs[0].Refs)
	}
	var cached int
	o := opts()
	o.Progress = func(e Event) {
		if e.Cached {
			cached++
		}
	}
	if _, err := Import(s, p, "", o); err != nil || cached != 2 {
		t.Errorf("again: %v, %d layers cached", err, cached)
	}
}

// TestImportLayout: an OCI layout, as a directory and as a tar of one,
// comes in under its ref.name annotation.
func TestImportLayout(t *testing.T) {
	dir := t.TempDir()
	lp, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := lp.AppendImage(testImage(t), layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": "2.0"})); err != nil {
		t.Fatal(err)
	}
	s := newStore(t)
	if _, err := Import(s, dir, "hutch.test/layout", opts()); err != nil {
		t.Fatal(err)
	}
	checkImage(t, s, "hutch.test/layout:2.0")

	tarPath := filepath.Join(t.TempDir(), "layout.tar")
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	_ = filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		rel, _ := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		h, _ := tar.FileInfoHeader(fi, "")
		h.Name = rel
		tw.WriteHeader(h)
		if fi.Mode().IsRegular() {
			c, _ := os.ReadFile(p)
			tw.Write(c)
		}
		return nil
	})
	tw.Close()
	if err := os.WriteFile(tarPath, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	s2 := newStore(t)
	if _, err := Import(s2, tarPath, "hutch.test/fromtar", opts()); err != nil {
		t.Fatal(err)
	}
	checkImage(t, s2, "hutch.test/fromtar:2.0")
}

// TestImportRefused: a layer whose content is not what the configuration
// names, and a layer that reaches outside itself, are refused with the
// image's and the layer's digests; nothing of them stays in the store.
func TestImportRefused(t *testing.T) {
	good := testImage(t)
	p := dockerSave(t, good, "hutch.test/bad:1")
	// Swap the first layer's bytes for others of the same length.
	tampered := filepath.Join(t.TempDir(), "tampered.tar")
	swapped := false
	rewriteTar(t, p, tampered, func(name string, body []byte) []byte {
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			return body // not a layer
		}
		plain, _ := io.ReadAll(zr)
		if !bytes.Contains(plain, []byte("echo hello")) {
			return body
		}
		swapped = true
		var out bytes.Buffer
		zw := gzip.NewWriter(&out)
		zw.Write(bytes.ReplaceAll(plain, []byte("echo hello"), []byte("echo HELLO")))
		zw.Close()
		return out.Bytes()
	})
	if !swapped {
		t.Fatal("no layer to tamper with")
	}
	s := newStore(t)
	_, err := Import(s, tampered, "", opts())
	if err == nil || !strings.Contains(err.Error(), "layer sha256:") {
		t.Errorf("a tampered layer: %v", err)
	}
	cf, _ := good.ConfigFile()
	assertRefused(t, s, cf.RootFS.DiffIDs[0].String())

	escape := tarOf(t, "l=->/etc", "l/passwd=owned")
	img := imagetest.Image(t, "amd64", nil, layerOf(t, escape))
	s = newStore(t)
	_, err = Import(s, dockerSave(t, img, "hutch.test/escape:1"), "", opts())
	var ee *layer.EntryError
	if !errors.As(err, &ee) || !errors.Is(err, layer.ErrLinkParent) || !strings.Contains(err.Error(), "image sha256:") {
		t.Errorf("a layer through a symbolic link: %v", err)
	}
	assertNothingKept(t, s)
}

// assertRefused checks that an image whose layer diffID was refused left
// no record, no work in progress and not that layer; the layers it
// verified whole may stay (a retry does not fetch them again).
func assertRefused(t *testing.T, s *image.Store, diffID string) {
	t.Helper()
	if s.HasLayer(diffID) {
		t.Errorf("the refused layer %s was kept", diffID)
	}
	for _, d := range []string{"records", "tmp"} {
		ents, _ := os.ReadDir(filepath.Join(s.Dir(), d))
		for _, e := range ents {
			if !strings.HasPrefix(e.Name(), "write-") {
				t.Errorf("%s/%s was kept", d, e.Name())
			}
		}
	}
	if imgs, _ := s.List(); len(imgs) != 0 {
		t.Errorf("images %v", imgs)
	}
}

func assertNothingKept(t *testing.T, s *image.Store) {
	t.Helper()
	for _, d := range []string{"layers/sha256", "records", "tmp", "locks"} {
		ents, _ := os.ReadDir(filepath.Join(s.Dir(), d))
		for _, e := range ents {
			if !strings.HasSuffix(e.Name(), ".lock") && !strings.HasPrefix(e.Name(), "write-") {
				t.Errorf("%s/%s was kept", d, e.Name())
			}
		}
	}
	if imgs, _ := s.List(); len(imgs) != 0 {
		t.Errorf("images %v", imgs)
	}
}

// rewriteTar copies the tar src to dst, each file's content through f.
func rewriteTar(t *testing.T, src, dst string, f func(string, []byte) []byte) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range imagetest.ReadTar(t, in) {
		body := f(e.Name, e.Body)
		e.Size = int64(len(body))
		tw.WriteHeader(e.Header)
		tw.Write(body)
	}
	tw.Close()
	if err := os.WriteFile(dst, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestImportConcurrent: two imports of one image at once both succeed,
// and each layer is unpacked once.
func TestImportConcurrent(t *testing.T) {
	s := newStore(t)
	p := dockerSave(t, testImage(t), "hutch.test/box:2")
	var mu sync.Mutex
	unpacked := 0
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o := opts()
			o.Progress = func(e Event) {
				if e.Done && !e.Cached {
					mu.Lock()
					unpacked++
					mu.Unlock()
				}
			}
			_, err := Import(s, p, "", o)
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if unpacked != 2 {
		t.Errorf("%d layers unpacked for an image of 2, imported twice at once", unpacked)
	}
	checkImage(t, s, "hutch.test/box:2")
}

// TestRemovePrune: removing an image's last name removes it; Prune then
// removes its layers.
func TestRemovePrune(t *testing.T) {
	s := newStore(t)
	if _, err := Import(s, dockerSave(t, testImage(t), "hutch.test/box:3"), "", opts()); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove("hutch.test/box:3"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get("hutch.test/box:3"); !errors.Is(err, image.ErrNotFound) {
		t.Errorf("after rm: %v", err)
	}
	if n, err := s.Prune(); err != nil || n != 2 {
		t.Errorf("prune: %d, %v", n, err)
	}
	assertNothingKept(t, s)
}

// TestNormalize: names are kept as go-containerregistry (and Docker)
// reads them.
func TestNormalize(t *testing.T) {
	for _, r := range []string{"python:3.12-slim", "busybox", "library/alpine:3", "ghcr.io/o/i:tag", "localhost:5000/x",
		"registry.example:443/a/b/c:v1.2", "index.docker.io/foo/bar",
		"busybox@sha256:" + strings.Repeat("a", 64)} {
		got, err := image.Normalize(r)
		if err != nil {
			t.Errorf("%s: %v", r, err)
			continue
		}
		ref, err := name.ParseReference(r)
		if err != nil {
			t.Fatal(err)
		}
		// Docker Hub is index.docker.io to go-containerregistry and
		// docker.io to Docker's CLI, and to hutch.
		if want := strings.Replace(ref.Name(), "index.docker.io/", "docker.io/", 1); got != want {
			t.Errorf("%s: %s, go-containerregistry says %s", r, got, want)
		}
	}
	for _, bad := range []string{"", "UPPER/case", "a b", "x@sha256:12", "x:", "-x", "a//b"} {
		if _, err := image.Normalize(bad); !errors.Is(err, image.ErrBadRef) {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

// TestFetchAsUser runs the tests above as an ordinary user, whose layers
// keep no owners and mark opaque directories with user.overlay.opaque.
func TestFetchAsUser(t *testing.T) {
	testutil.RunAsUser(t, "^(TestImportDockerSave|TestImportLayout|TestImportRefused|TestImportConcurrent|TestRemovePrune|TestEvictAndInUse|TestStandingLimit|TestUseIsRecent|TestPullAuth|TestPullPlainHTTP|TestPullIndex|TestPullTampered|TestPullDockerConfig|TestPullBearerToken|TestPullConcurrent|TestPullReferences)$")
}

// TestEvictAndInUse: eviction removes the least recently used images
// first until the layers fit, never an image a sandbox uses (Use), and
// prune leaves the layers of a removed image alone while a sandbox still
// stacks them.
func TestEvictAndInUse(t *testing.T) {
	s := newStore(t)
	a := imagetest.Image(t, "amd64", nil, layerOf(t, tarOf(t, "a="+strings.Repeat("a", 64<<10))))
	b := imagetest.Image(t, "amd64", nil, layerOf(t, tarOf(t, "b="+strings.Repeat("b", 64<<10))))
	c := imagetest.Image(t, "amd64", nil, layerOf(t, tarOf(t, "c="+strings.Repeat("c", 64<<10))))
	for tag, img := range map[string]v1.Image{"a": a, "b": b, "c": c} {
		if _, err := Import(s, dockerSave(t, img, "hutch.test/lru:"+tag), "", opts()); err != nil {
			t.Fatal(err)
		}
	}
	get := func(tag string) *image.Image {
		img, err := s.Get("hutch.test/lru:" + tag)
		if err != nil {
			t.Fatal(err)
		}
		return img
	}
	// b is in use (oldest use of all), a was used before c.
	imgA, imgB, imgC := get("a"), get("b"), get("c")
	usedAgo(t, s, imgA, time.Hour)
	release, err := s.Use(imgB)
	if err != nil {
		t.Fatal(err)
	}
	usedAgo(t, s, imgB, 2*time.Hour)
	// Room for about two layers: a goes (least recently used not in use).
	removed, err := s.Evict(150 << 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(removed) != 1 || removed[0].Digest != imgA.Digest || removed[0].Refs[0] != "hutch.test/lru:a" {
		t.Errorf("evicted %v, want only a (%s)", removed, imgA.Digest)
	}
	// Room for nothing: c goes too, b stays in use.
	if removed, err = s.Evict(0); err != nil || len(removed) != 1 || removed[0].Digest != imgC.Digest {
		t.Errorf("evicted %v, %v; want only c", removed, err)
	}
	if _, err := s.Get("hutch.test/lru:b"); err != nil {
		t.Errorf("the image in use was evicted: %v", err)
	}
	// b removed by name while in use: its layer stays until released.
	if err := s.Remove("hutch.test/lru:b"); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Prune(); err != nil || n != 0 || !s.HasLayer(imgB.Layers[0]) {
		t.Errorf("prune of a layer in use: %d removed, %v", n, err)
	}
	release()
	if n, err := s.Prune(); err != nil || n != 1 {
		t.Errorf("prune after release: %d, %v", n, err)
	}
	assertNothingKept(t, s)
}
