package ociruntime

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/mountinfo"
	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// holdMountNamespace starts a process in a mount namespace of its own
// (unshare with args; -Urm for a user namespace's, whose copies of this
// namespace's mounts are locked) and returns the namespace's link and a
// func that ends the process; the test's end ends it too.
func holdMountNamespace(t *testing.T, args ...string) (ns string, end func()) {
	t.Helper()
	cmd := exec.Command("unshare", append(args, "--propagation", "private", "sh", "-c", "echo in; exec sleep 600")...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ended := false
	end = func() {
		if !ended {
			ended = true
			cmd.Process.Kill()
			cmd.Wait()
		}
	}
	t.Cleanup(end)
	if _, err := bufio.NewReader(out).ReadString('\n'); err != nil {
		t.Fatalf("unshare %v did not start: %v", args, err)
	}
	ns, err = os.Readlink("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/ns/mnt")
	if err != nil {
		t.Fatal(err)
	}
	return ns, end
}

// mountTmpfs mounts a tmpfs at dir until the test's end.
func mountTmpfs(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("hutch-test", dir, "tmpfs", 0, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
}

// TestSweepMounts: the sweep removes the mounts directories whose
// container's state is gone, when the namespace that made them is this
// one or has ended, and nothing else: not a directory whose state is
// there, nor one with a mount under it, nor one of another namespace
// that lives, nor one without a back-reference or with another
// container's; what goneDir holds goes.
func TestSweepMounts(t *testing.T) {
	testutil.RequireRoot(t)
	root, stateRoot := t.TempDir(), t.TempDir()
	ns, boot := whereAmI()
	if ns == "" || boot == "" {
		t.Fatalf("this mount namespace %q, this boot %q", ns, boot)
	}
	elsewhere, _ := holdMountNamespace(t, "-m")
	state := func(id string) string { return filepath.Join(stateRoot, "hutch", id) }
	mounts := func(id string, o *mountsOwner) string {
		t.Helper()
		dir := filepath.Join(root, mountsName(stateRoot, id))
		if err := os.MkdirAll(filepath.Join(dir, "rootfs"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "resolv.conf"), []byte("nameserver 127.0.0.1\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if o != nil {
			if err := writeJSON(filepath.Join(dir, ownerFile), *o); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	here := func(id string) *mountsOwner { return &mountsOwner{State: state(id), MountNS: ns, Boot: boot} }
	ended := mounts("b", &mountsOwner{State: state("b"), MountNS: "mnt:[1]", Boot: boot})
	gone := map[string]string{
		"its state gone":           mounts("a", here("a")),
		"another boot's":           mounts("c", &mountsOwner{State: state("c"), MountNS: elsewhere, Boot: "another"}),
		"another boot's, this one": mounts("d", &mountsOwner{State: state("d"), MountNS: ns, Boot: "another"}),
	}
	kept := map[string]string{
		"its state there":                   mounts("e", here("e")),
		"a mount under it":                  mounts("f", here("f")),
		"a namespace's that lives":          mounts("g", &mountsOwner{State: state("g"), MountNS: elsewhere, Boot: boot}),
		"no back-reference":                 mounts("h", nil),
		"another container's back-ref":      mounts("i", here("a")),
		"a back-reference without its boot": mounts("j", &mountsOwner{State: state("j"), MountNS: ns}),
	}
	// Whether a namespace has ended is known only when every process's
	// can be read (a Landlock domain or an LSM may hide some).
	if _, known := liveMountNamespaces(nil); known {
		gone["an ended namespace's"] = ended
	} else {
		t.Log("some processes' mount namespaces cannot be read here: an ended namespace's directory is kept")
		kept["an ended namespace's, unknown here"] = ended
	}
	if err := os.MkdirAll(state("e"), 0o700); err != nil {
		t.Fatal(err)
	}
	mountTmpfs(t, filepath.Join(kept["a mount under it"], "rootfs"))
	left := filepath.Join(root, goneDir, "x-1")
	if err := os.MkdirAll(filepath.Join(left, "rootfs"), 0o755); err != nil {
		t.Fatal(err)
	}

	sweepMounts(root)
	for what, dir := range gone {
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("%s: %s left (%v)", what, dir, err)
		}
	}
	for what, dir := range kept {
		if _, err := os.Stat(filepath.Join(dir, "resolv.conf")); err != nil {
			t.Errorf("%s: %s swept: %v", what, dir, err)
		}
	}
	if _, err := os.Stat(left); !os.IsNotExist(err) {
		t.Errorf("%s left (%v)", left, err)
	}
}

// TestRemoveMountsHeld: a container's cleanup while another mount
// namespace (a user namespace's, whose copies of the container's mounts
// are locked) holds its mount points neither fails nor keeps the
// directory's name from a container of the same name; once that
// namespace has ended, nothing of it is left.
func TestRemoveMountsHeld(t *testing.T) {
	testutil.RequireRoot(t)
	root, stateRoot := t.TempDir(), t.TempDir()
	dir := filepath.Join(root, mountsName(stateRoot, "held"))
	if err := makeMounts(dir, filepath.Join(stateRoot, "hutch", "held")); err != nil {
		t.Fatal(err)
	}
	mountTmpfs(t, filepath.Join(dir, "rootfs"))
	_, end := holdMountNamespace(t, "-Urm")
	if err := removeMounts(dir, ""); err != nil {
		t.Fatalf("removeMounts while held: %v", err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("%s still there (%v)", dir, err)
	}
	if err := makeMounts(dir, filepath.Join(stateRoot, "hutch", "held")); err != nil {
		t.Errorf("the same name again: %v", err)
	}
	end()
	// The ended namespace lets go of its copies as the kernel tears it
	// down, a moment after its last process: each sweep tries again.
	var left []string
	if !testutil.Eventually(time.Minute, func() bool {
		sweepMounts(root)
		left, _ = filepath.Glob(filepath.Join(root, goneDir, "*"))
		return len(left) == 0
	}) {
		t.Errorf("left after the holder's end: %v", left)
	}
}

// TestRetireBusy: a mounts directory that cannot be removed (a mount
// point of it is busy) goes to goneDir, under a name of its own, and the
// name is free again; the sweep leaves it there while a mount is under
// it, and removes it after.
func TestRetireBusy(t *testing.T) {
	testutil.RequireRoot(t)
	root, stateRoot := t.TempDir(), t.TempDir()
	dir := filepath.Join(root, mountsName(stateRoot, "busy"))
	if err := makeMounts(dir, filepath.Join(stateRoot, "hutch", "busy")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "rootfs"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("hutch-test", filepath.Join(dir, "rootfs"), "tmpfs", 0, ""); err != nil {
		t.Fatal(err)
	}
	// Wherever the mount is: it moves with its directory.
	defer func() {
		ms, _ := mountinfo.Read("/proc/self/mountinfo")
		for _, p := range pointsUnder(ms, root) {
			unix.Unmount(p, unix.MNT_DETACH)
		}
	}()
	if err := retire(dir); err != nil {
		t.Fatalf("retire: %v", err)
	}
	moved, _ := filepath.Glob(filepath.Join(root, goneDir, "*", "rootfs"))
	if len(moved) != 1 {
		t.Fatalf("in %s: %v, want the busy directory", goneDir, moved)
	}
	if err := makeMounts(dir, filepath.Join(stateRoot, "hutch", "busy")); err != nil {
		t.Errorf("the same name again: %v", err)
	}
	sweepMounts(root)
	if _, err := os.Stat(moved[0]); err != nil {
		t.Errorf("swept with a mount under it: %v", err)
	}
	if err := unix.Unmount(moved[0], 0); err != nil {
		t.Fatal(err)
	}
	sweepMounts(root)
	if left, _ := filepath.Glob(filepath.Join(root, goneDir, "*")); len(left) > 0 {
		t.Errorf("left after its mount's end: %v", left)
	}
}
