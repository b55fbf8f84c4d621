//go:build linux

// Command attacker is the escape suite's probe: it runs inside a hutch
// sandbox and tries, one system call at a time, what a hostile command
// would try. Each argument names one attack, optionally with a parameter
// after the first colon ("tcp:127.0.0.1:80", "kill:1234"). For every
// attack it prints one line, "NAME RESULT", where RESULT is "ok" when the
// attack succeeded, the errno name (EPERM, ENOENT, …) when it failed with
// one, or a short word for other outcomes ("timeout", "noreply"). Some
// attacks print more after the result (whoami, fds).
//
// It is built statically (CGO_ENABLED=0) by the tests and copied into the
// sandbox's workspace.
package main

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: attacker ATTACK[:PARAM]...")
		os.Exit(2)
	}
	for _, a := range os.Args[1:] {
		name, param, _ := strings.Cut(a, ":")
		f, ok := attacks[name]
		if !ok {
			fmt.Fprintf(os.Stderr, "attacker: unknown attack %q\n", name)
			os.Exit(2)
		}
		fmt.Printf("%s %s\n", a, f(param))
	}
}

// attacks maps an attack's name to the function that tries it and words the
// outcome.
var attacks = map[string]func(param string) string{
	"whoami": whoami,
	"fds":    fds,

	// Other processes (ESCAPES 8).
	"ptrace":            ptraceParent,
	"process_vm_readv":  vmReadv,
	"process_vm_writev": vmWritev,
	"kill":              killPid,
	"pidfd_open":        pidfdOpen,
	"openproc":          openFile, // open a /proc path read-only
	"pidfd_getfd":       pidfdGetfd,

	// Privilege and kernel attack surface (ESCAPES 10).
	"unshare":           unshare,
	"clone_newuser":     cloneNewUser,
	"clone3":            clone3,
	"setns":             setns,
	"mount":             mountTmpfs,
	"umount":            umount,
	"chroot":            func(string) string { return result(unix.Chroot("/tmp")) },
	"pivot_root":        func(string) string { return result(unix.PivotRoot("/tmp", "/tmp")) },
	"open_tree":         openTree,
	"fsopen":            fsopen,
	"mount_setattr":     mountSetattr,
	"keyctl":            keyctl,
	"add_key":           addKey,
	"bpf":               bpf,
	"perf_event_open":   perfEventOpen,
	"userfaultfd":       userfaultfd,
	"io_uring_setup":    ioUringSetup,
	"kexec_load":        kexecLoad,
	"init_module":       initModule,
	"finit_module":      finitModule,
	"open_by_handle_at": openByHandleAt,
	"name_to_handle_at": nameToHandleAt,
	"personality":       personality,
	"setuid0":           func(string) string { return result(unix.Setresuid(0, 0, 0)) },
	"x32_unshare":       x32Unshare,
	"open":              openFile,
	"list":              listDir, // a directory's names
	"write":             writeFile,

	// Sockets (ESCAPES 12, 13, 15, 16, 18).
	"socket":        socket,
	"tcp":           dialTCP,
	"udp":           sendUDP,
	"unix":          dialUnix,
	"unixguess":     unixGuess,
	"unixbind":      bindUnix,
	"unlink":        func(p string) string { return result(unix.Unlink(p)) },
	"renameaway":    func(p string) string { return result(unix.Rename(p, p+".away")) },
	"abstract":      dialAbstract,
	"abstract_self": abstractSelf,
	"tcp_self":      tcpSelf,

	// The egress proxy's protocols spoken by hand (ESCAPES 15, 17, 18).
	"socks5":  socks5Probe,
	"socks4":  socks4Probe,
	"rawhttp": rawHTTP,

	// Terminal (ESCAPES 14).
	"tiocsti":    tiocsti,
	"tiocsti_hi": tiocstiHigh,
	"tioclinux":  tioclinux,

	// Resources (ESCAPES 11).
	"alloc":    alloc,
	"forkbomb": forkbomb,
	"fillfile": fillFile,
}

