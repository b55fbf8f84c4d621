package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/hutch-sandbox/hutch/internal/image/fetch"
	"github.com/hutch-sandbox/hutch/internal/image/imagetest"
	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// TestCreateFromImage: a tenant's sandbox starts from an image of the
// daemon's image store (policy root image:REF): the image's files and
// environment, its workspace made in its own root, every other file of
// the host out of view; an image not in the store is refused as the
// tenant's error, and the daemon fetches nothing for it.
func TestCreateFromImage(t *testing.T) {
	// The image has no C library: the sandboxes' agent is the static
	// hutch-agent (this test binary may be linked against libc).
	m := newManager(t, Config{AgentBinary: filepath.Join(filepath.Dir(testutil.Hutch(t)), "hutch-agent")})
	img := imagetest.Busybox(t, func(ok bool, reason string) { testutil.Need(t, ok, reason) })
	tarPath := imagetest.DockerSave(t, img, "hutch.test/served:1", t.TempDir())
	if _, err := fetch.Import(m.images, tarPath, "", fetch.Options{Root: os.Geteuid() == 0}); err != nil {
		t.Fatal(err)
	}
	info := mustCreate(t, m, "a", CreateRequest{Policy: policy.Spec{Root: policy.ImagePrefix + "hutch.test/served:1"}})
	if digest, _ := img.Digest(); info.Image != digest.String() {
		t.Errorf("create says image %q, want %s", info.Image, digest)
	}
	out := mustRun(t, m, "a", info.ID, `cat /etc/motd; echo "$GREETING|$PATH"; pwd; ls /opq; test -e /usr/bin/env || echo no-host-usr; echo made > here && cat here`)
	for _, want := range []string{"from the image\n", "hi from the image|/bin\n", info.Workspace + "\n", "new\n", "no-host-usr\n", "made\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("the sandbox's output lacks %q:\n%s", want, out)
		}
	}

	// The image's user: who commands run as unless they say, owner of
	// the workspace, with its home; a user the image does not list
	// refuses the sandbox.
	for tag, user := range map[string]string{"hutch.test/app:1": "app", "hutch.test/ghost:1": "ghost"} {
		img := imagetest.BusyboxWith(t, func(ok bool, reason string) { testutil.Need(t, ok, reason) }, func(c *v1.Config) { c.User = user },
			imagetest.File("etc/passwd", "root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000::/home/app:/bin/sh\n", 0o644))
		if _, err := fetch.Import(m.images, imagetest.DockerSave(t, img, tag, t.TempDir()), "", fetch.Options{Root: os.Geteuid() == 0}); err != nil {
			t.Fatal(err)
		}
	}
	info = mustCreate(t, m, "a", CreateRequest{Policy: policy.Spec{Root: policy.ImagePrefix + "hutch.test/app:1"}})
	if out := mustRun(t, m, "a", info.ID, `id -u; id -g; echo "$HOME $USER"; pwd; echo mine > f && echo wrote`); out != "1000\n1000\n/home/app app\n"+info.Workspace+"\nwrote\n" {
		t.Errorf("the image's user:\n%s", out)
	}
	_, err := m.Create(testCtx(t), "a", CreateRequest{Policy: policy.Spec{Root: policy.ImagePrefix + "hutch.test/ghost:1"}})
	if err == nil || !strings.Contains(err.Error(), `user "ghost": no such user`) {
		t.Errorf("an image whose user it does not list: %v", err)
	}

	_, err = m.Create(testCtx(t), "a", CreateRequest{Policy: policy.Spec{Root: policy.ImagePrefix + "hutch.test/absent:1"}})
	if err == nil || !strings.Contains(err.Error(), "not in the daemon's image store") {
		t.Errorf("an image not in the store: %v", err)
	}

	// An operator's --allow-image: only the images it names.
	m.cfg.AllowImages = []string{"hutch.test/other:*"}
	_, err = m.Create(testCtx(t), "a", CreateRequest{Policy: policy.Spec{Root: policy.ImagePrefix + "hutch.test/served:1"}})
	if err == nil || !strings.Contains(err.Error(), "not one this daemon allows") {
		t.Errorf("an image --allow-image does not name: %v", err)
	}
	m.cfg.AllowImages = []string{"hutch.test/served:*"}
	info = mustCreate(t, m, "a", CreateRequest{Policy: policy.Spec{Root: policy.ImagePrefix + "hutch.test/served:1"}})
	if out := mustRun(t, m, "a", info.ID, `cat /etc/motd`); out != "from the image\n" {
		t.Errorf("an allowed image: %q", out)
	}
}
