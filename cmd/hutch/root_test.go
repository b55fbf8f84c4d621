package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// busyboxRoot makes a minimal root filesystem in a fresh directory: a static
// busybox, its applets, and the mount points a sandbox needs (unless
// without names one to leave out), plus the workspace's path.
func busyboxRoot(t *testing.T, ws string, without string) string {
	t.Helper()
	bb, err := exec.LookPath("busybox")
	testutil.Need(t, err == nil, "needs busybox (Debian package busybox-static)")
	root := hostDir(t)
	for _, d := range []string{"bin", "etc", "tmp", "proc", "dev", "sys", strings.TrimPrefix(ws, "/")} {
		if d == without {
			continue
		}
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	data, err := os.ReadFile(bb)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(root, "bin/busybox"), string(data), 0o755)
	for _, applet := range []string{"sh", "ls", "cat", "echo", "id", "touch"} {
		if err := os.Symlink("busybox", filepath.Join(root, "bin", applet)); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(root, "etc/os-release"), "NAME=hutch-test-root\n", 0o644)
	return root
}

// TestRootDir: --root DIR runs the command on a directory as its root, read
// only, with the workspace bound in and the sandbox's own /tmp, /proc and
// /dev; a root without a mount point the sandbox needs is refused by name.
func TestRootDir(t *testing.T) {
	ws := hostDir(t)
	root := busyboxRoot(t, ws, "")
	env := []string{"PATH=/bin", "HOME=/", "LANG=C"}
	r := sandboxed(t, invocation{dir: ws, env: env, args: []string{
		"--root", root, "--", "/bin/sh", "-c",
		"cat /etc/os-release; ls /; echo written > out; touch /etc/x 2>&1 | grep -c 'Read-only'; ls /proc/self/ >/dev/null && echo proc; ls /dev/null",
	}})
	wantOK(t, r)
	for _, want := range []string{"NAME=hutch-test-root", "bin", "proc", "\n1\n", "/dev/null"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, r)
		}
	}
	if strings.Contains(r.stdout, "usr") {
		t.Errorf("the host's /usr shows in a --root sandbox:\n%s", r)
	}
	if got, err := os.ReadFile(filepath.Join(ws, "out")); err != nil || string(got) != "written\n" {
		t.Errorf("the workspace was not writable under --root: %q, %v", got, err)
	}
	if _, err := os.Stat(filepath.Join(root, "etc/x")); err == nil {
		t.Errorf("the sandbox wrote into its root directory")
	}

	bare := busyboxRoot(t, ws, "tmp")
	r = sandboxed(t, invocation{dir: ws, env: env, args: []string{"--root", bare, "--", "/bin/sh", "-c", "echo ran"}})
	wantCode(t, r, 125)
	if !strings.Contains(r.stderr, `"/tmp"`) || strings.Contains(r.stdout, "ran") {
		t.Errorf("a root without /tmp was not refused by name:\n%s", r)
	}
}

// TestManyWritableRoots: every --allow-write path is writable, however
// many there are (root sends the sandbox one idmapped mount for each).
func TestManyWritableRoots(t *testing.T) {
	ws := hostDir(t)
	var args []string
	var dirs []string
	for i := 0; i < 12; i++ {
		d := hostDir(t)
		dirs = append(dirs, d)
		args = append(args, "--allow-write", d)
	}
	script := ""
	for _, d := range dirs {
		script += "echo ok > " + d + "/out && "
	}
	r := sandboxed(t, invocation{dir: ws, args: sh(script+"echo done", args...)})
	wantOK(t, r)
	for _, d := range dirs {
		if got, err := os.ReadFile(filepath.Join(d, "out")); err != nil || string(got) != "ok\n" {
			t.Errorf("%s was not writable: %q, %v", d, got, err)
		}
	}
}

