package gvisor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/sandbox"
)

// DefaultStateDir is where each sandbox of the tier gets a private
// directory (mode 0700): its OCI bundle, runsc's state (runsc --root), the
// empty file its masks bind, the console socket. Removed when the sandbox
// ends; a directory whose hutch was killed is removed by the next one.
const DefaultStateDir = sandbox.TierStateDir

// Runtime is the gVisor tier. The zero value is not usable: Runsc is
// required (see Find).
type Runtime struct {
	// Runsc is the runsc binary, of the pinned version (Find).
	Runsc string
	// StateDir holds the sandboxes' private directories; DefaultStateDir
	// when empty.
	StateDir string
	// Binary is hutch's binary, bound read-only at sandbox.SandboxHutch
	// when the sandbox has a proxy: its first process (InitMain) and ssh's
	// ProxyCommand. The running executable when empty.
	Binary string
	// DirectFS lets gVisor's kernel open the sandbox's files itself, on
	// descriptors its gofer hands it (runsc --directfs), rather than ask
	// the gofer for every file operation: file-heavy commands run faster
	// (git status about 3×), and the Sentry and the stub processes in
	// which the command's code runs are then the sandbox's root on the
	// host (sandbox.RootMappedID) holding CAP_CHOWN, CAP_DAC_OVERRIDE,
	// CAP_DAC_READ_SEARCH, CAP_FOWNER, CAP_FSETID and CAP_SYS_PTRACE in
	// the sandbox's user namespace, with file system calls in their
	// seccomp filter, where without it they are host nobody with no
	// capability. Off by default (S1); hutch run only in this version.
	DirectFS bool
}

var _ sandbox.Runtime = (*Runtime)(nil)

// Tier returns policy.TierGVisor.
func (*Runtime) Tier() string { return policy.TierGVisor }

// check refuses what neither Run nor Start can do: another tier's spec,
// no runsc, hutch not root (runsc's rootless mode does not give the same
// isolation), a field the tier refuses (policy.TierRefusals), a network
// mode other than none or proxy, or proxy without an egress proxy.
func (rt *Runtime) check(c sandbox.Config) error {
	s := c.Spec
	switch {
	case s.Tier != policy.TierGVisor:
		return fmt.Errorf("tier %q: not the gvisor tier", s.Tier)
	case rt.Runsc == "":
		return fmt.Errorf("%w: tier %q needs runsc; %s", ErrRunsc, policy.TierGVisor, installAdvice())
	case os.Geteuid() != 0:
		return fmt.Errorf("tier %q needs hutch to run as root in this version (runsc's rootless mode does not give the same isolation)", policy.TierGVisor)
	}
	if r := policy.TierRefusals(s); len(r) > 0 {
		return fmt.Errorf("tier %q: %s", policy.TierGVisor, strings.Join(r, "; "))
	}
	switch {
	case s.Network.Mode != "none" && s.Network.Mode != "proxy":
		return fmt.Errorf("tier %q: network mode %q is not supported", policy.TierGVisor, s.Network.Mode)
	case s.Network.Mode == "proxy" && c.Proxy == nil:
		return errors.New("network mode proxy needs an egress proxy")
	}
	return nil
}

// forwarded are the signals hutch passes on to the command.
var forwarded = []os.Signal{unix.SIGINT, unix.SIGTERM, unix.SIGHUP, unix.SIGQUIT, unix.SIGUSR1, unix.SIGUSR2}

