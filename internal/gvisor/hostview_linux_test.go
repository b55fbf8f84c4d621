package gvisor

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/mountinfo"
	"github.com/hutch-sandbox/hutch/internal/sandbox"
	"github.com/hutch-sandbox/hutch/internal/testutil"
)

func TestStateDirs(t *testing.T) {
	mounts := mountinfo.Parse(`26 1 254:0 / / rw,relatime - ext4 /dev/vda rw
21 26 0:20 / /proc rw,relatime - proc proc rw
44 26 254:0 /run/hutch-gvisor /run/hutch-gvisor rw,relatime - ext4 /dev/vda rw
68 44 0:4 net:[4026532181] /run/hutch-gvisor/hutch-0123456789ab/state/null-netns rw - nsfs nsfs rw
71 26 254:0 / /run/hutch-gvisor-test-0123 rw - ext4 /dev/vda rw
73 71 254:0 / /run/hutch-gvisor-test-0123/hutch-0123456789ab/rootfs rw - ext4 /dev/vda rw
72 26 254:0 / /run/hutch-gvisorx rw - ext4 /dev/vda rw
74 26 254:0 / /run/hutch-gvisor rw - ext4 /dev/vda rw
`)
	for _, tc := range []struct {
		base string
		want []string
	}{
		{DefaultStateDir, []string{"/run/hutch-gvisor", "/run/hutch-gvisor-test-0123"}},
		{"/run/hutch-gvisorx", []string{"/run/hutch-gvisor", "/run/hutch-gvisor-test-0123", "/run/hutch-gvisorx"}},
		{"/elsewhere", []string{"/run/hutch-gvisor", "/run/hutch-gvisor-test-0123"}},
	} {
		if got := stateDirs(mounts, tc.base); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("stateDirs(%s) = %q, want %q", tc.base, got, tc.want)
		}
	}
}

// TestGoferView checks what gVisor's gofer serves, from its own mount
// namespace while a sandbox runs, with either file access: no kernel
// filesystem of the host's, nothing of the state directory (other
// sandboxes' roots and sockets) but an empty tmpfs, and the workspace's
// protected paths read-only mounts on the host, in the area the gofer
// serves.
func TestGoferView(t *testing.T) {
	forFileAccess(t, func(t *testing.T, rt *Runtime) {
		ws := testutil.OwnedDir(t, testutil.UnprivilegedUID)
		if err := os.Mkdir(filepath.Join(ws, ".git"), 0o755); err != nil {
			t.Fatal(err)
		}
		ch := make(chan outcome, 1)
		go func() { ch <- run(t, rt, ws, nil, "sh", "-c", "echo > started; exec sleep 600") }()
		// Once the command runs, the gofer serves its view.
		var gofer int
		if !testutil.Eventually(time.Minute, func() bool {
			if _, err := os.Stat(filepath.Join(ws, "started")); err != nil {
				return false
			}
			for _, pid := range processesOf(rt.StateDir) {
				cmdline, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
				if strings.HasPrefix(string(cmdline), "runsc-gofer") {
					gofer = pid
					return true
				}
			}
			return false
		}) {
			endAll(t, rt.StateDir, ch)
			t.Fatal("the sandbox did not start")
		}
		mounts, err := mountinfo.Read(filepath.Join("/proc", strconv.Itoa(gofer), "mountinfo"))
		endAll(t, rt.StateDir, ch)
		if err != nil {
			t.Fatal(err)
		}
		readOnly := map[string]bool{}
		for _, m := range mounts {
			readOnly[m.Point] = m.ReadOnly()
			if kernelFilesystems[m.FSType] {
				t.Errorf("the gofer serves the host's %s at %s", m.FSType, m.Point)
			}
			if within(m.Point, rt.StateDir) && (m.Point != rt.StateDir || m.FSType != "tmpfs") {
				t.Errorf("the gofer serves the state directory's %s (%s)", m.Point, m.FSType)
			}
		}
		for _, p := range []string{".bashrc", ".git/hooks", ".git/config", ".vscode"} {
			if !readOnly[filepath.Join(ws, p)] {
				t.Errorf("%s is not a read-only mount in the gofer's view: %+v", p, mounts)
			}
		}
		if ro, ok := readOnly[ws]; !ok || ro {
			t.Errorf("the workspace is not a writable mount in the gofer's view: %+v", mounts)
		}
	})
}

