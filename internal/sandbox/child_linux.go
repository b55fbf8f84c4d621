package sandbox

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The sandbox's first process is a fork of hutch that runs its prog, forks
// the command, reports to hutch and stays PID 1 of the sandbox: it reaps
// orphans and passes the signals hutch forwards to the command's process
// group, and when the command exits it exits with its status, and the
// kernel kills whatever is left in the pid namespace (S4). Everything here
// runs without the Go runtime: no allocation, no stack growth, raw system
// calls on memory hutch prepared.

// The runtime's fork hooks, as package syscall uses them: before the fork
// they block signals and forbid stack growth; in the child, before exec,
// they restore default signal handlers and the signal mask.
//
//go:linkname runtimeBeforeFork syscall.runtime_BeforeFork
func runtimeBeforeFork()

//go:linkname runtimeAfterFork syscall.runtime_AfterFork
func runtimeAfterFork()

//go:linkname runtimeAfterForkInChild syscall.runtime_AfterForkInChild
func runtimeAfterForkInChild()

// reply is what the first process tells hutch, once.
type reply struct {
	Kind  int32 // replyStarted, replyFailed, replyExec
	Op    int32 // replyFailed: the op that failed
	Errno int32
	Code  int32 // the exit code the first process exits with
}

const (
	replyStarted = 1 + iota
	replyFailed
	replyExec // the command could not be executed
)

// child is everything the first process needs, prepared by hutch.
type child struct {
	ops   []op
	slots [maxSlots]uintptr

	ctl   uintptr   // its end of the control socket
	argv  uintptr   // **byte, NULL-terminated
	envv  uintptr   // **byte, NULL-terminated
	paths []uintptr // *byte: where to look for the command, in order
	tty   bool
	// agentFD >= 0: exec hutch's agent (paths[0], argv, envv) with this
	// descriptor as 3 instead of forking the command.
	agentFD int
	master  int8 // slots of the pty, with tty
	slave   int8
	execR   int8 // slots of the pipe that tells whether the exec worked
	execW   int8

	// listener is the slot of the seccomp filter's listener (-1: none):
	// PID 1 answers the umask calls the filter hands over (answer), or
	// passes it to the agent as agentListenerFD.
	listener int8
	pfds     [2]unix.PollFd
	notif    seccompNotif
	resp     seccompResp
	path     [32]byte  // /proc/PID/status
	procBuf  [512]byte // its start, which holds Umask

	sigmask uint64 // forwarded signals and SIGCHLD, for signalfd
	siginfo [128]byte
	status  int32
	execErr int32
	out     reply
	outIov  unix.Iovec
	outHdr  unix.Msghdr // the reply alone
	outFDs  unix.Msghdr // the reply with the pty master
	outOOB  []byte      // the SCM_RIGHTS message of outFDs
	outFD   *int32      // where in outOOB the descriptor goes
	stat    unix.Stat_t
}

