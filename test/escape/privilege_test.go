//go:build linux

package escape

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// whoami parses the attacker's whoami line into its key=value fields.
func whoami(t *testing.T, r result, key string) map[string]string {
	t.Helper()
	line, ok := attacks(r.stdout)[key]
	if !ok || !strings.HasPrefix(line, "ok ") {
		t.Fatalf("%s: no identity printed\n%s", key, r)
	}
	m := map[string]string{}
	for _, f := range strings.Fields(line)[1:] {
		if k, v, ok := strings.Cut(f, "="); ok {
			m[k] = v
		}
	}
	return m
}

// checkUnprivileged fails the test unless the identity in m is the
// sandbox's own uid with no capability, no_new_privs and a seccomp filter.
func checkUnprivileged(t *testing.T, m map[string]string, innerUID int, what string) {
	t.Helper()
	u := strconv.Itoa(innerUID)
	want := map[string]string{
		"uid": u, "euid": u, "capeff": "0000000000000000", "capprm": "0000000000000000",
		"capbnd": "0000000000000000", "nnp": "1", "seccomp": "2",
	}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("S1: %s: %s=%s, want %s", what, k, m[k], v)
		}
	}
}

// TestItem10_Identity: the sandboxed command holds no capability, runs
// with no_new_privs and a seccomp filter, and as root's sandbox its uid 0
// is an unprivileged host uid (S1): the uid map shows 0 → 1000000000 when
// root starts hutch, and the invoking user's own uid otherwise.
func TestItem10_Identity(t *testing.T) {
	forEachMode(t, func(t *testing.T, sb *harness) {
		a := sb.attacker()
		r := sb.run(opts{}, argv(a, "whoami")+"\necho \"UIDMAP $(awk '{print $1, $2, $3}' /proc/self/uid_map)\"")
		checkUnprivileged(t, whoami(t, r, "whoami"), sb.mode.uid, "the command")
		want := fmt.Sprintf("UIDMAP %d %d 1", sb.mode.uid, hostUID(sb.mode))
		if sb.gvisor() {
			// The uid map the command reads is gVisor's kernel's, not the
			// host's; the host ids of the Sentry and gofer are checked
			// in internal/gvisor's tests.
			want = "UIDMAP 0 0 4294967295"
		}
		if !strings.Contains(r.stdout, want) {
			t.Errorf("want %q in the output\n%s", want, r)
		}
	})
}

// TestItem10_Setuid: setuid binaries grant nothing (S1). A setuid-root
// copy of the attacker, on the host's root filesystem (mounted nosuid in
// the sandbox), runs (the control) but with the sandbox's own uid and no
// capabilities; the host's setuid-root mount and su do not work either.
func TestItem10_Setuid(t *testing.T) {
	forEachMode(t, func(t *testing.T, sb *harness) {
		a := sb.attacker()
		dir := hostDir(t, 0, "suid")
		suid := filepath.Join(dir, "suid-attacker")
		copyFile(t, filepath.Join(sb.ws, a), suid, 0o755, 0)
		if err := os.Chmod(suid, 0o6755); err != nil {
			t.Fatal(err)
		}
		script := fmt.Sprintf(`
grep -E ' / / ' /proc/self/mountinfo
%[1]s whoami
mkdir -p /tmp/m && /usr/bin/mount -t tmpfs none /tmp/m; echo "RC mount $?"
/usr/bin/su -c id root </dev/null; echo "RC su $?"
`, suid)
		r := sb.run(opts{}, script)
		checkUnprivileged(t, whoami(t, r, "whoami"), sb.mode.uid, "a setuid-root binary")
		rootMount := false
		for _, line := range strings.Split(r.stdout, "\n") {
			if f := strings.Fields(line); len(f) > 5 && f[4] == "/" {
				rootMount = true
				// gVisor's mount table shows its own 9p root without
				// nosuid; the setuid binary above still ran without
				// privilege (no_new_privs), which is what must hold.
				if !sb.gvisor() && !strings.Contains(","+f[5]+",", ",nosuid,") {
					t.Errorf("the root filesystem is not mounted nosuid: %s", line)
				}
			}
		}
		if !rootMount {
			t.Errorf("no mount of / found in the sandbox's mountinfo\n%s", r)
		}
		for _, bad := range []string{"RC mount 0", "RC su 0"} {
			if strings.Contains(r.stdout, bad) {
				t.Errorf("%s: a host setuid-root program worked\n%s", bad, r)
			}
		}
	})
}