// Run runs c.Args under gVisor and waits for it: the contract of
// sandbox.Run. Only root can run it in this version (runsc then gives its
// Sentry a user namespace of its own, as host nobody, and the command
// runs as the workspace's owner without capabilities inside gVisor).
func (rt *Runtime) Run(ctx context.Context, c sandbox.Config) (res sandbox.Result, err error) {
	res.ExitCode = sandbox.ExitHutchError
	log := c.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	t0 := time.Now()
	phase := func(name string) { log.Debug("gvisor setup", "phase", name, "at", time.Since(t0)) }
	warn := c.Warn
	if warn == nil {
		warn = io.Discard
	}
	if err := rt.check(c); err != nil {
		return res, err
	}
	switch {
	case len(c.Args) == 0:
		return res, errors.New("no command given")
	case c.RootLayer != nil || c.RootCaps:
		return res, fmt.Errorf("tier %q: a writable root layer is for hutch serve's sandboxes (Start)", policy.TierGVisor)
	}
	img := c.Image
	if err := checkImage(img); err != nil {
		return res, err
	}
	if c.Proxy != nil {
		defer c.Proxy.Close()
	}

	h, err := rt.hostView(c, c.Args, false, log, warn, phase)
	if h != nil {
		defer phase("cleaned up")
		defer func() { res.SetAside = h.close() }()
	}
	if err != nil {
		var ie *sandbox.InitError
		if errors.As(err, &ie) {
			res.ExitCode = ie.Code
		}
		return res, err
	}
	s, v, dir, id, state := h.spec, h.v, h.dir, h.id, h.state

	// Signals that arrive while the sandbox starts are forwarded once it
	// runs; none may kill hutch and leave runsc to its parent-death signal.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)

	var console net.Listener
	if sandbox.IsTerminal(c.Stdin) {
		v.tty = true
		if ws, err := unix.IoctlGetWinsize(int(c.Stdin.Fd()), unix.TIOCGWINSZ); err == nil {
			v.rows, v.cols = ws.Row, ws.Col
		}
		if console, err = net.Listen("unix", filepath.Join(dir, "console.sock")); err != nil {
			return res, fmt.Errorf("console socket: %w", err)
		}
		defer console.Close()
	}
	spec, err := json.MarshalIndent(buildSpec(s, v), "", " ")
	if err != nil {
		return res, err
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), spec, 0o600); err != nil {
		return res, fmt.Errorf("bundle: %w", err)
	}
	phase("bundle written")

	logFile := filepath.Join(dir, "runsc.log")
	args := runscArgs(state, logFile, v.netDir != "", false, v.cgroup != "")
	if rt.DirectFS {
		i := slices.Index(args, "--directfs=false")
		if i < 0 {
			return res, errors.New("runsc's arguments: no --directfs to turn on")
		}
		args[i] = "--directfs=true"
	}
	debugDir := ""
	if log.Enabled(ctx, slog.LevelDebug) {
		// runsc's own debug logs (its gofer's and Sentry's too), whose
		// errors hutch passes on if the sandbox fails to start.
		debugDir = filepath.Join(dir, "debug") + "/"
		args = append(args, "--debug", "--debug-log="+debugDir)
	}
	args = append(args, "run", "--bundle", dir)
	if console != nil {
		args = append(args, "--console-socket", console.Addr().String())
	}
	args = append(args, id)
	cmd := exec.Command(rt.Runsc, args...)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	if console == nil {
		if c.Stdin != nil {
			cmd.Stdin = c.Stdin
		}
		// gVisor writes a regular file at offsets of its own: stdout and
		// stderr sharing one file (2>&1) would overwrite each other. The
		// command writes to pipes then, which hutch copies.
		if c.Stdout != nil {
			cmd.Stdout = viaPipe(c.Stdout)
		}
		if c.Stderr != nil {
			cmd.Stderr = viaPipe(c.Stderr)
		}
	} else {
		if c.Stderr != nil {
			cmd.Stdout, cmd.Stderr = viaPipe(c.Stderr), viaPipe(c.Stderr) // runsc's own messages
		}
	}
	// runsc runs its sandbox attached: its Sentry and gofer die with it,
	// and it dies with hutch (S4).
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	log.Debug("gvisor: starting", "runsc", rt.Runsc, "args", args)
	if err := cmd.Start(); err != nil {
		return res, fmt.Errorf("start runsc: %w", err)
	}
	phase("runsc started")
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	var drain, restore func()
	if console != nil {
		master, err := receiveConsole(console, done)
		if err != nil {
			_ = cmd.Process.Kill()
			<-done
			return res, err
		}
		drain, restore = sandbox.RelayTerminal(master, c.Stdin, c.Stdout)
		defer restore()
	}

	var timeout <-chan time.Time
	if s.Resources.Timeout > 0 {
		t := time.NewTimer(s.Resources.Timeout)
		defer t.Stop()
		timeout = t.C
	}
	for waiting := true; waiting; {
		select {
		case <-done:
			waiting = false
		case sig := <-sigs:
			// runsc run dies of the signals it gets: runsc kill passes
			// them on to the command.
			go forward(rt.Runsc, state, id, sig.(syscall.Signal), log)
		case <-timeout:
			res.TimedOut = true
			_ = cmd.Process.Kill()
		case <-ctx.Done():
			_ = cmd.Process.Kill()
		}
	}
	if drain != nil {
		drain()
	}
	phase("runsc ended")
	code := cmd.ProcessState.ExitCode()
	switch {
	case res.TimedOut:
		res.ExitCode = sandbox.ExitTimeout
		return res, nil
	case ctx.Err() != nil:
		return res, ctx.Err()
	case code == 128 && runscFailed(logFile, debugDir, log):
		return res, fmt.Errorf("tier %q: runsc could not run the sandbox (see its message above; --debug shows runsc's logs)", policy.TierGVisor)
	case code < 0:
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return res, fmt.Errorf("runsc was killed by signal %d", ws.Signal())
		}
		return res, errors.New("runsc ended without an exit code")
	}
	res.ExitCode = code
	return res, nil
}

