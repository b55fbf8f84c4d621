//go:build linux

package escape

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/hostperm"
	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// Nothing a sandbox writes may grant or widen privilege on the host
// (ESCAPES 21): the workspace is the host's, written as its owner (through
// an idmapped mount when root started hutch), so a setuid copy of a shell
// made there is a setuid program of the host, and a host-owned entry made
// writable to others is open to every local user.

// privilegeXattrs are the extended attributes that grant or widen access.
var privilegeXattrs = []string{"security.capability", "system.posix_acl_access", "system.posix_acl_default"}

// noHostPrivilege fails the test if any entry below dir, as the host sees
// it, is setuid or setgid, writable by others, writable by its group when
// withheld has the group's write bit, or carries a file capability or an
// ACL. Symbolic links are left out (their modes mean nothing), and so are
// the entries (relative paths) of skip.
func noHostPrivilege(t *testing.T, dir string, withheld fs.FileMode, skip ...string) {
	t.Helper()
	buf := make([]byte, 4096)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if slices.Contains(skip, rel) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			return nil
		}
		mode := st.Mode & 0o7777
		if mode&(unix.S_ISUID|unix.S_ISGID) != 0 {
			t.Errorf("host: %s is set-id (mode %04o, owner %d)", rel, mode, st.Uid)
		}
		if fs.FileMode(mode)&withheld != 0 {
			t.Errorf("host: %s is writable beyond its owner (mode %04o, withheld %04o)", rel, mode, withheld)
		}
		n, err := unix.Llistxattr(p, buf)
		if err != nil && !errors.Is(err, unix.ENOTSUP) {
			return err
		}
		for _, name := range strings.Split(string(buf[:max(n, 0)]), "\x00") {
			if slices.Contains(privilegeXattrs, name) {
				t.Errorf("host: %s carries %s", rel, name)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walk %s: %v", dir, err)
	}
}

// hostMode is the mode of path as the host sees it, or -1.
func hostMode(path string) int {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return -1
	}
	return int(st.Mode & 0o7777)
}

