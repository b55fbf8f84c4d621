package seccomp

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// TestConstants compares the values this package writes out with
// golang.org/x/sys/unix.
func TestConstants(t *testing.T) {
	// seccompDataLayout mirrors struct seccomp_data.
	type seccompDataLayout struct {
		nr   int32
		arch uint32
		ip   uint64
		args [6]uint64
	}
	var sd seccompDataLayout
	tests := []struct {
		name      string
		got, want uint64
	}{
		{"SECCOMP_RET_KILL_PROCESS", retKillProcess, unix.SECCOMP_RET_KILL_PROCESS},
		{"SECCOMP_RET_ERRNO", retErrno, unix.SECCOMP_RET_ERRNO},
		{"SECCOMP_RET_ALLOW", retAllow, unix.SECCOMP_RET_ALLOW},
		{"EPERM", errnoEPERM, uint64(unix.EPERM)},
		{"ENOSYS", errnoENOSYS, uint64(unix.ENOSYS)},
		{"EAFNOSUPPORT", errnoEAFNOSUPPORT, uint64(unix.EAFNOSUPPORT)},
		{"BPF_LD|BPF_W|BPF_ABS", opLdAbsW, unix.BPF_LD | unix.BPF_W | unix.BPF_ABS},
		{"BPF_ALU|BPF_AND|BPF_K", opAndK, unix.BPF_ALU | unix.BPF_AND | unix.BPF_K},
		{"BPF_JMP|BPF_JA", opJa, unix.BPF_JMP | unix.BPF_JA},
		{"BPF_JMP|BPF_JEQ|BPF_K", opJeqK, unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K},
		{"BPF_JMP|BPF_JGE|BPF_K", opJgeK, unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K},
		{"BPF_JMP|BPF_JSET|BPF_K", opJsetK, unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K},
		{"BPF_JMP|BPF_JGT|BPF_K", opJgtK, unix.BPF_JMP | unix.BPF_JGT | unix.BPF_K},
		{"BPF_RET|BPF_K", opRetK, unix.BPF_RET | unix.BPF_K},
		{"BPF_MAXINSNS", maxInsns, unix.BPF_MAXINSNS},
		{"AUDIT_ARCH_X86_64", auditArchX86_64, unix.AUDIT_ARCH_X86_64},
		{"AUDIT_ARCH_AARCH64", auditArchAArch64, unix.AUDIT_ARCH_AARCH64},
		{"AUDIT_ARCH_I386", auditArchI386, unix.AUDIT_ARCH_I386},
		{"AUDIT_ARCH_ARM", auditArchARM, unix.AUDIT_ARCH_ARM},
		{"CLONE_NEWNS", cloneNewNS, unix.CLONE_NEWNS},
		{"CLONE_NEWCGROUP", cloneNewCgroup, unix.CLONE_NEWCGROUP},
		{"CLONE_NEWUTS", cloneNewUTS, unix.CLONE_NEWUTS},
		{"CLONE_NEWIPC", cloneNewIPC, unix.CLONE_NEWIPC},
		{"CLONE_NEWUSER", cloneNewUser, unix.CLONE_NEWUSER},
		{"CLONE_NEWPID", cloneNewPID, unix.CLONE_NEWPID},
		{"CLONE_NEWNET", cloneNewNet, unix.CLONE_NEWNET},
		{"CLONE_NEWTIME", cloneNewTime, unix.CLONE_NEWTIME},
		{"CSIGNAL overlaps CLONE_NEWTIME", cloneNewTime & unix.CSIGNAL, cloneNewTime},
		{"AF_UNIX", afUnix, unix.AF_UNIX},
		{"AF_INET", afInet, unix.AF_INET},
		{"AF_INET6", afInet6, unix.AF_INET6},
		{"TIOCSTI", tiocsti, unix.TIOCSTI},
		{"TIOCLINUX", tioclinux, unix.TIOCLINUX},
		{"offsetof(seccomp_data, nr)", offNr, uint64(unsafe.Offsetof(sd.nr))},
		{"offsetof(seccomp_data, arch)", offArch, uint64(unsafe.Offsetof(sd.arch))},
		{"offsetof(seccomp_data, instruction_pointer)", 8, uint64(unsafe.Offsetof(sd.ip))},
		{"offsetof(seccomp_data, args)", offArgs, uint64(unsafe.Offsetof(sd.args))},
		{"sizeof(seccomp_data)", 64, uint64(unsafe.Sizeof(sd))},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: have %#x, unix says %#x", tt.name, tt.got, tt.want)
		}
	}
	if native != nil && binary.NativeEndian.Uint16([]byte{1, 0}) != 1 {
		t.Error("the filter assumes a little-endian seccomp_data")
	}
}

