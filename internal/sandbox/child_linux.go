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
	// From here on the first process needs no descriptor: it keeps none of
	// the caller's streams, the pty, the control socket, or what it
	// inherited from hutch (the writable roots' locks, hutch's runtime's
	// descriptors, detached mounts of host files).
	syscall.RawSyscall(unix.SYS_CLOSE_RANGE, 0, ^uintptr(0), 0)
	c.reap(pid)
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
	runtimeAfterForkInChild()
	syscall.RawSyscall(unix.SYS_EXECVE, c.paths[0], c.argv, c.envv)
	exit(ExitNotExecutable)
}

// reap waits for signals: SIGCHLD reaps children until the command itself
// has exited, whose status becomes the first process's exit code; any
// other (forwarded by hutch) goes to the command's process group.
//
//go:nosplit
//go:norace
//go:nocheckptr
func (c *child) reap(cmd uintptr) {
	sfd, _, e := syscall.RawSyscall6(unix.SYS_SIGNALFD4, ^uintptr(0), uintptr(unsafe.Pointer(&c.sigmask)), 8, unix.SFD_CLOEXEC, 0, 0)
	if e != 0 {
		exit(ExitHutchError)
	}
	for {
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
