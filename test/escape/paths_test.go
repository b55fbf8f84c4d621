//go:build linux

package escape

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/sandbox"
)

// TestItem07_Symlinks: links the sandbox makes in its workspace do not
// reach masked files (S3, S5): a symbolic link to ~/.ssh or to a key, a
// link to / followed by the key's path, a hard link or a copy of a masked
// file, a ".." path out of the workspace, and replacing a protected file
// by a link all fail, while a link to an ordinary file of the home works.
// The home is unchanged afterwards.
func TestItem07_Symlinks(t *testing.T) {
	forEachMode(t, func(t *testing.T, sb *harness) {
		secrets, notes := plantSecrets(t, sb.home, sb.mode.uid)
		before := snapshot(t, sb.home)
		script := `
ln -s "$HOME/notes.txt" notes && cat notes; echo "RC control $?"
ln -s "$HOME/.ssh" sshdir && cat sshdir/id_rsa; echo "RC dirlink $?"
ln -s "$HOME/.ssh/id_rsa" key && cat key; echo "RC filelink $?"
ln -s / root && cat "root$HOME/.aws/credentials"; echo "RC rootlink $?"
ln "$HOME/.ssh/id_rsa" hard; echo "RC hardlink $?"
ln "$HOME/.netrc" hard2; echo "RC hardlink2 $?"
cp "$HOME/.git-credentials" copy; echo "RC copy $?"
cat "../../../../../../..$HOME/.netrc"; echo "RC dotdot $?"
rm -f .bashrc; ln -s "$HOME/.netrc" .bashrc; echo "RC replace $?"
cat .bashrc; echo "RC readreplaced $?"
`
		r := sb.run(opts{}, script)
		noSecret(t, r, secrets)
		if !strings.Contains(r.stdout, notes) || !strings.Contains(r.stdout, "RC control 0") {
			t.Errorf("control failed: a link to ~/notes.txt was not readable\n%s", r)
		}
		mustFail := []string{"dirlink", "filelink", "rootlink", "hardlink", "hardlink2", "copy", "dotdot", "replace"}
		if sb.gvisor() {
			// The gVisor tier masks a deny-read file with an empty one:
			// reading or copying it succeeds and yields nothing, which
			// noSecret above and the empty copy below check.
			mustFail = slices.DeleteFunc(mustFail, func(a string) bool { return a == "copy" || a == "dotdot" })
		}
		for _, a := range mustFail {
			if strings.Contains(r.stdout, "RC "+a+" 0") {
				t.Errorf("%s: succeeded\n%s", a, r)
			}
		}
		for _, name := range []string{"hard", "hard2"} {
			if exists(filepath.Join(sb.ws, name)) {
				t.Errorf("a hard link %s to a masked file was created", name)
			}
		}
		if b, err := os.ReadFile(filepath.Join(sb.ws, "copy")); err == nil && len(b) > 0 {
			t.Errorf("a copy of ~/.git-credentials holds %d bytes", len(b))
		}
		if exists(filepath.Join(sb.ws, ".bashrc")) {
			t.Errorf("the .bashrc placeholder (or a replacement) was left in the workspace")
		}
		sameTree(t, sb.home, before)
	})
}

// TestItem07_BindMountAliases: a denied file is denied under every name
// the host's mounts give it, not only the one the policy lists (S3): with
// the home bound at another directory, ~/.ssh bound at a third and the
// host's root bound at a fourth (as backup tools, container setups and
// shared-folder managers leave them), the credentials read through those
// names yield nothing, while an ordinary file of the home stays readable
// through them. Both layers of the namespace tier (the mounts over denied
// paths, and Landlock, whose rules on a bound directory would otherwise
// grant what lies below its source) and the gVisor tier's view are
// covered.
func TestItem07_BindMountAliases(t *testing.T) {
	forEachMode(t, func(t *testing.T, sb *harness) {
		secrets, notes := plantSecrets(t, sb.home, sb.mode.uid)
		// In a mount namespace of hutch's own (opts.binds), which the
		// sandbox's copies.
		var binds [][2]string
		bind := func(src, what string) string {
			dst := hostDir(t, 0, what)
			binds = append(binds, [2]string{src, dst})
			return dst
		}
		aliasHome := bind(sb.home, "alias-home")
		aliasSSH := bind(filepath.Join(sb.home, ".ssh"), "alias-ssh")
		aliasRoot := bind("/", "alias-root")
		script := fmt.Sprintf(`
cat %[1]s/notes.txt; echo "RC control $?"
cat %[1]s/.ssh/id_rsa; echo "RC home $?"
cat %[1]s/.aws/credentials; echo "RC home2 $?"
cat %[2]s/id_ed25519; echo "RC ssh $?"
ls %[2]s; echo "RC sshlist $?"
cat %[3]s%[4]s/.netrc; echo "RC root $?"
grep -r hutch-fake-secret %[1]s %[2]s 2>/dev/null; echo "RC grep $?"
`, aliasHome, aliasSSH, aliasRoot, sb.home)
		r := sb.run(opts{binds: binds}, script)
		noSecret(t, r, secrets)
		if !strings.Contains(r.stdout, notes) || !strings.Contains(r.stdout, "RC control 0") {
			t.Errorf("control failed: ~/notes.txt was not readable through the home's other name\n%s", r)
		}
		if !sb.gvisor() {
			// The gVisor tier shows a denied file as an empty one, which
			// noSecret checks; here every read must fail.
			for _, a := range []string{"home", "home2", "ssh", "root"} {
				if strings.Contains(r.stdout, "RC "+a+" 0") {
					t.Errorf("%s: read succeeded\n%s", a, r)
				}
			}
		}
	})
}

