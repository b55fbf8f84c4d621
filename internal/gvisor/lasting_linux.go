package gvisor

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/cgroups"
	"github.com/hutch-sandbox/hutch/internal/sandbox"
)

// A served sandbox that outlives hutch (sandbox.Config.AgentSocket), for
// the next daemon on the same state directory to take again (Reattach):
//
//   - runsc starts it detached (runsc run --detach, in a session of its
//     own, with no parent-death signal): gVisor's Sentry and gofer are
//     then nobody's children but init's, and live on when hutch dies. The
//     bundle directory's owner stamp (sweep) becomes the Sentry's, so that
//     no hutch removes the directory while the sandbox runs, and any hutch
//     does once it has ended. hutch learns of its end from runsc wait and
//     a pidfd of the Sentry, and ends it by killing the Sentry.
//   - its agent serves the hutch that started it on its standard input,
//     as every served sandbox's does, and listens, for the next ones, on
//     a unix socket it binds in a directory of the host's bound into its
//     view at agentAt (runsc --host-uds=create: the gofer makes the socket
//     on the host and hands the Sentry its listening descriptor). The
//     directory is the sandbox's root's (its host id) until the agent
//     listens there (waitListening: the gofer's work on the socket's file
//     goes on after the file is made); then hutch makes it root's, mode
//     0700, before any code of the
//     sandbox can run (the agent runs none before a daemon connects): the
//     gofer, whose host ids are the sandbox's, can then neither remove,
//     rename nor make anything there, so no code of the sandbox can put a
//     socket of its own in the agent's place. A connection authenticates
//     with the token (agent.ServeListener), which the agent takes out of
//     its environment before any command runs.
//   - the egress proxy's sockets (serveNet) close with the hutch that
//     served them; the next one listens at the same host paths again.
//   - gVisor saves no sandbox that listens on a socket of the host's
//     ("Cannot save endpoint with bound host socket"): a detach on the
//     standard input, which comes before every save of its memory, closes
//     the agent's listener for good (agent.ListenOptions.First), and the
//     sandbox no longer outlives its daemon; one a later hutch took again
//     has no such connection left, and its memory is not saved
//     (SavesMemory). A sandbox restored from a save is started attached,
//     as ever.

// agentDir is the directory, in the bundle directory, where the agent
// of a sandbox that outlives hutch binds its socket, agentSock; agentAt
// is where the sandbox's view shows it.
const (
	agentDir  = "agent"
	agentSock = "agent.sock"
	agentAt   = "/dev/hutch-agent"
)

// consoleFile is the file, in the bundle directory, that a detached
// sandbox's standard output and error go to (runsc's own messages, the
// agent's last words).
const consoleFile = "console.log"

// lastingView sets v up for a sandbox whose agent serves on a socket in
// dir's agentDir, with token: the directory (the sandbox's root's until
// the socket is made, lockAgentDir), its bind at agentAt, and the agent's
// arguments and environment.
func lastingView(v *view, dir, token string) error {
	v.agentDir = filepath.Join(dir, agentDir)
	if err := os.Mkdir(v.agentDir, 0o700); err != nil {
		return fmt.Errorf("agent socket: %w", err)
	}
	if err := os.Chown(v.agentDir, sandbox.RootMappedID, sandbox.RootMappedID); err != nil {
		return fmt.Errorf("agent socket: %w", err)
	}
	v.args = []string{sandbox.SandboxHutch, "agent", "--stdin", "--accept-at", agentAt + "/" + agentSock}
	v.env = append(slices.DeleteFunc(slices.Clone(v.env), func(kv string) bool {
		return strings.HasPrefix(kv, sandbox.AgentTokenEnv+"=")
	}), sandbox.AgentTokenEnv+"="+token)
	return nil
}