// result words err: "ok", or the errno's name.
func result(err error) string {
	if err == nil {
		return "ok"
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		if name := unix.ErrnoName(errno); name != "" {
			return name
		}
		return "errno" + strconv.Itoa(int(errno))
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "timeout"
	}
	return "error(" + strings.ReplaceAll(err.Error(), " ", "_") + ")"
}

func errnoResult(e syscall.Errno) string {
	if e == 0 {
		return "ok"
	}
	return result(e)
}

func atoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		fmt.Fprintf(os.Stderr, "attacker: bad number %q\n", s)
		os.Exit(2)
	}
	return n
}

func whoami(string) string {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return result(err)
	}
	fields := map[string]string{}
	for _, line := range strings.Split(string(status), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if ok {
			fields[k] = strings.Join(strings.Fields(v), ",")
		}
	}
	return fmt.Sprintf("ok uid=%d euid=%d gid=%d egid=%d capeff=%s capprm=%s capbnd=%s nnp=%s seccomp=%s",
		os.Getuid(), os.Geteuid(), os.Getgid(), os.Getegid(),
		fields["CapEff"], fields["CapPrm"], fields["CapBnd"], fields["NoNewPrivs"], fields["Seccomp"])
}

// fds lists the open descriptors, leaving out the one used for listing.
// It uses raw system calls: the os package could open descriptors of the
// Go runtime's own (its poller) and list them too.
func fds(string) string {
	d, err := unix.Open("/proc/self/fd", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return result(err)
	}
	defer unix.Close(d)
	var names []string
	buf := make([]byte, 8192)
	for {
		n, err := unix.ReadDirent(d, buf)
		if err != nil {
			return result(err)
		}
		if n == 0 {
			break
		}
		_, _, names = unix.ParseDirent(buf[:n], -1, names)
	}
	var out []string
	for _, n := range names {
		if n == strconv.Itoa(d) {
			continue
		}
		target := make([]byte, 256)
		k, _ := unix.Readlink("/proc/self/fd/"+n, target)
		out = append(out, n+"="+strings.ReplaceAll(string(target[:max(k, 0)]), " ", "_"))
	}
	return "ok " + strings.Join(out, " ")
}

func ptraceParent(string) string {
	ppid := os.Getppid()
	err := unix.PtraceAttach(ppid)
	if err == nil {
		// The parent stops; wait for that, then let it go again.
		var ws unix.WaitStatus
		_, _ = unix.Wait4(ppid, &ws, unix.WALL, nil)
		_ = unix.PtraceDetach(ppid)
	}
	return result(err)
}

// vmReadv reads this process's own memory through process_vm_readv: it
// succeeds wherever the call is allowed at all.
func vmReadv(string) string {
	src := []byte("hutch")
	dst := make([]byte, len(src))
	local := []unix.Iovec{{Base: &dst[0]}}
	local[0].SetLen(len(dst))
	remote := []unix.RemoteIovec{{Base: uintptr(unsafe.Pointer(&src[0])), Len: len(src)}}
	_, err := unix.ProcessVMReadv(os.Getpid(), local, remote, 0)
	runtime.KeepAlive(src)
	return result(err)
}

func vmWritev(string) string {
	src := []byte("hutch")
	dst := make([]byte, len(src))
	local := []unix.Iovec{{Base: &src[0]}}
	local[0].SetLen(len(src))
	remote := []unix.RemoteIovec{{Base: uintptr(unsafe.Pointer(&dst[0])), Len: len(dst)}}
	_, err := unix.ProcessVMWritev(os.Getpid(), local, remote, 0)
	runtime.KeepAlive(dst)
	return result(err)
}

func killPid(p string) string { return result(unix.Kill(atoi(p), unix.SIGKILL)) }

func pidfdOpen(p string) string {
	fd, err := unix.PidfdOpen(atoi(p), 0)
	if err == nil {
		unix.Close(fd)
	}
	return result(err)
}

// pidfdGetfd tries to copy descriptor 0 of the parent process.
func pidfdGetfd(string) string {
	pfd, err := unix.PidfdOpen(os.Getppid(), 0)
	if err != nil {
		return "pidfd_open:" + result(err)
	}
	defer unix.Close(pfd)
	fd, err := unix.PidfdGetfd(pfd, 0, 0)
	if err == nil {
		unix.Close(fd)
	}
	return result(err)
}

