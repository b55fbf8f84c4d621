package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// cloneNamespaces are the sandbox's new namespaces.
const cloneNamespaces = unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWPID |
	unix.CLONE_NEWNET | unix.CLONE_NEWIPC | unix.CLONE_NEWUTS | unix.CLONE_NEWCGROUP

// cloneArgs is struct clone_args of clone3.
type cloneArgs struct {
	flags      uint64
	pidfd      uint64
	childTID   uint64
	parentTID  uint64
	exitSignal uint64
	stack      uint64
	stackSize  uint64
	tls        uint64
	setTID     uint64
	setTIDSize uint64
	cgroup     uint64
}

// newChild prepares the first process's world around its prog.
func newChild(b *builder, cfg initConfig, ctl int) (*child, error) {
	ch := &child{ops: b.p.ops, ctl: uintptr(ctl), tty: cfg.Tty, master: -1, slave: -1, agentFD: cfg.AgentFD, listener: -1}
	p := &b.p
	argv, err := cStrings(cfg.Args)
	if err != nil {
		return nil, fmt.Errorf("command: %w", err)
	}
	envv, err := cStrings(cfg.Env)
	if err != nil {
		return nil, fmt.Errorf("environment: %w", err)
	}
	p.keep = append(p.keep, argv, envv)
	ch.argv = uintptr(unsafe.Pointer(&argv[0]))
	ch.envv = uintptr(unsafe.Pointer(&envv[0]))
	paths := []string{SandboxHutch}
	if cfg.AgentFD < 0 {
		paths = commandPaths(cfg.Args[0], cfg.Env)
	}
	for _, path := range paths {
		b, err := unix.BytePtrFromString(path)
		if err != nil {
			return nil, fmt.Errorf("command: %w", err)
		}
		p.keep = append(p.keep, b)
		ch.paths = append(ch.paths, uintptr(unsafe.Pointer(b)))
	}
	for _, sig := range forwardedSignals {
		ch.sigmask |= 1 << (uint(sig.(syscall.Signal)) - 1)
	}
	ch.sigmask |= 1 << (uint(unix.SIGCHLD) - 1)

	ch.outIov.Base = (*byte)(unsafe.Pointer(&ch.out))
	ch.outIov.SetLen(int(unsafe.Sizeof(ch.out)))
	ch.outHdr.Iov = &ch.outIov
	ch.outHdr.SetIovlen(1)
	ch.outFDs = ch.outHdr
	ch.outOOB = unix.UnixRights(0)
	ch.outFD = (*int32)(unsafe.Pointer(&ch.outOOB[unix.CmsgLen(0)]))
	ch.outFDs.Control = &ch.outOOB[0]
	ch.outFDs.SetControllen(len(ch.outOOB))
	return ch, nil
}

// cStrings turns ss into a NULL-terminated array of C strings.
func cStrings(ss []string) ([]*byte, error) {
	out := make([]*byte, 0, len(ss)+1)
	for _, v := range ss {
		b, err := unix.BytePtrFromString(v)
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return append(out, nil), nil
}

// commandPaths lists where to look for the command, in order, as a shell
// would: the name itself if it has a slash, else each directory of PATH.
func commandPaths(name string, env []string) []string {
	if strings.Contains(name, "/") {
		return []string{name}
	}
	path := "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin"
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	var out []string
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		out = append(out, filepath.Join(dir, name))
	}
	return out
}

// spawn clones the first process into the sandbox's namespaces (into the
// cgroup when cgroupFD >= 0; without a network namespace of its own unless
// newNet) and returns its pid. The child runs ch.main.
// Pdeathsig belongs to the thread that cloned the child; the Go runtime
// keeps its threads, so the lock is needed only around the clone.
func spawn(ch *child, cgroupFD int, newNet bool) (int, error) {
	args := &cloneArgs{flags: cloneNamespaces, exitSignal: uint64(unix.SIGCHLD)}
	if !newNet {
		args.flags &^= unix.CLONE_NEWNET
	}
	if cgroupFD >= 0 {
		args.flags |= unix.CLONE_INTO_CGROUP
		args.cgroup = uint64(cgroupFD)
	}
	runtime.LockOSThread()
	pid, errno := forkChild(args, ch)
	runtime.UnlockOSThread()
	runtime.KeepAlive(ch)
	if errno != 0 {
		return 0, startError(errno)
	}
	return int(pid), nil
}

// forkChild is the clone itself; in the child it runs ch.main and never
// returns.
//
//go:nosplit
//go:norace
//go:nocheckptr
func forkChild(args *cloneArgs, ch *child) (uintptr, unix.Errno) {
	runtimeBeforeFork()
	pid, _, errno := syscall.RawSyscall(unix.SYS_CLONE3, uintptr(unsafe.Pointer(args)), unsafe.Sizeof(*args), 0)
	if errno == 0 && pid == 0 {
		ch.main()
	}
	runtimeAfterFork()
	return pid, errno
}

// idMap maps n ids from inner (in the sandbox's user namespace) onto the
// host's from host.
type idMap struct{ inner, host, n int }

