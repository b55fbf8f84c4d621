package peercred

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// soPeerPidfd is SO_PEERPIDFD (Linux 6.5): a pidfd of the process that
// connected, taken by the kernel at connect time. Its value is the
// generic one (amd64, arm64, riscv64 …).
const soPeerPidfd = 77

// ownUserNS is the user namespace of this process (device and inode of
// /proc/self/ns/user), which does not change while it runs.
var ownUserNS = sync.OnceValues(func() (nsID, error) {
	return userNS("self")
})

// nsID identifies a namespace.
type nsID struct{ dev, ino uint64 }

// userNS returns the user namespace of the process /proc/<pid> shows.
func userNS(pid string) (nsID, error) {
	var st unix.Stat_t
	if err := unix.Stat("/proc/"+pid+"/ns/user", &st); err != nil {
		return nsID{}, fmt.Errorf("user namespace of pid %s: %w", pid, err)
	}
	return nsID{st.Dev, st.Ino}, nil
}

// Of returns the peer of c, a unix socket connection. The peer's process
// is held by a pidfd — the kernel's own (SO_PEERPIDFD), taken when the
// peer connected; on kernels before 6.5 one opened for the pid SO_PEERCRED
// names (which a process that exited and whose pid was reused before that
// could fool) — and its user namespace is read from /proc and only
// trusted if the pidfd's process still runs afterwards, so that the pid
// was not reused in between. A peer that has exited, or that the caller's
// pid namespace cannot see, is an error: the caller cannot tell where it
// lives.
func Of(c syscall.Conn) (Peer, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return Peer{}, fmt.Errorf("peer credentials: %w", err)
	}
	var cred *unix.Ucred
	pidfd := -1
	var credErr, fdErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
		pidfd, fdErr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, soPeerPidfd)
	}); err != nil {
		return Peer{}, fmt.Errorf("peer credentials: %w", err)
	}
	if credErr != nil {
		return Peer{}, fmt.Errorf("peer credentials: SO_PEERCRED: %w", credErr)
	}
	p := Peer{PID: int(cred.Pid), UID: cred.Uid, GID: cred.Gid}
	if p.PID <= 0 {
		return p, errors.New("peer credentials: the peer's process is not in this pid namespace")
	}
	switch {
	case fdErr == nil:
	case errors.Is(fdErr, unix.ENOPROTOOPT) || errors.Is(fdErr, unix.EINVAL):
		// Before Linux 6.5.
		if pidfd, fdErr = unix.PidfdOpen(p.PID, 0); fdErr != nil {
			return p, fmt.Errorf("peer credentials: pidfd of pid %d: %w", p.PID, fdErr)
		}
	default:
		return p, fmt.Errorf("peer credentials: SO_PEERPIDFD: %w", fdErr)
	}
	defer unix.Close(pidfd)
	// SO_PEERCRED's pid and SO_PEERPIDFD's process were both taken when
	// the peer connected: the same process.
	ns, err := userNS(strconv.Itoa(p.PID))
	if err != nil {
		return p, fmt.Errorf("peer credentials: %w", err)
	}
	// The pid named the peer while we read its namespace only if the
	// peer still runs now: a pid is not reused before its process is
	// gone.
	if err := unix.PidfdSendSignal(pidfd, 0, nil, 0); err != nil {
		return p, fmt.Errorf("peer credentials: the peer (pid %d) has exited: %w", p.PID, err)
	}
	own, err := ownUserNS()
	if err != nil {
		return p, fmt.Errorf("peer credentials: %w", err)
	}
	p.SameUserNS = ns == own
	return p, nil
}
