//go:build linux

package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Attacks that try to grant privilege on the host through what the
// sandbox writes (ESCAPES 21): set-id bits and file capabilities on a copy
// of a shell (or a new file), ACLs, a umask that lets new files be
// writable by others, host-owned entries made writable. Each that makes a
// file names it after itself (w-ATTACK-MODE) in the working directory, the
// workspace; the parameter is an octal mode. Results print the outcome and, when a file
// exists afterwards, its mode as the sandbox sees it.
func init() {
	for name, f := range map[string]func(path string, mode uint32) error{
		"w_chmod":     func(p string, m uint32) error { return chmodRaw(p, uint64(m)) },
		"w_chmod_hi":  func(p string, m uint32) error { return chmodRaw(p, 0xffffffff_00000000|uint64(m)) },
		"w_fchmod":    fchmodFile,
		"w_fchmodat":  func(p string, m uint32) error { return unix.Fchmodat(unix.AT_FDCWD, p, m, 0) },
		"w_fchmodat2": fchmodat2,
	} {
		attacks[name] = chmodShell(name, f)
	}
	for name, f := range map[string]func(path string, mode uint32) (int, error){
		"w_open": openRaw,
		"w_openat": func(p string, m uint32) (int, error) {
			return openatRaw(p, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY, uint64(m))
		},
		"w_creat":   creatRaw,
		"w_openat2": openat2File,
		"w_tmpfile": tmpfileLinked,
		"w_mknod":   mknodFile,
	} {
		attacks[name] = createShell(name, f)
	}
	attacks["w_setcap"] = setcap
	attacks["w_setacl"] = setacl
	attacks["w_removexattr"] = removexattr
	attacks["w_umask0"] = umask0Create
	attacks["w_umask_read"] = umaskRead
	attacks["w_umask077"] = umask077
	attacks["w_pip"] = pipChmod
	attacks["w_chmodpath"] = chmodPath
	attacks["w_chmodadd"] = chmodAdd
}

// The legacy calls only x86_64 has (unix names them only there).
const (
	sysOpenAMD64  = 2
	sysCreatAMD64 = 85
	sysChmodAMD64 = 90
)

// shell is what the attacks copy: the sandbox's /bin/sh.
func shell() ([]byte, error) { return os.ReadFile("/bin/sh") }

// parseMode reads an octal mode parameter.
func parseMode(p string) uint32 {
	m, err := strconv.ParseUint(p, 8, 32)
	if err != nil {
		fmt.Fprintf(os.Stderr, "attacker: bad mode %q\n", p)
		os.Exit(2)
	}
	return uint32(m)
}

// withMode appends the mode of path to res, if path exists.
func withMode(res, path string) string {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return res
	}
	return fmt.Sprintf("%s mode=%04o", res, st.Mode&0o7777)
}

// chmodShell copies the shell into the workspace (mode 0755) and changes
// its mode with f.
func chmodShell(name string, f func(string, uint32) error) func(string) string {
	return func(p string) string {
		mode := parseMode(p)
		path := fmt.Sprintf("w-%s-%s", strings.TrimPrefix(name, "w_"), p)
		b, err := shell()
		if err != nil {
			return "read:" + result(err)
		}
		if err := os.WriteFile(path, b, 0o755); err != nil {
			return "copy:" + result(err)
		}
		return withMode(result(f(path, mode)), path)
	}
}

// createShell creates a file with f, which asks for the mode at once. The
// file stays empty: a write would make the kernel drop a setuid bit, and
// what is tried here is whether the create keeps it (it does: a file
// system that does not drop it on every way of filling the file, or a
// mapping written later, would then hold a set-id program).
func createShell(name string, f func(string, uint32) (int, error)) func(string) string {
	return func(p string) string {
		mode := parseMode(p)
		path := fmt.Sprintf("w-%s-%s", strings.TrimPrefix(name, "w_"), p)
		fd, err := f(path, mode)
		if err != nil {
			return withMode(result(err), path)
		}
		if fd >= 0 {
			unix.Close(fd)
		}
		return withMode("ok", path)
	}
}

