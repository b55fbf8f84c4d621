package landlock

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// Environment of the re-executed helper process.
const (
	envScenario = "HUTCH_LANDLOCK_SCENARIO" // name of the scenario to run
	envDir      = "HUTCH_LANDLOCK_DIR"      // the scenario's directory tree
	envSocket   = "HUTCH_LANDLOCK_SOCKET"   // abstract socket the parent listens on
)

// probe is one operation the helper attempts after Restrict, and its
// expected outcome: "ok" or an errno name. Before ABI since, the outcome is
// before instead.
type probe struct {
	name   string
	do     func(dir, socket string) error
	want   string
	since  int
	before string
}

func (p probe) expect(abi int) string {
	if abi < p.since {
		return p.before
	}
	return p.want
}

// scenario is a Config applied in a helper process and the probes run
// under it. Paths in the config are relative to the scenario's directory,
// unless absolute.
type scenario struct {
	minABI int
	config Config
	probes []probe
}

// fsTree is the directory tree of the filesystem scenario.
var fsTree = []string{
	"ro/", "ro/public", "ro/secret", "ro/secretdir/", "ro/secretdir/file", "ro/sub/", "ro/sub/other", "ro/sub/key",
	"ro/alias -> secret", "ro/rwfile", "rw/", "rw/a", "rw/sub/",
}

var scenarios = map[string]scenario{
	"fs": {
		minABI: 1,
		config: Config{
			ReadOnly:  []string{"/"},
			ReadWrite: []string{"rw", "missing", "ro/rwfile"},
			Devices:   []string{"/dev/null"},
			DenyRead:  []string{"ro/secret", "ro/secretdir", "ro/sub/key"},
		},
		probes: []probe{
			{name: "read_public", do: inDir(openRead, "ro/public"), want: "ok"},
			{name: "read_sibling_deeper", do: inDir(openRead, "ro/sub/other"), want: "ok"},
			{name: "read_outside_tree", do: func(string, string) error { return openRead(os.Args[0]) }, want: "ok"},
			{name: "read_denied_file", do: inDir(openRead, "ro/secret"), want: "EACCES"},
			{name: "read_denied_via_symlink", do: inDir(openRead, "ro/alias"), want: "EACCES"},
			{name: "read_in_denied_dir", do: inDir(openRead, "ro/secretdir/file"), want: "EACCES"},
			{name: "read_denied_deeper", do: inDir(openRead, "ro/sub/key"), want: "EACCES"},
			{name: "list_dir", do: inDir(listDir, "ro"), want: "ok"},
			// Documented limitation: names in a denied directory stay listable.
			{name: "list_denied_dir", do: inDir(listDir, "ro/secretdir"), want: "ok"},
			{name: "create_read_only", do: inDir(create, "ro/new"), want: "EACCES"},
			{name: "create_next_to_tree", do: inDir(create, "../new"), want: "EACCES"},
			{name: "write_read_only", do: inDir(openWrite, "ro/public"), want: "EACCES"},
			{name: "unlink_read_only", do: inDir(unix.Unlink, "ro/public"), want: "EACCES"},
			{name: "truncate_read_only", do: inDir(truncate, "ro/public"), want: "EACCES", since: 3, before: "ok"},
			{name: "create_writable", do: inDir(create, "rw/new"), want: "ok"},
			{name: "write_writable", do: inDir(openWrite, "rw/a"), want: "ok"},
			// A writable file: the rule's directory rights must be dropped.
			{name: "write_writable_file", do: inDir(openWrite, "ro/rwfile"), want: "ok"},
			{name: "mkdir_writable", do: inDir(mkdir, "rw/dir"), want: "ok"},
			{name: "rename_writable", do: func(dir, _ string) error {
				return unix.Rename(filepath.Join(dir, "rw/a"), filepath.Join(dir, "rw/sub/a"))
			}, want: "ok", since: 2, before: "EXDEV"},
			{name: "exec_read_only", do: func(string, string) error {
				return exec.Command(os.Args[0], "-test.run=^$").Run()
			}, want: "ok"},
			{name: "open_granted_device", do: func(string, string) error { return openWrite("/dev/null") }, want: "ok"},
			// The driver refuses TCGETS (ENOTTY): Landlock let it through.
			{name: "ioctl_granted_device", do: func(string, string) error { return ioctlTCGETS("/dev/null") }, want: "ENOTTY"},
			{name: "write_other_device", do: func(string, string) error { return openWrite("/dev/zero") }, want: "EACCES"},
			{name: "ioctl_other_device", do: func(string, string) error { return ioctlTCGETS("/dev/zero") }, want: "EACCES", since: 5, before: "ENOTTY"},
		},
	},
	"scope": {
		minABI: 6,
		config: Config{ReadOnly: []string{"/"}, Scope: true},
		probes: []probe{
			{name: "signal_parent", do: signalParent, want: "EPERM"},
			{name: "connect_abstract", do: connectAbstract, want: "EPERM"},
		},
	},
	"noscope": {
		minABI: 1,
		config: Config{ReadOnly: []string{"/"}},
		probes: []probe{
			{name: "signal_parent", do: signalParent, want: "ok"},
			{name: "connect_abstract", do: connectAbstract, want: "ok"},
		},
	},
}