var unshareFlags = map[string]int{
	"user": unix.CLONE_NEWUSER, "mnt": unix.CLONE_NEWNS, "net": unix.CLONE_NEWNET,
	"pid": unix.CLONE_NEWPID, "ipc": unix.CLONE_NEWIPC, "uts": unix.CLONE_NEWUTS,
	"cgroup": unix.CLONE_NEWCGROUP, "time": unix.CLONE_NEWTIME,
}

// unshare runs in a locked thread that is thrown away afterwards, so that
// a namespace it might create does not leak into the other attacks.
func unshare(p string) string {
	flag, ok := unshareFlags[p]
	if !ok {
		return "badparam"
	}
	ch := make(chan string)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		ch <- result(unix.Unshare(flag))
	}()
	return <-ch
}

// cloneNewUser calls clone(2) directly with CLONE_NEWUSER; a child that
// does come into being exits at once.
func cloneNewUser(string) string {
	pid, _, e := unix.RawSyscall6(unix.SYS_CLONE, uintptr(unix.CLONE_NEWUSER|unix.SIGCHLD), 0, 0, 0, 0, 0)
	if e != 0 {
		return errnoResult(e)
	}
	if pid == 0 {
		unix.RawSyscall(unix.SYS_EXIT_GROUP, 0, 0, 0)
	}
	var ws unix.WaitStatus
	_, _ = unix.Wait4(int(pid), &ws, 0, nil)
	return "ok"
}

// cloneArgs is struct clone_args (linux/sched.h), first version.
type cloneArgs struct {
	flags, pidfd, childTID, parentTID, exitSignal, stack, stackSize, tls uint64
}

func clone3(string) string {
	args := cloneArgs{flags: unix.CLONE_NEWUSER, exitSignal: uint64(unix.SIGCHLD)}
	pid, _, e := unix.RawSyscall(unix.SYS_CLONE3, uintptr(unsafe.Pointer(&args)), unsafe.Sizeof(args), 0)
	if e != 0 {
		return errnoResult(e)
	}
	if pid == 0 {
		unix.RawSyscall(unix.SYS_EXIT_GROUP, 0, 0, 0)
	}
	var ws unix.WaitStatus
	_, _ = unix.Wait4(int(pid), &ws, 0, nil)
	return "ok"
}

func setns(string) string {
	fd, err := unix.Open("/proc/self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "open:" + result(err)
	}
	defer unix.Close(fd)
	ch := make(chan string)
	go func() {
		runtime.LockOSThread()
		ch <- result(unix.Setns(fd, unix.CLONE_NEWNET))
	}()
	return <-ch
}

func mountTmpfs(p string) string {
	if p == "" {
		p = "/tmp"
	}
	return result(unix.Mount("none", p, "tmpfs", 0, ""))
}

func umount(p string) string { return result(unix.Unmount(p, unix.MNT_DETACH)) }