// chmodRaw is chmod(2) with a full 64-bit mode argument (fchmodat where
// there is no chmod).
func chmodRaw(path string, mode uint64) error {
	p, err := unix.BytePtrFromString(path)
	if err != nil {
		return err
	}
	var e unix.Errno
	if runtime.GOARCH == "amd64" {
		_, _, e = unix.Syscall(sysChmodAMD64, uintptr(unsafe.Pointer(p)), uintptr(mode), 0)
	} else {
		_, _, e = unix.Syscall6(unix.SYS_FCHMODAT, uintptr(unix.AT_FDCWD&0xffffffff), uintptr(unsafe.Pointer(p)), uintptr(mode), 0, 0, 0)
	}
	runtime.KeepAlive(p)
	return errnoErr(e)
}

func errnoErr(e unix.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}

func fchmodFile(path string, mode uint32) error {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Fchmod(fd, mode)
}

func fchmodat2(path string, mode uint32) error {
	p, err := unix.BytePtrFromString(path)
	if err != nil {
		return err
	}
	_, _, e := unix.Syscall6(unix.SYS_FCHMODAT2, uintptr(unix.AT_FDCWD&0xffffffff), uintptr(unsafe.Pointer(p)), uintptr(mode), 0, 0, 0)
	runtime.KeepAlive(p)
	return errnoErr(e)
}

// openRaw is open(2) with O_CREAT (openat where there is no open).
func openRaw(path string, mode uint32) (int, error) {
	if runtime.GOARCH != "amd64" {
		return openatRaw(path, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY, uint64(mode))
	}
	p, err := unix.BytePtrFromString(path)
	if err != nil {
		return -1, err
	}
	fd, _, e := unix.Syscall(sysOpenAMD64, uintptr(unsafe.Pointer(p)), unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, uintptr(mode))
	runtime.KeepAlive(p)
	if e != 0 {
		return -1, e
	}
	return int(fd), nil
}

func openatRaw(path string, flags int, mode uint64) (int, error) {
	p, err := unix.BytePtrFromString(path)
	if err != nil {
		return -1, err
	}
	fd, _, e := unix.Syscall6(unix.SYS_OPENAT, uintptr(unix.AT_FDCWD&0xffffffff), uintptr(unsafe.Pointer(p)), uintptr(flags|unix.O_CLOEXEC), uintptr(mode), 0, 0)
	runtime.KeepAlive(p)
	if e != 0 {
		return -1, e
	}
	return int(fd), nil
}

// creatRaw is creat(2) (openat where there is no creat).
func creatRaw(path string, mode uint32) (int, error) {
	if runtime.GOARCH != "amd64" {
		return openatRaw(path, unix.O_CREAT|unix.O_TRUNC|unix.O_WRONLY, uint64(mode))
	}
	p, err := unix.BytePtrFromString(path)
	if err != nil {
		return -1, err
	}
	fd, _, e := unix.Syscall(sysCreatAMD64, uintptr(unsafe.Pointer(p)), uintptr(mode), 0)
	runtime.KeepAlive(p)
	if e != 0 {
		return -1, e
	}
	return int(fd), nil
}

func openat2File(path string, mode uint32) (int, error) {
	return unix.Openat2(unix.AT_FDCWD, path, &unix.OpenHow{Flags: unix.O_CREAT | unix.O_EXCL | unix.O_WRONLY | unix.O_CLOEXEC, Mode: uint64(mode)})
}

// tmpfileLinked makes an unnamed file with the mode and links it in.
func tmpfileLinked(path string, mode uint32) (int, error) {
	fd, err := openatRaw(".", unix.O_TMPFILE|unix.O_WRONLY, uint64(mode))
	if err != nil {
		return -1, err
	}
	err = unix.Linkat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(fd), unix.AT_FDCWD, path, unix.AT_SYMLINK_FOLLOW)
	unix.Close(fd)
	if err != nil {
		return -1, err
	}
	return -1, nil
}

// mknodFile makes a regular file with mknod, then opens it to fill it.
func mknodFile(path string, mode uint32) (int, error) {
	if err := unix.Mknodat(unix.AT_FDCWD, path, unix.S_IFREG|mode, 0); err != nil {
		return -1, err
	}
	return unix.Open(path, unix.O_WRONLY|unix.O_CLOEXEC, 0)
}

