package daemon

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/hutch-sandbox/hutch/internal/image"
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
	hits, misses := ImageCache.With("create", "hit").Value(), ImageCache.With("create", "miss").Value()
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
	// hutch_image_cache_total counts both (other tests may count too).
	if ImageCache.With("create", "hit").Value() < hits+1 || ImageCache.With("create", "miss").Value() < misses+1 {
		t.Errorf("hutch_image_cache_total{op=\"create\"}: hits %v → %v, misses %v → %v", hits, ImageCache.With("create", "hit").Value(), misses, ImageCache.With("create", "miss").Value())
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
	m2 := reopen(t, m)
	got, err := m2.Get(testCtx(t), "a", info.ID)
	if err != nil || got.Image != info.Image || got.State != store.StateStopped {
		t.Errorf("after a restart: %+v, %v; want stopped, image %s", got, err, info.Image)
	}
	if got, err := m2.Get(testCtx(t), "a", host.ID); err != nil || got.Image != "" {
		t.Errorf("after a restart, the host-root sandbox: %+v, %v", got, err)
	}
}

// TestWarmImage: a warm pool of an image's policy (an E2B template's,
// hutch serve --warm NAME=N): a create with that policy takes a warm
// sandbox of the image at once, its digest in the answer; the pool
// refills; the warm sandboxes hold the image's layers in use, so that a
// prune after the image's name was removed keeps them; a warm sandbox
// whose image name no longer gives its image is never handed out. A pool
// whose image is not in the store stops the daemon at start.
func TestWarmImage(t *testing.T) {
	testutil.RequireRoot(t)
	dir := stateDir(t)
	st, err := image.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	img := imagetest.Busybox(t, func(ok bool, reason string) { testutil.Need(t, ok, reason) })
	digest, _ := img.Digest()
	tarPath := imagetest.DockerSave(t, img, "hutch.test/warm:1", t.TempDir())
	rec, err := fetch.Import(st, tarPath, "", fetch.Options{Root: true})
	if err != nil {
		t.Fatal(err)
	}
	agentBin := filepath.Join(filepath.Dir(testutil.Hutch(t)), "hutch-agent")

	spec := policy.Spec{Root: policy.ImagePrefix + "hutch.test/warm:1"}
	spec.Filesystem.Workspace = "/home/user"
	_, err = New(Config{StateDir: dir, AgentBinary: agentBin, Pools: []WarmPool{
		{Name: "bb", Size: 1, Policy: spec},
		{Name: "gone", Size: 1, Policy: policy.Spec{Root: policy.ImagePrefix + "hutch.test/absent:1"}},
	}}, slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "warm pool gone") || !strings.Contains(err.Error(), "not in the daemon's image store") {
		t.Fatalf("a pool of an image not in the store: %v", err)
	}

	m := newManager(t, Config{StateDir: dir, AgentBinary: agentBin, Pools: []WarmPool{{Name: "bb", Size: 1, Policy: spec}}})
	p := m.pools[0]
	waitPool(t, p, 1)
	rows := warmRows(t, m.st)
	if len(rows) != 1 || rows[0].Image != digest.String() {
		t.Fatalf("warm records %+v, want one of image %s", rows, digest)
	}
	hits := WarmCreates.With("bb", "hit").Value()
	if v := warmReady("bb"); v < 1 {
		t.Errorf("hutch_warm_sandboxes{template=\"bb\"} is %d", v)
	}

	info := mustCreate(t, m, "a", CreateRequest{Policy: spec, Labels: map[string]string{"t": "bb"}})
	if p.took.Load() != 1 || info.ID != rows[0].ID {
		t.Fatalf("the create took %d warm sandboxes (%s, warm %s)", p.took.Load(), info.ID, rows[0].ID)
	}
	if info.Image != digest.String() || info.Workspace != "/home/user" {
		t.Errorf("info %+v, want image %s", info, digest)
	}
	if got := WarmCreates.With("bb", "hit").Value(); got != hits+1 {
		t.Errorf("hutch_warm_creates_total{template=\"bb\",result=\"hit\"} went from %v to %v", hits, got)
	}
	if out := mustRun(t, m, "a", info.ID, `cat /etc/motd; pwd`); out != "from the image\n/home/user\n" {
		t.Errorf("the warm sandbox's output %q", out)
	}
	// Another policy of the image starts cold.
	cold := mustCreate(t, m, "a", CreateRequest{Policy: policy.Spec{Root: spec.Root}})
	if p.took.Load() != 1 || cold.Image != digest.String() {
		t.Errorf("a create of hutch's workspace: took %d, image %q", p.took.Load(), cold.Image)
	}
	waitPool(t, p, 1)

	// The name goes and a prune runs: the layers of the sandboxes,
	// warm or taken, stay.
	if err := m.images.Remove("hutch.test/warm:1"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.images.Prune(); err != nil {
		t.Fatal(err)
	}
	for _, l := range rec[0].Layers {
		if !m.images.HasLayer(l) {
			t.Errorf("layer %s was pruned under a sandbox", l)
		}
	}
	// The warm sandbox of a name the store no longer has is discarded;
	// the create fails as a cold one does.
	misses := WarmCreates.With("bb", "miss").Value()
	_, err = m.Create(testCtx(t), "a", CreateRequest{Policy: spec})
	if err == nil || !strings.Contains(err.Error(), "not in the daemon's image store") {
		t.Errorf("a create after the image's name was removed: %v", err)
	}
	if p.took.Load() != 1 || WarmCreates.With("bb", "miss").Value() != misses+1 {
		t.Errorf("took %d, misses %v → %v", p.took.Load(), misses, WarmCreates.With("bb", "miss").Value())
	}
}

// waitPool waits until p holds n ready sandboxes.
func waitPool(t *testing.T, p *pool, n int) {
	t.Helper()
	if !testutil.Eventually(60*time.Second, func() bool { return p.readyCount() == n }) {
		t.Fatalf("pool %q holds %d warm sandboxes, want %d", p.name, p.readyCount(), n)
	}
}