// launchDetached starts the sandbox with runsc's args (run --detach),
// its agent's first connection its standard input, as launch's, and
// waits for its agent's socket, which it makes the host's. link, when
// set, becomes a symbolic link to the socket.
func (s *served) launchDetached(args []string, link string) error {
	console, err := os.OpenFile(filepath.Join(s.dir, consoleFile), os.O_WRONLY|os.O_CREATE|os.O_APPEND|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("console: %w", err)
	}
	defer console.Close()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("agent socketpair: %w", err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "hutch-agent"), os.NewFile(uintptr(fds[1]), "hutch-agent-sandbox")
	defer theirs.Close()
	s.conn, err = net.FileConn(ours)
	ours.Close()
	if err != nil {
		return fmt.Errorf("agent connection: %w", err)
	}
	s.out = &tail{max: 8 << 10}
	cmd := exec.Command(s.runsc, args...)
	cmd.Dir = s.dir
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	// The sandbox's standard streams are runsc's: the agent's connection,
	// and the console file, which outlives hutch as the sandbox does.
	cmd.Stdin, cmd.Stdout, cmd.Stderr = theirs, console, console
	// No parent-death signal: the sandbox outlives hutch. A session of its
	// own: no signal to hutch's process group reaches it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	s.log.Debug("gvisor: starting a served sandbox that outlives hutch", "runsc", s.runsc, "args", args)
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("runsc run: %v: %s", err, s.console())
	}
	pid, err := s.sandboxPID()
	if err != nil {
		return err
	}
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return fmt.Errorf("gVisor's Sentry (pid %d): %w", pid, err)
	}
	s.pid, s.pidfd = pid, pidfd
	// The Sentry owns the directory from now on (sweep).
	if err := os.WriteFile(filepath.Join(s.dir, "owner"), []byte(ownerStamp(pid)), 0o600); err != nil {
		return fmt.Errorf("state directory: %w", err)
	}
	sock := filepath.Join(s.dir, agentDir, agentSock)
	if err := waitListening(sock, s.pidfd, socketTimeout); err != nil {
		return fmt.Errorf("%w: %s", err, s.console())
	}
	if err := lockAgentDir(filepath.Join(s.dir, agentDir), sock); err != nil {
		return err
	}
	if link != "" {
		if err := os.Remove(link); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("agent socket: %w", err)
		}
		if err := os.Symlink(sock, link); err != nil {
			return fmt.Errorf("agent socket: %w", err)
		}
	}
	s.watch()
	return nil
}

// socketTimeout bounds the wait for a starting agent's socket.
const socketTimeout = time.Minute

// errSandboxEnded is waitListening's error when the sandbox ends first.
var errSandboxEnded = errors.New("the sandbox ended before its agent listened")

// waitListening waits until something listens on the unix socket at sock:
// until a connection to it is accepted (and closed again at once; the
// agent refuses it, having had no token). The socket's file alone is not
// enough: gVisor's gofer makes it with bind(2), then opens and chowns it
// in its directory, and only later listens; lockAgentDir in between would
// make the gofer's next step fail (EACCES: the directory is no longer its
// ids'), and the agent's bind with it. It fails with errSandboxEnded once
// pidfd, the sandbox's, says it has ended, and after timeout.
func waitListening(sock string, pidfd int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for pause := 500 * time.Microsecond; ; pause = min(2*pause, 20*time.Millisecond) {
		c, err := net.DialTimeout("unix", sock, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		if errors.Is(err, unix.EAGAIN) {
			return nil // listening, its backlog full
		}
		if !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.ECONNREFUSED) {
			return fmt.Errorf("the agent's socket: %w", err)
		}
		if n, _ := unix.Poll([]unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}, 0); n > 0 {
			return errSandboxEnded
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the agent did not listen within %s", timeout)
		}
		time.Sleep(pause)
	}
}

// restoredAgentDir makes the agent's directory of a sandbox restored from
// a save of one that was to outlive hutch: the restore walks to the socket
// the saved agent listened on, which must be there, a socket; nothing
// listens on it, and the directory is root's (the gofer may only pass).
func restoredAgentDir(dir string) error {
	if err := os.Mkdir(dir, 0o711); err != nil {
		return fmt.Errorf("agent socket: %w", err)
	}
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("agent socket: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: filepath.Join(dir, agentSock)}); err != nil {
		return fmt.Errorf("agent socket: %w", err)
	}
	return os.Chmod(dir, 0o711)
}