// main is the first process. It never returns.
//
//go:nosplit
//go:norace
//go:nocheckptr
func (c *child) main() {
	if i, e := run(c.ops, &c.slots); i >= 0 {
		c.send(replyFailed, int32(i), int32(e), ExitHutchError, false)
		exit(ExitHutchError)
	}
	if c.agentFD >= 0 {
		c.execAgent()
	}
	pid, _, e := syscall.RawSyscall6(unix.SYS_CLONE, uintptr(unix.SIGCHLD), 0, 0, 0, 0, 0)
	if e != 0 {
		c.send(replyFailed, -1, int32(e), ExitHutchError, false)
		exit(ExitHutchError)
	}
	if pid == 0 {
		c.exec()
	}
	syscall.RawSyscall(unix.SYS_CLOSE, c.slot(c.execW), 0, 0)
	for {
		n, _, e := syscall.RawSyscall(unix.SYS_READ, c.slot(c.execR), uintptr(unsafe.Pointer(&c.execErr)), 4)
		if e == unix.EINTR {
			continue
		}
		if e == 0 && n == 4 {
			code := int32(ExitNotExecutable)
			if c.execErr == int32(unix.ENOENT) || c.execErr == int32(unix.ENOTDIR) {
				code = ExitNotFound
			}
			c.send(replyExec, -1, c.execErr, code, false)
			exit(int(code))
		}
		break
	}
	c.send(replyStarted, -1, 0, 0, c.tty)
	// From here on the first process needs no descriptor but the filter's
	// listener: it keeps none of the caller's streams, the pty, the
	// control socket, or what it inherited from hutch (the writable roots'
	// locks, hutch's runtime's descriptors, detached mounts of host files).
	lfd := ^uintptr(0)
	if c.listener >= 0 {
		lfd = c.slot(c.listener)
		if lfd > 0 {
			syscall.RawSyscall(unix.SYS_CLOSE_RANGE, 0, lfd-1, 0)
		}
		syscall.RawSyscall(unix.SYS_CLOSE_RANGE, lfd+1, ^uintptr(0), 0)
	} else {
		syscall.RawSyscall(unix.SYS_CLOSE_RANGE, 0, ^uintptr(0), 0)
	}
	c.reap(pid, lfd)
}

//go:nosplit
func (c *child) slot(s int8) uintptr { return c.slots[uint8(s)&(maxSlots-1)] }

// exec is the command's process: a new session (with the pty as its
// controlling terminal), default signal handling, then execve of the first
// path that works, as a shell would.
//
//go:nosplit
//go:norace
//go:nocheckptr
func (c *child) exec() {
	syscall.RawSyscall(unix.SYS_SETSID, 0, 0, 0)
	if c.tty {
		slave := c.slot(c.slave)
		syscall.RawSyscall(unix.SYS_IOCTL, slave, unix.TIOCSCTTY, 0)
		for fd := uintptr(0); fd < 3; fd++ {
			syscall.RawSyscall(unix.SYS_DUP3, slave, fd, 0)
		}
	}
	runtimeAfterForkInChild()
	c.execErr = int32(unix.ENOENT)
	for _, p := range c.paths {
		// As a shell: a path that cannot be reached (a directory of PATH
		// that may not be searched) is as good as absent.
		if _, _, e := syscall.RawSyscall6(unix.SYS_NEWFSTATAT, uintptr(unix.AT_FDCWD&0xffffffff), p, uintptr(unsafe.Pointer(&c.stat)), 0, 0, 0); e != 0 {
			continue
		}
		_, _, e := syscall.RawSyscall(unix.SYS_EXECVE, p, c.argv, c.envv)
		if c.execErr == int32(unix.ENOENT) {
			c.execErr = int32(e)
		}
	}
	syscall.RawSyscall(unix.SYS_WRITE, c.slot(c.execW), uintptr(unsafe.Pointer(&c.execErr)), 4)
	exit(ExitNotFound)
}

// execAgent makes the first process hutch's agent: it reports the start
// (the agent itself greets hutch on the agent connection once it runs),
// puts the agent connection at descriptor 3, open across the exec, and
// execs the agent with default signal handling.
//
//go:nosplit
//go:norace
//go:nocheckptr
func (c *child) execAgent() {
	c.send(replyStarted, -1, 0, 0, false)
	if c.agentFD == 3 {
		syscall.RawSyscall(unix.SYS_FCNTL, 3, unix.F_SETFD, 0)
	} else {
		syscall.RawSyscall(unix.SYS_DUP3, uintptr(c.agentFD), 3, 0)
	}
	if c.listener >= 0 {
		// Above 9 (see builder.harden), so neither 3 nor this replaced it.
		syscall.RawSyscall(unix.SYS_DUP3, c.slot(c.listener), agentListenerFD, 0)
	}
	runtimeAfterForkInChild()
	syscall.RawSyscall(unix.SYS_EXECVE, c.paths[0], c.argv, c.envv)
	exit(ExitNotExecutable)
}

