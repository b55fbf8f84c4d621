//go:build linux

package escape

import (
	"io/fs"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/image/imagetest"
	"github.com/hutch-sandbox/hutch/internal/runner"
	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// TestItem21_GuestSnapshot (escape item 21 through a microVM's
// snapshot): the root of a microVM's guest holds every capability of the
// guest's own kernel, so in its root layer it makes what no other tier's
// sandbox can — root's set-id copies of the shell, a file capability,
// device nodes of the host's disk and memory, files of any owner — and
// links out, a FIFO, a hard link, a sticky directory; it removes a file of
// the image (a whiteout, the one device the store keeps). A snapshot exports
// that layer from the guest (its agent writes it as a tar, which a guest
// that took its agent over writes as it likes: internal/sandbox's
// TestSnapshotExported sends such tars) and the daemon keeps it as files
// in its store. There nothing is set-id, carries a capability or ACL, or
// is a device, and no one but root reaches the store (its layers are
// owned as an image's: by the guest's ids). A namespace sandbox started from the
// snapshot has the files (the control) without the bits, and a microVM
// copy of it has the guest's memory.
func TestItem21_GuestSnapshot(t *testing.T) {
	testutil.RequireRoot(t)
	t.Parallel()
	kernel := guestKernel(t)
	const ref = "hutch.test/escape-guest:1"
	dir := hostDir(t, 0, "serve")
	tar := imagetest.DockerSave(t, imagetest.Busybox(t, need(t)), ref, hostDir(t, 0, "tar"))
	if out, err := exec.Command(testutil.Hutch(t), "image", "import", tar, "--state-dir", filepath.Join(dir, "state")).CombinedOutput(); err != nil {
		t.Fatalf("hutch image import %s: %v\n%s", ref, err, out)
	}
	d := startServedEnv(t, dir, false, []string{runner.GuestKernelEnv + "=" + kernel},
		"--default-tier", "microvm", "--allow-emulation")
	id := d.createCLI("--image", ref)
	a := d.attacker(id)
	r := d.client("exec", id, "--", "sh", "-c", `set -e
for a in cp chown chmod mknod mkfifo ln mv stat readlink; do busybox ln -s busybox /bin/$a; done
mkdir -p /opt/x && cd /opt/x
cp /bin/busybox suid && chown 0:0 suid && chmod 6755 suid
cp /bin/busybox sgid && chmod 2755 sgid
mknod disk b 8 0 && mknod mem c 1 1
mkfifo fifo
ln -s /etc/shadow out && ln -s ../../../../../../etc/shadow up
ln suid hard
echo x > owned && chown 12345:54321 owned
mkdir -m 1777 sticky
rm /etc/motd
cd /workspace && `+a+` w_setcap:set && mv w-setcap-set /opt/x/cap
stat -c '%a %u:%g %F %n' /opt/x/*`)
	if r.code != 0 || !strings.Contains(r.stdout, "6755 0:0 regular file /opt/x/suid") ||
		!strings.Contains(r.stdout, "block special file /opt/x/disk") || !strings.Contains(r.stdout, "w_setcap:set ok") {
		t.Fatalf("control: the guest's root could not make set-id files, devices and a file capability in its layer:\n%s", r)
	}

	sid := d.clientID("snapshot", id)
	store := filepath.Join(d.stateDir, "snapshots", "layers")
	noHostPrivilege(t, store, 0)
	seen := 0
	err := filepath.WalkDir(store, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		rel, _ := filepath.Rel(store, p)
		if !strings.Contains(rel, "/") {
			return nil // the store's own directory of the snapshot
		}
		// A character device 0:0 is a whiteout, as overlayfs reads
		// one: no device.
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFBLK, unix.S_IFCHR:
			if st.Mode&unix.S_IFMT == unix.S_IFBLK || st.Rdev != 0 {
				t.Errorf("host: %s is a device (%#x) in the snapshot store", rel, st.Rdev)
			}
		}
		if strings.HasSuffix(rel, "/opt/x/suid") || strings.HasSuffix(rel, "/opt/x/cap") {
			seen++
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walk %s: %v", store, err)
	}
	// The store keeps layers as an image store does, their owners the
	// image's (the guest's root's files are root's): no one but root may
	// reach them.
	if !reachableByRootOnly(d.stateDir, store) {
		t.Errorf("host: the snapshot store %s is reachable by users other than root", store)
	}
	if seen != 2 {
		t.Errorf("control: the snapshot store holds %d of the guest's suid and cap, want both", seen)
	}

	ns := d.createCLI("--snapshot", sid, "--tier", "namespace")
	r = d.client("exec", ns, "--", "sh", "-c", "stat -c '%a %u:%g %F %n' /opt/x/*; readlink /opt/x/out")
	for _, want := range []string{"755 0:0 regular file /opt/x/suid", "755 0:0 regular file /opt/x/sgid", "644 12345:54321 regular file /opt/x/owned",
		"fifo /opt/x/fifo", "symbolic link /opt/x/out", "/etc/shadow\n"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("the namespace sandbox from the guest's snapshot: no %q\n%s", want, r)
		}
	}
	if c := d.client("exec", ns, "--", "test", "-e", "/etc/motd"); c.code == 0 {
		t.Errorf("control: the image's file the guest removed (its whiteout in the store) is back in the namespace sandbox")
	}
	if strings.Contains(r.stdout, "/opt/x/disk") || strings.Contains(r.stdout, "/opt/x/mem") {
		t.Errorf("the namespace sandbox from the guest's snapshot has its device nodes:\n%s", r)
	}
	copied := d.createCLI("--snapshot", sid)
	if c := d.client("exec", copied, "--", "stat", "-c", "%a", "/opt/x/suid"); c.stdout != "6755\n" {
		t.Errorf("control: the microVM copy, with the guest's memory and layer, has suid as %q", c.stdout)
	}
}

// reachableByRootOnly reports whether a directory from top down to dir
// (top included) is root's and searchable by no one else.
func reachableByRootOnly(top, dir string) bool {
	for p := dir; ; p = filepath.Dir(p) {
		var st unix.Stat_t
		if unix.Lstat(p, &st) == nil && st.Uid == 0 && st.Mode&0o011 == 0 {
			return true
		}
		if p == top || p == filepath.Dir(p) {
			return false
		}
	}
}