// TestItem21_SetIDFiles: a copy of the shell in the workspace cannot be
// made setuid or setgid (6755, 4755, 2755) by any call that sets a mode:
// chmod (also with the high word of the mode set), fchmod, fchmodat and
// fchmodat2 are refused with EPERM; creates that ask for the mode (open,
// openat, creat, mknod with S_IFREG) with EPERM; openat2, whose mode the
// filter cannot read, with ENOSYS; an unnamed file (O_TMPFILE) with
// EOPNOTSUPP (ENOTSUP, the same errno). Afterwards no entry of the workspace is set-id or writable
// to others on the host. The controls work: chmod 0755 and fchmodat2 0700
// of the copy, creates of 0755 and 0644 files and an unnamed 0600 file
// linked in, each with its mode on the host. io_uring, which would make
// these calls unseen by the filter, is refused.
func TestItem21_SetIDFiles(t *testing.T) {
	forEachMode(t, func(t *testing.T, sb *harness) {
		a := sb.attacker()
		want := map[string][]string{"io_uring_setup": {"EPERM"}}
		for _, m := range []string{"6755", "4755", "2755"} {
			for _, c := range []string{"w_chmod", "w_chmod_hi", "w_fchmod", "w_fchmodat", "w_fchmodat2", "w_open", "w_openat", "w_creat", "w_mknod"} {
				want[c+":"+m] = []string{"EPERM"}
			}
			want["w_openat2:"+m] = []string{"ENOSYS"}
			want["w_tmpfile:"+m] = []string{"ENOTSUP"}
		}
		controls := map[string]string{
			"w_chmod:0755":     "ok mode=0755",
			"w_fchmodat2:0700": "ok mode=0700",
			"w_openat:0755":    "ok mode=0755",
			"w_mknod:0644":     "ok mode=0644",
			"w_tmpfile:0600":   "ok mode=0600",
		}
		hostModes := map[string]int{"w-chmod-0755": 0o755, "w-fchmodat2-0700": 0o700, "w-openat-0755": 0o755, "w-mknod-0644": 0o644, "w-tmpfile-0600": 0o600}
		if sb.gvisor() || sb.microvm() {
			// gVisor has neither fchmodat2 (ENOSYS) nor O_TMPFILE on the
			// host's files (ENOTSUP): those two controls cannot work
			// there, and the attacks through them fail before any mode
			// is set. openat2's set-id creates and O_TMPFILE's are
			// refused by the spec's filter (EPERM), as every other.
			// Nor has the microvm guest's kernel (Debian 12's 6.1, no
			// O_TMPFILE on virtiofs).
			delete(controls, "w_fchmodat2:0700")
			delete(controls, "w_tmpfile:0600")
			delete(hostModes, "w-fchmodat2-0700")
			delete(hostModes, "w-tmpfile-0600")
		}
		r := sb.run(opts{}, argv(a, append(sortedKeys(want), sortedKeys(controls)...)...))
		// Under microvm the calls are the guest kernel's, and what it
		// asks of the workspace reaches virtiofsd on the host, whose
		// filter refuses the set-id modes (EPERM): openat2 and io_uring
		// go that way too, so neither bypasses it; fchmodat2 is missing.
		mvAlso := map[string][]string{"io_uring_setup": {"ok"}}
		for _, m := range []string{"6755", "4755", "2755"} {
			mvAlso["w_fchmodat2:"+m] = []string{"ENOSYS"}
			mvAlso["w_openat2:"+m] = []string{"EPERM"}
		}
		want = sb.microvmAlso(want, mvAlso)
		also := map[string][]string{"io_uring_setup": {"ENOSYS"}}
		for _, m := range []string{"6755", "4755", "2755"} {
			also["w_fchmodat2:"+m] = []string{"ENOSYS"}
			also["w_openat2:"+m] = []string{"EPERM"}
			also["w_tmpfile:"+m] = []string{"EPERM"}
		}
		expect(t, r, sb.gvisorAlso(want, also))
		got := attacks(r.stdout)
		for c, res := range controls {
			if got[c] != res {
				t.Errorf("control %s: got %q, want %q\n%s", c, got[c], res, r)
			}
		}
		for file, mode := range hostModes {
			if m := hostMode(filepath.Join(sb.ws, file)); m != mode {
				t.Errorf("host: control %s has mode %04o, want %04o", file, m, mode)
			}
		}
		// From the host: each copy the chmods aimed at is as it was made
		// (0755, the workspace owner's), and no create left a file.
		for _, m := range []string{"6755", "4755", "2755"} {
			for _, c := range []string{"chmod", "chmod_hi", "fchmod", "fchmodat", "fchmodat2"} {
				var st unix.Stat_t
				path := filepath.Join(sb.ws, "w-"+c+"-"+m)
				if err := unix.Lstat(path, &st); err != nil {
					t.Errorf("host: %s: %v", path, err)
				} else if st.Mode&0o7777 != 0o755 || int(st.Uid) != sb.mode.uid {
					t.Errorf("host: %s has mode %04o, owner %d; want 0755, %d", path, st.Mode&0o7777, st.Uid, sb.mode.uid)
				}
			}
			for _, c := range []string{"open", "openat", "creat", "mknod", "openat2", "tmpfile"} {
				if path := filepath.Join(sb.ws, "w-"+c+"-"+m); exists(path) {
					t.Errorf("host: the refused create left %s", path)
				}
			}
		}
		noHostPrivilege(t, sb.ws, 0o002)
	})
}

// TestItem21_FileCaps: no file capability (security.capability) and no
// ACL (system.posix_acl_access granting others write) can be set on a
// file of the workspace by any of the setxattr calls, nor an ACL removed
// (which can widen the group's access): EOPNOTSUPP, as from a filesystem
// without them, so that cp -a and tar carry on; setcap(8) fails too. The
// sandbox holds no CAP_SETFCAP in any set (the kernel's own condition
// for writing a file capability). On the host no file carries either.
func TestItem21_FileCaps(t *testing.T) {
	forEachMode(t, func(t *testing.T, sb *harness) {
		a := sb.attacker()
		want := map[string][]string{}
		for _, c := range []string{"set", "lset", "fset", "setat"} {
			want["w_setcap:"+c] = []string{"ENOTSUP"}
			want["w_setacl:"+c] = []string{"ENOTSUP"}
		}
		for _, c := range []string{"remove", "lremove", "fremove", "removeat"} {
			want["w_removexattr:"+c] = []string{"ENOTSUP"}
		}
		script := argv(a, append([]string{"whoami"}, sortedKeys(want)...)...) + `
cp /bin/sh ./setcap-tool && setcap cap_setuid+ep ./setcap-tool; echo "RC setcap $?"
`
		r := sb.run(opts{}, script)
		// Under gVisor the spec's filter refuses extended attributes with
		// EPERM, and gVisor lacks the *at variants (ENOSYS): refused all
		// the same, and the host's modes are checked below.
		also := map[string][]string{}
		for k := range want {
			also[k] = []string{"EPERM", "ENOSYS"}
		}
		if sb.microvm() {
			// The guest's root holds every capability of the guest's
			// kernel; what stops it is virtiofsd on the host, which
			// serves no extended attribute: the guest's kernel answers
			// EOPNOTSUPP, and ENOSYS for the *at variants it lacks.
			for k := range want {
				want[k] = append(want[k], "ENOSYS")
			}
			expect(t, r, want)
		} else {
			expect(t, r, sb.gvisorAlso(want, also))
			checkUnprivileged(t, whoami(t, r, "whoami"), sb.mode.uid, "the command")
		}
		if strings.Contains(r.stdout, "RC setcap 0") {
			t.Errorf("setcap worked\n%s", r)
		}
		for f, mode := range map[string]int{"w-setcap-set": 0o755, "w-setcap-fset": 0o755, "w-setacl-fset": 0o644, "w-setacl-setat": 0o644, "setcap-tool": 0o755} {
			if m := hostMode(filepath.Join(sb.ws, f)); m != mode {
				t.Errorf("host: %s has mode %04o, want %04o as it was made\n%s", f, m, mode, r)
			}
		}
		noHostPrivilege(t, sb.ws, 0o002)
	})
}

