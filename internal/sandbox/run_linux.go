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
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// RootMappedID is the host uid and gid the sandbox runs as when root starts
// it (S1): an id no host file or process owns. Writable paths are mounted
// idmapped so that the sandbox's writes land on the host owned by the
// workspace's owner.
const RootMappedID = 1_000_000_000

// initCaps are the capabilities (in its own user namespace) the init keeps
// across its execve: mounts, pivot_root and hostname (SYS_ADMIN), bringing up
// lo (NET_ADMIN), emptying the bounding set and locking securebits (SETPCAP),
// setting up mount points whatever their owner (DAC_OVERRIDE, FOWNER) and
// rlimits (SYS_RESOURCE).
var initCaps = []uintptr{
	unix.CAP_SYS_ADMIN, unix.CAP_NET_ADMIN, unix.CAP_SETPCAP,
	unix.CAP_DAC_OVERRIDE, unix.CAP_FOWNER, unix.CAP_SYS_RESOURCE,
}

// forwardedSignals are passed on from hutch to the command.
var forwardedSignals = []os.Signal{unix.SIGINT, unix.SIGTERM, unix.SIGHUP, unix.SIGQUIT, unix.SIGUSR1, unix.SIGUSR2}

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
	t0 := time.Now()
	phase := func(name string) { c.Log.Debug("sandbox setup", "phase", name, "at", time.Since(t0)) }

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

	cfg := initConfig{
		Args:       c.Args,
		Env:        c.Environ,
		Dir:        ws,
		Root:       s.Root,
		TmpBytes:   s.Resources.TmpBytes,
		Hostname:   "hutch",
		BestEffort: s.BestEffort,
		Landlock:   -1,
		Missing:    simulatedMissing(),
	}
	if cfg.Missing["userns"] {
		return res, fmt.Errorf("create sandbox namespaces: %w: user namespaces are not available (simulated by %s)", ErrKernelFeature, SimulateMissingEnv)
	}
	if asRoot {
		cfg.PrivateHome = privateHome(c.Environ, writableRoots(s))
	}
	for _, r := range writableRoots(s) {
		cfg.Writable = append(cfg.Writable, bindSrc{Path: r, FD: -1})
	}
	cfg.DenyRead = s.Filesystem.DenyRead
	cfg.AllowRead = s.Filesystem.AllowRead

	// Signals that arrive while the sandbox starts are forwarded once it
	// runs; none may kill hutch and leave the sandbox to its Pdeathsig.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, forwardedSignals...)
	defer signal.Stop(sigs)

	// Terminal: the init opens a pty in the sandbox's own devpts and sends
	// back its master; it holds nothing of the caller's terminal itself.
	stdin, stdout, stderr := c.Stdin, c.Stdout, c.Stderr
	var err error
	if isTerminal(c.Stdin) {
		devnull, err := os.Open(os.DevNull)
		if err != nil {
			return res, err
		}
		defer devnull.Close()
		stdin, stdout, stderr = devnull, devnull, devnull
		cfg.Tty = true
		if ws, err := unix.IoctlGetWinsize(int(c.Stdin.Fd()), unix.TIOCGWINSZ); err == nil {
			cfg.Rows, cfg.Cols = ws.Row, ws.Col
		}
	}

	ctl, childCtl, err := socketPair()
	if err != nil {
		return res, err
	}
	defer ctl.Close()

	cmd := &exec.Cmd{
		Path:       "/proc/self/exe",
		Args:       []string{initArg0},
		Env:        []string{"GOMAXPROCS=1"}, // the init is sequential: one P, fewer threads
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
			// The init runs as the sandbox's inside uid, which is not 0
			// unless the workspace is root's: without ambient capabilities
			// its execve would drop the ones it needs to build the sandbox.
			// It drops them all before the command starts.
			AmbientCaps: initCaps,
		},
	}
	if asRoot {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(innerUID), Gid: uint32(innerGID), Groups: []uint32{}}
	}

	group, rlimits, dropped, err := limits(s.Resources, s.BestEffort)
	if err != nil {
		return res, err
	}
	cfg.Rlimits = rlimits
	intoGroup := false
	if group != nil {
		if fd, ok := group.FD(); ok {
			cmd.SysProcAttr.UseCgroupFD = true
			cmd.SysProcAttr.CgroupFD = fd
			intoGroup = true
		}
	}

	// The init starts first: it blocks reading its config, and everything
	// below is prepared while its runtime starts. Pdeathsig fires when the
	// thread that cloned the child exits; the Go runtime keeps its threads
	// (nothing in hutch exits a goroutine locked to its thread), so the lock
	// is needed only around the clone.
	runtime.LockOSThread()
	err = cmd.Start()
	runtime.UnlockOSThread()
	if err != nil {
		childCtl.Close()
		if group != nil {
			_ = group.Destroy()
		}
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

	phase("init started")
	home := envHome(c.Environ)
	if cfg.PrivateHome != "" {
		home = "" // replaced by a private tmpfs: nothing there to protect
	}
	p := prepare(s, home, pid, asRoot, cfg.Writable, group, intoGroup, cfg.Missing)
	phase("host side prepared")
	defer p.cleanup(c.Log)
	if p.err != nil {
		return fail(p.err)
	}
	cfg.DenyWrite, cfg.Pin = protectionPlan(s, home, p.placeholders.paths())
	fds := p.fds
	for i := range cfg.Writable {
		cfg.Writable[i].FD = p.writableFD[i]
	}
	if p.ruleset != nil {
		cfg.Landlock = len(fds)
		fds = append(fds, p.ruleset.FD())
	}
	err = sendMsg(int(ctl.Fd()), cfg, fds)
	p.closeFDs()
	if err != nil {
		return fail(fmt.Errorf("send sandbox config: %w", err))
	}
	dropped = append(dropped, p.dropped...)

	var reply initReply
	replyFDs, err := recvMsg(int(ctl.Fd()), &reply)
	if err != nil {
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
	phase("command started")
	for _, t := range reply.Timings {
		c.Log.Debug("sandbox init", "phase", t.Phase, "took", t.Took)
	}
	res.Dropped = append(dropped, reply.Dropped...)
	for _, d := range res.Dropped {
		fmt.Fprintf(c.Warn, "hutch: warning: running without %s\n", d)
	}
	var term *ptyRelay
	if cfg.Tty {
		if len(replyFDs) != 1 {
			closeAll(replyFDs)
			return fail(fmt.Errorf("sandbox init sent %d terminal descriptors, want 1", len(replyFDs)))
		}
		term = startPtyRelay(os.NewFile(uintptr(replyFDs[0]), "pty-master"), c.Stdin, c.Stdout)
		defer term.Close()
	} else {
		closeAll(replyFDs)
	}

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
			_ = unix.Kill(pid, sig.(syscall.Signal)) // init forwards it to the command
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
	phase("sandbox ended")
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

// privateHome returns the sandbox's home directory when root started the
// sandbox and the home is closed to others (as /root is): the sandbox's
// unprivileged identity could not enter it, and tools that need a writable
// home (git, go, npm caches) would fail. It gets a private tmpfs instead.
func privateHome(environ, writable []string) string {
	home := envHome(environ)
	var st unix.Stat_t
	if home == "" || home == "/" || !filepath.IsAbs(home) || under(home, writable) || unix.Stat(home, &st) != nil {
		return ""
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR || st.Mode&0o001 != 0 {
		return ""
	}
	return filepath.Clean(home)
}

// envHome is the home directory the sandbox's environment names.
func envHome(environ []string) string {
	var home string
	for _, kv := range environ {
		if v, ok := strings.CutPrefix(kv, "HOME="); ok {
			home = v
		}
	}
	if !filepath.IsAbs(home) {
		return ""
	}
	return filepath.Clean(home)
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