// TestNativeNumbers compares the native syscall table with x/sys/unix.
func TestNativeNumbers(t *testing.T) {
	if native == nil {
		t.Skipf("no syscall table for %s", runtime.GOARCH)
	}
	for _, n := range numbersOf(native) {
		name, nr := n.name, n.nr
		want, ok := xsysNumbers[name]
		switch {
		case nr == absent && ok:
			t.Errorf("%s marked absent, unix has %d", name, want)
		case nr != absent && !ok:
			t.Errorf("%s = %d not checked against unix", name, nr)
		case nr != absent && nr != want:
			t.Errorf("%s = %d, unix has %d", name, nr, want)
		}
	}
	for name := range xsysNumbers {
		if _, ok := native.number(name); !ok {
			t.Errorf("%s missing from the %s table", name, native.name)
		}
	}
}

func TestBuild(t *testing.T) {
	if native == nil {
		_, err := Build(Options{})
		if !errors.Is(err, ErrNotSupported) {
			t.Fatalf("Build on %s: got %v, want ErrNotSupported", runtime.GOARCH, err)
		}
		return
	}
	if _, err := Build(Options{HostWrites: true}); err == nil {
		t.Error("Build with host writes and nothing withheld: no error")
	}
	host, err := Build(Options{HostWrites: true, Withheld: unix.S_IWOTH | unix.S_IWGRP})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s filter with host writes: %d instructions", native.name, len(host))
	filter, err := Build(Options{})
	if err != nil {
		t.Fatal(err)
	}
	prog := make([]instruction, len(filter))
	for i, f := range filter {
		prog[i] = instruction{Code: f.Code, Jt: f.Jt, Jf: f.Jf, K: f.K}
	}
	if err := check(prog); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s filter: %d instructions", native.name, len(filter))
	for _, tt := range []struct {
		nr   int
		args [6]uint64
		want uint32
	}{
		{unix.SYS_GETPID, [6]uint64{}, retAllow},
		{unix.SYS_PTRACE, [6]uint64{}, retErrno | errnoEPERM},
		{unix.SYS_SOCKET, [6]uint64{unix.AF_NETLINK}, retErrno | errnoEOPNOTSUPP},
		{unix.SYS_SOCKET, [6]uint64{unix.AF_PACKET}, retErrno | errnoEAFNOSUPPORT},
		{unix.SYS_IOCTL, [6]uint64{0, 0xdeadbeef_00000000 | unix.TIOCSTI}, retErrno | errnoEPERM},
		{unix.SYS_CLONE3, [6]uint64{}, retErrno | errnoENOSYS},
	} {
		got, err := run(prog, seccompData{nr: int32(tt.nr), arch: native.audit, args: tt.args})
		if err != nil {
			t.Fatal(err)
		}
		if got != tt.want {
			t.Errorf("nr %d: got %s, want %s", tt.nr, retName(got), retName(tt.want))
		}
	}
}

const helperEnv = "HUTCH_SECCOMP_HELPER"

// helperCheck is one system call the helper makes under the filter, and
// the errno the parent expects (0 for success).
type helperCheck struct {
	name string
	want syscall.Errno
	call func() syscall.Errno
}