// lockAgentDir makes the agent's directory and socket root's, owner-only:
// gVisor's gofer, whose host ids are the sandbox's, can no longer change
// anything there.
func lockAgentDir(dir, sock string) error {
	err := os.Lchown(sock, 0, 0)
	if err == nil {
		err = os.Chown(dir, 0, 0)
	}
	if err == nil {
		err = os.Chmod(dir, 0o700)
	}
	if err != nil {
		return fmt.Errorf("agent socket: make it the host's: %w", err)
	}
	return nil
}

// console is the end of what the sandbox and runsc wrote to the console
// file, and runsc's log's, for an error.
func (s *served) console() string {
	var b []byte
	if f, err := os.Open(filepath.Join(s.dir, consoleFile)); err == nil {
		if st, err := f.Stat(); err == nil && st.Size() > 4<<10 {
			_, _ = f.Seek(st.Size()-4<<10, io.SeekStart)
		}
		b, _ = io.ReadAll(f)
		f.Close()
	}
	return strings.TrimSpace(string(b))
}

// sandboxPID is the host pid of the sandbox's Sentry (runsc state).
func (s *served) sandboxPID() (int, error) {
	var st struct {
		PID    int    `json:"pid"`
		Status string `json:"status"`
	}
	cmd := exec.Command(s.runsc, "--root", s.state, "state", s.id)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.Output()
	if err != nil {
		return 0, fmt.Errorf("runsc state: %v", err)
	}
	if err := json.Unmarshal(out, &st); err != nil || st.PID <= 0 {
		return 0, fmt.Errorf("runsc state: no pid in %q", out)
	}
	if st.Status != "running" {
		return 0, fmt.Errorf("runsc state: the sandbox is %s", st.Status)
	}
	return st.PID, nil
}

// watch makes s.done, closed once the Sentry has ended (its pidfd reads
// as ready), with s.code the container's exit code as runsc wait tells
// it (-1 when it cannot), or once s is let go of (Release).
func (s *served) watch() {
	s.done = make(chan struct{})
	wait := exec.Command(s.runsc, "--root", s.state, "wait", s.id)
	wait.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var out bytes.Buffer
	wait.Stdout = &out
	err := wait.Start()
	if err == nil {
		s.waiter = wait.Process
	}
	go func() {
		s.code = -1
		if err == nil {
			var res struct {
				ExitStatus int `json:"exitStatus"`
			}
			if wait.Wait() == nil && json.Unmarshal(out.Bytes(), &res) == nil {
				s.code = res.ExitStatus
			}
		}
		if !s.released.Load() {
			// Its cgroup's counts at once: the cgroup goes with the
			// Sentry's gofer.
			if g, err := cgroups.Named(s.cgroup); s.cgroup != "" && err == nil {
				s.oomKills, _ = g.OOMKills()
				if s.code < 0 {
					// Its status unknown (hutch is not its parent): a
					// Sentry that ended at its memory limit was killed
					// there, as runsc run's 137 would say.
					s.limitHits, _ = g.MemoryLimitHits()
				}
			}
			// runsc wait ends with the container; the Sentry a moment
			// later, or, when runsc wait failed, whenever it does.
			_, _ = unix.Poll([]unix.PollFd{{Fd: int32(s.pidfd), Events: unix.POLLIN}}, -1)
			s.out.Write([]byte(s.console()))
		}
		close(s.done)
	}()
}

// SavesMemory reports whether the sandbox's memory can be saved
// (Checkpoint, SaveRunning): not once a later hutch took it again, whose
// agent then listens on a socket of the host's with no connection of the
// daemon's own (ListenOptions.First) to close it on — gVisor saves no
// sandbox that listens on one.
func (s *served) SavesMemory() bool { return !s.reattached }

