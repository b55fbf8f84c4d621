package microvm

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/seccomp"
)

// TestHostWrites: on a thread under hostWrites (the workspace's
// virtiofsd's confinement, which its reaper installs), chmod to a set-id
// mode or one granting others write fails with EPERM, an extended
// attribute with EOPNOTSUPP, umask(0) fails and the sandbox's umask stays,
// so a file made asking for 0666 gets 0644; an ordinary chmod works (the
// control). The thread has a file system context of its own (its umask is
// not the test process's) and ends with the goroutine, its filter with it.
func TestHostWrites(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	type result struct {
		name string
		err  error
	}
	results := make(chan []result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread has the filter
		var out []result
		defer func() { results <- out }()
		add := func(name string, err error) { out = append(out, result{name, err}) }
		if err := unix.Unshare(unix.CLONE_FS); err != nil {
			add("unshare", err)
			return
		}
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			add("no_new_privs", err)
			return
		}
		if err := hostWrites(0o022); err != nil {
			add("hostWrites", err)
			return
		}
		add("chmod 4755", unix.Chmod(file, 0o4755))
		add("chmod 2755", unix.Fchmodat(unix.AT_FDCWD, file, 0o2755, 0))
		add("chmod 666", unix.Chmod(file, 0o666))
		add("chmod 640", unix.Chmod(file, 0o640))
		add("setxattr", unix.Setxattr(file, "user.hutch", []byte("x"), 0))
		_, _, e := unix.RawSyscall(unix.SYS_UMASK, 0, 0, 0)
		add("umask 0", errnoErr(e))
		fd, err := unix.Open(filepath.Join(dir, "made"), unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC, 0o666)
		if err == nil {
			unix.Close(fd)
		}
		add("create 0666", err)
		_, err = unix.Open(filepath.Join(dir, "setid"), unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC, 0o4755)
		add("create 4755", err)
	}()
	want := map[string]error{
		"chmod 4755": unix.EPERM, "chmod 2755": unix.EPERM, "chmod 666": unix.EPERM, "chmod 640": nil,
		"setxattr": unix.EOPNOTSUPP, "umask 0": unix.EPERM, "create 0666": nil, "create 4755": unix.EPERM,
	}
	got := <-results
	if len(got) != len(want) {
		t.Fatalf("the confined thread stopped early: %v", got)
	}
	for _, r := range got {
		if r.err != want[r.name] {
			t.Errorf("%s: %v, want %v", r.name, r.err, want[r.name])
		}
	}
	st, err := os.Stat(filepath.Join(dir, "made"))
	if err != nil {
		t.Fatal(err)
	}
	if m := st.Mode().Perm(); m != 0o644 {
		t.Errorf("a file made asking for 0666 has mode %04o, want 0644: the sandbox's umask did not stay", m)
	}
	if _, err := os.Stat(filepath.Join(dir, "setid")); err == nil {
		t.Errorf("a set-id file was made")
	}
}

// TestVirtiofsdRules: virtiofsd's rules are hostperm's for the sandbox's
// umask with no call handed to a supervisor (it has none): a filter of
// rules alone refuses one.
func TestVirtiofsdRules(t *testing.T) {
	rules := virtiofsdRules(0o022)
	if len(rules) != len(seccomp.HostWriteRules(0o002)) {
		t.Errorf("%d rules, want hostperm's %d", len(rules), len(seccomp.HostWriteRules(0o002)))
	}
	for _, r := range rules {
		if r.Action == seccomp.Notify {
			t.Errorf("rule for %s hands calls to a supervisor", r.Name)
		}
	}
	if err := seccomp.InstallRules([]seccomp.Rule{{Name: "umask", Action: seccomp.Notify}}); err == nil {
		t.Errorf("InstallRules took a rule for a supervisor")
	}
}

func errnoErr(e unix.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}
