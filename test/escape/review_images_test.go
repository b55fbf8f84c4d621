//go:build linux

package escape

import (
	"archive/tar"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/hutch-sandbox/hutch/internal/image/imagetest"
	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// layerEntry is one entry of a hostile layer.
type layerEntry = imagetest.Entry

// imageTarOf writes a `docker save` tarball of an image of one layer made
// of entries, tagged hutch.test/hostile:TAG.
func imageTarOf(t *testing.T, dir, tag string, entries ...layerEntry) string {
	t.Helper()
	img := imagetest.Image(t, "amd64", nil, imagetest.Layer(t, imagetest.Tar(t, entries...)))
	return imagetest.DockerSave(t, img, "hutch.test/hostile:"+tag, dir)
}

// TestImageLayersHostile: an image's layers come from whoever pushed it.
// Through `hutch image import`, as root and as an ordinary user: entries
// that would write outside the layer (dot-dot, absolute names, a symbolic
// link planted as a parent, hard links out, a whiteout through a link)
// refuse the image with an error naming the image, the layer and the
// entry, nothing outside changes and nothing of the image is kept;
// device nodes are never made, set-id bits never kept (both reported).
func TestImageLayersHostile(t *testing.T) {
	forEachMode(t, func(t *testing.T, sb *harness) {
		work := hostDir(t, sb.mode.uid, "images")
		state := filepath.Join(work, "state")
		victimDir := hostDir(t, sb.mode.uid, "victim")
		victim := filepath.Join(victimDir, "victim")
		writeFile(t, victim, "safe\n", 0o644, sb.mode.uid)
		up := strings.Repeat("../", 12)
		for _, c := range []struct {
			tag     string
			entries []layerEntry
		}{
			{"dotdot", []layerEntry{{Name: up + strings.TrimPrefix(victim, "/"), Body: "owned\n"}}},
			{"absolute", []layerEntry{{Name: victim, Body: "owned\n"}}},
			{"symlink-parent", []layerEntry{{Name: "l", Type: tar.TypeSymlink, Link: victimDir}, {Name: "l/victim", Body: "owned\n"}}},
			{"symlink-parent-rel", []layerEntry{{Name: "d/", Type: tar.TypeDir, Mode: 0o755}, {Name: "d/l", Type: tar.TypeSymlink, Link: up + strings.TrimPrefix(victimDir, "/")}, {Name: "d/l/new", Body: "owned\n"}}},
			{"hardlink-out", []layerEntry{{Name: "h", Type: tar.TypeLink, Link: up + strings.TrimPrefix(victim, "/")}}},
			{"whiteout-through-link", []layerEntry{{Name: "l", Type: tar.TypeSymlink, Link: victimDir}, {Name: "l/.wh.victim"}}},
		} {
			p := imageTarOf(t, work, c.tag, c.entries...)
			r := sb.hutch(opts{noCheck: true}, "image", "import", p, "--state-dir", state)
			if r.code == 0 {
				t.Errorf("%s: imported:\n%s", c.tag, r)
			}
			if !strings.Contains(r.stderr, "image sha256:") || !strings.Contains(r.stderr, "layer sha256:") || !strings.Contains(r.stderr, "entry ") {
				t.Errorf("%s: the error does not name the image, the layer and the entry:\n%s", c.tag, r)
			}
			if b, err := os.ReadFile(victim); err != nil || string(b) != "safe\n" {
				t.Fatalf("%s: the file outside changed: %q, %v", c.tag, b, err)
			}
			if es, _ := os.ReadDir(victimDir); len(es) != 1 {
				t.Fatalf("%s: something was made outside: %v", c.tag, es)
			}
		}
		ls := sb.hutch(opts{}, "image", "ls", "--state-dir", state)
		if strings.Contains(ls.stdout, "hostile") {
			t.Errorf("a refused image was kept:\n%s", ls)
		}
		if es, _ := os.ReadDir(filepath.Join(state, "images", "layers", "sha256")); len(es) > 0 {
			for _, e := range es {
				if !strings.HasSuffix(e.Name(), ".lock") {
					t.Errorf("a refused layer was kept: %s", e.Name())
				}
			}
		}

		p := imageTarOf(t, work, "devices",
			layerEntry{Name: "dev/sda", Type: tar.TypeBlock, Mode: 0o666},
			layerEntry{Name: "dev/mem", Type: tar.TypeChar, Mode: 0o666},
			layerEntry{Name: "bin/su", Mode: 0o4755, Body: "#!/bin/sh\n"},
			layerEntry{Name: "bin/sg", Mode: 0o2755, Body: "#!/bin/sh\n"})
		r := sb.hutch(opts{}, "image", "import", p, "--state-dir", state)
		for _, want := range []string{"dev/sda: a device node", "dev/mem: a device node", "bin/su: set-id bits", "bin/sg: set-id bits"} {
			if !strings.Contains(r.stderr, want) {
				t.Errorf("the import does not report %q:\n%s", want, r)
			}
		}
		layers, _ := filepath.Glob(filepath.Join(state, "images", "layers", "sha256", "*"))
		found := false
		for _, l := range layers {
			if strings.HasSuffix(l, ".lock") {
				continue
			}
			found = true
			if _, err := os.Lstat(filepath.Join(l, "dev", "sda")); !os.IsNotExist(err) {
				t.Errorf("a device node was made: %v", err)
			}
			for _, f := range []string{"bin/su", "bin/sg"} {
				if fi, err := os.Stat(filepath.Join(l, f)); err != nil || fi.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 {
					t.Errorf("%s: %v %v", f, fi.Mode(), err)
				}
			}
		}
		if !found {
			t.Errorf("the image of devices and set-id files was not imported:\n%s", r)
		}
	})
}

// TestImageRootEscapes: a sandbox started from an image, as root (hutch
// stacks the layers, idmapped) and as an ordinary user (the sandbox's
// first process stacks them in its own user namespace), reaches nothing of
// the host beyond its workspace: the host's files are not in its view, what
// it writes to its root (also at a host path it makes) stays in memory
// and never reaches the host or the image store, and the workspace's
// protected names stay protected.
func TestImageRootEscapes(t *testing.T) {
	forEachMode(t, func(t *testing.T, sb *harness) {
		state, env := importImages(t, sb, map[string]v1.Image{"hutch.test/escape-root:1": imagetest.Busybox(t, need(t))})
		victimDir := hostDir(t, 0, "victim")
		writeFile(t, filepath.Join(victimDir, "secret"), "HOST-SECRET\n", 0o644, 0)
		writeFile(t, filepath.Join(sb.home, ".netrc"), "NETRC-SECRET\n", 0o600, sb.mode.uid)
		script := `cat ` + victimDir + `/secret 2>&1; cat ` + sb.home + `/.netrc 2>&1; cat /etc/hostname 2>&1
			mkdir -p ` + victimDir + ` && echo planted > ` + victimDir + `/planted && echo WROTE-HOST-PATH
			echo evil > .bashrc || echo BASHRC-REFUSED
			echo hello > /etc/motd && echo WROTE-ROOT
			echo ok > in-workspace`
		r := sb.run(opts{env: env, flags: []string{"--image", "hutch.test/escape-root:1"}, noCheck: true}, script)
		if r.code != 0 {
			t.Fatalf("the sandbox did not run:\n%s", r)
		}
		if strings.Contains(r.stdout+r.stderr, "HOST-SECRET") || strings.Contains(r.stdout+r.stderr, "NETRC-SECRET") {
			t.Errorf("a host file showed in the image's view:\n%s", r)
		}
		if _, err := os.Stat(filepath.Join(victimDir, "planted")); !os.IsNotExist(err) {
			t.Errorf("a write to a host path outside the workspace reached the host: %v", err)
		}
		if !strings.Contains(r.stdout, "BASHRC-REFUSED") {
			t.Errorf("the workspace's .bashrc was writable:\n%s", r)
		}
		if b, err := os.ReadFile(filepath.Join(sb.ws, "in-workspace")); err != nil || string(b) != "ok\n" {
			t.Errorf("the workspace: %q, %v", b, err)
		}
		if m, _ := filepath.Glob(filepath.Join(state, "images", "layers", "sha256", "*", "etc", "motd")); len(m) != 1 {
			t.Errorf("the store's layers: %v", m)
		} else if b, _ := os.ReadFile(m[0]); string(b) != "from the image\n" {
			t.Errorf("a write to the root reached the image store: %q", b)
		}
	})
}

// TestImageWorkspaceProtections: in a sandbox from an image the workspace
// is at /workspace, not at its host path, and every protection of the
// workspace holds there exactly as with the host's root: git's hooks and
// configuration, the policy file the sandbox runs under, the default
// deny-write names (existing or held by placeholders), the policy's own
// deny_write and deny_read, a .git that may be neither moved nor
// replaced; what it makes that the host would run is set aside at its
// end, reported by its host path.
func TestImageWorkspaceProtections(t *testing.T) {
	forEachMode(t, func(t *testing.T, sb *harness) {
		_, env := importImages(t, sb, map[string]v1.Image{
			"hutch.test/escape-ws:root": imagetest.Busybox(t, need(t)),
			"hutch.test/escape-ws:app": imagetest.BusyboxWith(t, need(t), func(c *v1.Config) { c.User = "app" },
				imagetest.File("etc/passwd", "root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000::/home/app:/bin/sh\n", 0o644)),
		})
		for user, uid := range map[string]string{"root": "0", "app": "1000"} {
			t.Run("image user "+user, func(t *testing.T) {
				workspaceProtections(t, newSandbox(t, sb.mode), env, "hutch.test/escape-ws:"+user, uid)
			})
		}
	})
}

// need is testutil.Need for imagetest.
func need(t *testing.T) func(ok bool, reason string) {
	return func(ok bool, reason string) { testutil.Need(t, ok, reason) }
}

// importImages imports images (by tag) into a state directory of the
// test's own, which env names for hutch.
func importImages(t *testing.T, sb *harness, images map[string]v1.Image) (state string, env []string) {
	t.Helper()
	state = hostDir(t, sb.mode.uid, "state")
	env = []string{"HUTCH_STATE_DIR=" + state}
	for tag, img := range images {
		p := imagetest.DockerSave(t, img, tag, hostDir(t, sb.mode.uid, "tar"))
		if r := sb.hutch(opts{env: env}, "image", "import", p); r.code != 0 {
			t.Fatalf("import %s:\n%s", tag, r)
		}
	}
	return state, env
}

// workspaceProtections is TestImageWorkspaceProtections in sb's
// workspace, with image ref, whose user is uid.
func workspaceProtections(t *testing.T, sb *harness, env []string, ref, uid string) {
	mkdirs(t, sb.ws, sb.mode.uid, ".git/hooks", ".git/info", ".git/objects", ".git/refs/heads")
	writeFile(t, filepath.Join(sb.ws, ".git", "info", "exclude"), "*.o\n", 0o644, sb.mode.uid)
	writeFile(t, filepath.Join(sb.ws, ".git", "HEAD"), "ref: refs/heads/main\n", 0o644, sb.mode.uid)
	writeFile(t, filepath.Join(sb.ws, ".git", "config"), "[core]\n\tbare = false\n", 0o644, sb.mode.uid)
	writeFile(t, filepath.Join(sb.ws, "secret.txt"), "WS-SECRET\n", 0o644, sb.mode.uid)
	writeFile(t, filepath.Join(sb.ws, "keep.txt"), "kept\n", 0o644, sb.mode.uid)
	writeFile(t, filepath.Join(sb.ws, ".bashrc"), "# the user's\n", 0o644, sb.mode.uid)
	pol := filepath.Join(sb.ws, "policy.yaml")
	policy := "filesystem:\n  deny_read: [" + filepath.Join(sb.ws, "secret.txt") + "]\n  deny_write: [" + filepath.Join(sb.ws, "keep.txt") + "]\n"
	writeFile(t, pol, policy, 0o644, sb.mode.uid)
	script := `pwd; id -u
		cat .git/info/exclude
		echo x >> .git/info/exclude && echo EXCLUDE-WRITTEN
			echo hook > .git/hooks/pre-commit && echo HOOK-WRITTEN
			echo '[core] hooksPath=/x' >> .git/config && echo CONFIG-WRITTEN
			echo root: host > policy.yaml && echo POLICY-WRITTEN
			echo evil >> .bashrc && echo BASHRC-WRITTEN
			mkdir -p .vscode && echo x > .vscode/tasks.json && echo VSCODE-WRITTEN
			echo x > .mcp.json && echo MCP-WRITTEN
			echo x > keep.txt && echo KEEP-WRITTEN
			cat secret.txt /workspace/secret.txt
			busybox mv .git moved-git && echo GIT-MOVED
			busybox mv .git/hooks .git/h && echo HOOKS-MOVED
			mkdir -p other/.git && busybox mv .git .git-old && busybox mv other/.git .git && echo GIT-REPLACED
			echo 'repos: []' > .pre-commit-config.yaml
			echo ok > work.txt && echo WORK-WRITTEN`
	r := sb.run(opts{env: env, flags: []string{"--image", ref, "--policy", pol}, noCheck: true}, script)
	if r.code != 0 {
		t.Fatalf("the sandbox did not run:\n%s", r)
	}
	if !strings.HasPrefix(r.stdout, "/workspace\n"+uid+"\n") || !strings.Contains(r.stdout, "WORK-WRITTEN") {
		t.Fatalf("the workspace is not at /workspace, not writable, or the command not uid %s:\n%s", uid, r)
	}
	if !strings.Contains(r.stdout, "*.o\n# hutch: empty stand-ins") {
		t.Errorf("git's info/exclude at /workspace is not hutch's copy, with the placeholders:\n%s", r)
	}
	for _, bad := range []string{"EXCLUDE-WRITTEN", "HOOK-WRITTEN", "CONFIG-WRITTEN", "POLICY-WRITTEN", "BASHRC-WRITTEN", "VSCODE-WRITTEN", "MCP-WRITTEN", "KEEP-WRITTEN", "WS-SECRET", "GIT-MOVED", "HOOKS-MOVED", "GIT-REPLACED"} {
		if strings.Contains(r.stdout, bad) {
			t.Errorf("%s: a protection of the workspace does not hold at /workspace:\n%s", bad, r)
		}
	}
	for path, want := range map[string]string{
		".git/config": "[core]\n\tbare = false\n", "policy.yaml": policy, ".bashrc": "# the user's\n", "keep.txt": "kept\n",
		".git/HEAD": "ref: refs/heads/main\n", "work.txt": "ok\n",
	} {
		if b, err := os.ReadFile(filepath.Join(sb.ws, path)); err != nil || string(b) != want {
			t.Errorf("%s on the host: %q, %v", path, b, err)
		}
	}
	for _, gone := range []string{".git/hooks/pre-commit", ".mcp.json", ".vscode/tasks.json", ".pre-commit-config.yaml"} {
		if _, err := os.Lstat(filepath.Join(sb.ws, gone)); !os.IsNotExist(err) {
			t.Errorf("%s exists on the host after the sandbox: %v", gone, err)
		}
	}
	for _, line := range strings.Split(r.stderr, "\n") {
		if strings.HasPrefix(line, "hutch: refused") && strings.Contains(line, "/workspace/") {
			t.Errorf("a refusal report names the path in the sandbox, not the host's: %s", line)
		}
	}
	setAside := filepath.Join(sb.ws, ".pre-commit-config.yaml")
	if !strings.Contains(r.stderr, setAside) {
		t.Errorf("the set-aside report does not name the host path %s:\n%s", setAside, r)
	}
	if _, err := os.Stat(setAside + ".hutch-set-aside"); err != nil {
		t.Errorf("the hook manager's file was not set aside: %v", err)
	}
}