// TestItem07_LinkFollowedNextRun: links a sandbox leaves in its workspace
// are never followed by hutch itself on the host (S5). The first run plants
// .config → ~/.config and .ssh → ~/.ssh; the second run, in the same
// workspace, must neither create placeholders through them (in the real
// ~/.config) nor let what the sandbox writes through them reach the host.
func TestItem07_LinkFollowedNextRun(t *testing.T) {
	forEachMode(t, func(t *testing.T, sb *harness) {
		mkdirs(t, sb.home, sb.mode.uid, ".config", ".ssh")
		writeFile(t, filepath.Join(sb.home, ".config/keep"), "keep\n", 0o644, sb.mode.uid)
		before := snapshot(t, sb.home)
		r := sb.run(opts{}, `ln -s "$HOME/.config" .config && ln -s "$HOME/.ssh" .ssh && echo planted`)
		if !strings.Contains(r.stdout, "planted") {
			t.Fatalf("could not plant the links\n%s", r)
		}
		script := `
cat .config/keep; echo "RC control $?"
mkdir -p .config/fish .config/autostart 2>/dev/null
echo pwned > .config/fish/config.fish; echo "RC fish $?"
echo pwned > .config/autostart/x.desktop; echo "RC autostart $?"
echo pwned > .ssh/authorized_keys; echo "RC authkeys $?"
`
		r = sb.run(opts{}, script)
		if !strings.Contains(r.stdout, "keep\nRC control 0") {
			t.Errorf("control failed: ~/.config/keep was not readable through the planted link\n%s", r)
		}
		// Writes through the links land in the sandbox's own layer over
		// the home (--home ro), never in the host's home.
		sameTree(t, sb.home, before)
	})
}

// TestItem07_RenameParent: with the home directory as the workspace, the
// sandbox renames the parent of a protected path (~/.config, holding the
// protected ~/.config/fish and the masked ~/.config/gh) and recreates the
// protected path under the old name. The host must end up unchanged
// apart from the control file: no new fish config, nothing moved (S5).
func TestItem07_RenameParent(t *testing.T) {
	forEachMode(t, func(t *testing.T, sb *harness) {
		mkdirs(t, sb.home, sb.mode.uid, ".config/fish", ".config/gh")
		writeFile(t, filepath.Join(sb.home, ".config/fish/config.fish"), "# original\n", 0o644, sb.mode.uid)
		secret := randomName("hutch-fake-secret-")
		writeFile(t, filepath.Join(sb.home, ".config/gh/hosts.yml"), secret+"\n", 0o644, sb.mode.uid)
		before := snapshot(t, sb.home)
		script := `
echo control > control; echo "RC control $?"
mv .config .c2; echo "RC rename $?"
mkdir -p .config/fish .config/autostart .config/systemd/user
echo pwned > .config/fish/config.fish; echo "RC fish $?"
echo pwned > .config/autostart/x.desktop; echo "RC autostart $?"
echo pwned > .config/systemd/user/x.service; echo "RC systemd $?"
cat .c2/gh/hosts.yml .config/gh/hosts.yml 2>&1
`
		r := sb.run(opts{dir: sb.home}, script)
		if strings.Contains(r.stdout, secret) {
			t.Errorf("S3 violated: ~/.config/gh/hosts.yml was read after renaming its parent\n%s", r)
		}
		if !strings.Contains(r.stdout, "RC control 0") {
			t.Errorf("control failed: the workspace (home) was not writable\n%s", r)
		}
		var recreated []string
		for _, a := range []string{"fish", "autostart", "systemd"} {
			if strings.Contains(r.stdout, "RC "+a+" 0") {
				recreated = append(recreated, a)
			}
		}
		if len(recreated) > 0 {
			t.Errorf("protected paths recreated after renaming their parent: %s\n%s", strings.Join(recreated, ", "), r)
		}
		sameTree(t, sb.home, before, "control")
	})
}