func inDir(f func(string) error, rel string) func(dir, socket string) error {
	return func(dir, _ string) error { return f(filepath.Join(dir, rel)) }
}

func openRead(p string) error { return openClose(p, unix.O_RDONLY) }

func openWrite(p string) error { return openClose(p, unix.O_WRONLY) }

func create(p string) error { return openClose(p, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL) }

func listDir(p string) error {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	_, err = unix.Getdents(fd, make([]byte, 4096))
	return err
}

func mkdir(p string) error { return unix.Mkdir(p, 0o755) }

func truncate(p string) error { return unix.Truncate(p, 0) }

func openClose(p string, flags int) error {
	fd, err := unix.Open(p, flags|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return err
	}
	return unix.Close(fd)
}

func ioctlTCGETS(p string) error {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	_, err = unix.IoctlGetTermios(fd, unix.TCGETS)
	return err
}

func signalParent(string, string) error { return unix.Kill(unix.Getppid(), 0) }

func connectAbstract(_, socket string) error {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Connect(fd, &unix.SockaddrUnix{Name: "@" + socket})
}

// outcome names err the way probes expect it.
func outcome(err error) string {
	var errno unix.Errno
	switch {
	case err == nil:
		return "ok"
	case errors.As(err, &errno):
		return unix.ErrnoName(errno)
	default:
		return strings.ReplaceAll(err.Error(), " ", "_")
	}
}

// TestHelperProcess is the re-executed side of TestRestrict: it restricts
// itself as the scenario says, then prints one "probe NAME OUTCOME" line per
// probe.
func TestHelperProcess(t *testing.T) {
	name := os.Getenv(envScenario)
	if name == "" {
		t.Skip("helper process of TestRestrict")
	}
	sc := scenarios[name]
	dir, socket := os.Getenv(envDir), os.Getenv(envSocket)
	runtime.LockOSThread()
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		t.Fatalf("set no_new_privs: %v", err)
	}
	c := sc.config
	abs := func(ps []string) []string {
		out := make([]string, len(ps))
		for i, p := range ps {
			if !filepath.IsAbs(p) {
				p = filepath.Join(dir, p)
			}
			out[i] = p
		}
		return out
	}
	c.ReadOnly, c.ReadWrite, c.Devices, c.DenyRead = abs(c.ReadOnly), abs(c.ReadWrite), abs(c.Devices), abs(c.DenyRead)
	st, err := Restrict(c)
	if err != nil {
		t.Fatalf("Restrict: %v (status %+v)", err, st)
	}
	for _, p := range sc.probes {
		fmt.Printf("probe %s %s\n", p.name, outcome(p.do(dir, socket)))
	}
}

func TestRestrict(t *testing.T) {
	abi := ABI()
	for name, sc := range scenarios {
		t.Run(name, func(t *testing.T) {
			testutil.Need(t, abi > 0, "kernel has no landlock")
			testutil.Need(t, abi >= sc.minABI, fmt.Sprintf("kernel landlock ABI %d < %d", abi, sc.minABI))
			dir := makeTree(t, fsTree...)
			socket := fmt.Sprintf("hutch-landlock-test-%d-%s", os.Getpid(), name)
			ln, err := net.Listen("unix", "@"+socket)
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()

			cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$")
			cmd.Env = append(os.Environ(), envScenario+"="+name, envDir+"="+dir, envSocket+"="+socket)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("helper: %v\nstdout:\n%s\nstderr:\n%s", err, out, stderr.Bytes())
			}
			got := map[string]string{}
			sc := bufio.NewScanner(bytes.NewReader(out))
			for sc.Scan() {
				if f := strings.Fields(sc.Text()); len(f) == 3 && f[0] == "probe" {
					got[f[1]] = f[2]
				}
			}
			for _, p := range scenarios[name].probes {
				if want := p.expect(abi); got[p.name] != want {
					t.Errorf("%s: got %q, want %q", p.name, got[p.name], want)
				}
			}
		})
	}
}