func openTree(string) string {
	fd, err := unix.OpenTree(unix.AT_FDCWD, "/", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err == nil {
		unix.Close(fd)
	}
	return result(err)
}

func fsopen(string) string {
	fd, err := unix.Fsopen("tmpfs", unix.FSOPEN_CLOEXEC)
	if err == nil {
		unix.Close(fd)
	}
	return result(err)
}

// mountSetattr tries to make the read-only root writable.
func mountSetattr(string) string {
	attr := unix.MountAttr{Attr_clr: unix.MOUNT_ATTR_RDONLY}
	return result(unix.MountSetattr(unix.AT_FDCWD, "/", 0, &attr))
}

func keyctl(string) string {
	_, err := unix.KeyctlInt(unix.KEYCTL_GET_KEYRING_ID, unix.KEY_SPEC_SESSION_KEYRING, 1, 0, 0)
	return result(err)
}

func addKey(string) string {
	_, err := unix.AddKey("user", "hutch-escape", []byte("x"), unix.KEY_SPEC_PROCESS_KEYRING)
	return result(err)
}

// bpf asks for the smallest array map.
func bpf(string) string {
	var attr [48]byte
	le := func(off int, v uint32) {
		attr[off], attr[off+1], attr[off+2], attr[off+3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
	}
	le(0, 2)  // map_type BPF_MAP_TYPE_ARRAY
	le(4, 4)  // key_size
	le(8, 4)  // value_size
	le(12, 1) // max_entries
	fd, _, e := unix.Syscall(unix.SYS_BPF, 0 /* BPF_MAP_CREATE */, uintptr(unsafe.Pointer(&attr[0])), uintptr(len(attr)))
	if e == 0 {
		unix.Close(int(fd))
	}
	return errnoResult(e)
}

// perfEventOpen asks for a software clock counter on itself, which even
// perf_event_paranoid=2 allows to an unprivileged process.
func perfEventOpen(string) string {
	attr := unix.PerfEventAttr{
		Type:   unix.PERF_TYPE_SOFTWARE,
		Config: unix.PERF_COUNT_SW_CPU_CLOCK,
		Size:   uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
		Bits:   unix.PerfBitDisabled | unix.PerfBitExcludeKernel | unix.PerfBitExcludeHv,
	}
	fd, err := unix.PerfEventOpen(&attr, 0, -1, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if err == nil {
		unix.Close(fd)
	}
	return result(err)
}

func userfaultfd(string) string {
	fd, _, e := unix.Syscall(unix.SYS_USERFAULTFD, unix.O_CLOEXEC|1 /* UFFD_USER_MODE_ONLY */, 0, 0)
	if e == 0 {
		unix.Close(int(fd))
	}
	return errnoResult(e)
}

func ioUringSetup(string) string {
	var params [120]byte // struct io_uring_params
	fd, _, e := unix.Syscall(unix.SYS_IO_URING_SETUP, 4, uintptr(unsafe.Pointer(&params[0])), 0)
	if e == 0 {
		unix.Close(int(fd))
	}
	return errnoResult(e)
}

func kexecLoad(string) string {
	_, _, e := unix.Syscall6(unix.SYS_KEXEC_LOAD, 0, 0, 0, 0, 0, 0)
	return errnoResult(e)
}

func initModule(string) string {
	return result(unix.InitModule([]byte{0x7f, 'E', 'L', 'F'}, ""))
}

func finitModule(string) string {
	fd, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "open:" + result(err)
	}
	defer unix.Close(fd)
	return result(unix.FinitModule(fd, "", 0))
}

func openByHandleAt(string) string {
	h := unix.NewFileHandle(1, make([]byte, 8))
	fd, err := unix.OpenByHandleAt(unix.AT_FDCWD, h, unix.O_RDONLY)
	if err == nil {
		unix.Close(fd)
	}
	return result(err)
}

func nameToHandleAt(string) string {
	_, _, err := unix.NameToHandleAt(unix.AT_FDCWD, "/", 0)
	return result(err)
}

// personality tries to switch address-space randomisation off.
func personality(string) string {
	const addrNoRandomize = 0x0040000
	_, _, e := unix.Syscall(unix.SYS_PERSONALITY, addrNoRandomize, 0, 0)
	return errnoResult(e)
}

// x32Unshare calls unshare(CLONE_NEWUSER) through the x32 system call
// numbering (amd64 only), which a filter that checks only native numbers
// would miss.
func x32Unshare(string) string {
	if runtime.GOARCH != "amd64" {
		return "n/a"
	}
	const x32Bit = 0x40000000
	ch := make(chan string)
	go func() {
		runtime.LockOSThread()
		_, _, e := unix.RawSyscall(x32Bit|272 /* unshare */, unix.CLONE_NEWUSER, 0, 0)
		ch <- errnoResult(e)
	}()
	return <-ch
}

func openFile(p string) string {
	f, err := os.Open(p)
	if err != nil {
		return result(err)
	}
	defer f.Close()
	buf := make([]byte, 64)
	n, err := f.Read(buf)
	if err != nil && !errors.Is(err, io.EOF) {
		return "read:" + result(err)
	}
	return fmt.Sprintf("ok %q", buf[:n])
}

// listDir lists the directory p: "ok" and its names, quoted.
func listDir(p string) string {
	names, err := os.ReadDir(p)
	if err != nil {
		return result(err)
	}
	var b strings.Builder
	b.WriteString("ok")
	for _, e := range names {
		fmt.Fprintf(&b, " %q", e.Name())
	}
	return b.String()
}

func writeFile(p string) string {
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		return result(err)
	}
	defer f.Close()
	_, err = f.Write([]byte("1"))
	return result(err)
}

var families = map[string][3]int{
	"packet":  {unix.AF_PACKET, unix.SOCK_RAW, 0x0300}, // htons(ETH_P_ALL)
	"netlink": {unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_ROUTE},
	"vsock":   {unix.AF_VSOCK, unix.SOCK_STREAM, 0},
	"alg":     {unix.AF_ALG, unix.SOCK_SEQPACKET, 0},
	"raw4":    {unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_ICMP},
	"raw6":    {unix.AF_INET6, unix.SOCK_RAW, unix.IPPROTO_ICMPV6},
	"ping4":   {unix.AF_INET, unix.SOCK_DGRAM, unix.IPPROTO_ICMP},
	"tcp4":    {unix.AF_INET, unix.SOCK_STREAM, 0},
	"unix":    {unix.AF_UNIX, unix.SOCK_STREAM, 0},
}

func socket(p string) string {
	f, ok := families[p]
	if !ok {
		return "badparam"
	}
	fd, err := unix.Socket(f[0], f[1]|unix.SOCK_CLOEXEC, f[2])
	if err == nil {
		unix.Close(fd)
	}
	return result(err)
}

func dialTCP(addr string) string {
	c, err := net.DialTimeout("tcp", addr, 3*time.Second)
	if err != nil {
		return result(err)
	}
	c.Close()
	return "ok"
}

// sendUDP sends one datagram and waits briefly for any answer.
func sendUDP(addr string) string {
	c, err := net.Dial("udp", addr)
	if err != nil {
		return result(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("hutch-escape-probe")); err != nil {
		return result(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	buf := make([]byte, 512)
	if _, err := c.Read(buf); err != nil {
		if r := result(err); r == "timeout" {
			return "noreply"
		} else {
			return r
		}
	}
	return "ok"
}

func dialUnix(path string) string {
	c, err := net.DialTimeout("unix", path, 3*time.Second)
	if err != nil {
		return result(err)
	}
	c.Close()
	return "ok"
}

func dialAbstract(name string) string { return dialUnix("@" + name) }

// unixGuess connects to an agent's socket at path and authenticates with
// a guessed token: "answered" if the agent sends anything back, "refused"
// if it closes the connection, else the error.
func unixGuess(path string) string {
	c, err := net.DialTimeout("unix", path, 3*time.Second)
	if err != nil {
		return result(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("hutch-agent/1 " + strings.Repeat("0", 64) + "\n")); err != nil {
		return "refused"
	}
	_ = c.SetReadDeadline(time.Now().Add(15 * time.Second))
	var b [1]byte
	if n, _ := c.Read(b[:]); n > 0 {
		return "answered"
	}
	return "refused"
}

// bindUnix listens on a unix socket at path.
func bindUnix(path string) string {
	l, err := net.Listen("unix", path)
	if err != nil {
		return result(err)
	}
	l.Close()
	return "ok"
}

// abstractSelf listens on an abstract socket and connects to it: allowed
// inside one sandbox.
func abstractSelf(string) string {
	name := fmt.Sprintf("@hutch-self-%d", os.Getpid())
	l, err := net.Listen("unix", name)
	if err != nil {
		return "listen:" + result(err)
	}
	defer l.Close()
	return dialUnix(name)
}

// tcpSelf listens on the sandbox's own loopback and connects to it.
func tcpSelf(string) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "listen:" + result(err)
	}
	defer l.Close()
	return dialTCP(l.Addr().String())
}

// terminal opens the terminal to inject into: a descriptor number, or a
// path such as /dev/tty.
func terminal(p string) (int, func(), error) {
	if n, err := strconv.Atoi(p); err == nil {
		return n, func() {}, nil
	}
	fd, err := unix.Open(p, unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, nil, err
	}
	return fd, func() { unix.Close(fd) }, nil
}

// inject pushes "id\n" into the terminal's input one byte at a time with
// the ioctl request req.
func inject(p string, req uintptr) string {
	fd, done, err := terminal(p)
	if err != nil {
		return "open:" + result(err)
	}
	defer done()
	for _, c := range []byte("id\n") {
		b := c
		_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), req, uintptr(unsafe.Pointer(&b)))
		if e != 0 {
			return errnoResult(e)
		}
	}
	return "ok"
}

func tiocsti(p string) string { return inject(p, unix.TIOCSTI) }

// tiocstiHigh sets bits above the 32 the kernel reads of the request, which
// a filter comparing all 64 bits would not recognise.
func tiocstiHigh(p string) string { return inject(p, 1<<32|unix.TIOCSTI) }

func tioclinux(p string) string {
	fd, done, err := terminal(p)
	if err != nil {
		return "open:" + result(err)
	}
	defer done()
	sub := byte(2) // TIOCL_SETSEL
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.TIOCLINUX, uintptr(unsafe.Pointer(&sub)))
	return errnoResult(e)
}