// TestItem10_Namespaces: no new namespaces (S1): unshare(2) of a user,
// mount or network namespace, clone(2) with CLONE_NEWUSER and the x32
// spelling of unshare are refused, clone3 is ENOSYS (its flags cannot be
// inspected; libc falls back to clone), setns is refused, and
// "unshare -U" / "unshare -r" fail. Forking without new namespaces works
// (the shell runs the commands).
func TestItem10_Namespaces(t *testing.T) {
	forEachMode(t, func(t *testing.T, sb *harness) {
		a := sb.attacker()
		script := argv(a, "unshare:user", "unshare:mnt", "unshare:net", "unshare:pid", "unshare:time",
			"clone_newuser", "clone3", "setns") + `
unshare -U true; echo "RC unshare-U $?"
unshare -r id; echo "RC unshare-r $?"
` + a + ` x32_unshare; echo "RC x32 $?"
sh -c 'exit 5'; echo "RC control $?"
`
		r := sb.run(opts{}, script)
		// Under gVisor a namespace is an object of gVisor's kernel: a
		// nested user namespace there gives capabilities over gVisor's
		// objects only, never the host's (the Sentry is host nobody with
		// no capability), and the views it could change are gVisor's.
		expect(t, r, sb.gvisorAlso(map[string][]string{
			"unshare:user": {"EPERM"}, "unshare:mnt": {"EPERM"}, "unshare:net": {"EPERM"},
			"unshare:pid": {"EPERM"}, "unshare:time": {"EPERM"}, "clone_newuser": {"EPERM"},
			"clone3": {"ENOSYS"}, "setns": {"EPERM"},
		}, map[string][]string{
			"unshare:user": {"EINVAL"}, "unshare:pid": {"EINVAL"}, "unshare:time": {"ok"},
			"clone_newuser": {"ok"}, "clone3": {"ok"},
		}))
		if !strings.Contains(r.stdout, "RC control 5") {
			t.Errorf("control failed: a plain fork did not work\n%s", r)
		}
		for _, bad := range []string{"RC unshare-U 0", "RC unshare-r 0"} {
			if strings.Contains(r.stdout, bad) && !sb.gvisor() {
				t.Errorf("%s: nested user namespace created\n%s", bad, r)
			}
		}
		// x32: refused with EPERM or ENOSYS, or the process is killed by
		// the filter (SIGSYS, 159); never "ok".
		x32 := attacks(r.stdout)["x32_unshare"]
		if !strings.Contains(r.stdout, "RC x32 159") && x32 != "EPERM" && x32 != "ENOSYS" && x32 != "n/a" {
			t.Errorf("x32 unshare: got %q\n%s", x32, r)
		}
	})
}

