package sandbox

import (
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/agent"
	"github.com/hutch-sandbox/hutch/internal/changes"
	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// reviewFixture is a host directory to review in a sandbox with a root
// layer, and a change-set store beside it, below a directory of the host's
// root outside /tmp (which every sandbox covers with its own).
type reviewFixture struct {
	dir, ws, store string
	set            *changes.Set
}

// newReviewFixture makes the fixture: files of an ordinary user, a git
// repository, and an empty change set of the workspace.
func newReviewFixture(t *testing.T) *reviewFixture {
	t.Helper()
	dir, err := os.MkdirTemp("/var/lib", "hutch-review-layer-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	f := &reviewFixture{dir: dir, ws: filepath.Join(dir, "ws"), store: filepath.Join(dir, "store")}
	uid := testutil.UnprivilegedUID
	files := map[string]string{
		"edit.txt": "before\n", "gone.txt": "bye\n", "from.txt": "moved content\n", "mode.sh": "#!/bin/sh\n",
		"touched.txt": "same\n", "keep.txt": "kept\n", "d/old": "old\n",
		".git/HEAD": "ref: refs/heads/main\n", ".git/config": "[core]\n", ".git/hooks/README": "hooks\n",
		".git/objects/.keep": "", ".git/refs/heads/.keep": "", "secret.txt": "secret\n",
		"sub/repo/.git/HEAD": "ref: refs/heads/main\n", "sub/repo/.git/config": "[core]\n",
		"sub/repo/.git/objects/.keep": "", "sub/repo/.git/refs/heads/.keep": "",
	}
	for p, content := range files {
		full := filepath.Join(f.ws, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("keep.txt", filepath.Join(f.ws, "old-link")); err != nil {
		t.Fatal(err)
	}
	err = filepath.Walk(f.ws, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, uid)
	})
	if err != nil {
		t.Fatal(err)
	}
	if f.set, err = changes.NewStore(f.store).Create(f.ws); err != nil {
		t.Fatal(err)
	}
	return f
}

// reviewScript is what the sandbox does in its reviewed workspace (its
// working directory), and at its protected paths and its root.
const reviewScript = `set -e
echo "cwd=$PWD"
stat -c "own=%u:%g" edit.txt
stat -c "wsown=%u:%g" .
echo new > new.txt
echo after >> edit.txt
rm gone.txt
mv from.txt to.txt
chmod 755 mode.sh
touch -d "2001-02-03 04:05:06" touched.txt
ln -s edit.txt link
ln new.txt hard
rm old-link
rm -r d && mkdir d && echo y > d/y
echo layer > /etc/hutch-review-layer
(echo x >> .git/config) 2>/dev/null && echo config-written || echo config-protected
(echo x > .git/hooks/pre-commit) 2>/dev/null && echo hook-written || echo hook-protected
(echo x > .mcp.json) 2>/dev/null && echo mcp-written || echo mcp-protected
(echo x > sub/repo/.git/hooks) 2>/dev/null && echo nested-hooks-written || echo nested-hooks-protected
(echo x >> keep.txt) 2>/dev/null && echo keep-written || echo keep-protected
echo "secret=[$(cat secret.txt 2>/dev/null)]"
`

// reviewWant is what the command must say (reviewScript) in a workspace
// at at whose root belongs to wsOwner in the view.
func reviewWant(at, wsOwner string) []string {
	uid := testutil.UnprivilegedUID
	return []string{
		"cwd=" + at + "\n", fmt.Sprintf("own=%d:%d\n", uid, uid), "wsown=" + wsOwner + "\n",
		"config-protected\n", "hook-protected\n", "mcp-protected\n", "nested-hooks-protected\n",
		"keep-protected\n", "secret=[]\n",
	}
}

// runReview runs script in a sandbox of cfg and returns what it wrote;
// it fails the test unless the script exits 0.
func runReview(t *testing.T, cfg Config, script string) string {
	t.Helper()
	out, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	cfg.Stdout, cfg.Stderr = w, w
	cfg.Args = []string{"sh", "-c", script}
	done := make(chan string)
	go func() {
		b, _ := io.ReadAll(out)
		done <- string(b)
	}()
	res, err := Run(context.Background(), cfg)
	w.Close()
	got := <-done
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("Run: %v, exit %d\n%s", err, res.ExitCode, got)
	}
	return got
}

// changed checks that the host's workspace is as it was (before,
// describe's) and returns the changes the set reads, a line each, sorted:
// kind, path, and where it was renamed from and which path it is a hard
// link of.
func (f *reviewFixture) changed(t *testing.T, before map[string]string) []string {
	t.Helper()
	if after := describe(t, f.ws); !maps.Equal(before, after) {
		t.Errorf("the host's workspace changed:\nbefore %v\nafter  %v", before, after)
	}
	got, err := f.set.Changes()
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, c := range got {
		s := string(c.Kind) + " " + c.Path
		if c.From != "" {
			s += " from " + c.From
		}
		if c.HardLink != "" {
			s += " =" + c.HardLink
		}
		kinds = append(kinds, s)
	}
	slices.Sort(kinds)
	return kinds
}

// checkReviewed checks what a run of reviewScript left: the host's
// workspace as it was (before, describe's), the changes the set reads,
// with the owners the sandbox wrote them as, and nothing of the layer's on
// the host.
func (f *reviewFixture) checkReviewed(t *testing.T, before map[string]string) {
	t.Helper()
	kinds := f.changed(t, before)
	want := []string{
		"added d/y", "added hard", "added link", "added new.txt =hard",
		"deleted d/old", "deleted gone.txt", "deleted old-link",
		"modified edit.txt", "modified mode.sh", "renamed to.txt from from.txt",
	}
	if !slices.Equal(kinds, want) {
		t.Errorf("the change set:\n%s\nwant\n%s", strings.Join(kinds, "\n"), strings.Join(want, "\n"))
	}
	up := f.set.Upper()
	for p, id := range map[string]int{"new.txt": RootMappedID, "edit.txt": RootMappedID + testutil.UnprivilegedUID} {
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(up, p), &st); err != nil || st.Uid != uint32(id) || st.Gid != uint32(id) {
			t.Errorf("upper %s: owner %d:%d, want %d (%v)", p, st.Uid, st.Gid, id, err)
		}
	}
	if b, err := os.ReadFile(filepath.Join(up, "edit.txt")); err != nil || string(b) != "before\nafter\n" {
		t.Errorf("upper edit.txt: %q, %v", b, err)
	}
	for _, p := range []string{"/etc/hutch-review-layer", filepath.Join(up, "etc")} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s: the sandbox's root write reached the host (%v)", p, err)
		}
	}
}