// alloc allocates and touches the given number of MiB, then reports.
func alloc(p string) string {
	mib := atoi(p)
	var keep [][]byte
	for i := 0; i < mib; i++ {
		b := make([]byte, 1<<20)
		for j := 0; j < len(b); j += 4096 {
			b[j] = 1
		}
		keep = append(keep, b)
	}
	runtime.KeepAlive(keep)
	return fmt.Sprintf("ok allocated=%d", mib)
}

// forkbomb starts up to N sleeping children and reports how many it got
// and why it stopped. The children stay behind for the sandbox to kill.
func forkbomb(p string) string {
	n := atoi(p)
	attr := &syscall.ProcAttr{Files: []uintptr{0, 1, 2}, Env: os.Environ()}
	for i := 0; i < n; i++ {
		if _, err := syscall.ForkExec("/bin/sleep", []string{"sleep", "1000"}, attr); err != nil {
			return fmt.Sprintf("%s forked=%d", result(err), i)
		}
	}
	return fmt.Sprintf("ok forked=%d", n)
}

// fillFile writes MiB of zeros to a file until an error stops it.
func fillFile(p string) string {
	path, mibStr, _ := strings.Cut(p, ",")
	f, err := os.Create(path)
	if err != nil {
		return "create:" + result(err)
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for i := 0; i < atoi(mibStr); i++ {
		if _, err := f.Write(buf); err != nil {
			return fmt.Sprintf("%s written_mib=%d", result(err), i)
		}
	}
	return "ok written_mib=" + mibStr
}

// proxyTimeout bounds each exchange with the egress proxy and, through it,
// with an upstream.
const proxyTimeout = 5 * time.Second

// cutProxy splits "PROXYHOST:PROXYPORT:REST" (an IPv4 proxy address).
func cutProxy(p string) (proxy, rest string, ok bool) {
	i := strings.IndexByte(p, ':')
	if i < 0 {
		return "", "", false
	}
	j := strings.IndexByte(p[i+1:], ':')
	if j < 0 {
		return "", "", false
	}
	return p[:i+1+j], p[i+1+j+1:], true
}

// cutLast splits s at its last colon.
func cutLast(s string) (before, after string, ok bool) {
	i := strings.LastIndexByte(s, ':')
	if i < 0 {
		return "", "", false
	}
	return s[:i], s[i+1:], true
}

// readWord words the error of a read from the proxy: "closed" when it hung
// up without answering (in full).
func readWord(err error) string {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return "closed"
	}
	return result(err)
}