// TestItem10_Mount: the mount table cannot change (S1, S3): mount(2) of a
// tmpfs, unmounting the mask over ~/.ssh, chroot, pivot_root, and the new
// mount API (open_tree, fsopen, mount_setattr to make / writable) are all
// refused, and ~/.ssh/id_rsa stays unreadable afterwards while
// ~/notes.txt reads (the control).
func TestItem10_Mount(t *testing.T) {
	forEachMode(t, func(t *testing.T, sb *harness) {
		secrets, notes := plantSecrets(t, sb.home, sb.mode.uid)
		a := sb.attacker()
		ssh := filepath.Join(sb.home, ".ssh")
		script := argv(a, "mount:/tmp", "umount:"+ssh, "umount:/proc", "chroot", "pivot_root", "open_tree", "fsopen", "mount_setattr") + `
mount -t tmpfs none /tmp; echo "RC mount $?"
umount -l "$HOME/.ssh"; echo "RC umount $?"
cat "$HOME/.ssh/id_rsa"; echo "RC read $?"
cat "$HOME/notes.txt"
`
		r := sb.run(opts{}, script)
		noSecret(t, r, secrets)
		// gVisor has no mount_setattr (ENOSYS): refused as well.
		expect(t, r, sb.gvisorAlso(map[string][]string{
			"mount:/tmp": {"EPERM"}, "umount:" + ssh: {"EPERM"}, "umount:/proc": {"EPERM"},
			"chroot": {"EPERM"}, "pivot_root": {"EPERM"}, "open_tree": {"EPERM"}, "fsopen": {"EPERM"},
			"mount_setattr": {"EPERM"},
		}, map[string][]string{"mount_setattr": {"ENOSYS"}}))
		for _, bad := range []string{"RC mount 0", "RC umount 0", "RC read 0"} {
			if strings.Contains(r.stdout, bad) {
				t.Errorf("%s\n%s", bad, r)
			}
		}
		if !strings.Contains(r.stdout, notes) {
			t.Errorf("control failed: ~/notes.txt unreadable\n%s", r)
		}
	})
}

// TestItem10_KernelSurface: the calls that widen the kernel's attack
// surface are refused with EPERM by the seccomp filter: keyrings, bpf,
// perf_event_open, userfaultfd, io_uring, kexec, module loading, file
// handles, personality flags; raw devices are absent from /dev, and
// kernel knobs under /proc cannot be written. /dev/null works (the
// control).
func TestItem10_KernelSurface(t *testing.T) {
	forEachMode(t, func(t *testing.T, sb *harness) {
		a := sb.attacker()
		r := sb.run(opts{}, argv(a, "keyctl", "add_key", "bpf", "perf_event_open", "userfaultfd",
			"io_uring_setup", "kexec_load", "init_module", "finit_module", "open_by_handle_at",
			"name_to_handle_at", "personality", "open:/dev/mem", "open:/dev/kmsg", "open:/dev/vda", "open:/dev/sda",
			"write:/proc/sysrq-trigger", "write:/proc/sys/kernel/hostname", "write:/proc/sys/vm/drop_caches",
			"write:/dev/null"))
		want := map[string][]string{"write:/dev/null": {"ok"}}
		for _, c := range []string{"keyctl", "add_key", "bpf", "perf_event_open", "userfaultfd", "io_uring_setup",
			"kexec_load", "init_module", "finit_module", "open_by_handle_at", "name_to_handle_at", "personality"} {
			want[c] = []string{"EPERM"}
		}
		for _, d := range []string{"open:/dev/mem", "open:/dev/kmsg", "open:/dev/vda", "open:/dev/sda"} {
			want[d] = []string{"ENOENT"}
		}
		for _, w := range []string{"write:/proc/sysrq-trigger", "write:/proc/sys/kernel/hostname", "write:/proc/sys/vm/drop_caches"} {
			want[w] = []string{"EACCES", "EROFS", "ENOENT", "EPERM"}
		}
		// Under gVisor these calls reach gVisor's kernel, never the
		// host's (TestGVisorKernel): it lacks most of them (ENOSYS,
		// ENODEV, ENOTSUP, EINVAL), keeps keyrings of its own (keyctl
		// on the session keyring works there), and its sysrq-trigger
		// does nothing (EIO). The devices stay absent.
		expect(t, r, sb.gvisorAlso(want, map[string][]string{
			"keyctl": {"ok"}, "add_key": {"EACCES"}, "perf_event_open": {"ENODEV"}, "userfaultfd": {"ENOSYS"},
			"io_uring_setup": {"ENOSYS"}, "open_by_handle_at": {"ENOTSUP"}, "name_to_handle_at": {"ENOTSUP"},
			"personality": {"EINVAL"}, "write:/proc/sysrq-trigger": {"EIO"},
		}))
	})
}
