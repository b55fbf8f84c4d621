package main

import (
	"archive/tar"
	"bytes"
	"io"
	"log"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// testImageTar writes a `docker save` tarball of a one-layer image tagged
// tag (a file holding content) into a fresh directory.
func testImageTar(t *testing.T, tag, file, content string) string {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	tw.WriteHeader(&tar.Header{Name: file, Mode: 0o644, Size: int64(len(content)), Typeflag: tar.TypeReg})
	tw.Write([]byte(content))
	tw.Close()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b.Bytes())), nil })
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, l)
	if err != nil {
		t.Fatal(err)
	}
	img, err = mutate.ConfigFile(img, &v1.ConfigFile{OS: "linux", Architecture: "amd64",
		RootFS: v1.RootFS{Type: "layers", DiffIDs: mustDiffIDs(t, img)}, Config: v1.Config{Cmd: []string{"/bin/sh"}}})
	if err != nil {
		t.Fatal(err)
	}
	ref, err := name.NewTag(tag)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(hostDir(t), "image.tar")
	if err := tarball.WriteToFile(p, ref, img); err != nil {
		t.Fatal(err)
	}
	return p
}

func mustDiffIDs(t *testing.T, img v1.Image) []v1.Hash {
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	return cf.RootFS.DiffIDs
}

// TestImageCommands: hutch image import, ls, inspect, rm and prune, as a
// user types them (hutch runs hutch-serve for them), on a state directory
// of the test's own.
func TestImageCommands(t *testing.T) {
	state := hostDir(t)
	p := testImageTar(t, "hutch.test/tool:1", "etc/tool.conf", "setting\n")
	run := func(args ...string) result {
		t.Helper()
		return hutch(t, invocation{args: append([]string{"image"}, append(args, "--state-dir", state)...)})
	}
	r := run("import", p)
	wantOK(t, r)
	if !strings.Contains(r.stdout, "sha256:") || !strings.Contains(r.stdout, "hutch.test/tool:1") {
		t.Errorf("import printed:\n%s", r)
	}
	r = run("ls")
	wantOK(t, r)
	if !strings.Contains(r.stdout, "hutch.test/tool:1") || !strings.Contains(r.stdout, "linux/amd64") {
		t.Errorf("ls:\n%s", r)
	}
	r = run("inspect", "hutch.test/tool:1")
	wantOK(t, r)
	for _, want := range []string{`"digest": "sha256:`, `"/bin/sh"`, `"refs": [`} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("inspect lacks %s:\n%s", want, r)
		}
	}
	r = run("inspect", "hutch.test/none:1")
	if r.code == 0 || !strings.Contains(r.stderr, "no such image") {
		t.Errorf("inspect of a missing image:\n%s", r)
	}
	r = run("rm", "hutch.test/tool:1")
	wantOK(t, r)
	r = run("prune")
	wantOK(t, r)
	if !strings.Contains(r.stdout, "removed 1 unused layers") {
		t.Errorf("prune:\n%s", r)
	}
	r = run("import", filepath.Join(state, "missing.tar"))
	if r.code == 0 || !strings.Contains(r.stderr, "missing.tar") {
		t.Errorf("import of a missing file:\n%s", r)
	}
}

// TestImagePull: hutch image pull takes an image from a registry on
// loopback that speaks plain HTTP only when named with
// --insecure-registry, and prints its digest; hutch image ls shows it.
func TestImagePull(t *testing.T) {
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	img, err := tarball.ImageFromPath(testImageTar(t, "hutch.test/x:1", "etc/pulled", "yes\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := name.ParseReference(host+"/team/pulled:2", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img); err != nil {
		t.Fatal(err)
	}
	state := hostDir(t)
	home := hostDir(t)
	env := []string{"PATH=" + stdPath, "HOME=" + home, "LANG=C.UTF-8"}
	r := hutch(t, invocation{env: env, args: []string{"image", "pull", ref.String(), "--state-dir", state}})
	if r.code == 0 || !strings.Contains(r.stderr, "--insecure-registry "+host) {
		t.Errorf("plain HTTP without the flag:\n%s", r)
	}
	r = hutch(t, invocation{env: env, args: []string{"image", "pull", "--insecure-registry", host, ref.String(), "--state-dir", state}})
	wantOK(t, r)
	digest, _ := img.Digest()
	if strings.TrimSpace(r.stdout) != digest.String() {
		t.Errorf("pull printed %q, want the digest %s\n%s", r.stdout, digest, r)
	}
	r = hutch(t, invocation{env: env, args: []string{"image", "ls", "--state-dir", state}})
	if !strings.Contains(r.stdout, host+"/team/pulled:2") {
		t.Errorf("ls:\n%s", r)
	}
}