// reap waits for signals: SIGCHLD reaps children until the command itself
// has exited, whose status becomes the first process's exit code; any
// other (forwarded by hutch) goes to the command's process group. With the
// filter's listener lfd (not ^0) it also answers the calls the filter
// hands over.
//
//go:nosplit
//go:norace
//go:nocheckptr
func (c *child) reap(cmd, lfd uintptr) {
	sfd, _, e := syscall.RawSyscall6(unix.SYS_SIGNALFD4, ^uintptr(0), uintptr(unsafe.Pointer(&c.sigmask)), 8, unix.SFD_CLOEXEC, 0, 0)
	if e != 0 {
		exit(ExitHutchError)
	}
	nfds := uintptr(1)
	c.pfds[0] = unix.PollFd{Fd: int32(sfd), Events: unix.POLLIN}
	if lfd != ^uintptr(0) {
		c.pfds[1] = unix.PollFd{Fd: int32(lfd), Events: unix.POLLIN}
		nfds = 2
	}
	for {
		if nfds == 2 {
			// The signalfd and the listener; without a listener the
			// read below waits alone.
			_, _, e := syscall.RawSyscall6(unix.SYS_PPOLL, uintptr(unsafe.Pointer(&c.pfds[0])), nfds, 0, 0, 0, 0)
			if e == unix.EINTR {
				continue
			}
			if e != 0 {
				exit(ExitHutchError)
			}
			if c.pfds[1].Revents&unix.POLLIN != 0 {
				c.answer(lfd)
			} else if c.pfds[1].Revents&(unix.POLLHUP|unix.POLLERR|unix.POLLNVAL) != 0 {
				nfds = 1
			}
			if c.pfds[0].Revents&unix.POLLIN == 0 {
				continue
			}
		}
		_, _, e := syscall.RawSyscall(unix.SYS_READ, sfd, uintptr(unsafe.Pointer(&c.siginfo[0])), uintptr(len(c.siginfo)))
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			exit(ExitHutchError)
		}
		sig := *(*uint32)(unsafe.Pointer(&c.siginfo[0]))
		if sig != uint32(unix.SIGCHLD) {
			syscall.RawSyscall(unix.SYS_KILL, uintptr(-int(cmd)), uintptr(sig), 0)
			continue
		}
		for {
			pid, _, e := syscall.RawSyscall6(unix.SYS_WAIT4, ^uintptr(0), uintptr(unsafe.Pointer(&c.status)), unix.WNOHANG, 0, 0, 0)
			if e != 0 || pid == 0 {
				break
			}
			if pid == cmd {
				st := c.status
				if st&0x7f == 0 {
					exit(int((st >> 8) & 0xff))
				}
				exit(128 + int(st&0x7f))
			}
		}
	}
}

// agentListenerFD is where the agent finds the filter's listener
// (agent.ListenerFD).
const agentListenerFD = 4

// seccompNotif and seccompResp are struct seccomp_notif and struct
// seccomp_notif_resp.
type seccompNotif struct {
	id    uint64
	pid   uint32 // the calling thread, in the receiver's pid namespace
	flags uint32
	nr    int32
	arch  uint32
	ip    uint64
	args  [6]uint64
}

type seccompResp struct {
	id    uint64
	val   int64
	error int32
	flags uint32
}

// unknownUmask answers for a thread whose umask cannot be read (it is
// gone, and the answer with it): set back, it makes files private.
const unknownUmask = 0o077