// forward sends sig to the sandbox's command.
func forward(runsc, state, id string, sig syscall.Signal, log *slog.Logger) {
	cmd := exec.Command(runsc, "--root", state, "kill", id, fmt.Sprint(int(sig)))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if out, err := cmd.CombinedOutput(); err != nil {
		log.Debug("gvisor: forward signal", "signal", sig, "err", err, "out", string(out))
	}
}

// viaPipe returns f, or a writer that is not an *os.File (so that
// os/exec gives runsc a pipe and copies) when f is a regular file.
func viaPipe(f *os.File) io.Writer {
	if f == nil {
		return nil
	}
	if st, err := f.Stat(); err == nil && st.Mode().IsRegular() {
		return struct{ io.Writer }{f}
	}
	return f
}

// runscFailed reports whether runsc's log says it failed itself, rather
// than the command exiting with 128.
func runscFailed(logFile, debugDir string, log *slog.Logger) bool {
	failed := false
	if b, err := os.ReadFile(logFile); err == nil && (bytes.Contains(b, []byte(`"level":"error"`)) || bytes.Contains(b, []byte("FATAL ERROR"))) {
		failed = true
	}
	if debugDir == "" {
		return failed
	}
	entries, _ := os.ReadDir(debugDir)
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(debugDir, e.Name()))
		if err != nil {
			continue
		}
		for _, line := range bytes.Split(b, []byte("\n")) {
			if bytes.Contains(line, []byte("FATAL ERROR")) {
				failed = true
				log.Debug("gvisor: runsc failed", "log", e.Name(), "line", string(line))
			}
		}
	}
	return failed
}

// receiveConsole waits for runsc to send the pty master over the console
// socket.
func receiveConsole(l net.Listener, done <-chan struct{}) (*os.File, error) {
	type got struct {
		f   *os.File
		err error
	}
	ch := make(chan got, 1)
	go func() {
		conn, err := l.Accept()
		if err != nil {
			ch <- got{nil, err}
			return
		}
		defer conn.Close()
		uc := conn.(*net.UnixConn)
		oob := make([]byte, unix.CmsgSpace(4))
		buf := make([]byte, 256)
		_, oobn, _, _, err := uc.ReadMsgUnix(buf, oob)
		if err != nil {
			ch <- got{nil, err}
			return
		}
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil || len(msgs) != 1 {
			ch <- got{nil, fmt.Errorf("no descriptor (%v)", err)}
			return
		}
		fds, err := unix.ParseUnixRights(&msgs[0])
		if err != nil || len(fds) != 1 {
			for _, fd := range fds {
				unix.Close(fd)
			}
			ch <- got{nil, fmt.Errorf("want one descriptor (%v)", err)}
			return
		}
		ch <- got{os.NewFile(uintptr(fds[0]), "pty-master"), nil}
	}()
	select {
	case g := <-ch:
		if g.err != nil {
			return nil, fmt.Errorf("console socket: %w", g.err)
		}
		return g.f, nil
	case <-done:
		return nil, errors.New("runsc ended before it sent the terminal")
	}
}

