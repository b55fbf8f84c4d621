package ociruntime

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/sandbox"
)

// ProxyCommand is the command of hutch-runc's binary that serves a
// network namespace's egress: started by the createRuntime hook, it ends
// when the container that owns the namespace does.
const ProxyCommand = "egress-proxy"

// proxyReadyWithin bounds how long the hook waits for the proxy to serve,
// proxyStopWithin how long poststop waits for it to end on SIGTERM.
const (
	proxyReadyWithin = time.Minute
	proxyStopWithin  = 10 * time.Second
)

// hookMain runs one of hutch-runc's hooks: args are the event and the
// container's state directory; the container's state is on stdin.
func hookMain(args []string, stdin io.Reader, stderr io.Writer) int {
	if len(args) != 2 || !filepath.IsAbs(args[1]) || filepath.Base(filepath.Dir(args[1])) != "hutch" {
		fmt.Fprintln(stderr, "hutch-runc: usage: hutch-runc hook EVENT STATE-DIR (run by the low-level runtime)")
		return 2
	}
	dir := args[1]
	var st specs.State
	b, err := io.ReadAll(io.LimitReader(stdin, maxConfig))
	if err == nil {
		err = json.Unmarshal(b, &st)
	}
	if err != nil {
		fmt.Fprintf(stderr, "hutch-runc: hook %s: read the container's state: %v\n", args[0], err)
		return 1
	}
	switch args[0] {
	case "createRuntime":
		err = startEgress(dir, st.Pid)
	case "poststop":
		err = cleanupState(dir)
	default:
		fmt.Fprintf(stderr, "hutch-runc: unknown hook %q\n", args[0])
		return 2
	}
	if err != nil {
		fmt.Fprintf(stderr, "hutch-runc: %v\n", err)
		return 1
	}
	return 0
}

