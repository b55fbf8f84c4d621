package main

import (
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/hutch-sandbox/hutch/internal/image"
	"github.com/hutch-sandbox/hutch/internal/image/fetch"
	"github.com/hutch-sandbox/hutch/internal/image/imagetest"
	"github.com/hutch-sandbox/hutch/internal/testutil"
	"github.com/hutch-sandbox/hutch/internal/testutil/storetest"
)

// TestServeImages: the daemon's image store through the CLI, as a user
// would: hutch image ls|pull|rm --remote work on the store of the daemon at
// $HUTCH_HOST (pulling and removing on its socket only; a tenant lists);
// hutch create --image starts a sandbox of an image there (a tenant on
// TCP too), and hutch ls says its image's digest.
func TestServeImages(t *testing.T) {
	img := imagetest.Busybox(t, func(ok bool, reason string) { testutil.Need(t, ok, reason) })
	digest, _ := img.Digest()
	short := "sha256:" + digest.Hex[:12]
	d := startDaemonWith(t, importImage(t, img, "hutch.test/cli:1"))
	r := d.admin(t, "token", "create", "--tenant", "img", "--state-dir", d.stateDir)
	wantOK(t, r)
	token := lastLine(r.stdout)
	tenant := func(args ...string) result { return d.as(t, d.tcp, token, nil, args...) }

	r = tenant("image", "ls", "--remote")
	wantOK(t, r)
	if ls := lines(r.stdout); len(ls) != 2 || !strings.HasPrefix(ls[0], "NAME") || !strings.HasPrefix(ls[1], "hutch.test/cli:1 ") || !strings.Contains(ls[1], digest.Hex[:12]) {
		t.Errorf("image ls --remote:\n%s", r)
	}
	r = d.admin(t, "image", "ls", "-q", "--remote")
	if wantOK(t, r); strings.TrimSpace(r.stdout) != digest.String() {
		t.Errorf("image ls --remote -q:\n%s", r)
	}

	// A sandbox of the image, for the operator and for a tenant; ls
	// says its image.
	for _, as := range []func(args ...string) result{func(args ...string) result { return d.admin(t, args...) }, tenant} {
		r = as("create", "--image", "hutch.test/cli:1")
		wantOK(t, r)
		id := lastLine(r.stdout)
		r = as("exec", id, "--", "cat", "/etc/motd")
		if wantOK(t, r); r.stdout != "from the image\n" {
			t.Errorf("exec in the image's sandbox:\n%s", r)
		}
		r = as("ls")
		wantOK(t, r)
		for _, l := range lines(r.stdout) {
			if strings.HasPrefix(l, id+" ") && !strings.Contains(l, " "+short+" ") {
				t.Errorf("ls does not say the image %s:\n%s", short, r.stdout)
			}
		}
	}

	// A pull from a registry, on the daemon's socket only.
	small := imagetest.Image(t, "amd64", nil, imagetest.Layer(t, imagetest.Tar(t, imagetest.File("hello", "hi\n", 0o644))))
	host, ref := imagetest.Registry(t, small, "cli/small:1")
	smallDigest, _ := small.Digest()
	r = tenant("image", "pull", ref, "--remote", "--insecure-registry", host)
	if r.code != 1 || !strings.Contains(r.stderr, "operator") {
		t.Errorf("a tenant pulls:\n%s", r)
	}
	r = d.admin(t, "image", "pull", ref, "--remote", "--insecure-registry", host)
	if wantOK(t, r); strings.TrimSpace(r.stdout) != smallDigest.String() {
		t.Errorf("image pull --remote:\n%s", r)
	}
	r = d.admin(t, "image", "pull", "--remote", ref)
	if r.code != 1 || !strings.Contains(r.stderr, "--insecure-registry") {
		t.Errorf("a pull over plain HTTP not named:\n%s", r)
	}
	r = tenant("image", "rm", "--remote", ref)
	if r.code != 1 || !strings.Contains(r.stderr, "operator") {
		t.Errorf("a tenant removes:\n%s", r)
	}
	r = d.admin(t, "image", "rm", "--remote", ref)
	if wantOK(t, r); strings.TrimSpace(r.stdout) != "removed "+ref {
		t.Errorf("image rm --remote:\n%s", r)
	}
	r = d.admin(t, "image", "ls", "-q", "--remote")
	if wantOK(t, r); strings.TrimSpace(r.stdout) != digest.String() {
		t.Errorf("image ls --remote after rm:\n%s", r)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"image", "inspect", "--remote", "x"}, "only ls, pull and rm"},
		{[]string{"image", "pull", "--remote"}, "takes one REF"},
		{[]string{"image", "ls", "--remote", "extra"}, "takes no arguments"},
	} {
		if r := d.admin(t, c.args...); r.code != 2 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("%q: want exit 2 and %q:\n%s", c.args, c.want, r)
		}
	}
}

// importImage is a setup of startDaemonWith: it imports img, named tag,
// into the daemon's state directory before the daemon starts.
func importImage(t *testing.T, img v1.Image, tag string) func(stateDir string) {
	tarball := imagetest.DockerSave(t, img, tag, t.TempDir())
	return func(stateDir string) {
		if _, err := fetch.Import(openStore(t, stateDir), tarball, "", fetch.Options{Root: true}); err != nil {
			t.Fatalf("import %s: %v", tarball, err)
		}
	}
}

// importTarball is a setup of startDaemonWith: it gives the daemon's state
// directory the image of one of hutch's built tarballs (testutil's
// BaseImage, CodeInterpreterImage) before the daemon starts, linked from
// the test run's one import of it (storetest).
func importTarball(t *testing.T, tarball string) func(stateDir string) {
	return func(stateDir string) { storetest.Import(t, tarball, openStore(t, stateDir)) }
}

// openStore opens the image store of stateDir.
func openStore(t *testing.T, stateDir string) *image.Store {
	t.Helper()
	st, err := image.Open(stateDir)
	if err != nil {
		t.Fatal(err)
	}
	return st
}
