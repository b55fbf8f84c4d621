package sandbox

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/landlock"
	"github.com/hutch-sandbox/hutch/internal/seccomp"
)

// Init is the main function of the re-executed init process. It returns the
// exit code for main to exit with: the command's, or ExitHutchError.
func Init() int {
	// Capabilities, no_new_privs, landlock and seccomp are per thread: every
	// hardening step and the command's fork happen on this one thread.
	runtime.LockOSThread()
	var cfg initConfig
	fds, err := recvMsg(controlFD, &cfg)
	if err != nil {
		return ExitHutchError
	}
	fail := func(code int, err error) int {
		_ = sendMsg(controlFD, initReply{Error: err.Error(), ExitCode: code}, nil)
		return code
	}
	if len(cfg.Args) == 0 {
		return fail(ExitHutchError, errors.New("no command given"))
	}
	dropped, timings, err := harden(cfg, fds)
	closeAll(fds)
	if err != nil {
		return fail(ExitHutchError, err)
	}

	path, err := lookPath(cfg.Args[0], cfg.Env)
	if err != nil {
		if errors.Is(err, errNotExecutable) {
			return fail(ExitNotExecutable, err)
		}
		return fail(ExitNotFound, err)
	}
	stdio := []uintptr{0, 1, 2}
	var master []int
	if cfg.Tty {
		m, slave, err := openPty(cfg.Rows, cfg.Cols)
		if err != nil {
			return fail(ExitHutchError, fmt.Errorf("terminal: %w", err))
		}
		defer unix.Close(slave)
		stdio = []uintptr{uintptr(slave), uintptr(slave), uintptr(slave)}
		master = []int{m}
	}
	// No descriptor but the three streams reaches the command: not the
	// control socket, not whatever hutch itself inherited without
	// close-on-exec (S3).
	if err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		return fail(ExitHutchError, fmt.Errorf("close inherited descriptors: %w", err))
	}
	if err := setRlimits(cfg.Rlimits); err != nil {
		return fail(ExitHutchError, err)
	}
	attr := &syscall.ProcAttr{
		Dir:   cfg.Dir,
		Env:   cfg.Env,
		Files: stdio,
		Sys:   &syscall.SysProcAttr{Setsid: true, Setctty: cfg.Tty, Ctty: 0},
	}
	pid, err := syscall.ForkExec(path, cfg.Args, attr)
	if err != nil {
		code := ExitNotExecutable
		if errors.Is(err, unix.ENOENT) {
			code = ExitNotFound
		}
		return fail(code, fmt.Errorf("%s: %w", cfg.Args[0], err))
	}
	// hutch forwards signals only once it has this reply, so catching them
	// from here on loses none; doing it here keeps it off the start-up path.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, append(forwardedSignals, unix.SIGWINCH)...)
	err = sendMsg(controlFD, initReply{Started: true, Dropped: dropped, Timings: timings}, master)
	closeAll(master)
	if err != nil {
		_ = unix.Kill(pid, unix.SIGKILL)
		return ExitHutchError
	}
	unix.Close(controlFD)
	for _, fd := range []int{0, 1, 2} {
		unix.Close(fd) // init holds no terminal or pipe of the user's
	}
	go func() {
		for s := range sigs {
			_ = unix.Kill(-pid, s.(syscall.Signal))
		}
	}()
	return reap(pid)
}

// reap reaps every child until the command itself exits; its status becomes
// init's exit code. When init returns, the kernel kills what is left in the
// pid namespace.
func reap(pid int) int {
	for {
		var ws unix.WaitStatus
		got, err := unix.Wait4(-1, &ws, 0, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return ExitHutchError
		}
		if got != pid {
			continue
		}
		if ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ws.ExitStatus()
	}
}

// harden applies the layers in their fixed order: mounts → pivot_root →
// hostname and loopback → rlimits → capabilities → no_new_privs → landlock
// → seccomp. It returns the layers dropped under best effort.
func harden(cfg initConfig, fds []int) (dropped []string, timings []timing, err error) {
	last := time.Now()
	step := func(name string) {
		now := time.Now()
		timings = append(timings, timing{Phase: name, Took: now.Sub(last)})
		last = now
	}
	dropped, err = setupMounts(cfg, fds)
	if err != nil {
		return nil, nil, fmt.Errorf("filesystem: %w", err)
	}
	step("mounts")
	if err := unix.Sethostname([]byte(cfg.Hostname)); err != nil {
		return nil, nil, fmt.Errorf("hostname: %w", err)
	}
	if err := loopbackUp(); err != nil {
		return nil, nil, fmt.Errorf("network: %w", err)
	}
	// Init's memory (its config) is not for the command to read.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return nil, nil, fmt.Errorf("dumpable: %w", err)
	}
	step("hostname, network")
	if err := dropCapabilities(); err != nil {
		return nil, nil, fmt.Errorf("capabilities: %w", err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return nil, nil, fmt.Errorf("no_new_privs: %w", err)
	}

	step("capabilities, no_new_privs")
	if err := applyLandlock(cfg, fds); err != nil {
		if !cfg.BestEffort || !errors.Is(err, landlock.ErrNotSupported) {
			return nil, nil, fmt.Errorf("landlock: %w: %w (pass --best-effort to run without it)", ErrKernelFeature, err)
		}
		dropped = append(dropped, "landlock ("+err.Error()+")")
	}

	step("landlock")
	if err := installSeccomp(cfg); err != nil {
		if !cfg.BestEffort || !errors.Is(err, seccomp.ErrNotSupported) {
			return nil, nil, fmt.Errorf("seccomp: %w: %w (pass --best-effort to run without it)", ErrKernelFeature, err)
		}
		dropped = append(dropped, "seccomp ("+err.Error()+")")
	}
	step("seccomp")
	return dropped, timings, nil
}