// umaskCase is a umask hutch is started with and what the sandbox must
// show for it: its own umask (the user's plus others' write, and the
// group's when the user's withholds it), the modes of a file, directory
// and FIFO created after umask(0), the mode pip gives a script, and the
// bits no host entry may have.
type umaskCase struct {
	umask, sandbox       string
	file, dir, fifo, pip string
	withheld             fs.FileMode
}

var umaskCases = []umaskCase{
	{"022", "0022", "0644", "0755", "0644", "0755", 0o022},
	{"002", "0002", "0664", "0775", "0664", "0775", 0o002},
	{"000", "0002", "0664", "0775", "0664", "0775", 0o002},
	{"077", "0077", "0600", "0700", "0600", "0711", 0o022},
}

// TestItem21_Umask: the sandbox's umask is the user's with others' write
// added (and the group's when the user's umask withholds it), and it
// cannot be lowered: umask(0) (also with the high word set) changes
// nothing and returns the current umask, so a file, a directory and a
// FIFO created afterwards asking for 0666/0777 get the withheld bits
// removed. The usual way to read the umask (old = umask(0); umask(old))
// returns the true umask and leaves it (the control), a stricter umask
// (077) takes effect and reads back, and pip's chmod of its scripts
// (0777 &^ umask | 0111) works. On the host nothing has the withheld bits.
func TestItem21_Umask(t *testing.T) {
	forEachMode(t, func(t *testing.T, sb *harness) {
		a := sb.attacker()
		for _, c := range umaskCases {
			t.Run("umask"+c.umask, func(t *testing.T) {
				dir := filepath.Join(sb.ws, "u"+c.umask)
				mkdirs(t, sb.ws, sb.mode.uid, "u"+c.umask)
				copyFile(t, filepath.Join(sb.ws, a), filepath.Join(dir, a), 0o755, sb.mode.uid)
				r := sb.run(opts{umask: c.umask, dir: dir}, argv(a, "w_umask_read", "w_umask0", "w_umask0:hi", "w_umask077", "w_pip"))
				got := attacks(r.stdout)
				made := fmt.Sprintf("ok returned=%s umask=%s file=%s dir=%s fifo=%s", c.sandbox, c.sandbox, c.file, c.dir, c.fifo)
				for k, v := range map[string]string{
					"w_umask_read": "ok " + c.sandbox,
					"w_umask0":     made,
					"w_umask0:hi":  made,
					"w_umask077":   "ok",
					"w_pip":        "ok mode=" + c.pip,
				} {
					if got[k] != v {
						t.Errorf("%s: got %q, want %q\n%s", k, got[k], v, r)
					}
				}
				noHostPrivilege(t, dir, c.withheld)
				if m := hostMode(filepath.Join(dir, "w-umask0-file-")); fmt.Sprintf("%04o", m) != c.file {
					t.Errorf("host: the file made after umask(0) has mode %04o, want %s", m, c.file)
				}
			})
		}
	})
}

