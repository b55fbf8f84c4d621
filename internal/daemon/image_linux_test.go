package daemon

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/image/fetch"
	"github.com/hutch-sandbox/hutch/internal/image/imagetest"
	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/store"
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
	// Every answer says the image, not only the create's.
	if got, err := m.Get(testCtx(t), "a", info.ID); err != nil || got.Image != info.Image {
		t.Errorf("get: image %q, %v; want %s", got.Image, err, info.Image)
	}
	if list, err := m.List(testCtx(t), "a", nil, ""); err != nil || len(list) != 1 || list[0].Image != info.Image {
		t.Errorf("list: %+v, %v; want the image %s", list, err, info.Image)
	}
	out := mustRun(t, m, "a", info.ID, `cat /etc/motd; echo "$GREETING|$PATH"; pwd; ls /opq; test -e /usr/bin/env || echo no-host-usr; echo made > here && cat here`)
	for _, want := range []string{"from the image\n", "hi from the image|/bin\n", info.Workspace + "\n", "new\n", "no-host-usr\n", "made\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("the sandbox's output lacks %q:\n%s", want, out)
		}
	}
	_, err := m.Create(testCtx(t), "a", CreateRequest{Policy: policy.Spec{Root: policy.ImagePrefix + "hutch.test/absent:1"}})
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
	host := mustCreate(t, m, "a", CreateRequest{})
	if host.Image != "" {
		t.Errorf("a sandbox of the host's root says image %q", host.Image)
	}

	// The record keeps the image once the daemon is gone: the next one
	// says it of the stopped sandbox.
	dir := m.cfg.StateDir
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	m2, err := New(Config{StateDir: dir}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close()
	got, err := m2.Get(testCtx(t), "a", info.ID)
	if err != nil || got.Image != info.Image || got.State != store.StateStopped {
		t.Errorf("after a restart: %+v, %v; want stopped, image %s", got, err, info.Image)
	}
	if got, err := m2.Get(testCtx(t), "a", host.ID); err != nil || got.Image != "" {
		t.Errorf("after a restart, the host-root sandbox: %+v, %v", got, err)
	}
}