// echoExchange sends line on c and expects it back from the echo upstream:
// "echo=ok", or what went wrong.
func echoExchange(c net.Conn, r *bufio.Reader, line string) string {
	_ = c.SetDeadline(time.Now().Add(proxyTimeout))
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		return "echo=" + result(err)
	}
	got, err := r.ReadString('\n')
	switch {
	case strings.TrimSuffix(got, "\n") == line:
		return "echo=ok"
	case err != nil:
		return "echo=" + readWord(err)
	}
	return "echo=mismatch"
}

var socks5Commands = map[string]byte{"connect": 1, "bind": 2, "udp": 3}

// socks5Probe speaks SOCKS5 to a proxy ("PROXYHOST:PROXYPORT:HOST:PORT:CMD",
// CMD connect, bind or udp; HOST a name, an IPv4 address or a bracketed
// IPv6 address, sent as such). It prints the reply code, "rep=0x00"…,
// "auth=0xNN" when the proxy refused the no-authentication method, or
// "closed". A granted CONNECT then sends the line "socks5 HOST PORT" and
// adds whether the upstream echoed it ("echo=ok").
func socks5Probe(p string) string {
	proxy, rest, ok := cutProxy(p)
	if !ok {
		return "badparam"
	}
	rest, cmdName, ok1 := cutLast(rest)
	host, portStr, ok2 := cutLast(rest)
	cmd, ok3 := socks5Commands[cmdName]
	port, err := strconv.Atoi(portStr)
	if !ok1 || !ok2 || !ok3 || err != nil || port < 0 || port > 65535 {
		return "badparam"
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	req := []byte{5, cmd, 0}
	if ip := net.ParseIP(host); ip != nil && ip.To4() != nil && !strings.Contains(host, ":") {
		req = append(append(req, 1), ip.To4()...)
	} else if ip != nil {
		req = append(append(req, 4), ip.To16()...)
	} else {
		req = append(append(req, 3, byte(len(host))), host...)
	}
	req = binary.BigEndian.AppendUint16(req, uint16(port))

	c, err := net.DialTimeout("tcp", proxy, proxyTimeout)
	if err != nil {
		return result(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(proxyTimeout))
	r := bufio.NewReader(c)
	if _, err := c.Write([]byte{5, 1, 0}); err != nil {
		return result(err)
	}
	var hello [2]byte
	if _, err := io.ReadFull(r, hello[:]); err != nil {
		return readWord(err)
	}
	if hello[0] != 5 {
		return "badversion=" + hex.EncodeToString(hello[:])
	}
	if hello[1] != 0 {
		return fmt.Sprintf("auth=0x%02x", hello[1])
	}
	if _, err := c.Write(req); err != nil {
		return result(err)
	}
	var head [4]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return readWord(err)
	}
	rep := fmt.Sprintf("rep=0x%02x", head[1])
	if head[1] != 0 {
		return rep
	}
	skip := 0
	switch head[3] {
	case 1:
		skip = 4 + 2
	case 4:
		skip = 16 + 2
	case 3:
		n, err := r.ReadByte()
		if err != nil {
			return rep + " bound=" + readWord(err)
		}
		skip = int(n) + 2
	default:
		return rep + fmt.Sprintf(" atyp=0x%02x", head[3])
	}
	if _, err := io.ReadFull(r, make([]byte, skip)); err != nil {
		return rep + " bound=" + readWord(err)
	}
	if cmd != 1 {
		return rep
	}
	return rep + " " + echoExchange(c, r, "socks5 "+host+" "+portStr)
}

// socks4Probe speaks SOCKS4 to a proxy ("PROXYHOST:PROXYPORT:HOST:PORT"):
// CONNECT to an IPv4 address, or SOCKS4a with a name. It prints the reply
// code ("rep=0x5a" is granted), "closed" when the proxy hung up, or
// "short=HEX" for a reply that is not SOCKS4's. A granted CONNECT then
// sends the line "socks4 HOST PORT" and adds whether it came back.
func socks4Probe(p string) string {
	proxy, rest, ok := cutProxy(p)
	if !ok {
		return "badparam"
	}
	host, portStr, ok := cutLast(rest)
	port, err := strconv.Atoi(portStr)
	if !ok || err != nil || port < 0 || port > 65535 {
		return "badparam"
	}
	req := binary.BigEndian.AppendUint16([]byte{4, 1}, uint16(port))
	if ip := net.ParseIP(host).To4(); ip != nil {
		req = append(append(req, ip...), "hutch\x00"...)
	} else {
		req = append(append(req, 0, 0, 0, 1), "hutch\x00"+host+"\x00"...)
	}
	c, err := net.DialTimeout("tcp", proxy, proxyTimeout)
	if err != nil {
		return result(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(proxyTimeout))
	if _, err := c.Write(req); err != nil {
		return result(err)
	}
	r := bufio.NewReader(c)
	var reply [8]byte
	n, err := io.ReadFull(r, reply[:])
	switch {
	case n == 0:
		return readWord(err)
	case n < len(reply):
		return "short=" + hex.EncodeToString(reply[:n])
	case reply[0] != 0:
		return "badversion=" + hex.EncodeToString(reply[:])
	}
	rep := fmt.Sprintf("rep=0x%02x", reply[1])
	if reply[1] != 0x5a {
		return rep
	}
	return rep + " " + echoExchange(c, r, "socks4 "+host+" "+portStr)
}

// rawHTTP sends one hand-made request to an HTTP proxy
// ("PROXYADDR,METHOD,TARGET,HOST": "127.0.0.1:3128,GET,http://a.test:80/x,b.test";
// an empty HOST sends no Host header) and prints "status=NNN", the
// proxy's X-Hutch-Blocked reason as "blocked=WORDS_JOINED_BY_UNDERSCORES",
// and for a 2xx answer the start of the body ("body=…"), or after a
// granted CONNECT whether the upstream echoed the line
// "connect TARGET HOST" ("echo=ok").
func rawHTTP(p string) string {
	f := strings.Split(p, ",")
	if len(f) != 4 {
		return "badparam"
	}
	proxy, method, target, host := f[0], f[1], f[2], f[3]
	c, err := net.DialTimeout("tcp", proxy, proxyTimeout)
	if err != nil {
		return result(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(proxyTimeout))
	req := method + " " + target + " HTTP/1.1\r\n"
	if host != "" {
		req += "Host: " + host + "\r\n"
	}
	if method != "CONNECT" {
		req += "Connection: close\r\n"
	}
	req += "User-Agent: hutch-attacker\r\n\r\n"
	if _, err := io.WriteString(c, req); err != nil {
		return result(err)
	}
	r := bufio.NewReader(c)
	status, header, err := readResponseHead(r)
	if err != nil {
		return err.Error()
	}
	out := fmt.Sprintf("status=%d", status)
	if b := header["x-hutch-blocked"]; b != "" {
		out += " blocked=" + strings.ReplaceAll(b, " ", "_")
	}
	if status/100 != 2 {
		return out
	}
	if method == "CONNECT" {
		return out + " " + echoExchange(c, r, "connect "+target+" "+host)
	}
	if strings.EqualFold(header["transfer-encoding"], "chunked") {
		if _, err := r.ReadString('\n'); err != nil { // the first chunk's size
			return out + " body=" + readWord(err)
		}
	}
	body := make([]byte, 64)
	n, _ := io.ReadFull(r, body)
	return out + " body=" + strings.Join(strings.Fields(string(body[:n])), "_")
}

// readResponseHead reads an HTTP/1.x status line and header (kept small:
// the net/http package would make this static program too big to start
// under the resource tests' memory limits). Header names are lower-cased;
// the error is already worded ("closed", "badstatus=…").
func readResponseHead(r *bufio.Reader) (int, map[string]string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return 0, nil, errors.New(readWord(err))
	}
	f := strings.Fields(line)
	if len(f) < 2 || !strings.HasPrefix(f[0], "HTTP/1.") {
		return 0, nil, errors.New("badstatus=" + strings.Join(f, "_"))
	}
	status, err := strconv.Atoi(f[1])
	if err != nil {
		return 0, nil, errors.New("badstatus=" + strings.Join(f, "_"))
	}
	header := map[string]string{}
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return 0, nil, errors.New("header:" + readWord(err))
		}
		line = strings.TrimRight(line, "\r\n")
		if line == "" {
			return status, header, nil
		}
		if k, v, ok := strings.Cut(line, ":"); ok {
			k = strings.ToLower(strings.TrimSpace(k))
			if _, dup := header[k]; !dup {
				header[k] = strings.TrimSpace(v)
			}
		}
	}
}