func helperChecks() []helperCheck {
	var b byte
	ptr := uintptr(unsafe.Pointer(&b))
	socket := func(domain uint64, typ int) func() syscall.Errno {
		return func() syscall.Errno {
			fd, _, e := unix.Syscall(unix.SYS_SOCKET, uintptr(domain), uintptr(typ), 0)
			if e == 0 {
				unix.Close(int(fd))
			}
			return e
		}
	}
	raw := func(nr uintptr, a ...uintptr) func() syscall.Errno {
		var args [3]uintptr
		copy(args[:], a)
		return func() syscall.Errno {
			_, _, e := unix.Syscall(nr, args[0], args[1], args[2])
			return e
		}
	}
	return []helperCheck{
		{"getpid", 0, raw(unix.SYS_GETPID)},
		{"socket(AF_NETLINK)", unix.EOPNOTSUPP, socket(unix.AF_NETLINK, unix.SOCK_RAW)},
		{"socket(AF_NETLINK with high bits)", unix.EOPNOTSUPP, socket(0xffffffff_00000000|unix.AF_NETLINK, unix.SOCK_RAW)},
		{"socket(AF_PACKET)", unix.EAFNOSUPPORT, socket(unix.AF_PACKET, unix.SOCK_RAW)},
		{"socket(AF_UNIX)", 0, socket(unix.AF_UNIX, unix.SOCK_STREAM)},
		{"socket(AF_INET)", 0, socket(unix.AF_INET, unix.SOCK_DGRAM)},
		{"ptrace(PTRACE_TRACEME)", unix.EPERM, raw(unix.SYS_PTRACE, unix.PTRACE_TRACEME)},
		{"unshare(CLONE_NEWUSER)", unix.EPERM, raw(unix.SYS_UNSHARE, unix.CLONE_NEWUSER)},
		{"unshare(CLONE_NEWNET)", unix.EPERM, raw(unix.SYS_UNSHARE, unix.CLONE_NEWNET)},
		{"unshare(CLONE_SYSVSEM)", 0, raw(unix.SYS_UNSHARE, unix.CLONE_SYSVSEM)},
		{"clone3(NULL, 0)", unix.ENOSYS, raw(unix.SYS_CLONE3)},
		// stdin is /dev/null: a call that reaches the kernel gets ENOTTY.
		{"ioctl(0, TIOCSTI with high bits)", unix.EPERM, raw(unix.SYS_IOCTL, 0, 0xdeadbeef_00000000|unix.TIOCSTI, ptr)},
		{"ioctl(0, TIOCLINUX)", unix.EPERM, raw(unix.SYS_IOCTL, 0, unix.TIOCLINUX, ptr)},
		{"ioctl(0, TCGETS)", unix.ENOTTY, raw(unix.SYS_IOCTL, 0, unix.TCGETS, uintptr(unsafe.Pointer(new(unix.Termios))))},
		{"personality(0xffffffff)", 0, raw(unix.SYS_PERSONALITY, 0xffffffff)},
		{"personality(ADDR_NO_RANDOMIZE)", unix.EPERM, raw(unix.SYS_PERSONALITY, 0x0040000)},
		{"bpf", unix.EPERM, raw(unix.SYS_BPF)},
		{"syscall(-1)", unix.ENOSYS, raw(^uintptr(0))},
	}
}