// TestItem21_GitWritable: a host-owned .git (root's when root started
// hutch, the user's otherwise) cannot be made writable to others — chmod
// 0777, o+w, chmod -R o+w — nor to its group under a umask that withholds
// group write; its hooks and config stay read-only. Under a umask of 022
// .git is unchanged on the host afterwards. Under 002 (user-private
// groups) g+w is allowed, as on the host, and o+w still is not.
func TestItem21_GitWritable(t *testing.T) {
	forEachMode(t, func(t *testing.T, sb *harness) {
		a := sb.attacker()
		mkdirs(t, sb.ws, sb.mode.uid, ".git/hooks", ".git/objects")
		writeFile(t, filepath.Join(sb.ws, ".git/config"), "[core]\n", 0o644, sb.mode.uid)
		writeFile(t, filepath.Join(sb.ws, ".git/hooks/pre-commit"), "#!/bin/sh\n", 0o755, sb.mode.uid)
		git := filepath.Join(sb.ws, ".git")
		for _, tt := range []struct {
			umask    string
			group    string // want of w_chmodadd:020:.git
			withheld fs.FileMode
		}{{"022", "EPERM", 0o022}, {"002", "ok", 0o002}} {
			t.Run("umask"+tt.umask, func(t *testing.T) {
				before := snapshot(t, git)
				script := argv(a, "w_chmodpath:0777:.git", "w_chmodadd:002:.git", "w_chmodadd:006:.git/objects", "w_chmodpath:0777:.git/hooks",
					"w_chmodpath:0666:.git/config", "w_chmodadd:020:.git") + `
chmod -R o+w .git 2>/dev/null; echo "RC chmod-R $?"
`
				r := sb.run(opts{umask: tt.umask}, script)
				expect(t, r, map[string][]string{
					"w_chmodpath:0777:.git":        {"EPERM"},
					"w_chmodadd:002:.git":          {"EPERM"},
					"w_chmodadd:006:.git/objects":  {"EPERM"},
					"w_chmodpath:0777:.git/hooks":  {"EPERM", "EROFS"},
					"w_chmodpath:0666:.git/config": {"EPERM", "EROFS"},
					"w_chmodadd:020:.git":          {tt.group},
				})
				if strings.Contains(r.stdout, "RC chmod-R 0") {
					t.Errorf("chmod -R o+w .git worked\n%s", r)
				}
				if tt.group == "EPERM" {
					sameTree(t, git, before)
				}
				noHostPrivilege(t, sb.ws, tt.withheld)
				if err := os.Chmod(git, 0o755); err != nil {
					t.Fatal(err)
				}
			})
		}
	})
}

// TestItem21_Copies: copies that keep modes bring no set-id bit into the
// workspace: cp -p and cp -a of the host's setuid su, install -m 4755,
// and tar -xp of an archive whose entry is setuid (tar -tv shows the bit)
// leave files without it, as the host sees them. The controls: the copies
// exist, and cp -p of a plain 0755 file keeps its mode.
func TestItem21_Copies(t *testing.T) {
	forEachMode(t, func(t *testing.T, sb *harness) {
		var st syscall.Stat_t
		if err := syscall.Stat("/usr/bin/su", &st); err != nil || st.Mode&syscall.S_ISUID == 0 {
			testutil.Need(t, false, "the host's /usr/bin/su is not setuid")
		}
		r := sb.run(opts{}, `
cp -p /usr/bin/su ./cp-p-su 2>/dev/null; echo "RC cp-p $?"
cp -a /usr/bin/su ./cp-a-su 2>/dev/null; echo "RC cp-a $?"
install -m 4755 /bin/sh ./install-sh 2>/dev/null; echo "RC install $?"
tar -C /usr/bin -cf /tmp/su.tar su && tar -tvf /tmp/su.tar
mkdir t && tar -xpf /tmp/su.tar -C t 2>/dev/null; echo "RC tar $?"
cp /bin/sh ./plain && chmod 0755 ./plain && cp -p ./plain ./plain-copy; echo "RC control $?"
`)
		if !strings.Contains(r.stdout, "-rws") {
			t.Errorf("the archive's entry is not setuid, so tar -xp was not tried with one\n%s", r)
		}
		for _, f := range []string{"cp-p-su", "cp-a-su", "t/su"} {
			if !exists(filepath.Join(sb.ws, f)) {
				t.Errorf("control: %s was not copied\n%s", f, r)
			}
		}
		// Under gVisor, cp -p's copy of the ACL is refused with EPERM (not
		// EOPNOTSUPP, which cp passes over), so cp reports a failure after
		// it made the copy with its mode: the copy's mode is the control
		// there.
		if m := hostMode(filepath.Join(sb.ws, "plain-copy")); m != 0o755 || (!sb.gvisor() && !strings.Contains(r.stdout, "RC control 0")) {
			t.Errorf("control: cp -p of a 0755 file: mode %04o\n%s", m, r)
		}
		noHostPrivilege(t, sb.ws, 0o002)
	})
}