// writeIDMaps writes the sandbox's uid and gid maps; setgroups stays allowed
// only when root started the sandbox (it then drops all supplementary
// groups).
func writeIDMaps(pid int, uids, gids idMap, setgroups bool) error {
	dir := fmt.Sprintf("/proc/%d/", pid)
	sg := "deny"
	if setgroups {
		sg = "allow"
	}
	for _, w := range [][2]string{
		{"uid_map", fmt.Sprintf("%d %d %d\n", uids.inner, uids.host, uids.n)},
		{"setgroups", sg},
		{"gid_map", fmt.Sprintf("%d %d %d\n", gids.inner, gids.host, gids.n)},
	} {
		f, err := os.OpenFile(dir+w[0], os.O_WRONLY, 0)
		if err != nil {
			return fmt.Errorf("user namespace %s: %w", w[0], err)
		}
		_, err = f.WriteString(w[1])
		f.Close()
		if err != nil {
			return fmt.Errorf("user namespace %s: %w", w[0], err)
		}
	}
	return nil
}

// sent is what the first process sends hutch besides its reply: the pty's
// master (with the reply) and the proxy's listeners (in a message of their
// own, before the reply). An absent master is -1.
type sent struct {
	master    int
	listeners []int
}

// close closes every descriptor of s.
func (s *sent) close() {
	closeAll(s.listeners)
	s.listeners = nil
	if s.master >= 0 {
		unix.Close(s.master)
		s.master = -1
	}
}

// readReply reads the first process's reply and the descriptors it sends.
func readReply(ctl int, onStandIns func(dev int)) (r reply, got sent, err error) {
	got = sent{master: -1}
	buf := (*[unsafe.Sizeof(r)]byte)(unsafe.Pointer(&r))[:]
	oob := make([]byte, unix.CmsgSpace(4*4))
	for {
		n, oobn, _, _, err := unix.Recvmsg(ctl, buf, oob, unix.MSG_CMSG_CLOEXEC)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return r, got, err
		}
		var fds []int
		if oobn > 0 {
			msgs, _ := unix.ParseSocketControlMessage(oob[:oobn])
			for _, m := range msgs {
				rights, _ := unix.ParseUnixRights(&m)
				fds = append(fds, rights...)
			}
		}
		if n == 1 && buf[0] == listenersMsg && got.listeners == nil {
			got.listeners = fds
			continue
		}
		if n == 1 && buf[0] == standInsMsg {
			// The first process mounted the stand-ins and waits for
			// them to be served (see builder.userStandIns).
			if len(fds) == 1 && onStandIns != nil {
				onStandIns(fds[0])
			} else {
				closeAll(fds)
			}
			continue
		}
		if n != len(buf) {
			closeAll(fds)
			return r, got, errPeerClosed
		}
		if len(fds) > 0 {
			got.master = fds[0]
			closeAll(fds[1:])
		}
		return r, got, nil
	}
}

// idmapUserns makes a user namespace for idmapped mounts only (root):
// it maps the host uid and gid of a writable area's owner, uid and gid,
// onto toUID and toGID, so that a mount idmapped with it shows the
// owner's files as the host ids toUID and toGID — which the sandbox's own
// namespace shows as the id its command runs as — and the command's
// files land on the host as the owner's. Every other id stays unmapped
// (nobody, read-only). The namespace's only process, which blocks in the
// kernel from its clone on, is gone when idmapUserns returns; the
// descriptor keeps the namespace.
func idmapUserns(uid, gid, toUID, toGID int) (int, error) {
	return idmapUsernsMaps(fmt.Sprintf("%d %d 1\n", uid, toUID), fmt.Sprintf("%d %d 1\n", gid, toGID))
}

// idmapUsernsMaps is idmapUserns with the namespace's uid_map and gid_map
// given whole (lines "inside outside count").
func idmapUsernsMaps(uidMap, gidMap string) (int, error) {
	args := &cloneArgs{flags: unix.CLONE_NEWUSER, exitSignal: uint64(unix.SIGCHLD)}
	runtime.LockOSThread()
	pid, errno := forkIdle(args)
	runtime.UnlockOSThread()
	if errno != 0 {
		return -1, fmt.Errorf("user namespace for the writable areas' owner: %w", errno)
	}
	defer func() {
		_ = unix.Kill(int(pid), unix.SIGKILL)
		var ws unix.WaitStatus
		for {
			if _, err := unix.Wait4(int(pid), &ws, 0, nil); err != unix.EINTR {
				break
			}
		}
	}()
	dir := fmt.Sprintf("/proc/%d/", pid)
	for _, w := range [][2]string{
		{"uid_map", uidMap},
		{"gid_map", gidMap},
	} {
		if err := os.WriteFile(dir+w[0], []byte(w[1]), 0); err != nil {
			return -1, fmt.Errorf("user namespace for the writable areas' owner: %s: %w", w[0], err)
		}
	}
	fd, err := unix.Open(dir+"ns/user", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("user namespace for the writable areas' owner: %w", err)
	}
	return fd, nil
}

// forkIdle clones a process (args) that only waits to be killed: it asks
// for SIGKILL when its parent thread goes, and sleeps in ppoll.
//
//go:nosplit
//go:norace
//go:nocheckptr
func forkIdle(args *cloneArgs) (uintptr, unix.Errno) {
	runtimeBeforeFork()
	pid, _, errno := syscall.RawSyscall(unix.SYS_CLONE3, uintptr(unsafe.Pointer(args)), unsafe.Sizeof(*args), 0)
	if errno == 0 && pid == 0 {
		syscall.RawSyscall6(unix.SYS_PRCTL, unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0, 0)
		for {
			syscall.RawSyscall6(unix.SYS_PPOLL, 0, 0, 0, 0, 0, 0)
		}
	}
	runtimeAfterFork()
	return pid, errno
}