func installSeccomp(cfg initConfig) error {
	if cfg.Missing["seccomp"] {
		return fmt.Errorf("%w (simulated by %s)", seccomp.ErrNotSupported, SimulateMissingEnv)
	}
	return seccomp.Install()
}

// privateReadOnly, privateWritable and privateDevices are the sandbox's own
// filesystems, which only the init can name: Landlock rules bind to inodes,
// and a rule on the host's /proc does not cover the sandbox's procfs mounted
// over it (Landlock skips mount points when it walks up a path).
var (
	privateReadOnly = []string{"/proc", "/sys"}
	privateWritable = []string{"/tmp", "/dev/shm"}
	privateDevices  = []string{"/dev/pts", "/dev/ptmx"}
)

// applyLandlock enforces the ruleset the parent prepared, completed with the
// sandbox's private filesystems, or builds the whole ruleset here. Landlock
// runs with the best ABI the kernel has; what older ABIs lack is covered by
// the other layers.
func applyLandlock(cfg initConfig, fds []int) error {
	if cfg.Missing["landlock"] {
		return fmt.Errorf("%w (simulated by %s)", landlock.ErrNotSupported, SimulateMissingEnv)
	}
	if cfg.Landlock >= 0 && cfg.Landlock < len(fds) {
		rs := landlock.FromFD(fds[cfg.Landlock])
		rw := privateWritable
		if cfg.PrivateHome != "" {
			rw = append(rw[:len(rw):len(rw)], cfg.PrivateHome)
		}
		if _, err := rs.Add(landlock.Config{ReadOnly: privateReadOnly, ReadWrite: rw, Devices: privateDevices}); err != nil {
			return err
		}
		return rs.RestrictSelf()
	}
	var writable []string
	for _, w := range cfg.Writable {
		writable = append(writable, w.Path)
	}
	if cfg.PrivateHome != "" {
		writable = append(writable, cfg.PrivateHome)
	}
	_, err := landlock.Restrict(landlock.Config{
		ReadOnly:  []string{"/"},
		ReadWrite: append(writable, privateWritable...),
		Devices:   append(hostDevices(), privateDevices...),
		DenyRead:  landlockDenyRead(cfg.DenyRead, cfg.AllowRead, writable),
		Scope:     true,
	})
	return err
}

// setRlimits sets the fallback limits just before the command starts, so
// that they bind the command and not the init's own setup. A limit above
// the caller's hard limit is lowered to it.
func setRlimits(rl []rlimit) error {
	for _, r := range rl {
		var cur unix.Rlimit
		if err := unix.Getrlimit(r.Resource, &cur); err != nil {
			return fmt.Errorf("rlimit %d: %w", r.Resource, err)
		}
		v := min(r.Value, cur.Max)
		if err := unix.Setrlimit(r.Resource, &unix.Rlimit{Cur: v, Max: v}); err != nil {
			return fmt.Errorf("rlimit %d: %w", r.Resource, err)
		}
	}
	return nil
}

// loopbackUp brings up lo in the sandbox's network namespace.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	ifr.SetUint16(unix.IFF_UP | unix.IFF_RUNNING)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("bring up lo: %w", err)
	}
	return nil
}

// Securebits that keep uid 0 in the sandbox from ever regaining capabilities
// through execve, locked so the command cannot change them back.
const (
	secbitNoroot            = 1 << 0
	secbitNorootLocked      = 1 << 1
	secbitNoSetuidFixupLock = 1 << 3
	secbitKeepCapsLocked    = 1 << 5
	secbitNoCapAmbientRaise = 1 << 6
	secbitNoCapAmbientLock  = 1 << 7
)

// dropCapabilities empties the bounding, ambient, inheritable, permitted and
// effective sets of this thread (S1).
func dropCapabilities() error {
	bits := secbitNoroot | secbitNorootLocked | secbitNoSetuidFixupLock | secbitKeepCapsLocked | secbitNoCapAmbientRaise | secbitNoCapAmbientLock
	if err := unix.Prctl(unix.PR_SET_SECUREBITS, uintptr(bits), 0, 0, 0); err != nil {
		return fmt.Errorf("securebits: %w", err)
	}
	for c := 0; c <= unix.CAP_LAST_CAP; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && err != unix.EINVAL {
			return fmt.Errorf("drop bounding capability %d: %w", c, err)
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil && err != unix.EINVAL {
		return fmt.Errorf("clear ambient capabilities: %w", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	return nil
}

// lookPath finds name in the sandbox's PATH, as a shell would.
func lookPath(name string, env []string) (string, error) {
	if strings.Contains(name, "/") {
		if err := executable(name); err != nil {
			return "", fmt.Errorf("%s: %w", name, err)
		}
		return name, nil
	}
	path := "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin"
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	var denied error
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, name)
		err := executable(p)
		if err == nil {
			return p, nil
		}
		// A file that exists but may not be executed is remembered (126);
		// a directory that cannot be searched is as good as absent (127).
		if errors.Is(err, errNotExecutable) && denied == nil {
			denied = fmt.Errorf("%s: %w", p, err)
		}
	}
	if denied != nil {
		return "", denied
	}
	return "", fmt.Errorf("%s: command not found", name)
}

// errNotExecutable marks a file that exists but cannot be executed.
var errNotExecutable = errors.New("not executable")

func executable(p string) error {
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return fmt.Errorf("%w: %w", errNotExecutable, unix.EISDIR)
	}
	if err := unix.Access(p, unix.X_OK); err != nil {
		return fmt.Errorf("%w: %w", errNotExecutable, err)
	}
	return nil
}
