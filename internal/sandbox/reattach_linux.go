package sandbox

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/cgroups"
)

// A sandbox that outlives hutch (Config.AgentSocket) — the daemon's,
// re-adopted by the next daemon on the same state directory:
//
//   - its agent, PID 1, serves the daemon on a listening unix socket in
//     the daemon's directory for the sandbox (mode 0600, in a directory of
//     root's alone), one authenticated connection at a time, a newer one
//     taking over from the one before (agent.ServeListener, as a pod's
//     agent does): the commands in flight go on without their streams;
//   - its PID 1 has no parent-death signal: it outlives a daemon that
//     crashed or left it running, reparented to the host's init (or the
//     nearest subreaper), and ends when a daemon ends it;
//   - the sockets of its egress proxy (netSockets) close with the daemon
//     that held them: the next one makes them again in the sandbox's
//     network namespace, at the same addresses, and serves them with a
//     proxy of the same rules. If the sandbox's code took one of those
//     addresses meanwhile, Reattach fails and the daemon ends the sandbox
//     (S6: nothing else ever answers for the proxy).

// startListening is Start with c.AgentSocket: the agent accepts the
// daemon's connections on a socket there, and this first one is made
// here.
func startListening(c Config) (*Sandbox, error) {
	if c.AgentToken == "" {
		return nil, errors.New("agent socket: no token")
	}
	lf, err := listenAgent(c.AgentSocket)
	if err != nil {
		return nil, err
	}
	l, err := launch(c, lf)
	lf.Close()
	if err != nil {
		os.Remove(c.AgentSocket)
		return nil, err
	}
	conn, err := DialAgent(c.AgentSocket, c.AgentToken)
	if err != nil {
		l.close()
		os.Remove(c.AgentSocket)
		return nil, err
	}
	return &Sandbox{l: l, conn: conn}, nil
}

// listenAgent makes the listening socket at path, mode 0600, above the
// standard descriptors.
func listenAgent(path string) (*os.File, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("agent socket: %w", err)
	}
	if fd, err = aboveStdio(fd); err != nil {
		return nil, fmt.Errorf("agent socket: %w", err)
	}
	f := os.NewFile(uintptr(fd), "hutch-agent-listener")
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		f.Close()
		return nil, fmt.Errorf("agent socket: %w", err)
	}
	err = unix.Bind(fd, &unix.SockaddrUnix{Name: path})
	if err == nil {
		err = os.Chmod(path, 0o600)
	}
	if err == nil {
		err = unix.Listen(fd, 16)
	}
	if err != nil {
		f.Close()
		os.Remove(path)
		return nil, fmt.Errorf("agent socket %s: %w", path, err)
	}
	return f, nil
}

// DialAgent connects to the agent at path and authenticates with token;
// the agent answers with its hello.
func DialAgent(path, token string) (net.Conn, error) {
	c, err := net.DialTimeout("unix", path, 10*time.Second)
	if err != nil {
		return nil, fmt.Errorf("agent socket: %w", err)
	}
	if _, err := io.WriteString(c, AgentAuthPrefix+token+"\n"); err != nil {
		c.Close()
		return nil, fmt.Errorf("agent socket: authenticate: %w", err)
	}
	return c, nil
}

// Reattach takes again a sandbox that a previous hutch started with
// Config.AgentSocket: a new connection to its agent (which takes over
// from any before), its cgroup, and its egress proxy's sockets made
// again. Done is closed when its PID 1 ends; its exit code is then
// unknown (ExitHutchError): this hutch is not its parent. Close ends it.
func Reattach(r ReattachConfig) (*Sandbox, error) {
	l := &launched{master: -1, log: r.Log, pidfd: r.PIDFD}
	pid := PIDOf(r.PIDFD)
	if pid <= 0 {
		unix.Close(r.PIDFD)
		return nil, fmt.Errorf("reattach: PID 1 is gone")
	}
	l.pid = pid
	if err := watchExit(l, r.PIDFD); err != nil {
		unix.Close(r.PIDFD)
		return nil, fmt.Errorf("reattach: %w", err)
	}
	fail := func(err error) (*Sandbox, error) {
		l.close()
		return nil, fmt.Errorf("reattach: %w", err)
	}
	if r.CgroupName != "" {
		g, err := cgroups.Named(r.CgroupName)
		if err != nil {
			return fail(err)
		}
		l.group = g
		l.onClose(func() {
			if err := g.Destroy(); err != nil && l.log != nil {
				l.log.Debug("destroy cgroup", "err", err)
			}
		})
	}
	if r.Proxy != nil {
		l.onLoose(func() { _ = r.Proxy.Close() })
		fds, err := netSocketsIn(r.PIDFD)
		if err != nil {
			return fail(err)
		}
		w, err := serveLazily(r.Proxy, fds)
		if err != nil {
			return fail(err)
		}
		l.onLoose(w.stop)
	}
	conn, err := DialAgent(r.AgentSocket, r.AgentToken)
	if err != nil {
		return fail(err)
	}
	return &Sandbox{l: l, conn: conn}, nil
}