// makePrivateDir makes base (0711, root's) and id's directory in it.
func makePrivateDir(base, id string) (string, error) {
	// Searchable by others, and no more: gVisor's gofer reaches the
	// bundle with the sandbox's ids, which own nothing of the host's.
	if err := os.MkdirAll(base, 0o711); err != nil {
		return "", fmt.Errorf("state directory: %w", err)
	}
	var st unix.Stat_t
	// Made 0711: only root may write there, and gVisor's gofer, whose
	// host ids are the sandbox's, may pass through.
	if err := unix.Lstat(base, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR || st.Uid != 0 || st.Mode&0o022 != 0 {
		return "", fmt.Errorf("state directory %s: must be a directory of root's that only root may write", base)
	}
	if st.Mode&0o011 != 0o011 {
		if err := os.Chmod(base, os.FileMode(st.Mode&0o777|0o011)); err != nil {
			return "", fmt.Errorf("state directory %s: %w", base, err)
		}
	}
	if err := privateMount(base); err != nil {
		return "", fmt.Errorf("state directory %s: %w", base, err)
	}
	dir := filepath.Join(base, id)
	if err := os.Mkdir(dir, 0o711); err != nil {
		return "", fmt.Errorf("state directory: %w", err)
	}
	if err := os.Chmod(dir, 0o711); err != nil {
		return "", fmt.Errorf("state directory: %w", err)
	}
	// The owner: the next hutch removes what a hutch killed with SIGKILL
	// left (sweep).
	if err := os.WriteFile(filepath.Join(dir, "owner"), []byte(ownerStamp(os.Getpid())), 0o600); err != nil {
		os.RemoveAll(dir)
		return "", fmt.Errorf("state directory: %w", err)
	}
	return dir, nil
}

// privateMount makes dir a mount point of its own, private: the
// sandboxes' roots mounted below it propagate to no other mount namespace.
func privateMount(dir string) error {
	var stx unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, dir, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_BASIC_STATS, &stx); err != nil {
		return err
	}
	if stx.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT == 0 {
		return errors.New("the kernel does not say which directories are mount points")
	}
	if stx.Attributes&unix.STATX_ATTR_MOUNT_ROOT == 0 {
		if err := unix.Mount(dir, dir, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind over itself: %w", err)
		}
	}
	if err := unix.Mount("", dir, "", unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make private: %w", err)
	}
	return nil
}

// ownerStamp names a process for as long as it lives: its pid and start
// time (a pid alone may be reused); "" once it has ended, a zombie too.
func ownerStamp(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	// The start time is field 22; the command name (2) may hold spaces.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return ""
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 || f[0] == "Z" || f[0] == "X" {
		return ""
	}
	return fmt.Sprintf("%d %s", pid, f[19])
}

// sweep removes the directories of sandboxes whose hutch is gone (killed
// with SIGKILL: runsc and its sandbox died with it, their state stayed).
func sweep(base, runsc string, log *slog.Logger) {
	entries, err := os.ReadDir(base)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), "hutch-") {
			continue
		}
		dir := filepath.Join(base, e.Name())
		b, err := os.ReadFile(filepath.Join(dir, "owner"))
		if err != nil {
			continue // being made
		}
		var pid int
		if _, err := fmt.Sscanf(string(b), "%d", &pid); err != nil || ownerStamp(pid) == string(b) {
			continue // its hutch still runs
		}
		log.Debug("gvisor: removing a dead sandbox's state", "dir", dir)
		cleanup(runsc, dir, e.Name(), log)
	}
}

// nullNetns is the network namespace runsc binds into its root directory.
const nullNetns = "null-netns"