// TestHelperProcess runs in a child started by TestInstall, where
// installing the filter cannot harm the test run.
func TestHelperProcess(t *testing.T) {
	mode := os.Getenv(helperEnv)
	if mode == "" {
		return
	}
	runtime.LockOSThread() // never unlocked: the thread has the filter
	if err := unix.Setrlimit(unix.RLIMIT_CORE, &unix.Rlimit{}); err != nil {
		t.Fatalf("no core dumps: %v", err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		t.Fatalf("set no_new_privs: %v", err)
	}
	if mode == "notify" {
		notifyHelper(t)
		return
	}
	if _, err := Install(Options{}); err != nil {
		t.Fatal(err)
	}
	switch mode {
	case "checks":
		for _, c := range helperChecks() {
			fmt.Printf("check\t%s\t%d\n", c.name, int(c.call()))
		}
	case "x32":
		_, _, e := unix.Syscall(x32SyscallBit|unix.SYS_GETPID, 0, 0, 0)
		t.Fatalf("x32 getpid returned (errno %d) instead of killing the process", e)
	default:
		t.Fatalf("unknown helper mode %q", mode)
	}
}

// notifyHelper installs the filter for host writes on this thread only
// (the supervisor's goroutine runs on other threads, without it), answers
// its umask notifications with a Supervisor, and prints what the calls
// returned: "value NAME N" for a umask's result, "check NAME ERRNO" for
// others.
func notifyHelper(t *testing.T) {
	dir, err := os.MkdirTemp("", "hutch-seccomp-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	file := dir + "/f"
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	unix.Umask(0o027)
	fd, err := Install(Options{HostWrites: true, Withheld: unix.S_IWOTH | unix.S_IWGRP})
	if err != nil {
		t.Fatal(err)
	}
	sup, err := Supervise(fd)
	if err != nil {
		t.Fatal(err)
	}
	path, _ := unix.BytePtrFromString(file)
	created, _ := unix.BytePtrFromString(dir + "/created")
	name, _ := unix.BytePtrFromString("user.hutch")
	raw := func(nr uintptr, a ...uintptr) (uintptr, syscall.Errno) {
		var args [6]uintptr
		copy(args[:], a)
		r, _, e := unix.RawSyscall6(nr, args[0], args[1], args[2], args[3], args[4], args[5])
		return r, e
	}
	value := func(what string, nr uintptr, a ...uintptr) {
		r, e := raw(nr, a...)
		if e != 0 {
			fmt.Printf("value\t%s\terrno %d\n", what, int(e))
			return
		}
		fmt.Printf("value\t%s\t%#o\n", what, r)
	}
	check := func(what string, nr uintptr, a ...uintptr) {
		r, e := raw(nr, a...)
		if e == 0 && (nr == unix.SYS_OPENAT || nr == unix.SYS_OPENAT2) {
			unix.Close(int(r))
		}
		fmt.Printf("check\t%s\t%d\n", what, int(e))
	}
	at := uintptr(unix.AT_FDCWD & 0xffffffff)
	p := uintptr(unsafe.Pointer(path))
	value("umask(0)", unix.SYS_UMASK, 0)
	value("umask(0) again", unix.SYS_UMASK, 0)
	value("umask(077)", unix.SYS_UMASK, 0o077)
	value("umask(0) after 077", unix.SYS_UMASK, 0)
	value("umask(002) after 077", unix.SYS_UMASK, 0o002)
	value("umask(027) after 077", unix.SYS_UMASK, 0o027)
	check("fchmodat 04755", unix.SYS_FCHMODAT, at, p, 0o4755)
	check("fchmodat 0777", unix.SYS_FCHMODAT, at, p, 0o777)
	check("fchmodat 0775", unix.SYS_FCHMODAT, at, p, 0o775)
	check("fchmodat 0755", unix.SYS_FCHMODAT, at, p, 0o755)
	check("fchmodat2 02755", unix.SYS_FCHMODAT2, at, p, 0o2755, 0)
	check("openat O_CREAT 04755", unix.SYS_OPENAT, at, uintptr(unsafe.Pointer(created)), unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC, 0o4755)
	check("openat O_CREAT 0666", unix.SYS_OPENAT, at, uintptr(unsafe.Pointer(created)), unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC, 0o666)
	check("openat2", unix.SYS_OPENAT2, at, p, uintptr(unsafe.Pointer(&unix.OpenHow{Flags: unix.O_RDONLY})), unix.SizeofOpenHow)
	check("setxattr", unix.SYS_SETXATTR, p, uintptr(unsafe.Pointer(name)), p, 1, 0)
	check("removexattr", unix.SYS_REMOVEXATTR, p, uintptr(unsafe.Pointer(name)))
	var st unix.Stat_t
	if err := unix.Stat(dir+"/created", &st); err == nil {
		fmt.Printf("value\tcreated mode\t%#o\n", st.Mode&0o7777)
	}
	if err := sup.Close(); err != nil {
		t.Fatal(err)
	}
	check("umask(0) without a supervisor", unix.SYS_UMASK, 0)
	value("umask(022) without a supervisor", unix.SYS_UMASK, 0o022)
	runtime.KeepAlive(path)
	runtime.KeepAlive(created)
	runtime.KeepAlive(name)
}

// TestSupervisor installs the filter for host writes in a child, where a
// Supervisor answers its umask calls, and checks the results: a umask
// lacking the withheld bits returns the thread's current umask and leaves
// it, one with them is set; set-id and withheld modes, openat2 and
// extended attributes are refused; once the supervisor is gone the
// notified calls fail with ENOSYS.
func TestSupervisor(t *testing.T) {
	needSeccomp(t)
	out, err := runHelper(t, "notify")
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	got := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if f := strings.Split(sc.Text(), "\t"); len(f) == 3 && (f[0] == "check" || f[0] == "value") {
			got[f[1]] = f[2]
		}
	}
	want := map[string]string{
		"umask(0)":                        "027",
		"umask(0) again":                  "027",
		"umask(077)":                      "027",
		"umask(0) after 077":              "077",
		"umask(002) after 077":            "077",
		"umask(027) after 077":            "077",
		"fchmodat 04755":                  strconv.Itoa(int(unix.EPERM)),
		"fchmodat 0777":                   strconv.Itoa(int(unix.EPERM)),
		"fchmodat 0775":                   strconv.Itoa(int(unix.EPERM)),
		"fchmodat 0755":                   "0",
		"fchmodat2 02755":                 strconv.Itoa(int(unix.EPERM)),
		"openat O_CREAT 04755":            strconv.Itoa(int(unix.EPERM)),
		"openat O_CREAT 0666":             "0",
		"created mode":                    "0640",
		"openat2":                         strconv.Itoa(int(unix.ENOSYS)),
		"setxattr":                        strconv.Itoa(int(unix.EOPNOTSUPP)),
		"removexattr":                     strconv.Itoa(int(unix.EOPNOTSUPP)),
		"umask(0) without a supervisor":   strconv.Itoa(int(unix.ENOSYS)),
		"umask(022) without a supervisor": "027",
	}
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if got[k] != want[k] {
			t.Errorf("%s: got %q, want %q", k, got[k], want[k])
		}
	}
	if t.Failed() {
		t.Logf("helper output:\n%s", out)
	}
}

