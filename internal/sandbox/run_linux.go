package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/cgroups"
	"github.com/hutch-sandbox/hutch/internal/policy"
)

// RootMappedID is the host uid and gid the sandbox runs as when root starts
// it (S1): an id no host file or process owns. Writable paths are mounted
// idmapped so that the sandbox's writes land on the host owned by the
// workspace's owner.
const RootMappedID = 1_000_000_000

// initArg0 marks the re-executed process as hutch's init.
const initArg0 = "hutch:init"

// IsInit reports whether this process is hutch's sandbox init.
func IsInit() bool { return len(os.Args) > 0 && os.Args[0] == initArg0 }

// Run runs c.Args in a new sandbox and waits for it to end.
func Run(ctx context.Context, c Config) (Result, error) {
	res := Result{ExitCode: ExitHutchError}
	if len(c.Args) == 0 {
		return res, errors.New("no command given")
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if c.Warn == nil {
		c.Warn = io.Discard
	}
	s := c.Spec
	ws := s.Filesystem.Workspace

	var wsStat unix.Stat_t
	if err := unix.Stat(ws, &wsStat); err != nil {
		return res, fmt.Errorf("workspace %q: %w", ws, err)
	}

	// Identity (S1).
	asRoot := os.Geteuid() == 0
	innerUID, innerGID := os.Getuid(), os.Getgid()
	hostUID, hostGID := innerUID, innerGID
	if asRoot {
		innerUID, innerGID = int(wsStat.Uid), int(wsStat.Gid)
		hostUID, hostGID = RootMappedID, RootMappedID
	}

	// Resource limits: a cgroup, or rlimits where none can be made.
	cfg := initConfig{
		Args:       c.Args,
		Env:        c.Environ,
		Dir:        ws,
		Root:       s.Root,
		TmpBytes:   s.Resources.TmpBytes,
		Hostname:   "hutch",
		BestEffort: s.BestEffort,
	}
	var dropped []string
	group, err := cgroups.Create("hutch-"+randomID(), cgroups.Limits{
		MemoryBytes: s.Resources.MemoryBytes,
		CPUs:        s.Resources.CPUs,
		Pids:        s.Resources.Pids,
	})
	if err != nil {
		rl, lost := rlimitFallback(s.Resources)
		if lost != "" && !s.BestEffort {
			return res, fmt.Errorf("%s cannot be enforced without a cgroup (%v); pass --best-effort to run without it", lost, err)
		}
		if lost != "" {
			dropped = append(dropped, lost+" (no cgroup: "+err.Error()+")")
		}
		cfg.Rlimits = rl
		group = nil
	}
	if group != nil {
		defer group.Destroy()
	}

	// Writable paths and the protections inside them.
	placeholders, err := preparePlaceholders(s, asRoot, innerUID, innerGID)
	defer removePlaceholders(placeholders, c.Log)
	if err != nil {
		return res, err
	}
	cfg.Writable, cfg.DenyWrite, cfg.Pin = writablePlan(s, placeholders)
	cfg.DenyRead = s.Filesystem.DenyRead
	cfg.AllowRead = s.Filesystem.AllowRead

	// Terminal.
	stdin, stdout, stderr := c.Stdin, c.Stdout, c.Stderr
	var term *ptyRelay
	if isTerminal(c.Stdin) {
		term, err = newPtyRelay(c.Stdin, c.Stdout)
		if err != nil {
			return res, err
		}
		defer term.Close()
		stdin, stdout, stderr = term.slave, term.slave, term.slave
		cfg.Tty = true
	}

	ctl, childCtl, err := socketPair()
	if err != nil {
		return res, err
	}
	defer ctl.Close()

	cmd := &exec.Cmd{
		Path:       "/proc/self/exe",
		Args:       []string{initArg0},
		Env:        []string{},
		Dir:        "/",
		Stdin:      stdin,
		Stdout:     stdout,
		Stderr:     stderr,
		ExtraFiles: []*os.File{childCtl},
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags: unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWPID |
				unix.CLONE_NEWNET | unix.CLONE_NEWIPC | unix.CLONE_NEWUTS | unix.CLONE_NEWCGROUP,
			UidMappings:                []syscall.SysProcIDMap{{ContainerID: innerUID, HostID: hostUID, Size: 1}},
			GidMappings:                []syscall.SysProcIDMap{{ContainerID: innerGID, HostID: hostGID, Size: 1}},
			GidMappingsEnableSetgroups: asRoot,
			Pdeathsig:                  unix.SIGKILL,
		},
	}
	if asRoot {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(innerUID), Gid: uint32(innerGID), Groups: []uint32{}}
	}
	if group != nil {
		if fd, ok := group.FD(); ok {
			cmd.SysProcAttr.UseCgroupFD = true
			cmd.SysProcAttr.CgroupFD = fd
		}
	}

	// Pdeathsig is tied to the thread that cloned the child.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := cmd.Start(); err != nil {
		childCtl.Close()
		return res, startError(err)
	}
	childCtl.Close()
	pid := cmd.Process.Pid
	killInit := func() { _ = unix.Kill(pid, unix.SIGKILL) }

	waitErr := make(chan error, 1)
	go func() { waitErr <- cmd.Wait() }()

	fail := func(err error) (Result, error) {
		killInit()
		<-waitErr
		return res, err
	}

	if group != nil && !cmd.SysProcAttr.UseCgroupFD {
		if err := group.Add(pid); err != nil {
			return fail(fmt.Errorf("add sandbox to cgroup: %w", err))
		}
	}

	var fds []int
	if asRoot {
		fds, err = idmapWritable(pid, cfg.Writable)
		if err != nil {
			if !s.BestEffort {
				return fail(err)
			}
			dropped = append(dropped, "idmapped writable mounts ("+err.Error()+"): the sandbox may not be able to write its workspace")
		}
	}
	err = sendMsg(int(ctl.Fd()), cfg, fds)
	closeAll(fds)
	if err != nil {
		return fail(fmt.Errorf("send sandbox config: %w", err))
	}

	var reply initReply
	if _, err := recvMsg(int(ctl.Fd()), &reply); err != nil {
		killInit()
		werr := <-waitErr
		return res, fmt.Errorf("sandbox init failed before starting the command: %w (init: %v)", err, werr)
	}
	if !reply.Started {
		<-waitErr
		if reply.ExitCode != 0 {
			res.ExitCode = reply.ExitCode
		}
		return res, &InitError{Msg: reply.Error, Code: res.ExitCode}
	}
	res.Dropped = append(dropped, reply.Dropped...)
	for _, d := range res.Dropped {
		fmt.Fprintf(c.Warn, "hutch: warning: running without %s\n", d)
	}
	if term != nil {
		term.Start()
	}

	// Forward the caller's signals to the sandbox.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, unix.SIGINT, unix.SIGTERM, unix.SIGHUP, unix.SIGQUIT, unix.SIGUSR1, unix.SIGUSR2)
	defer signal.Stop(sigs)

	var timeout <-chan struct{}
	if s.Resources.Timeout > 0 {
		tctx, cancel := context.WithTimeout(ctx, s.Resources.Timeout)
		defer cancel()
		timeout = tctx.Done()
	} else {
		timeout = ctx.Done()
	}
	for {
		select {
		case sig := <-sigs:
			_ = unix.Kill(pid, sig.(syscall.Signal))
			continue
		case <-timeout:
			killInit()
			<-waitErr
			res.TimedOut = ctx.Err() == nil
			res.ExitCode = ExitTimeout
			if !res.TimedOut {
				res.ExitCode = 128 + int(unix.SIGKILL)
			}
		case err := <-waitErr:
			res.ExitCode = exitCode(cmd.ProcessState, err)
		}
		break
	}
	if term != nil {
		term.Drain()
	}
	if group != nil {
		if st, err := group.Stats(); err == nil && st.OOMKills > 0 {
			res.OOMKilled = true
		}
	}
	return res, nil
}