// setcap gives a copy of the shell the file capability CAP_SETUID
// (security.capability, version 2) through each of the setxattr calls in
// turn (param: set, lset, fset or setat), and reports the first answer.
func setcap(p string) string {
	path := "w-setcap-" + p
	b, err := shell()
	if err != nil {
		return "read:" + result(err)
	}
	if err := os.WriteFile(path, b, 0o755); err != nil {
		return "copy:" + result(err)
	}
	var v [20]byte
	binary.LittleEndian.PutUint32(v[0:], 0x02000000|1) // VFS_CAP_REVISION_2 | VFS_CAP_FLAGS_EFFECTIVE
	binary.LittleEndian.PutUint32(v[4:], 1<<unix.CAP_SETUID)
	return xattrCall(p, path, "security.capability", v[:])
}

// setacl gives a copy of the shell an access ACL that lets others write
// (system.posix_acl_access: user::rwx group::r-x other::rwx).
func setacl(p string) string {
	path := "w-setacl-" + p
	if err := os.WriteFile(path, []byte("x"), 0o644); err != nil {
		return "create:" + result(err)
	}
	acl := make([]byte, 4+3*8)
	binary.LittleEndian.PutUint32(acl[0:], 2)                        // POSIX_ACL_XATTR_VERSION
	for i, e := range [][2]uint16{{0x01, 7}, {0x04, 5}, {0x20, 7}} { // ACL_USER_OBJ, ACL_GROUP_OBJ, ACL_OTHER
		binary.LittleEndian.PutUint16(acl[4+8*i:], e[0])
		binary.LittleEndian.PutUint16(acl[6+8*i:], e[1])
		binary.LittleEndian.PutUint32(acl[8+8*i:], 0xffffffff)
	}
	return withMode(xattrCall(p, path, "system.posix_acl_access", acl), path)
}

// xattrCall sets name on path with the call the parameter names.
func xattrCall(call, path, name string, value []byte) string {
	switch call {
	case "set":
		return result(unix.Setxattr(path, name, value, 0))
	case "lset":
		return result(unix.Lsetxattr(path, name, value, 0))
	case "fset":
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return "open:" + result(err)
		}
		defer unix.Close(fd)
		return result(unix.Fsetxattr(fd, name, value, 0))
	case "setat":
		// struct xattr_args { u64 value; u32 size; u32 flags; }
		args := struct {
			value       uint64
			size, flags uint32
		}{uint64(uintptr(unsafe.Pointer(&value[0]))), uint32(len(value)), 0}
		p, _ := unix.BytePtrFromString(path)
		n, _ := unix.BytePtrFromString(name)
		_, _, e := unix.Syscall6(unix.SYS_SETXATTRAT, uintptr(unix.AT_FDCWD&0xffffffff), uintptr(unsafe.Pointer(p)), 0,
			uintptr(unsafe.Pointer(n)), uintptr(unsafe.Pointer(&args)), unsafe.Sizeof(args))
		runtime.KeepAlive(p)
		runtime.KeepAlive(n)
		runtime.KeepAlive(value)
		return errnoResult(e)
	}
	return "badparam"
}

// removexattr removes an ACL (param: remove, lremove, fremove, removeat)
// from a file that has none: ENODATA when the call reaches the file.
func removexattr(p string) string {
	path := "w-removexattr-" + p
	if err := os.WriteFile(path, []byte("x"), 0o644); err != nil {
		return "create:" + result(err)
	}
	const name = "system.posix_acl_access"
	switch p {
	case "remove":
		return result(unix.Removexattr(path, name))
	case "lremove":
		return result(unix.Lremovexattr(path, name))
	case "fremove":
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return "open:" + result(err)
		}
		defer unix.Close(fd)
		return result(unix.Fremovexattr(fd, name))
	case "removeat":
		ps, _ := unix.BytePtrFromString(path)
		n, _ := unix.BytePtrFromString(name)
		_, _, e := unix.Syscall6(unix.SYS_REMOVEXATTRAT, uintptr(unix.AT_FDCWD&0xffffffff), uintptr(unsafe.Pointer(ps)), 0, uintptr(unsafe.Pointer(n)), 0, 0)
		runtime.KeepAlive(ps)
		runtime.KeepAlive(n)
		return errnoResult(e)
	}
	return "badparam"
}