// runHelper re-runs the test binary as TestHelperProcess in mode.
func runHelper(t *testing.T, mode string) ([]byte, error) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperEnv+"="+mode)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	err := cmd.Run()
	return out.Bytes(), err
}

func needSeccomp(t *testing.T) {
	t.Helper()
	err := Supported()
	if err != nil && !errors.Is(err, ErrNotSupported) {
		t.Fatalf("probe: %v", err)
	}
	testutil.Need(t, err == nil, fmt.Sprintf("kernel has no seccomp filter support (%v)", err))
}

// TestInstall installs the filter on the real kernel, in a child process,
// and checks what the calls it makes return.
func TestInstall(t *testing.T) {
	needSeccomp(t)
	out, err := runHelper(t, "checks")
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	got := map[string]syscall.Errno{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Split(sc.Text(), "\t")
		if len(f) != 3 || f[0] != "check" {
			continue
		}
		n, err := strconv.Atoi(f[2])
		if err != nil {
			t.Fatalf("helper line %q: %v", sc.Text(), err)
		}
		got[f[1]] = syscall.Errno(n)
	}
	for _, c := range helperChecks() {
		e, ok := got[c.name]
		switch {
		case !ok:
			t.Errorf("%s: no result from the helper\n%s", c.name, out)
		case e != c.want:
			t.Errorf("%s: got %s (%v), want %s", c.name, unix.ErrnoName(e), e, unix.ErrnoName(c.want))
		}
	}
}

// TestInstallKillsX32 checks on the real kernel that an x32 call kills the
// process.
func TestInstallKillsX32(t *testing.T) {
	if native == nil || !native.x32 {
		t.Skipf("no x32 ABI on %s", runtime.GOARCH)
	}
	needSeccomp(t)
	out, err := runHelper(t, "x32")
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("helper: got %v, want death by SIGSYS\n%s", err, out)
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGSYS {
		t.Fatalf("helper: %v, want death by SIGSYS\n%s", err, out)
	}
}

func TestSupported(t *testing.T) {
	err := Supported()
	if err != nil && !errors.Is(err, ErrNotSupported) {
		t.Fatalf("Supported: %v", err)
	}
	t.Logf("Supported: %v", err)
}

func BenchmarkBuild(b *testing.B) {
	if native == nil {
		b.Skipf("no syscall table for %s", runtime.GOARCH)
	}
	for b.Loop() {
		if _, err := Build(Options{}); err != nil {
			b.Fatal(err)
		}
	}
}