// startVictim starts a host process as uid, the host uid the sandbox runs
// as, so that file permissions alone would let the sandbox signal or trace
// it; only the sandbox's isolation stands in the way.
func startVictim(t *testing.T, uid int) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("/bin/sleep", "1000")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid), Groups: []uint32{}}}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd
}

// alive reports whether pid runs and is not a zombie.
func alive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(stat), ')')
	return i > 0 && i+2 < len(stat) && stat[i+2] != 'Z' && stat[i+2] != 'X'
}

// hostUID is the host uid of a sandbox's processes: the invoking user's, or
// hutch's unused mapped id when root starts it.
func hostUID(m mode) int {
	if m.uid == 0 {
		return sandbox.RootMappedID
	}
	return m.uid
}

// TestItem08_ProcAndProcesses: the sandbox cannot reach other processes
// (S1, S4): /proc/self/root leads to the sandbox's own view, init's memory,
// environment and root are closed, ptrace, process_vm_readv/writev and
// pidfd_getfd are refused, a host process of the same host uid can be
// neither signalled nor opened as a pidfd, and "kill -9 -1" kills only the
// sandbox's own processes: the host process and hutch survive, and hutch
// reports the command's own exit status. Signalling the command's own
// shell works (the control).
func TestItem08_ProcAndProcesses(t *testing.T) {
	forEachMode(t, func(t *testing.T, sb *harness) {
		secrets, _ := plantSecrets(t, sb.home, sb.mode.uid)
		victim := startVictim(t, hostUID(sb.mode))
		vpid := victim.Process.Pid
		a := sb.attacker()
		script := fmt.Sprintf(`
cat "/proc/self/root$HOME/.ssh/id_rsa"; echo "RC procroot $?"
ls /proc/1/root/ >/dev/null; echo "RC initroot $?"
echo "INIT-CMDLINE $(tr '\0' '\n' </proc/1/cmdline | head -n 2 | tr '\n' ' ')"
[ -e /proc/%[2]d ] && echo "VISIBLE host pid"
kill -0 $$; echo "RC selfkill $?"
%[1]s openproc:/proc/1/mem openproc:/proc/1/environ ptrace process_vm_readv process_vm_writev pidfd_getfd kill:%[2]d pidfd_open:%[2]d
sleep 100 & 
kill -9 -1; echo "RC killall $?"
echo survived
exit 7
`, a, vpid)
		r := sb.run(opts{}, script)
		noSecret(t, r, secrets)
		want := map[string][]string{
			"openproc:/proc/1/mem":             {"EACCES"},
			"openproc:/proc/1/environ":         {"EACCES"},
			"ptrace":                           {"EPERM"},
			"process_vm_readv":                 {"EPERM"},
			"process_vm_writev":                {"EPERM"},
			"pidfd_getfd":                      {"EPERM"},
			"kill:" + strconv.Itoa(vpid):       {"ESRCH"},
			"pidfd_open:" + strconv.Itoa(vpid): {"ESRCH"},
		}
		bad := []string{"RC procroot 0", "RC initroot 0", "VISIBLE host pid"}
		if sb.gvisor() {
			// Under gVisor no hutch process runs inside the sandbox: PID 1
			// is the command's own shell, whose environment and root are
			// the command's own, and process_vm_readv/writev (on the
			// attacker's own memory) are calls of gVisor's kernel on the
			// sandbox's memory. What must hold is that PID 1 is the
			// command and that nothing outside is reached: the host
			// process is neither seen nor signalled, below.
			for _, own := range []string{"openproc:/proc/1/environ", "process_vm_readv", "process_vm_writev"} {
				delete(want, own)
			}
			bad = slices.DeleteFunc(bad, func(s string) bool { return s == "RC initroot 0" })
			if !strings.Contains(r.stdout, "INIT-CMDLINE /bin/sh -c") {
				t.Errorf("under gVisor, PID 1 is not the command\n%s", r)
			}
		}
		expect(t, r, want)
		for _, bad := range bad {
			if strings.Contains(r.stdout, bad) {
				t.Errorf("%s\n%s", bad, r)
			}
		}
		if !strings.Contains(r.stdout, "RC selfkill 0") {
			t.Errorf("control failed: the shell could not signal itself\n%s", r)
		}
		if r.code != 7 || !strings.Contains(r.stdout, "survived") {
			t.Errorf("after kill -9 -1 inside, want the command's own exit 7 from hutch\n%s", r)
		}
		time.Sleep(100 * time.Millisecond) // let a stray SIGKILL land, if one was sent
		if !alive(vpid) {
			t.Errorf("the host process %d (host uid %d) was killed from inside the sandbox", vpid, hostUID(sb.mode))
		}
	})
}