// TestWorkspaceBelowClosedDir: run by root in a workspace below a
// directory only its owner may enter (what mktemp -d makes), hutch works
// as bubblewrap does: the sandbox reaches and writes its workspace, and
// sees nothing else of the closed directory (the way down is a tmpfs of
// its own), whose other contents stay out of reach.
func TestWorkspaceBelowClosedDir(t *testing.T) {
	base := hostDir(t)
	closed := filepath.Join(base, "closed")
	writeFile(t, filepath.Join(closed, "other", "secret"), "secret\n", 0o644)
	ws := filepath.Join(closed, "deep", "ws")
	if err := os.MkdirAll(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(closed, 0o700); err != nil {
		t.Fatal(err)
	}
	r := sandboxed(t, invocation{dir: ws, args: sh(`pwd; echo ok > out && echo WROTE; ls ..; ls ../..; cat ../../other/secret 2>&1; true`)})
	wantOK(t, r)
	if !strings.Contains(r.stdout, "WROTE") {
		t.Errorf("the workspace was not writable:\n%s", r)
	}
	if got, err := os.ReadFile(filepath.Join(ws, "out")); err != nil || string(got) != "ok\n" {
		t.Errorf("the write did not reach the host: %q, %v", got, err)
	}
	if strings.Contains(r.stdout, "\nsecret\n") || slices.Contains(lines(r.stdout), "other") {
		t.Errorf("the sandbox saw the closed directory's other contents:\n%s", r)
	}
}

// TestResolvConfInRoot: the sandbox's resolv.conf, which names hutch's
// answers on its own loopback, replaces the root's, also where the root's
// is a symbolic link (as systemd-resolved's is, into /run); a root whose
// link leads nowhere or in a loop, or that has none, starts all the same.
func TestResolvConfInRoot(t *testing.T) {
	ws := hostDir(t)
	env := []string{"PATH=/bin", "HOME=/", "LANG=C"}
	root := busyboxRoot(t, ws, "")
	writeFile(t, filepath.Join(root, "run/resolve/stub-resolv.conf"), "nameserver 10.255.255.53\nsearch corp.example\n", 0o644)
	if err := os.Symlink("../run/resolve/stub-resolv.conf", filepath.Join(root, "etc/resolv.conf")); err != nil {
		t.Fatal(err)
	}
	r := sandboxed(t, invocation{dir: ws, env: env, args: []string{"--root", root, "--", "/bin/sh", "-c",
		"cat /etc/resolv.conf; echo ==; cat /run/resolve/stub-resolv.conf"}})
	wantOK(t, r)
	for _, part := range strings.Split(r.stdout, "==") {
		if !strings.Contains(part, "nameserver 127.0.0.1") || strings.Contains(part, "10.255.255.53") || strings.Contains(part, "corp.example") {
			t.Errorf("the root's resolv.conf shows through:\n%s", r)
		}
	}
	if b, err := os.ReadFile(filepath.Join(root, "run/resolve/stub-resolv.conf")); err != nil || !strings.Contains(string(b), "10.255.255.53") {
		t.Errorf("the root's own file changed: %q, %v", b, err)
	}

	dangling := busyboxRoot(t, ws, "")
	if err := os.Symlink("../run/nowhere/resolv.conf", filepath.Join(dangling, "etc/resolv.conf")); err != nil {
		t.Fatal(err)
	}
	loop := busyboxRoot(t, ws, "")
	if err := os.Symlink("resolv.conf", filepath.Join(loop, "etc/resolv.conf")); err != nil {
		t.Fatal(err)
	}
	for _, root := range []string{dangling, loop} {
		r = sandboxed(t, invocation{dir: ws, env: env, args: []string{"--root", root, "--", "/bin/sh", "-c", "echo ran"}})
		wantOK(t, r)
		if !strings.Contains(r.stdout, "ran") {
			t.Errorf("a root with a resolv.conf link that leads nowhere did not run:\n%s", r)
		}
	}
}