func TestRestrictWithoutNoNewPrivs(t *testing.T) {
	testutil.Need(t, ABI() > 0, "kernel has no landlock")
	// Without no_new_privs the kernel refuses before anything is enforced,
	// so this can run in the test process itself (on a goroutine of its
	// own, since Restrict locks its thread).
	v, err := unix.PrctlRetInt(unix.PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0)
	testutil.Need(t, err == nil && v == 0, fmt.Sprintf("no_new_privs already set (%d, %v)", v, err))
	done := make(chan error)
	go func() {
		// CAP_SYS_ADMIN stands in for no_new_privs: root's thread drops
		// it from its effective set first (capabilities are per thread,
		// and this one ends with the goroutine, which keeps it locked).
		runtime.LockOSThread()
		hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
		var data [2]unix.CapUserData
		if err := unix.Capget(&hdr, &data[0]); err != nil {
			done <- err
			return
		}
		data[unix.CAP_SYS_ADMIN/32].Effective &^= 1 << (unix.CAP_SYS_ADMIN % 32)
		if err := unix.Capset(&hdr, &data[0]); err != nil {
			done <- err
			return
		}
		_, err := Restrict(Config{ReadOnly: []string{"/"}})
		done <- err
	}()
	if err := <-done; !errors.Is(err, unix.EPERM) {
		t.Errorf("Restrict without no_new_privs: %v, want EPERM", err)
	}
}

func TestABI(t *testing.T) {
	abi := ABI()
	testutil.Need(t, abi > 0, "kernel has no landlock")
	data, err := os.ReadFile("/sys/kernel/security/lsm")
	if err == nil && !strings.Contains(string(data), "landlock") {
		t.Errorf("ABI() = %d but landlock is not in the LSM list %q", abi, data)
	}
	t.Logf("landlock ABI %s", strconv.Itoa(abi))
}

// TestConstants checks the package's copies of the kernel's constants
// against golang.org/x/sys/unix.
func TestConstants(t *testing.T) {
	tests := []struct {
		name      string
		got, want uint64
	}{
		{"execute", AccessExecute, unix.LANDLOCK_ACCESS_FS_EXECUTE},
		{"write_file", AccessWriteFile, unix.LANDLOCK_ACCESS_FS_WRITE_FILE},
		{"read_file", AccessReadFile, unix.LANDLOCK_ACCESS_FS_READ_FILE},
		{"read_dir", AccessReadDir, unix.LANDLOCK_ACCESS_FS_READ_DIR},
		{"remove_dir", AccessRemoveDir, unix.LANDLOCK_ACCESS_FS_REMOVE_DIR},
		{"remove_file", AccessRemoveFile, unix.LANDLOCK_ACCESS_FS_REMOVE_FILE},
		{"make_char", AccessMakeChar, unix.LANDLOCK_ACCESS_FS_MAKE_CHAR},
		{"make_dir", AccessMakeDir, unix.LANDLOCK_ACCESS_FS_MAKE_DIR},
		{"make_reg", AccessMakeReg, unix.LANDLOCK_ACCESS_FS_MAKE_REG},
		{"make_sock", AccessMakeSock, unix.LANDLOCK_ACCESS_FS_MAKE_SOCK},
		{"make_fifo", AccessMakeFifo, unix.LANDLOCK_ACCESS_FS_MAKE_FIFO},
		{"make_block", AccessMakeBlock, unix.LANDLOCK_ACCESS_FS_MAKE_BLOCK},
		{"make_sym", AccessMakeSym, unix.LANDLOCK_ACCESS_FS_MAKE_SYM},
		{"refer", AccessRefer, unix.LANDLOCK_ACCESS_FS_REFER},
		{"truncate", AccessTruncate, unix.LANDLOCK_ACCESS_FS_TRUNCATE},
		{"ioctl_dev", AccessIoctlDev, unix.LANDLOCK_ACCESS_FS_IOCTL_DEV},
		{"scope_abstract_unix_socket", scopeAbstractUnixSocket, unix.LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET},
		{"scope_signal", scopeSignal, unix.LANDLOCK_SCOPE_SIGNAL},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s = %#x, kernel's is %#x", tt.name, tt.got, tt.want)
		}
	}
}

// BenchmarkRuleset measures what Restrict costs on every sandbox start short
// of enforcing: planning the realistic Config, creating the ruleset and
// adding every rule.
func BenchmarkRuleset(b *testing.B) {
	abi := ABI()
	testutil.Need(b, abi > 0, "kernel has no landlock")
	c := realisticConfig(b.TempDir())
	for b.Loop() {
		rules, _, err := Plan(c, abi)
		if err != nil {
			b.Fatal(err)
		}
		fd, err := createRuleset(min(abi, maxABI), c.Scope)
		if err != nil {
			b.Fatal(err)
		}
		for _, r := range rules {
			if err := addRule(fd, r); err != nil {
				b.Fatal(err)
			}
		}
		unix.Close(fd)
	}
}