// InitError is a failure inside the sandbox before the command started, with
// the exit code hutch should use (127 for a missing command and so on).
type InitError struct {
	Msg  string
	Code int
}

func (e *InitError) Error() string { return e.Msg }

func exitCode(ps *os.ProcessState, err error) int {
	if ps == nil {
		return ExitHutchError
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok {
		if ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ws.ExitStatus()
	}
	return ps.ExitCode()
}

func startError(err error) error {
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EACCES) {
		return fmt.Errorf("create sandbox namespaces: %w: %w (are user namespaces enabled? check sysctl user.max_user_namespaces and kernel.unprivileged_userns_clone, and AppArmor's kernel.apparmor_restrict_unprivileged_userns)", ErrKernelFeature, err)
	}
	return fmt.Errorf("start sandbox init: %w", err)
}

// idmapWritable prepares one detached, idmapped clone of every writable path
// for the sandbox's user namespace, so that files the sandbox writes appear
// on the host owned by the path's owner while the sandbox runs as an
// unprivileged host uid.
func idmapWritable(pid int, w []bindSrc) ([]int, error) {
	userns, err := unix.Open(fmt.Sprintf("/proc/%d/ns/user", pid), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open sandbox user namespace: %w", err)
	}
	defer unix.Close(userns)
	var fds []int
	for i := range w {
		fd, err := unix.OpenTree(unix.AT_FDCWD, w[i].Path, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
		if err != nil {
			closeAll(fds)
			return nil, fmt.Errorf("clone mount of %q: %w", w[i].Path, err)
		}
		attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP, Userns_fd: uint64(userns)}
		if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &attr); err != nil {
			unix.Close(fd)
			closeAll(fds)
			return nil, fmt.Errorf("idmapped mount of %q (filesystem without idmap support?): %w: %w", w[i].Path, ErrKernelFeature, err)
		}
		w[i].FD = len(fds)
		fds = append(fds, fd)
	}
	return fds, nil
}

// rlimitFallback turns the resource limits into per-process rlimits for
// when no cgroup can be made. The pids limit holds for the whole sandbox
// (RLIMIT_NPROC counts the sandbox user's processes in its own user
// namespace); memory becomes RLIMIT_DATA per process. A CPU limit has no
// rlimit equivalent: it is returned as lost.
func rlimitFallback(r policy.Resources) ([]rlimit, string) {
	var rl []rlimit
	if r.Pids > 0 {
		rl = append(rl, rlimit{Resource: unix.RLIMIT_NPROC, Value: uint64(r.Pids)})
	}
	if r.MemoryBytes > 0 {
		rl = append(rl, rlimit{Resource: unix.RLIMIT_DATA, Value: uint64(r.MemoryBytes)})
	}
	if r.CPUs > 0 {
		return rl, fmt.Sprintf("the cpu limit of %g", r.CPUs)
	}
	return rl, ""
}

func randomID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func isTerminal(f *os.File) bool {
	if f == nil {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