// TestSentryIdentity checks what gVisor's kernel is on the host while the
// command runs, in the Sentry and in the stub processes in which the
// command's code runs (S1): never host root, never in the host's user
// namespace, no_new_privs and a seccomp filter, in a root that is not the
// host's; without direct file access host nobody (in a user namespace
// that maps nobody only) with no capability at all; with it
// (Runtime.DirectFS) the sandbox's root (sandbox.RootMappedID)
// in the sandbox's user namespace (ids 0–65535 onto RootMappedID and up),
// holding exactly CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH,
// CAP_FOWNER, CAP_FSETID and CAP_SYS_PTRACE there, none inheritable or
// ambient.
func TestSentryIdentity(t *testing.T) {
	forFileAccess(t, func(t *testing.T, rt *Runtime) {
		ws := testutil.OwnedDir(t, testutil.UnprivilegedUID)
		ch := make(chan outcome, 1)
		go func() { ch <- run(t, rt, ws, nil, "sh", "-c", "echo > started; exec sleep 600") }()
		var pids []int
		ok := testutil.Eventually(time.Minute, func() bool {
			if _, err := os.Stat(filepath.Join(ws, "started")); err != nil {
				return false
			}
			pids = nil
			for _, sentry := range sentries(rt.StateDir) {
				pids = append(pids, sentry)
				tasks, _ := filepath.Glob(filepath.Join("/proc", strconv.Itoa(sentry), "task", "*", "children"))
				for _, f := range tasks {
					b, _ := os.ReadFile(f)
					for _, c := range strings.Fields(string(b)) {
						if n, err := strconv.Atoi(c); err == nil {
							pids = append(pids, n)
						}
					}
				}
			}
			return len(pids) > 1 // the Sentry and its stubs
		})
		type proc struct {
			pid            int
			status, uidMap string
			userns         string
			root           unix.Stat_t
		}
		var procs []proc
		for _, pid := range pids {
			p := proc{pid: pid}
			dir := filepath.Join("/proc", strconv.Itoa(pid))
			b, err1 := os.ReadFile(filepath.Join(dir, "status"))
			m, err2 := os.ReadFile(filepath.Join(dir, "uid_map"))
			ns, err3 := os.Readlink(filepath.Join(dir, "ns", "user"))
			err4 := unix.Stat(filepath.Join(dir, "root"), &p.root)
			if err1 != nil || err2 != nil || err3 != nil || err4 != nil {
				continue // gone
			}
			p.status, p.uidMap, p.userns = string(b), string(m), ns
			procs = append(procs, p)
		}
		endAll(t, rt.StateDir, ch)
		if !ok || len(procs) < 2 {
			t.Fatalf("found no Sentry with stubs to check (%v)", pids)
		}
		hostNS, err := os.Readlink("/proc/self/ns/user")
		if err != nil {
			t.Fatal(err)
		}
		var hostRoot unix.Stat_t
		if err := unix.Stat("/", &hostRoot); err != nil {
			t.Fatal(err)
		}
		id, caps, uidMap := "65534", "0000000000000000", "65534 65534 1"
		if rt.DirectFS {
			id = strconv.Itoa(sandbox.RootMappedID)
			var c uint64
			for _, b := range []int{unix.CAP_CHOWN, unix.CAP_DAC_OVERRIDE, unix.CAP_DAC_READ_SEARCH, unix.CAP_FOWNER, unix.CAP_FSETID, unix.CAP_SYS_PTRACE} {
				c |= 1 << b
			}
			caps = fmt.Sprintf("%016x", c)
			uidMap = fmt.Sprintf("0 %d 65536", sandbox.RootMappedID)
		}
		want := map[string]string{
			"Uid": strings.Repeat(id+" ", 4), "Gid": strings.Repeat(id+" ", 4),
			"CapInh": "0000000000000000", "CapPrm": caps, "CapEff": caps, "CapBnd": caps, "CapAmb": "0000000000000000",
			"NoNewPrivs": "1", "Seccomp": "2",
		}
		for _, p := range procs {
			fields := map[string]string{}
			for _, l := range strings.Split(p.status, "\n") {
				if k, v, ok := strings.Cut(l, ":"); ok {
					fields[k] = strings.Join(strings.Fields(v), " ")
				}
			}
			for k, v := range want {
				if got := fields[k]; got != strings.TrimSpace(v) {
					t.Errorf("process %d (%s): %s is %q, want %q", p.pid, fields["Name"], k, got, strings.TrimSpace(v))
				}
			}
			if got := strings.Join(strings.Fields(p.uidMap), " "); got != uidMap {
				t.Errorf("process %d: its user namespace maps %q, want %q", p.pid, got, uidMap)
			}
			if p.userns == hostNS {
				t.Errorf("process %d is in the host's user namespace", p.pid)
			}
			if p.root.Dev == hostRoot.Dev && p.root.Ino == hostRoot.Ino {
				t.Errorf("process %d has the host's root as its root", p.pid)
			}
		}
	})
}