// cleanup deletes the sandbox's container (its processes, if any are
// left, and the cgroup runsc made), unmounts what runsc left in its state
// directory and removes the sandbox's directory.
func cleanup(runsc, dir, id string, log *slog.Logger) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	state := filepath.Join(dir, "state")
	if entries, err := os.ReadDir(state); err == nil {
		// A runsc run that ended on its own has deleted its container,
		// and left only the network namespace it binds into its root;
		// one that was killed left the container's files (and perhaps
		// processes and cgroups), which runsc delete removes.
		if slices.ContainsFunc(entries, func(e os.DirEntry) bool { return e.Name() != nullNetns }) {
			cmd := exec.Command(runsc, "--root", state, "delete", "--force", id)
			cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
			if out, err := cmd.CombinedOutput(); err != nil {
				log.Debug("gvisor: runsc delete", "err", err, "out", string(out))
			}
			entries, _ = os.ReadDir(state)
		}
		for _, e := range entries {
			_ = unix.Unmount(filepath.Join(state, e.Name()), unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
		}
	}
	// The writable areas' mounts and the root, a copy of the host's
	// mount tree: unmounted, never walked, and only then removed (rmdir
	// fails on a mount point).
	unmountAreas(dir)
	_ = unix.Unmount(filepath.Join(dir, volumesDir), unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
	_ = unix.Unmount(filepath.Join(dir, layerDir), unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
	_ = unix.Unmount(filepath.Join(dir, hutchFile), unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
	rootfs := filepath.Join(dir, "rootfs")
	// The root may be stacked (a layer attached over the mount point):
	// unmount until nothing is mounted there.
	for range 8 {
		if err := unix.Unmount(rootfs, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW); err != nil {
			break
		}
	}
	// Another sandbox starting now may hold a copy of this root in its
	// own for a moment, until it drops the state directory's copy
	// (trimHostRoot), and runsc's gofer may let go of it a moment after
	// it ended: the mount point is busy until then.
	err := unix.Rmdir(rootfs)
	for i := 0; i < 20 && errors.Is(err, unix.EBUSY); i++ {
		time.Sleep(100 * time.Millisecond)
		err = unix.Rmdir(rootfs)
	}
	if err != nil && !errors.Is(err, unix.ENOENT) {
		log.Debug("gvisor: remove the root's mount point; leaving the state directory", "err", err, "mounts", mountsAt(rootfs))
		return
	}
	// Never remove through a mount: a directory laid out by another
	// version of hutch may hold binds of a workspace.
	if m := mountsBelow(dir); len(m) > 0 {
		log.Debug("gvisor: mounts below the state directory; leaving it", "dir", dir, "mounts", m)
		return
	}
	if err := os.RemoveAll(dir); err != nil {
		log.Debug("gvisor: remove state", "err", err)
	}
}

// unmountAreas detaches the writable areas' tmpfs in the bundle dir, and
// the areas and what is mounted in them with it.
func unmountAreas(dir string) {
	_ = unix.Unmount(filepath.Join(dir, "areas"), unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
}

// areaMounts makes, below the bundle dir, n directories on a tmpfs of
// their own for the writable areas' idmapped mounts: searchable by gVisor's
// gofer, whose host ids are the sandbox's (cleanup unmounts the tmpfs, and
// the areas with it, before it removes anything).
func areaMounts(dir string, n int) ([]string, error) {
	areas := filepath.Join(dir, "areas")
	if err := os.Mkdir(areas, 0o711); err != nil {
		return nil, fmt.Errorf("writable areas: %w", err)
	}
	if err := unix.Mount("hutch-areas", areas, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=0711,size=64k"); err != nil {
		return nil, fmt.Errorf("writable areas: %w", err)
	}
	// Unbindable: a copy of the host's mount tree made meanwhile (another
	// sandbox's root) leaves the areas and their mounts out, rather than
	// hold the protected paths' mount points, which the placeholders'
	// removal and the unmounts at the end would find busy.
	if err := unix.Mount("", areas, "", unix.MS_UNBINDABLE, ""); err != nil {
		return nil, fmt.Errorf("writable areas: %w", err)
	}
	out := make([]string, n)
	for i := range out {
		out[i] = filepath.Join(areas, strconv.Itoa(i))
		if err := os.Mkdir(out[i], 0o711); err != nil {
			return nil, fmt.Errorf("writable areas: %w", err)
		}
	}
	return out, nil
}

// shadowWays makes the way to each writable area (roots) searchable in the
// root's copy at rootfs, as the namespace tier's shadows do: the first
// directory on the way that others cannot search (the command's ids own
// nothing of the host's, and gVisor's gofer, with those ids, resolves the
// mount points) becomes an empty, read-only tmpfs holding only the
// directories down to the areas' mount points. It returns those
// directories (host paths).
func shadowWays(rootfs string, roots []string) ([]string, error) {
	var shadows []string
	for _, r := range roots {
		if inAny(r, shadows) {
			continue
		}
		for _, a := range sandbox.AncestorsBelow("/", r) {
			if !othersReach(a) {
				shadows = append(shadows, a)
				break
			}
		}
	}
	for _, sh := range shadows {
		t := filepath.Join(rootfs, sh)
		if err := unix.Mount("hutch-way", t, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=0755,size=64k"); err != nil {
			return nil, fmt.Errorf("the way to %s: %w", sh, err)
		}
		for _, r := range roots {
			if within(r, sh) && r != sh {
				if err := os.MkdirAll(filepath.Join(rootfs, r), 0o755); err != nil {
					return nil, fmt.Errorf("the way to %s: %w", r, err)
				}
			}
		}
		if err := unix.Mount("", t, "", unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
			return nil, fmt.Errorf("the way to %s: read-only: %w", sh, err)
		}
	}
	return shadows, nil
}

// areaMap is the idmap of the writable areas for a workspace owner of
// host id owner (a uid or a gid) and a command of id inner: the owner's
// id shows as the host id the command's id has (sandbox.RootMappedID plus
// it, in the spec's user namespace). The sandbox root's host id, which
// gVisor's gofer creates files with before it gives them to their owner,
// must be mapped too: to root's id (root's files show as the sandbox
// root's), or, when root owns the workspace and the command is another
// user (an image's), to that same unused host id, so that nothing of the
// host shows as the sandbox root's.
func areaMap(owner, inner uint32) string {
	m := fmt.Sprintf("%d %d 1\n", owner, sandbox.RootMappedID+int(inner))
	switch {
	case inner == 0:
	case owner != 0:
		m += fmt.Sprintf("0 %d 1\n", sandbox.RootMappedID)
	default:
		m += fmt.Sprintf("%d %d 1\n", sandbox.RootMappedID, sandbox.RootMappedID)
	}
	return m
}

// mountsBelow lists the mount points below dir (dir itself excluded),
// without descending into any of them.
func mountsBelow(dir string) []string {
	var out []string
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() || p == dir {
			return nil
		}
		var stx unix.Statx_t
		if err := unix.Statx(unix.AT_FDCWD, p, unix.AT_SYMLINK_NOFOLLOW, 0, &stx); err != nil {
			out = append(out, p+" ("+err.Error()+")")
			return filepath.SkipDir
		}
		if stx.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT == 0 || stx.Attributes&unix.STATX_ATTR_MOUNT_ROOT != 0 {
			out = append(out, p) // a mount, or no way to tell
			return filepath.SkipDir
		}
		return nil
	})
	return out
}

// maskSpecial binds the empty file over each deny-read path that is
// neither a file nor a directory (a unix socket such as /run/docker.sock,
// a fifo, a device node) in the root's copy at rootfs, on the host and
// read-only: gVisor's gofer cannot open such a path as a mount point, and
// a socket masked nowhere would be one the sandbox may connect to with
// runsc's --host-uds. The path is resolved in the copy (RESOLVE_IN_ROOT),
// never through a symbolic link out of it; the masks go with the copy.
// One in a writable area (roots) is refused: a mount there would stop
// gVisor's gofer from binding the area. It returns the paths it masked.
func maskSpecial(rootfs, empty string, denyRead, roots []string) (map[string]bool, error) {
	masked := map[string]bool{}
	var root, tree = -1, -1
	defer func() {
		for _, fd := range []int{root, tree} {
			if fd >= 0 {
				unix.Close(fd)
			}
		}
	}()
	for _, d := range denyRead {
		var st unix.Stat_t
		if unix.Lstat(d, &st) != nil {
			continue
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFSOCK, unix.S_IFIFO, unix.S_IFCHR, unix.S_IFBLK:
		default:
			continue
		}
		if inAny(d, roots) {
			return nil, fmt.Errorf("tier %q: deny read %s: a socket, fifo or device in a writable area cannot be masked under gVisor yet", policy.TierGVisor, d)
		}
		if root < 0 {
			var err error
			if root, err = unix.Open(rootfs, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
				return nil, fmt.Errorf("deny read: the root's copy: %w", err)
			}
		}
		t, err := unix.Openat2(root, strings.TrimPrefix(d, "/"), &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC | unix.O_NOFOLLOW, Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS})
		if errors.Is(err, unix.ENOENT) {
			continue // not in the view (below an empty way to a writable area)
		} else if err != nil {
			return nil, fmt.Errorf("deny read %s: %w", d, err)
		}
		m, err := unix.OpenTree(unix.AT_FDCWD, empty, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
		if err == nil {
			attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV | unix.MOUNT_ATTR_NOEXEC}
			if err = unix.MountSetattr(m, "", unix.AT_EMPTY_PATH, &attr); err == nil {
				err = unix.MoveMount(m, "", t, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH)
			}
			unix.Close(m)
		}
		unix.Close(t)
		if err != nil {
			return nil, fmt.Errorf("deny read %s: %w", d, err)
		}
		masked[d] = true
	}
	return masked, nil
}

// mountsAt lists the lines of /proc/self/mountinfo whose mount point is p
// (what keeps it busy).
func mountsAt(p string) []string {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 4 && f[4] == p {
			out = append(out, l)
		}
	}
	return out
}