// statusUmask reads this process's umask from /proc.
func statusUmask() (uint32, error) {
	b, err := os.ReadFile("/proc/thread-self/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Umask:"); ok {
			m, err := strconv.ParseUint(strings.TrimSpace(v), 8, 32)
			return uint32(m), err
		}
	}
	return 0, errors.New("no Umask line")
}

// rawUmask calls umask(2) on the current thread.
func rawUmask(m uint64) uint32 {
	r, _, _ := unix.RawSyscall(unix.SYS_UMASK, uintptr(m), 0, 0)
	return uint32(r)
}

// umask0Create sets the umask to 0 (param: "hi" sets the high word too),
// then creates a file asking for 0666, a directory asking for 0777 and a
// FIFO asking for 0666, and reports the umask call's answer, the umask
// the kernel then has, and the three modes.
func umask0Create(p string) string {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	arg := uint64(0)
	if p == "hi" {
		arg = 0xffffffff_00000000
	}
	got := rawUmask(arg)
	after, err := statusUmask()
	if err != nil {
		return "status:" + result(err)
	}
	file, dir, fifo := "w-umask0-file-"+p, "w-umask0-dir-"+p, "w-umask0-fifo-"+p
	fd, err := openatRaw(file, unix.O_CREAT|unix.O_WRONLY, 0o666)
	if err != nil {
		return "create:" + result(err)
	}
	unix.Close(fd)
	if err := unix.Mkdir(dir, 0o777); err != nil {
		return "mkdir:" + result(err)
	}
	if err := unix.Mkfifo(fifo, 0o666); err != nil {
		return "mkfifo:" + result(err)
	}
	var fst, dst, pst unix.Stat_t
	_ = unix.Stat(file, &fst)
	_ = unix.Stat(dir, &dst)
	_ = unix.Stat(fifo, &pst)
	return fmt.Sprintf("ok returned=%04o umask=%04o file=%04o dir=%04o fifo=%04o", got, after, fst.Mode&0o7777, dst.Mode&0o7777, pst.Mode&0o7777)
}

// umaskRead is the usual way to read the umask, old = umask(0);
// umask(old), compared with /proc before and after: the control.
func umaskRead(string) string {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	before, err := statusUmask()
	if err != nil {
		return "status:" + result(err)
	}
	old := rawUmask(0)
	rawUmask(uint64(old))
	after, err := statusUmask()
	if err != nil {
		return "status:" + result(err)
	}
	if old != before || after != before {
		return fmt.Sprintf("wrong status=%04o returned=%04o after=%04o", before, old, after)
	}
	return fmt.Sprintf("ok %04o", old)
}

// umask077 sets a stricter umask, which must take effect, and reads it
// back with umask(0), which must return it; then sets the old one back.
func umask077(string) string {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	before := rawUmask(0o077)
	now, err := statusUmask()
	if err != nil {
		return "status:" + result(err)
	}
	read := rawUmask(0)
	rawUmask(uint64(before))
	if now != 0o077 || read != 0o077 {
		return fmt.Sprintf("wrong status=%04o read=%04o", now, read)
	}
	return "ok"
}

// pipChmod does what pip does to the scripts it installs: reads the umask
// (umask(0), then sets it back) and chmods to 0777 &^ umask | 0111.
func pipChmod(string) string {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	old := rawUmask(0)
	rawUmask(uint64(old))
	path := "w-pip"
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"), 0o644); err != nil {
		return "create:" + result(err)
	}
	return withMode(result(unix.Chmod(path, 0o777&^old|0o111)), path)
}

// chmodPath sets the mode of an existing path: param MODE:PATH.
func chmodPath(p string) string {
	m, path, ok := strings.Cut(p, ":")
	if !ok {
		return "badparam"
	}
	return withMode(result(unix.Chmod(path, parseMode(m))), path)
}

// chmodAdd adds permission bits to an existing path: param BITS:PATH.
func chmodAdd(p string) string {
	m, path, ok := strings.Cut(p, ":")
	if !ok {
		return "badparam"
	}
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return "stat:" + result(err)
	}
	return withMode(result(unix.Chmod(path, st.Mode&0o7777|parseMode(m))), path)
}