// reviewSpec is the policy of a sandbox that reviews ws at /workspace,
// where keep.txt is denied writing and secret.txt reading.
func reviewSpec(t *testing.T, ws string) policy.Spec {
	t.Helper()
	var s policy.Spec
	if err := s.Normalize(ws, ""); err != nil {
		t.Fatal(err)
	}
	s.Filesystem.WorkspaceAt = "/workspace"
	s.Filesystem.DenyWrite = append(s.Filesystem.DenyWrite, filepath.Join(ws, "keep.txt"))
	s.Filesystem.DenyRead = append(s.Filesystem.DenyRead, filepath.Join(ws, "secret.txt"))
	return s
}

// TestReviewRootLayer: a sandbox whose root is a writable layer over the
// host's root reviews a host directory (Config.ReviewDir with a
// RootLayer), seen at /workspace: it writes, removes, renames, chmods,
// touches and links there as it likes, and the host's directory stays as
// it was, byte for byte, while the change set holds exactly what it did
// (kinds, whiteouts, an opaque directory, a hard link); the files show
// their host owners through the layer's idmapping; the workspace's
// protected paths (a repository's configuration and hooks, a missing
// protected name) refuse writes; what it writes elsewhere in its root
// stays in the layer. The host's directory by another name — its host
// path in the view, /proc/self/root, a symbolic link to it, a hard link
// out of the workspace — leads nowhere but to the layer.
func TestReviewRootLayer(t *testing.T) {
	testutil.RequireRoot(t)
	f := newReviewFixture(t)
	before := describe(t, f.ws)
	escape := `set +e
echo "host-path=[$(ls -A ` + f.ws + `)] store=[$(ls -A ` + f.store + `)]"
echo x > ` + f.ws + `/keep.txt
echo x >> /proc/self/root` + f.ws + `/edit.txt
chmod 777 /proc/$$/root` + f.ws + `
ln -s ` + f.ws + ` /escape && echo x > /escape/gone.txt
(ln /workspace/keep.txt /hard-out) 2>/dev/null && echo hard-linked || echo no-hard-link
(echo x > /workspace/.git/hooks/README) 2>/dev/null && echo hooks-written || echo hooks-protected
`
	out := runReview(t, Config{
		Spec: reviewSpec(t, f.ws), Environ: []string{"PATH=/usr/bin:/bin"}, RootCaps: true, ReviewDir: f.set.Dir(),
		RootLayer: &RootLayer{SizeBytes: 64 << 20, Hide: []string{f.store}},
	}, reviewScript+escape)
	for _, want := range append(reviewWant("/workspace", "0:0"), "host-path=[] store=[]\n", "no-hard-link\n", "hooks-protected\n") {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	f.checkReviewed(t, before)
	if _, err := os.Lstat(filepath.Join(f.set.Upper(), "keep.txt")); !os.IsNotExist(err) {
		t.Errorf("a write through the host path reached the change set (%v)", err)
	}
}

// TestReviewRootLayerAtHostPath: without workspace_at, the reviewed
// directory is at its host path in the view over the host's root.
func TestReviewRootLayerAtHostPath(t *testing.T) {
	testutil.RequireRoot(t)
	f := newReviewFixture(t)
	before := describe(t, f.ws)
	s := reviewSpec(t, f.ws)
	s.Filesystem.WorkspaceAt = ""
	out := runReview(t, Config{
		Spec: s, Environ: []string{"PATH=/usr/bin:/bin"}, RootCaps: true, ReviewDir: f.set.Dir(),
		RootLayer: &RootLayer{SizeBytes: 64 << 20, Hide: []string{f.store}},
	}, reviewScript+`test -e /workspace || echo no-workspace`)
	for _, want := range append(reviewWant(f.ws, "0:0"), "no-workspace\n") {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	f.checkReviewed(t, before)
}

// TestReviewImageLayers: the same over an image's layers
// (RootLayer.Lowers): the workspace's root belongs to the image's user.
func TestReviewImageLayers(t *testing.T) {
	testutil.RequireRoot(t)
	f := newReviewFixture(t)
	base, top := imageLayerDirs(t)
	before := describe(t, f.ws)
	out := runReview(t, Config{
		Spec: reviewSpec(t, f.ws), Environ: []string{"PATH=/bin"}, RootCaps: true, ReviewDir: f.set.Dir(),
		RootLayer: &RootLayer{SizeBytes: 64 << 20, Lowers: []string{base, top}, UID: 1000, GID: 1000},
	}, reviewScript+`cat /etc/motd; test -e `+f.ws+` || echo no-host-path`)
	for _, want := range append(reviewWant("/workspace", "1000:1000"), "from the image\n", "no-host-path\n") {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	f.checkReviewed(t, before)
}

// imageLayerDirs makes an image's two unpacked layers: the host's static
// busybox with the applets the tests run, and a layer above it.
func imageLayerDirs(t *testing.T) (base, top string) {
	t.Helper()
	bb, err := os.ReadFile("/bin/busybox")
	testutil.Need(t, err == nil, "needs /bin/busybox (busybox-static)")
	dir := t.TempDir()
	base, top = filepath.Join(dir, "base"), filepath.Join(dir, "top")
	for _, d := range []string{"bin", "etc", "proc", "sys", "dev", "tmp", "root"} {
		if err := os.MkdirAll(filepath.Join(base, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(base, "bin", "busybox"), bb, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, a := range []string{"sh", "cat", "ls", "echo", "stat", "rm", "mv", "chmod", "touch", "ln", "mkdir", "test"} {
		if err := os.Symlink("busybox", filepath.Join(base, "bin", a)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(base, "etc", "passwd"), []byte("root:x:0:0:root:/root:/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(top, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(top, "etc", "motd"), []byte("from the image\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return base, top
}

// TestReviewRootLayerRefused: what cannot be reviewed under a root layer
// is refused before the sandbox starts, naming the problem: a workspace
// that is not a directory, a change set the view would show (its store
// not hidden), one on a filesystem overlayfs takes no upper layer from.
func TestReviewRootLayerRefused(t *testing.T) {
	testutil.RequireRoot(t)
	f := newReviewFixture(t)
	layer := func() *RootLayer { return &RootLayer{SizeBytes: 16 << 20, Hide: []string{f.store}} }
	file := filepath.Join(f.ws, "keep.txt")
	// An overlay mount as the change set's filesystem.
	ovl := filepath.Join(f.dir, "ovl")
	for _, d := range []string{"l", "u", "w", "m"} {
		if err := os.MkdirAll(filepath.Join(ovl, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	m := filepath.Join(ovl, "m")
	if err := unix.Mount("overlay", m, "overlay", 0, "lowerdir="+ovl+"/l,upperdir="+ovl+"/u,workdir="+ovl+"/w"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(m, unix.MNT_DETACH) })
	onOverlay := filepath.Join(m, "set")
	for _, d := range []string{"upper", "work"} {
		if err := os.MkdirAll(filepath.Join(onOverlay, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for _, tt := range []struct {
		name      string
		ws, dir   string
		layer     *RootLayer
		deny      []string
		wantError string
	}{
		{"workspace a file", file, f.set.Dir(), layer(), nil, "is not a directory"},
		{"change set in the view", f.ws, f.set.Dir(), &RootLayer{SizeBytes: 16 << 20}, nil, "the change set's directory " + f.set.Dir() + " is in the sandbox's root"},
		{"change set on an overlay", f.ws, onOverlay, &RootLayer{SizeBytes: 16 << 20, Hide: []string{ovl}}, nil, "not supported as upperdir"},
		{"no upper directory", f.ws, f.store, layer(), nil, "review directory: lstat " + f.store + "/upper"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := reviewSpec(t, f.ws)
			s.Filesystem.Workspace = tt.ws
			_, err := Run(context.Background(), Config{
				Spec: s, Environ: []string{"PATH=/usr/bin:/bin"}, Args: []string{"true"}, ReviewDir: tt.dir, RootLayer: tt.layer,
			})
			if err == nil || !strings.Contains(err.Error(), tt.wantError) {
				t.Errorf("Run: %v, want an error with %q", err, tt.wantError)
			}
		})
	}
	// Denied to read, the change set may be under a directory the view
	// shows.
	s := reviewSpec(t, f.ws)
	s.Filesystem.DenyRead = append(s.Filesystem.DenyRead, f.store)
	out := runReview(t, Config{Spec: s, Environ: []string{"PATH=/usr/bin:/bin"}, ReviewDir: f.set.Dir(), RootLayer: &RootLayer{SizeBytes: 16 << 20}},
		`ls `+f.store+` 2>/dev/null || echo store-denied`)
	if out != "store-denied\n" {
		t.Errorf("the store denied to read: %q", out)
	}
}

// TestStartReviewRootLayer: a long-lived sandbox (Start, as hutch serve
// runs them) with a root layer reviews a host directory: its commands
// start in the workspace, and what they and its agent write, remove or
// rename there lands in the change set, the host's directory unchanged.
func TestStartReviewRootLayer(t *testing.T) {
	testutil.RequireRoot(t)
	f := newReviewFixture(t)
	before := describe(t, f.ws)
	sb, c, ctx := startAgent(t, Config{
		Spec: reviewSpec(t, f.ws), Environ: []string{"PATH=/usr/bin:/bin", "HOME=/root"}, RootCaps: true, ReviewDir: f.set.Dir(),
		RootLayer: &RootLayer{SizeBytes: 16 << 20, Hide: []string{"/root", f.store}},
	})
	p, err := c.Exec(ctx, agent.ExecRequest{Args: []string{"sh", "-c", `echo "cwd=$PWD"; echo new > new.txt; rm gone.txt`}})
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(io.MultiReader(p.Stdout, p.Stderr))
	if st, err := p.Wait(); err != nil || st.Code != 0 || string(out) != "cwd=/workspace\n" {
		t.Fatalf("exec: %+v, %v\n%s", st, err, out)
	}
	if _, err := c.WriteFile(ctx, "/workspace/from-agent", strings.NewReader("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := c.Rename(ctx, "/workspace/from.txt", "/workspace/to.txt"); err != nil {
		t.Fatal(err)
	}
	if err := c.Remove(ctx, "/workspace/d", true); err != nil {
		t.Fatal(err)
	}
	if err := sb.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	kinds := f.changed(t, before)
	want := []string{"added from-agent", "added new.txt", "deleted d", "deleted d/old", "deleted gone.txt", "renamed to.txt from from.txt"}
	if !slices.Equal(kinds, want) {
		t.Errorf("the change set: %q, want %q", kinds, want)
	}
}