// Release lets go of a sandbox started with Config.AgentSocket without
// ending it: its agent's connection and its proxy's sockets close (a
// later hutch makes them again, Reattach), its processes run on.
func (s *Sandbox) Release() {
	_ = s.conn.Close()
	s.l.runClosers(false)
	if s.l.pidfile != nil {
		s.l.pidfile.Close() // ends watchExit's wait
		s.l.pidfd = -1
	}
}

// watchExit makes l.exited, closed once the process of pidfd, which l
// takes over, has ended (a pidfd reads as ready then), or once l lets go
// of it.
func watchExit(l *launched, pidfd int) error {
	if err := unix.SetNonblock(pidfd, true); err != nil {
		return fmt.Errorf("pidfd: %w", err)
	}
	f := os.NewFile(uintptr(pidfd), "hutch-pidfd")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return fmt.Errorf("pidfd: %w", err)
	}
	l.pidfd, l.pidfile = pidfd, f
	l.exited = make(chan struct{})
	go func() {
		_ = rc.Read(func(fd uintptr) bool {
			n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 0)
			return n > 0 || (err != nil && err != unix.EINTR)
		})
		close(l.exited)
	}()
	return nil
}

// PIDOf is the pid of the process of pidfd, or 0 when it has ended.
func PIDOf(pidfd int) int {
	var pid int
	if _, err := fmt.Sscan(readFdinfo(pidfd, "Pid:"), &pid); err != nil || pid <= 0 {
		return 0
	}
	return pid
}

// readFdinfo is the value of key in the fdinfo of descriptor fd, or "".
func readFdinfo(fd int, key string) string {
	b, err := os.ReadFile(filepath.Join("/proc/self/fdinfo", fmt.Sprint(fd)))
	if err != nil {
		return ""
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, key); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// netSocketsIn makes the sockets of netSockets again in the network
// namespace of the process of pidfd, from a thread of hutch's that enters
// it for the while: the proxy's listeners and the DNS socket at the same
// addresses. An address in use (the sandbox's code took it while no hutch
// held it) fails.
func netSocketsIn(pidfd int) (fds []int, err error) {
	runtime.LockOSThread()
	own, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("network sockets: %w", err)
	}
	defer unix.Close(own)
	if err := unix.Setns(pidfd, unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("network sockets: enter the sandbox's network namespace: %w", err)
	}
	defer func() {
		if serr := unix.Setns(own, unix.CLONE_NEWNET); serr != nil {
			// The thread stays locked and ends with this goroutine.
			closeAll(fds)
			fds, err = nil, fmt.Errorf("network sockets: back to hutch's network namespace: %w", serr)
			return
		}
		runtime.UnlockOSThread()
	}()
	for _, sk := range []struct {
		port int
		typ  int
	}{{ProxyHTTPPort, unix.SOCK_STREAM}, {ProxySOCKSPort, unix.SOCK_STREAM}, {DNSPort, unix.SOCK_DGRAM}} {
		fd, err := unix.Socket(unix.AF_INET, sk.typ|unix.SOCK_CLOEXEC, 0)
		if err == nil {
			fds = append(fds, fd)
		}
		if err == nil && sk.typ == unix.SOCK_STREAM {
			// Connections the previous hutch served linger in TIME_WAIT
			// at these addresses; a listener still bound there is not
			// taken over all the same. (Not for the DNS socket: two UDP
			// sockets with it share an address.)
			err = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)
		}
		if err == nil {
			err = unix.Bind(fd, &unix.SockaddrInet4{Port: sk.port, Addr: [4]byte{127, 0, 0, 1}})
		}
		if err == nil && sk.typ == unix.SOCK_STREAM {
			err = unix.Listen(fd, 1024)
		}
		if err != nil {
			closeAll(fds)
			return nil, fmt.Errorf("network sockets: 127.0.0.1:%d in the sandbox: %w", sk.port, err)
		}
	}
	return fds, nil
}
