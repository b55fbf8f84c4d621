package daemon

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/sandbox"
)

// startSandbox starts a long-lived sandbox with the runtime of its tier
// (Config.Runtimes); its agent is at the other end of the connection. The
// daemon needs the host pid of what holds the sandbox (its PID 1 under
// the namespace tier), which it records to end the sandbox after a crash
// of the daemon (leftovers.go): a runtime whose sandboxes do not say it
// is refused.
func startSandbox(rt sandbox.Runtime, c sandbox.Config) (instance, net.Conn, error) {
	sb, err := rt.Start(c)
	if err != nil {
		return nil, nil, err
	}
	inst, ok := sb.(instance)
	if !ok {
		_ = sb.Close()
		return nil, nil, fmt.Errorf("tier %s: its sandboxes give no host pid to record", rt.Tier())
	}
	return inst, sb.Conn(), nil
}

// processStart returns the start time of process pid, in clock ticks after
// boot (field 22 of /proc/PID/stat): with the pid it names one process
// across pid reuse.
func processStart(pid int) (uint64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name, field 2, is in parentheses and may hold anything;
	// the fields after its last ')' start with field 3.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 20 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f)+2)
	}
	start, err := strconv.ParseUint(string(f[19]), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("/proc/%d/stat: start time: %w", pid, err)
	}
	return start, nil
}

// openProcess returns a pidfd of process pid if it still is the one that
// started at start; an error says it is gone (or its pid was reused).
func openProcess(pid int, start uint64) (int, error) {
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return -1, fmt.Errorf("process %d: %w", pid, errProcessGone)
	}
	if err != nil {
		return -1, fmt.Errorf("pidfd_open %d: %w", pid, err)
	}
	// The pidfd holds on to the process that had pid when it was opened:
	// if pid still names the process that started at start, that is the
	// one, and no later reuse of pid can redirect a signal.
	if got, err := processStart(pid); err != nil || got != start {
		unix.Close(fd)
		return -1, fmt.Errorf("process %d: %w (its pid names another process)", pid, errProcessGone)
	}
	return fd, nil
}

// errProcessGone is openProcess's error for a process that is gone.
var errProcessGone = errors.New("the process is gone")

// closeFD closes descriptor fd.
func closeFD(fd int) { unix.Close(fd) }

// killProcess kills process pid if it still is the one that started at
// start, and waits up to timeout for it to end. It reports whether it
// killed it; a process that is gone (or whose pid was reused) is no error.
func killProcess(pid int, start uint64, timeout time.Duration) (bool, error) {
	fd, err := openProcess(pid, start)
	if errors.Is(err, errProcessGone) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer unix.Close(fd)
	if err := unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0); err != nil {
		if errors.Is(err, unix.ESRCH) {
			return false, nil
		}
		return false, fmt.Errorf("kill %d: %w", pid, err)
	}
	// The pidfd turns readable once the process has exited; PID 1 of a pid
	// namespace exits only after every other process in it.
	deadline := time.Now().Add(timeout)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return true, fmt.Errorf("process %d did not end within %s of SIGKILL", pid, timeout)
		}
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, int(left.Milliseconds())+1)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return true, fmt.Errorf("wait for process %d: %w", pid, err)
		}
		if n > 0 {
			return true, nil
		}
	}
}

// lockStateDir takes the lock of the state directory dir, so that two
// daemons never share (and clean up) the same sandboxes.
func lockStateDir(dir string) (*os.File, error) {
	p := filepath.Join(dir, "lock")
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("state directory lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("state directory %s is in use by another hutch serve: %w", dir, ErrUnavailable)
		}
		return nil, fmt.Errorf("state directory lock %s: %w", p, err)
	}
	return f, nil
}

// removeSandboxDir removes a sandbox's directory, once the tmpfs of its
// root layer attached there (keepDir) and that of its review workspace
// (reviewDir) are let go: removing the files of a mount would not end it.
func removeSandboxDir(dir string) error {
	for _, d := range []string{keepDir, reviewDir} {
		err := unix.Unmount(filepath.Join(dir, d), unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
		if err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("unmount %s of %s: %w", d, dir, err)
		}
	}
	return os.RemoveAll(dir)
}

// mountReviewTmpfs mounts the tmpfs of a review workspace's upper layer
// (size bytes) at dir.
func mountReviewTmpfs(dir string, size int64) error {
	opts := fmt.Sprintf("size=%d,nr_inodes=%d,mode=0700", size, max(size/4096, 1024))
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return fmt.Errorf("mount its tmpfs: %w", err)
	}
	return nil
}