// answer receives one call the filter handed over and answers it; the
// listener has one pending. The only such call is a umask that lacks the
// withheld bits (see seccomp's host-write rules): it is never made, and
// returns the calling thread's current umask, read from the sandbox's
// /proc, as umask(2) returns the old one. So old = umask(0); umask(old)
// reads the true umask and changes nothing. It is what
// seccomp.Supervisor does in the agent, without the Go runtime.
//
//go:nosplit
//go:norace
//go:nocheckptr
func (c *child) answer(lfd uintptr) {
	c.notif = seccompNotif{}
	if _, _, e := syscall.RawSyscall(unix.SYS_IOCTL, lfd, unix.SECCOMP_IOCTL_NOTIF_RECV, uintptr(unsafe.Pointer(&c.notif))); e != 0 {
		return // the caller went away meanwhile
	}
	c.resp = seccompResp{id: c.notif.id}
	if c.notif.nr != unix.SYS_UMASK {
		c.resp.error = -int32(unix.ENOSYS)
	} else {
		c.resp.val = int64(c.umaskOf(c.notif.pid))
		// The pid may be another thread's by now if the call is gone:
		// answer only a call still waiting, whose thread was read.
		if _, _, e := syscall.RawSyscall(unix.SYS_IOCTL, lfd, unix.SECCOMP_IOCTL_NOTIF_ID_VALID, uintptr(unsafe.Pointer(&c.notif.id))); e != 0 {
			return
		}
	}
	syscall.RawSyscall(unix.SYS_IOCTL, lfd, unix.SECCOMP_IOCTL_NOTIF_SEND, uintptr(unsafe.Pointer(&c.resp)))
}

// umaskOf reads the umask of thread tid from the "Umask:" line of
// /proc/TID/status (near its start), or returns unknownUmask.
//
//go:nosplit
//go:norace
//go:nocheckptr
func (c *child) umaskOf(tid uint32) uint32 {
	n := 0
	for _, b := range [...]byte{'/', 'p', 'r', 'o', 'c', '/'} {
		c.path[n] = b
		n++
	}
	var digits [10]byte
	d := 0
	for v := tid; ; v /= 10 {
		digits[d] = byte('0' + v%10)
		d++
		if v < 10 {
			break
		}
	}
	for d > 0 {
		d--
		c.path[n] = digits[d]
		n++
	}
	for _, b := range [...]byte{'/', 's', 't', 'a', 't', 'u', 's', 0} {
		c.path[n] = b
		n++
	}
	fd, _, e := syscall.RawSyscall6(unix.SYS_OPENAT, uintptr(unix.AT_FDCWD&0xffffffff), uintptr(unsafe.Pointer(&c.path[0])), unix.O_RDONLY|unix.O_CLOEXEC, 0, 0, 0)
	if e != 0 {
		return unknownUmask
	}
	got, _, e := syscall.RawSyscall(unix.SYS_READ, fd, uintptr(unsafe.Pointer(&c.procBuf[0])), uintptr(len(c.procBuf)))
	syscall.RawSyscall(unix.SYS_CLOSE, fd, 0, 0)
	if e != 0 || got > uintptr(len(c.procBuf)) {
		return unknownUmask
	}
	const key = "\nUmask:"
	for i := 0; i+len(key) <= int(got); i++ {
		j := 0
		for j < len(key) && c.procBuf[i+j] == key[j] {
			j++
		}
		if j < len(key) {
			continue
		}
		i += len(key)
		for i < int(got) && (c.procBuf[i] == ' ' || c.procBuf[i] == '\t') {
			i++
		}
		mask, digits := uint32(0), 0
		for i < int(got) && c.procBuf[i] >= '0' && c.procBuf[i] <= '7' {
			mask = mask<<3 | uint32(c.procBuf[i]-'0')
			i++
			digits++
		}
		if digits == 0 || i >= int(got) || c.procBuf[i] != '\n' {
			return unknownUmask
		}
		return mask & 0o777
	}
	return unknownUmask
}

// send tells hutch how the start went, with the pty's master when withFD.
//
//go:nosplit
//go:norace
//go:nocheckptr
func (c *child) send(kind, op, errno, code int32, withFD bool) {
	c.out = reply{Kind: kind, Op: op, Errno: errno, Code: code}
	hdr := &c.outHdr
	if withFD {
		*c.outFD = int32(c.slot(c.master))
		hdr = &c.outFDs
	}
	syscall.RawSyscall(unix.SYS_SENDMSG, c.ctl, uintptr(unsafe.Pointer(hdr)), 0)
}

//go:nosplit
func exit(code int) {
	for {
		syscall.RawSyscall(unix.SYS_EXIT_GROUP, uintptr(code), 0, 0)
	}
}
