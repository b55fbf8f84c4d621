package main

import (
	"bytes"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/hutch-sandbox/hutch/internal/image/imagetest"
	"github.com/hutch-sandbox/hutch/internal/sandbox"
	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// testImageTar writes a `docker save` tarball of a one-layer image tagged
// tag (a file holding content) into a fresh directory.
func testImageTar(t *testing.T, tag, file, content string) string {
	t.Helper()
	img := imagetest.Image(t, "amd64", func(c *v1.Config) { c.Cmd = []string{"/bin/sh"} },
		imagetest.Layer(t, imagetest.Tar(t, imagetest.File(file, content, 0o644))))
	return imagetest.DockerSave(t, img, tag, hostDir(t))
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
	if !strings.Contains(r.stdout, "hutch.test/tool:1") || !strings.Contains(r.stdout, "linux/amd64") || !strings.Contains(r.stdout, "LAST USED") {
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
// --insecure-registry, and prints its digest alone (stderr is no
// terminal: no progress); hutch image ls shows it.
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
	// Not on a terminal: quiet, and the digest alone on stdout.
	if r.stdout != digest.String()+"\n" || r.stderr != "" {
		t.Errorf("pull printed %q, want the digest %s alone\n%s", r.stdout, digest, r)
	}
	r = hutch(t, invocation{env: env, args: []string{"image", "ls", "--state-dir", state}})
	if !strings.Contains(r.stdout, host+"/team/pulled:2") {
		t.Errorf("ls:\n%s", r)
	}
}

// busyboxImageTar writes a `docker save` tarball of imagetest.Busybox,
// tagged tag.
func busyboxImageTar(t *testing.T, tag string) string {
	t.Helper()
	img := imagetest.Busybox(t, func(ok bool, reason string) { testutil.Need(t, ok, reason) })
	return imagetest.DockerSave(t, img, tag, hostDir(t))
}

// TestRunImage: hutch run --image, as root and as an ordinary user,
// starts the sandbox from an image of the store: its files (whiteouts and opaque directories honoured), not the
// host's; its environment (the image's PATH, not the host's); its command
// when none is given; the workspace bound in and written on the host;
// writes to the root kept in memory, never in the store.
func TestRunImage(t *testing.T) {
	testutil.RequireRoot(t)
	tarPath := busyboxImageTar(t, "hutch.test/bb:1")
	need := func(ok bool, reason string) { testutil.Need(t, ok, reason) }
	withUser := func(tag, user, workdir string) string {
		img := imagetest.BusyboxWith(t, need, func(c *v1.Config) {
			c.User, c.WorkingDir = user, workdir
			c.Cmd = []string{"/bin/sh", "-c", "pwd; id -u"}
		}, imagetest.File("etc/passwd", "root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000:App:/home/app:/bin/sh\n", 0o644),
			imagetest.File("etc/group", "root:x:0:\napp:x:1000:\nextra:x:2000:app\n", 0o644), imagetest.Dir("home/"), imagetest.Dir("home/app/"))
		return imagetest.DockerSave(t, img, tag, hostDir(t))
	}
	userTars := []string{withUser("hutch.test/app:1", "app", "/srv/app"), withUser("hutch.test/num:1", "4242:4343", ""), withUser("hutch.test/ghost:1", "ghost", "")}
	for _, uid := range []int{0, testutil.UnprivilegedUID} {
		t.Run(map[int]string{0: "root", testutil.UnprivilegedUID: "user"}[uid], func(t *testing.T) {
			state, ws, home := hostDir(t), hostDir(t), hostDir(t)
			chownTree(t, uid, state, ws, home)
			env := []string{"PATH=" + stdPath, "HOME=" + home, "LANG=C.UTF-8", "HUTCH_STATE_DIR=" + state}
			r := hutch(t, invocation{uid: uid, dir: ws, env: env, args: []string{"image", "import", tarPath}})
			wantOK(t, r)
			r = hutch(t, invocation{uid: uid, dir: ws, env: env, args: []string{"run", "--image", "hutch.test/bb:1", "--", "sh", "-c",
				`cat /etc/motd; echo "$GREETING"; echo "PATH=$PATH"; ls /opq; test -e /gone || echo no-gone; test -e /usr/bin/env || echo no-host-usr;
				 pwd; echo "PWD=$PWD"; test -e ` + ws + ` || echo no-host-path; echo written > out; echo x > /etc/newfile && echo root-writable`}})
			wantOK(t, r)
			for _, want := range []string{"from the image", "hi from the image", "PATH=/bin\n", "new\n", "no-gone", "no-host-usr", "\n/workspace\nPWD=/workspace\nno-host-path\n", "root-writable"} {
				if !strings.Contains(r.stdout, want) {
					t.Errorf("the sandbox's output lacks %q:\n%s", want, r)
				}
			}
			if strings.Contains(r.stdout, "old\n") {
				t.Errorf("the opaque directory shows the lower layer's file:\n%s", r)
			}
			if b, err := os.ReadFile(filepath.Join(ws, "out")); err != nil || string(b) != "written\n" {
				t.Errorf("the workspace write did not reach the host: %q, %v", b, err)
			}
			if fi, err := os.Stat(filepath.Join(ws, "out")); err == nil && fi.Sys().(*syscall.Stat_t).Uid != uint32(uid) {
				t.Errorf("the workspace write belongs to uid %d on the host, not to the workspace's owner %d", fi.Sys().(*syscall.Stat_t).Uid, uid)
			}
			// Elsewhere, as the policy says; never with the host's root.
			r = hutch(t, invocation{uid: uid, dir: ws, env: env, args: []string{"run", "--image", "hutch.test/bb:1", "--workspace-at", "/src", "--", "sh", "-c", "pwd; cat out"}})
			wantOK(t, r)
			if r.stdout != "/src\nwritten\n" {
				t.Errorf("--workspace-at /src:\n%s", r)
			}
			r = hutch(t, invocation{uid: uid, dir: ws, env: env, args: []string{"run", "--workspace-at", "/src", "--", "true"}})
			if r.code != sandbox.ExitHutchError || !strings.Contains(r.stderr, "workspace_at: only a sandbox from an image") {
				t.Errorf("--workspace-at with the host's root:\n%s", r)
			}
			r = hutch(t, invocation{uid: uid, dir: ws, env: env, args: []string{"policy", "show", "--image", "hutch.test/bb:1"}})
			if !strings.Contains(r.stdout, "workspace_at: /workspace\n") {
				t.Errorf("policy show does not say where the workspace is:\n%s", r)
			}
			if m, _ := filepath.Glob(filepath.Join(state, "images", "layers", "sha256", "*", "etc", "newfile")); len(m) > 0 {
				t.Errorf("a write to the root reached the store: %v", m)
			}
			r = hutch(t, invocation{uid: uid, dir: ws, env: env, args: []string{"run", "--image", "hutch.test/bb:1"}})
			wantOK(t, r)
			if !strings.Contains(r.stdout, "default command") {
				t.Errorf("the image's command did not run:\n%s", r)
			}

			// The image's user, with its groups (root: an ordinary user's
			// sandbox maps one id and sets no groups) and home; what it
			// writes in the workspace belongs on the host to the
			// workspace's owner, here another user than hutch's when root
			// runs it.
			for _, p := range userTars {
				wantOK(t, hutch(t, invocation{uid: uid, dir: ws, env: env, args: []string{"image", "import", p}}))
			}
			owner := testutil.UnprivilegedUID
			ws2 := hostDir(t)
			chownTree(t, owner, ws2)
			r = hutch(t, invocation{uid: uid, dir: ws2, env: env, args: []string{"run", "--image", "hutch.test/app:1", "--", "sh", "-c",
				`pwd; id -u; id -G; echo "HOME=$HOME USER=$USER LOGNAME=$LOGNAME"; echo hi > f`}})
			wantOK(t, r)
			groups := "1000 2000\n"
			if uid != 0 {
				groups = "1000"
			}
			if want := "/workspace\n1000\n" + groups; !strings.HasPrefix(r.stdout, want) || !strings.Contains(r.stdout, "HOME=/home/app USER=app LOGNAME=app\n") {
				t.Errorf("the image's user: want %q and its home and name:\n%s", want, r)
			}
			if fi, err := os.Stat(filepath.Join(ws2, "f")); err != nil || fi.Sys().(*syscall.Stat_t).Uid != uint32(owner) || fi.Sys().(*syscall.Stat_t).Gid != uint32(owner) {
				t.Errorf("the image user's file in the workspace is not the workspace owner's (%d) on the host: %v", owner, err)
			}
			// Its own command starts in its working directory (made when
			// missing).
			r = hutch(t, invocation{uid: uid, dir: ws2, env: env, args: []string{"run", "--image", "hutch.test/app:1"}})
			wantOK(t, r)
			if r.stdout != "/srv/app\n1000\n" {
				t.Errorf("the image's command in its working directory:\n%s", r)
			}
			r = hutch(t, invocation{uid: uid, dir: ws2, env: env, args: []string{"run", "--image", "hutch.test/num:1", "--", "sh", "-c", `id -u; id -g; echo "HOME=$HOME"`}})
			wantOK(t, r)
			if r.stdout != "4242\n4343\nHOME=/\n" {
				t.Errorf("a numeric user the image does not list:\n%s", r)
			}
			r = hutch(t, invocation{uid: uid, dir: ws2, env: env, args: []string{"run", "--image", "hutch.test/ghost:1", "--", "true"}})
			if r.code != sandbox.ExitHutchError || !strings.Contains(r.stderr, `image hutch.test/ghost:1: user "ghost": no such user in the image's /etc/passwd`) {
				t.Errorf("a user the image does not list:\n%s", r)
			}
			// Not in the store: pulled first, here from a registry that is
			// not there (loopback, nothing listens on port 1).
			r = hutch(t, invocation{uid: uid, dir: ws, env: env, args: []string{"run", "--image", "127.0.0.1:1/none:1", "--", "true"}})
			if r.code != sandbox.ExitHutchError || !strings.Contains(r.stderr, "pulling it") || !strings.Contains(r.stderr, "127.0.0.1:1") {
				t.Errorf("a missing image:\n%s", r)
			}
		})
	}
}

// TestImagePullKilled: a pull killed (SIGKILL) while it unpacks a layer
// leaves nothing a later pull or sandbox trusts: no image, no layer in
// place; the next pull brings the image in whole.
func TestImagePullKilled(t *testing.T) {
	big := make([]byte, 48<<20) // incompressible enough to take a while
	for i := range big {
		big[i] = byte(i*7 + i/4096)
	}
	img := imagetest.Image(t, "amd64", nil, imagetest.Layer(t, imagetest.Tar(t, imagetest.File("big", string(big), 0o644))))
	var slow atomic.Bool
	slow.Store(true)
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if slow.Load() && strings.Contains(r.URL.Path, "/blobs/") && r.Method == http.MethodGet {
			// Serve blobs a little at a time, so that the pull is
			// surely killed in the middle of one.
			rec := httptest.NewRecorder()
			reg.ServeHTTP(rec, r)
			for k, v := range rec.Header() {
				w.Header()[k] = v
			}
			w.WriteHeader(rec.Code)
			b := rec.Body.Bytes()
			for len(b) > 0 && slow.Load() {
				n := min(len(b), 256<<10)
				if _, err := w.Write(b[:n]); err != nil {
					return
				}
				w.(http.Flusher).Flush()
				b = b[n:]
				time.Sleep(20 * time.Millisecond)
			}
			w.Write(b)
			return
		}
		reg.ServeHTTP(w, r)
	}))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	ref, err := name.ParseReference(host+"/big:1", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	slow.Store(false)
	if err := remote.Write(ref, img); err != nil {
		t.Fatal(err)
	}
	slow.Store(true)
	state := hostDir(t)
	args := []string{"image", "pull", "--insecure-registry", host, ref.String(), "--state-dir", state}
	cmd := exec.Command(testutil.Hutch(t), args...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Wait until it is unpacking (a layer directory in tmp/), then kill.
	tmp := filepath.Join(state, "images", "tmp")
	started := testutil.Eventually(2*time.Minute, func() bool {
		es, _ := os.ReadDir(tmp)
		for _, e := range es {
			if strings.HasPrefix(e.Name(), "layer-") {
				return true
			}
		}
		return false
	})
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if !started {
		t.Fatal("the pull never started unpacking")
	}
	env := []string{"PATH=" + stdPath, "HOME=" + hostDir(t), "LANG=C.UTF-8"}
	r := hutch(t, invocation{env: env, args: []string{"image", "ls", "--state-dir", state}})
	if strings.Contains(r.stdout, "big") {
		t.Errorf("a killed pull left an image:\n%s", r)
	}
	if es, _ := os.ReadDir(filepath.Join(state, "images", "layers", "sha256")); len(es) > 0 {
		for _, e := range es {
			if !strings.HasSuffix(e.Name(), ".lock") {
				t.Errorf("a killed pull left a layer in place: %s", e.Name())
			}
		}
	}
	slow.Store(false)
	r = hutch(t, invocation{env: env, args: args})
	wantOK(t, r)
	r = hutch(t, invocation{env: env, args: []string{"image", "inspect", ref.String(), "--state-dir", state}})
	wantOK(t, r)
	layers, _ := filepath.Glob(filepath.Join(state, "images", "layers", "sha256", "*", "big"))
	if len(layers) != 1 {
		t.Fatalf("layers after the second pull: %v", layers)
	}
	if b, err := os.ReadFile(layers[0]); err != nil || !bytes.Equal(b, big) {
		t.Errorf("the layer after the second pull is not whole: %d bytes, %v", len(b), err)
	}
}

// TestImageLimit: hutch image limit sets, shows and removes the store's
// standing limit; a pull or import keeps the store within --max-size or
// $HUTCH_IMAGE_CACHE_MAX, whose bad values are refused naming them, and
// says on stderr which images it removed.
func TestImageLimit(t *testing.T) {
	state := hostDir(t)
	env := []string{"PATH=" + stdPath, "HOME=" + hostDir(t), "LANG=C.UTF-8", "HUTCH_STATE_DIR=" + state}
	run := func(extraEnv []string, args ...string) result {
		t.Helper()
		return hutch(t, invocation{env: append(slices.Clone(env), extraEnv...), args: append([]string{"image"}, args...)})
	}
	r := run(nil, "limit")
	wantOK(t, r)
	if !strings.HasPrefix(r.stdout, "no limit; the layers take ") {
		t.Errorf("limit of a new store:\n%s", r)
	}
	r = run(nil, "limit", "20g")
	wantOK(t, r)
	if !strings.Contains(r.stdout, "limit 20.0 GiB;") {
		t.Errorf("limit 20g:\n%s", r)
	}
	for _, c := range []struct {
		env  []string
		args []string
		want string
	}{
		{nil, []string{"limit", "lots"}, `invalid size "lots"`},
		{nil, []string{"limit", "0"}, "none for no limit"},
		{nil, []string{"limit", "1g", "2g"}, "at most one SIZE"},
		{[]string{"HUTCH_IMAGE_CACHE_MAX=lots"}, []string{"import", testImageTar(t, "hutch.test/a:1", "a", "a")}, `HUTCH_IMAGE_CACHE_MAX "lots"`},
		{nil, []string{"import", "--max-size", "0", testImageTar(t, "hutch.test/a:1", "a", "a")}, `--max-size "0"`},
	} {
		if r := run(c.env, c.args...); r.code == 0 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("%v %v: want an error with %q:\n%s", c.env, c.args, c.want, r)
		}
	}
	r = run(nil, "limit", "none")
	wantOK(t, r)
	if !strings.HasPrefix(r.stdout, "no limit;") {
		t.Errorf("limit none:\n%s", r)
	}
	// Two images in; a third with room for one: the first two, not used
	// in the last minute (made so), go, and stderr says so.
	for _, tag := range []string{"a", "b"} {
		wantOK(t, run(nil, "import", testImageTar(t, "hutch.test/"+tag+":1", tag, strings.Repeat(tag, 32<<10))))
	}
	old := time.Now().Add(-time.Hour)
	records, _ := filepath.Glob(filepath.Join(state, "images", "records", "*.json"))
	for _, p := range records {
		_ = os.Chtimes(p, old, old)
	}
	r = run([]string{"HUTCH_IMAGE_CACHE_MAX=1k"}, "import", testImageTar(t, "hutch.test/c:1", "c", "c"))
	wantOK(t, r)
	for _, want := range []string{"hutch.test/a:1", "hutch.test/b:1", "least recently used"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("the import's stderr lacks %q:\n%s", want, r)
		}
	}
	r = run(nil, "ls")
	if strings.Contains(r.stdout, "hutch.test/a:1") || strings.Contains(r.stdout, "hutch.test/b:1") || !strings.Contains(r.stdout, "hutch.test/c:1") {
		t.Errorf("ls after the import over the limit:\n%s", r)
	}
}