// startEgress, in the runtime's namespaces once the container's exist,
// gives the container's network namespace hutch's proxy: listeners on its
// loopback, a firewall that lets nothing else out, and the proxy process
// that serves them — unless another container's proxy serves it already
// (a pod's containers join its sandbox's namespace).
func startEgress(dir string, pid int) error {
	var plan egressPlan
	if err := readJSON(filepath.Join(dir, egressFile), &plan); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return err
	}
	if plan.Mode == "host" {
		return nil
	}
	if _, err := os.Lstat(filepath.Join(dir, ownerLink)); err == nil {
		return nil
	}
	ns, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", pid))
	if err != nil {
		return fmt.Errorf("the container's network namespace: %w", err)
	}
	defer ns.Close()
	var nsStat, ownStat syscall.Stat_t
	if err := syscall.Fstat(int(ns.Fd()), &nsStat); err != nil {
		return err
	}
	goruntime.LockOSThread()
	err = syscall.Stat(threadSelf("ns/net"), &ownStat)
	goruntime.UnlockOSThread()
	if err != nil {
		return err
	}
	if nsStat.Ino == ownStat.Ino && nsStat.Dev == ownStat.Dev {
		return errors.New("the container shares the runtime's network namespace: hutch-runc cannot hold its egress to the proxy; give it a network of its own, or a node policy with network.mode host")
	}
	files, err := egressListeners(int(ns.Fd()))
	if err != nil {
		return err
	}
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	if err := egressFirewall(int(ns.Fd()), plan.AgentPort); err != nil {
		return fmt.Errorf("the container's firewall: %w", err)
	}
	ready, readyW, err := os.Pipe()
	if err != nil {
		return err
	}
	defer ready.Close()
	log, err := os.OpenFile(filepath.Join(dir, "proxy.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		readyW.Close()
		return err
	}
	defer log.Close()
	self, err := os.Executable()
	if err != nil {
		readyW.Close()
		return err
	}
	cmd := exec.Command(self, ProxyCommand, dir, strconv.Itoa(pid))
	cmd.Args[0] = "hutch-runc"
	cmd.ExtraFiles = append(files, readyW)
	cmd.Stdout, cmd.Stderr = log, log
	// Its own session: the hook's end, and the low-level runtime's, do
	// not end it; the container's does.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	readyW.Close()
	if err != nil {
		return fmt.Errorf("start the egress proxy: %w", err)
	}
	go cmd.Wait()
	line, err := readLine(ready, proxyReadyWithin)
	if err != nil || line != "ok" {
		cmd.Process.Kill()
		if err == nil {
			err = errors.New(line)
		}
		return fmt.Errorf("the egress proxy: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, proxyPidFile), []byte(strconv.Itoa(cmd.Process.Pid)), 0o600); err != nil {
		cmd.Process.Kill()
		return err
	}
	idx := netIndex(dir)
	if err := os.MkdirAll(idx, 0o700); err != nil {
		return err
	}
	link := filepath.Join(idx, strconv.FormatUint(nsStat.Ino, 10))
	os.Remove(link)
	return os.Symlink(dir, link)
}

// readLine reads one line from r within d.
func readLine(r *os.File, d time.Duration) (string, error) {
	r.SetReadDeadline(time.Now().Add(d))
	line, err := bufio.NewReader(io.LimitReader(r, 4096)).ReadString('\n')
	if err != nil {
		if line != "" {
			return strings.TrimSpace(line), nil
		}
		if errors.Is(err, io.EOF) {
			return "", errors.New("it ended before it served")
		}
		return "", err
	}
	return strings.TrimSpace(line), nil
}

// egressListeners makes, in the network namespace ns, the proxy's
// listeners on its loopback — HTTP proxy, SOCKS5, DNS — as hutch's own
// sandboxes have them, with the loopback up.
func egressListeners(ns int) ([]*os.File, error) {
	type result struct {
		files []*os.File
		err   error
	}
	ch := make(chan result, 1)
	go func() {
		// The thread enters the namespace and never returns to the
		// pool: it ends with the goroutine, locked.
		goruntime.LockOSThread()
		files, err := func() ([]*os.File, error) {
			if err := unix.Setns(ns, unix.CLONE_NEWNET); err != nil {
				return nil, fmt.Errorf("enter the container's network namespace: %w", err)
			}
			if err := loopbackUp(); err != nil {
				return nil, err
			}
			var files []*os.File
			for _, port := range []int{sandbox.ProxyHTTPPort, sandbox.ProxySOCKSPort} {
				l, err := net.Listen("tcp4", "127.0.0.1:"+strconv.Itoa(port))
				if err != nil {
					return files, fmt.Errorf("listen on the container's 127.0.0.1:%d (the egress proxy's): %w", port, err)
				}
				f, err := l.(*net.TCPListener).File()
				l.Close()
				if err != nil {
					return files, err
				}
				files = append(files, f)
			}
			pc, err := net.ListenPacket("udp4", "127.0.0.1:"+strconv.Itoa(sandbox.DNSPort))
			if err != nil {
				return files, fmt.Errorf("listen on the container's 127.0.0.1:%d (its DNS): %w", sandbox.DNSPort, err)
			}
			f, err := pc.(*net.UDPConn).File()
			pc.Close()
			if err != nil {
				return files, err
			}
			return append(files, f), nil
		}()
		ch <- result{files, err}
	}()
	r := <-ch
	if r.err != nil {
		for _, f := range r.files {
			f.Close()
		}
	}
	return r.files, r.err
}

// loopbackUp sets the up flag of lo in the calling thread's network
// namespace.
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
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("lo's flags: %w", err)
	}
	if ifr.Uint16()&unix.IFF_UP != 0 {
		return nil
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("bring lo up: %w", err)
	}
	return nil
}

// liveProxy is the pid of the egress proxy the hook of the container
// whose state directory is dir started, 0 when it started none or it has
// ended: a pid the kernel gave again to another process is not it. The
// proxy ends when the container that owns its network namespace does, so
// a live proxy means a live namespace.
func liveProxy(dir string) (int, error) {
	b, err := os.ReadFile(filepath.Join(dir, proxyPidFile))
	if err != nil {
		return 0, nil
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 1 {
		return 0, fmt.Errorf("%s: not a pid", filepath.Join(dir, proxyPidFile))
	}
	if cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil && strings.Contains(string(cmdline), "\x00"+dir+"\x00") {
		return pid, nil
	}
	return 0, nil
}

// stopEgress ends the proxy the container's hook started, if any, and
// removes its namespace's link.
func stopEgress(dir string) error {
	pid, err := liveProxy(dir)
	if err != nil {
		return err
	}
	if pid > 0 {
		// Its pidfd first, so that the wait below is for this process.
		if fd, err := unix.PidfdOpen(pid, 0); err == nil {
			unix.PidfdSendSignal(fd, unix.SIGTERM, nil, 0)
			// The container is gone when poststop returns, and so is
			// its proxy: SIGKILL if it has not ended within a while.
			fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			if n, _ := unix.Poll(fds, int(proxyStopWithin/time.Millisecond)); n == 0 {
				unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
			}
			unix.Close(fd)
		}
	}
	idx := netIndex(dir)
	entries, _ := os.ReadDir(idx)
	for _, e := range entries {
		if target, err := os.Readlink(filepath.Join(idx, e.Name())); err == nil && target == dir {
			os.Remove(filepath.Join(idx, e.Name()))
		}
	}
	return nil
}