// TestItem21_ServedLayer: a sandbox of hutch serve writes no host path
// (its root is its own layer), so none of these rules applies there: its
// root can make a setuid file in its layer, as dpkg does, and umask(0)
// is set. It still cannot write a file capability: it holds no
// CAP_SETFCAP (not in its bounding set either), and the kernel refuses.
func TestItem21_ServedLayer(t *testing.T) {
	forEachServedTier(t, func(t *testing.T, tier []string) {
		d := startServed(t, "", false, tier...)
		id := d.createCLI()
		a := d.attacker(id)
		r := d.client("exec", id, "--", a, "whoami", "w_chmod:4755", "w_setcap:fset", "w_umask0")
		got := attacks(r.stdout)
		who := whoami(t, r, "whoami")
		for _, set := range []string{"capeff", "capprm", "capbnd"} {
			var caps uint64
			if _, err := fmt.Sscanf(who[set], "%x", &caps); err != nil {
				t.Fatalf("%s: %q", set, who[set])
			}
			if caps&(1<<unix.CAP_SETFCAP) != 0 {
				t.Errorf("the served sandbox's root holds CAP_SETFCAP in %s (%s)", set, who[set])
			}
		}
		if got["w_chmod:4755"] != "ok mode=4755" {
			t.Errorf("control: a setuid file in the sandbox's own layer: %q\n%s", got["w_chmod:4755"], r)
		}
		// gVisor keeps no file capabilities at all: it refuses the
		// attribute as unsupported.
		if res := got["w_setcap:fset"]; res != "EPERM" && !(underGVisor(tier) && res == "ENOTSUP") {
			t.Errorf("a file capability in a served sandbox: got %q, want EPERM\n%s", res, r)
		}
		// The control reads the umask back from /proc/self/status, which
		// has no Umask line under gVisor.
		if !underGVisor(tier) && (!strings.HasPrefix(got["w_umask0"], "ok returned=") || !strings.Contains(got["w_umask0"], "file=0666")) {
			t.Errorf("umask(0) in a served sandbox without host paths: %q\n%s", got["w_umask0"], r)
		}
	})
}

// TestItem21_CpFromServed: hutch cp from a served sandbox to the host
// brings no privilege with it. Inside its own layer the sandbox may make a
// setuid, world-writable copy of the shell and a world-writable directory
// holding set-id and sticky files (the control: it can); copied out, file
// and tree land without set-id or sticky bits, with the local umask, and
// nothing writable by others (nor by the group when the umask withholds
// it).
func TestItem21_CpFromServed(t *testing.T) {
	forEachServedTier(t, func(t *testing.T, tier []string) {
		d := startServed(t, "", false, tier...)
		id := d.createCLI()
		r := d.client("exec", id, "--", "sh", "-c", `set -e
cp /bin/sh x && chmod 6777 x
mkdir -m 0777 d && cp /bin/sh d/suid && chmod 4777 d/suid && touch d/plain && chmod 0666 d/plain
mkdir -m 1777 d/tmp && touch d/tmp/f && chmod 2777 d/tmp/f
stat -c '%a %n' x d d/suid d/plain d/tmp d/tmp/f`)
		if r.code != 0 || !strings.Contains(r.stdout, "6777 x") || !strings.Contains(r.stdout, "4777 d/suid") {
			t.Fatalf("control: the sandbox could not make set-id files in its layer:\n%s", r)
		}
		host := hostDir(t, 0, "cp")
		for _, c := range [][2]string{{id + ":x", filepath.Join(host, "x")}, {id + ":d", filepath.Join(host, "d")}} {
			if r := d.client("cp", c[0], c[1]); r.code != 0 {
				t.Fatalf("hutch cp %s %s:\n%s", c[0], c[1], r)
			}
		}
		for _, f := range []string{"x", "d/suid", "d/plain", "d/tmp/f"} {
			if !exists(filepath.Join(host, f)) {
				t.Errorf("control: %s was not copied", f)
			}
		}
		noHostPrivilege(t, host, cliWithheld())
		for _, f := range []string{"d", "d/tmp"} {
			if m := hostMode(filepath.Join(host, f)); m&0o1000 != 0 {
				t.Errorf("host: %s is sticky (%04o)", f, m)
			}
		}
	})
}

// cliWithheld is what hostperm withholds under this test
// process's umask, which the client commands inherit.
func cliWithheld() fs.FileMode { return hostperm.Withheld(hostperm.Umask()) }