// TestProtectedLink: a protected path that is a symbolic link in the
// workspace (.envrc to a file beside it) is not mounted on the host
// (sandbox.Protection.MountOver follows no link) but by the spec, as before: what it
// points to stays read-only, with either file access.
func TestProtectedLink(t *testing.T) {
	forFileAccess(t, func(t *testing.T, rt *Runtime) {
		uid := testutil.UnprivilegedUID
		ws := testutil.OwnedDir(t, uid)
		target := filepath.Join(ws, "config", "envrc")
		if err := os.Mkdir(filepath.Dir(target), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(target, []byte("original\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("config/envrc", filepath.Join(ws, ".envrc")); err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{filepath.Dir(target), target} {
			if err := os.Lchown(p, uid, uid); err != nil {
				t.Fatal(err)
			}
		}
		o := run(t, rt, ws, nil, "sh", "-c", "echo changed > config/envrc || echo refused; echo x > config/other && echo control")
		wantExit(t, o, 0)
		if !strings.Contains(o.stdout, "refused") || !strings.Contains(o.stdout, "control") {
			t.Errorf("want the link's target refused and its directory writable:\n%s", o)
		}
		if b, _ := os.ReadFile(target); string(b) != "original\n" {
			t.Errorf("the protected link's target changed on the host: %q", b)
		}
	})
}

// TestHostSubmount: a mount of the host's inside the workspace (a tmpfs
// here) is the sandbox's to use, not to remove: removing or renaming its
// mount point is refused, with either file access, and the host's mount
// stays. (A process of another mount namespace may remove a mount point
// the host has, unmounting it everywhere: gVisor's gofer holds a copy of
// the area's mounts, and gVisor's kernel, which removes files itself
// with direct access, is told of them.)
func TestHostSubmount(t *testing.T) {
	forFileAccess(t, func(t *testing.T, rt *Runtime) {
		uid := testutil.UnprivilegedUID
		ws := testutil.OwnedDir(t, uid)
		data := filepath.Join(ws, "data")
		if err := os.Mkdir(data, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mount("hutch-test-submount", data, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, fmt.Sprintf("mode=0755,uid=%d,gid=%d", uid, uid)); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = unix.Unmount(data, unix.MNT_DETACH) })
		o := run(t, rt, ws, nil, "sh", "-c", "rmdir data || echo rmdir refused; mv data moved || echo mv refused; echo x > data/x && echo written")
		wantExit(t, o, 0)
		for _, want := range []string{"rmdir refused", "mv refused", "written"} {
			if !strings.Contains(o.stdout, want) {
				t.Errorf("output lacks %q:\n%s", want, o)
			}
		}
		var st unix.Statx_t
		if err := unix.Statx(unix.AT_FDCWD, data, unix.AT_SYMLINK_NOFOLLOW, 0, &st); err != nil || st.Attributes&unix.STATX_ATTR_MOUNT_ROOT == 0 {
			t.Errorf("the host's mount at %s is gone (%v)", data, err)
		}
		if b, err := os.ReadFile(filepath.Join(data, "x")); err != nil || string(b) != "x\n" {
			t.Errorf("what the sandbox wrote is not in the host's mount: %q, %v", b, err)
		}
	})
}
