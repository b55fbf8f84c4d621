//go:build linux

package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Attacks on the sandbox's PID 1 (ESCAPES 27): hutch's agent in a served
// sandbox, the first process in hutch run. Each takes the target pid as
// its parameter (default 1).
func init() {
	attacks["become"] = become
	attacks["pid1_mem_rw"] = pid1MemRW
	attacks["pid1_mem_read"] = pid1MemRead
	attacks["pid1_environ"] = pid1Environ
	attacks["pid1_fds"] = pid1Fds
	attacks["pid1_fd_write"] = pid1FdWrite
	attacks["pid1_map_files"] = pid1MapFiles
	attacks["pid1_root"] = pid1Root
	attacks["pid1_vm_writev"] = pid1VMWritev
	attacks["pid1_ptrace"] = pid1Ptrace
}

// become switches every thread of the attacker to uid and gid PARAM
// (dropping supplementary groups), for the attacks after it: what a
// sandbox's root can do to act as one of its users.
func become(p string) string {
	id := atoi(p)
	if err := syscall.Setgroups(nil); err != nil {
		return "setgroups:" + result(err)
	}
	if err := syscall.Setresgid(id, id, id); err != nil {
		return "setresgid:" + result(err)
	}
	return result(syscall.Setresuid(id, id, id))
}

// target is the pid an attack on PID 1 aims at.
func target(p string) string {
	if p == "" {
		return "1"
	}
	return p
}

// pid1MemRW opens PID 1's memory for writing: with it, overwriting its
// code takes it over.
func pid1MemRW(p string) string {
	fd, err := unix.Open("/proc/"+target(p)+"/mem", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return result(err)
	}
	unix.Close(fd)
	return "ok"
}

// pid1MemRead reads PID 1's memory at the start of its first mapping.
func pid1MemRead(p string) string {
	maps, err := os.ReadFile("/proc/" + target(p) + "/maps")
	if err != nil {
		return "maps:" + result(err)
	}
	start, _, _ := strings.Cut(string(maps), "-")
	addr, err := strconv.ParseUint(start, 16, 64)
	if err != nil {
		return "maps:unreadable"
	}
	fd, err := unix.Open("/proc/"+target(p)+"/mem", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return result(err)
	}
	defer unix.Close(fd)
	buf := make([]byte, 16)
	if _, err := unix.Pread(fd, buf, int64(addr)); err != nil {
		return "read:" + result(err)
	}
	return "ok"
}

// pid1Environ reads PID 1's environment.
func pid1Environ(p string) string {
	b, err := os.ReadFile("/proc/" + target(p) + "/environ")
	if err != nil {
		return result(err)
	}
	return fmt.Sprintf("ok %d bytes", len(b))
}

// pid1Fds lists PID 1's descriptors and where they lead. Numbers alone
// tell nothing: it succeeds only when a link can be read.
func pid1Fds(p string) string {
	dir := "/proc/" + target(p) + "/fd"
	entries, err := os.ReadDir(dir)
	if err != nil {
		return result(err)
	}
	var out []string
	var first error
	for _, e := range entries {
		l, err := os.Readlink(dir + "/" + e.Name())
		if err != nil {
			first = cmpOr(first, err)
			continue
		}
		out = append(out, e.Name()+"="+strings.ReplaceAll(l, " ", "_"))
	}
	if len(out) == 0 && first != nil {
		return result(first)
	}
	return "ok " + strings.Join(out, " ")
}

// cmpOr returns a unless it is nil, else b.
func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// pid1FdWrite reopens each of PID 1's descriptors 0 to 9 that it can for
// writing and writes a line into it: through an inherited host file (a
// daemon's log) that is a write on the host. It reports the descriptors
// written to, or the error of the first attempt.
func pid1FdWrite(p string) string {
	var wrote []string
	var first error
	for fd := range 10 {
		path := fmt.Sprintf("/proc/%s/fd/%d", target(p), fd)
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			if first == nil && !errors.Is(err, os.ErrNotExist) {
				first = err
			}
			continue
		}
		if _, err := io.WriteString(f, "hutch-escape: written through PID 1's descriptor\n"); err == nil {
			wrote = append(wrote, strconv.Itoa(fd))
		}
		f.Close()
	}
	if len(wrote) > 0 {
		return "ok " + strings.Join(wrote, ",")
	}
	if first == nil {
		return "ENOENT"
	}
	return result(first)
}

// pid1MapFiles lists PID 1's mapped files.
func pid1MapFiles(p string) string {
	entries, err := os.ReadDir("/proc/" + target(p) + "/map_files")
	if err != nil {
		return result(err)
	}
	return fmt.Sprintf("ok %d", len(entries))
}

// pid1Root follows PID 1's root directory link.
func pid1Root(p string) string {
	entries, err := os.ReadDir("/proc/" + target(p) + "/root/")
	if err != nil {
		return result(err)
	}
	return fmt.Sprintf("ok %d", len(entries))
}

// pid1VMWritev writes into PID 1's memory with process_vm_writev (to an
// address of its own stack area that need not exist: any answer but a
// refusal of the call means it reached the process).
func pid1VMWritev(p string) string {
	src := []byte("hutch")
	local := []unix.Iovec{{Base: &src[0]}}
	local[0].SetLen(len(src))
	remote := []unix.RemoteIovec{{Base: uintptr(unsafe.Pointer(&src[0])), Len: len(src)}}
	_, err := unix.ProcessVMWritev(atoi(target(p)), local, remote, 0)
	runtime.KeepAlive(src)
	return result(err)
}

// pid1Ptrace attaches to PID 1 (and lets it go again at once).
func pid1Ptrace(p string) string {
	pid := atoi(target(p))
	ch := make(chan string)
	go func() {
		runtime.LockOSThread() // ptrace belongs to the thread
		err := unix.PtraceAttach(pid)
		if err == nil {
			var ws unix.WaitStatus
			_, _ = unix.Wait4(pid, &ws, unix.WALL, nil)
			_ = unix.PtraceDetach(pid)
		}
		ch <- result(err)
	}()
	return <-ch
}