// kill ends the sandbox: its Sentry (a detached one), or runsc run.
func (s *served) kill() {
	if s.cmd == nil {
		_ = unix.PidfdSendSignal(s.pidfd, unix.SIGKILL, nil, 0)
		return
	}
	_ = s.cmd.Process.Kill()
}

// Handle names a sandbox that outlives hutch for Reattach
// (sandbox.ReattachConfig.Handle): its bundle directory; "" for one that
// does not.
func (s *served) Handle() string {
	if s.cmd != nil || s.host != nil {
		return ""
	}
	return s.dir
}

// Release lets go of a sandbox that outlives hutch without ending it: its
// agent's connection and its proxy's sockets close (a later hutch makes
// them again, Reattach), its processes run on. Done is closed.
func (s *served) Release() {
	if s.cmd != nil {
		return // it dies with hutch
	}
	s.released.Store(true)
	s.conn.Close()
	if s.proxy != nil {
		_ = s.proxy.Close()
	}
	if s.waiter != nil {
		_ = s.waiter.Kill()
	}
	<-s.done
	unix.Close(s.pidfd)
	s.pidfd = -1
}

// Sweep removes what the tier holds on the host for sandboxes whose hutch
// and Sentry are gone: their bundle directories, runsc's state, mounts
// and cgroups.
func (rt *Runtime) Sweep(log *slog.Logger) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	sweep(rt.base(), rt.Runsc, log)
}

// base is the directory of the sandboxes' bundle directories.
func (rt *Runtime) base() string {
	if rt.StateDir == "" {
		return DefaultStateDir
	}
	return rt.StateDir
}

// Reattach takes again a served sandbox that a previous hutch started
// with sandbox.Config.AgentSocket and left running: r.Handle is its
// bundle directory (the instance's Handle), r.PIDFD a pidfd of its
// Sentry (its PID), r.CgroupName and r.Proxy its Config's. Its egress
// proxy listens on its sockets again and its agent is connected to with
// r.AgentToken. Close ends it.
func (rt *Runtime) Reattach(r sandbox.ReattachConfig) (inst sandbox.Instance, err error) {
	defer func() {
		if err != nil {
			unix.Close(r.PIDFD)
			if r.Proxy != nil {
				_ = r.Proxy.Close()
			}
			err = fmt.Errorf("reattach: %w", err)
		}
	}()
	log := r.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	dir := r.Handle
	id := filepath.Base(dir)
	if dir != filepath.Join(rt.base(), id) || !strings.HasPrefix(id, "hutch-") {
		return nil, fmt.Errorf("%q is not a sandbox's directory in %s", dir, rt.base())
	}
	s := &served{runsc: rt.Runsc, dir: dir, id: id, state: filepath.Join(dir, "state"), logFile: filepath.Join(dir, "runsc.log"),
		log: log, proxy: r.Proxy, cgroup: r.CgroupName, out: &tail{max: 8 << 10}, pidfd: r.PIDFD}
	netDir := filepath.Join(dir, "net")
	_, nerr := os.Lstat(netDir)
	s.flags = runscArgs(s.state, s.logFile, nerr == nil, true, s.cgroup != "")
	pid, err := s.sandboxPID()
	if err != nil {
		return nil, err
	}
	if got := sandbox.PIDOf(r.PIDFD); got != pid {
		return nil, fmt.Errorf("its Sentry is pid %d, not the recorded %d", pid, got)
	}
	s.pid = pid
	// In network mode "none" the sandbox has no proxy's sockets (the
	// proxy only reports what it refused).
	if r.Proxy != nil && nerr == nil {
		if err := serveNetAgain(netDir, r.Proxy); err != nil {
			return nil, err
		}
	}
	conn, err := sandbox.DialAgent(filepath.Join(dir, agentDir, agentSock), r.AgentToken)
	if err != nil {
		return nil, err
	}
	s.conn, s.reattached = conn, true
	s.watch()
	return s, nil
}
