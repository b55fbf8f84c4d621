// Package ocitest starts the container engines the tests of hutch-runc
// drive — containerd with its ctr, and Docker's dockerd — each private to
// the test that starts it: its own root, state and sockets in a temporary
// directory, no network but its own, and ended at the test's end by pid
// with every shim and container it started, its mounts undone.
package ocitest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/testutil"
)

var (
	buildOnce sync.Once
	buildPath string
	buildErr  error
)

// HutchRunc builds hutch-runc once per test process (static, as released)
// into a world-readable directory and returns its path: $HUTCH_TEST_BIN's
// when that is set (testutil.Build).
func HutchRunc(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		buildPath, buildErr = testutil.Build("hutch-runc", "github.com/hutch-sandbox/hutch/cmd/hutch-runc")
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildPath
}

// RemoveBuilds removes what HutchRunc and ImageTar built; TestMain calls
// it.
func RemoveBuilds() {
	testutil.RemoveBuilt(buildPath)
	if programsDir != "" {
		os.RemoveAll(programsDir)
	}
}

// Need finds the programs named on PATH, or skips (fails under
// HUTCH_TEST_ROOT=1) naming the Debian package that has them.
func Need(t testing.TB, progs ...string) {
	t.Helper()
	testutil.RequireRoot(t)
	for _, p := range progs {
		pkg, prog, ok := strings.Cut(p, ":")
		if !ok {
			prog = pkg
		}
		_, err := exec.LookPath(prog)
		testutil.Need(t, err == nil, fmt.Sprintf("needs %s (Debian package %s)", prog, pkg))
	}
}

// Result is what a command printed and how it ended.
type Result struct {
	Stdout, Stderr string
	Code           int
	Err            error
}

func (r Result) String() string {
	return fmt.Sprintf("exit %d (%v)\nstdout:\n%s\nstderr:\n%s", r.Code, r.Err, r.Stdout, r.Stderr)
}

// run runs name with args and returns what it did.
func run(ctx context.Context, env []string, stdin string, name string, args ...string) Result {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	r := Result{Stdout: out.String(), Stderr: errb.String(), Err: err}
	if cmd.ProcessState != nil {
		r.Code = cmd.ProcessState.ExitCode()
	}
	return r
}

// syncBuffer is a log written by a process and read by the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// daemon is an engine's process, its directory and log.
type daemon struct {
	name string
	dir  string
	cmd  *exec.Cmd
	log  *syncBuffer
	done <-chan struct{}
}

// start starts an engine's daemon with its log kept, in its own process
// group, and registers its end.
func start(t testing.TB, name, dir string, env []string, args ...string) *daemon {
	t.Helper()
	d := &daemon{name: name, dir: dir, log: &syncBuffer{}}
	d.cmd = exec.Command(name, args...)
	d.cmd.Env = append(os.Environ(), env...)
	d.cmd.Stdout, d.cmd.Stderr = d.log, d.log
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	done, err := testutil.StartLocked(d.cmd)
	if err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	d.done = done
	return d
}

// waitSocket waits for the daemon to listen on the unix socket at path.
func (d *daemon) waitSocket(t testing.TB, path string) {
	t.Helper()
	ok := testutil.Eventually(60*time.Second, func() bool {
		select {
		case <-d.done:
			return true
		default:
		}
		c, err := unixDial(path)
		if err == nil {
			unix.Close(c)
		}
		return err == nil
	})
	select {
	case <-d.done:
		t.Fatalf("%s ended at start: %v\n%s", d.name, d.cmd.ProcessState, d.log.String())
	default:
	}
	if !ok {
		t.Fatalf("%s did not listen on %s within a minute:\n%s", d.name, path, d.log.String())
	}
}

func unixDial(path string) (int, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	if err := unix.Connect(fd, &unix.SockaddrUnix{Name: path}); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// stop ends the daemon with SIGTERM (SIGKILL after a while), then every
// process left whose command line names the daemon's directory (shims,
// containers' init), then unmounts what is left under its directory.
func (d *daemon) stop(t testing.TB) {
	t.Helper()
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(30 * time.Second):
		t.Errorf("%s did not end within 30 s of SIGTERM; killing it", d.name)
		d.cmd.Process.Kill()
		<-d.done
	}
	for _, pid := range processesNaming(d.dir) {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	unmountUnder(d.dir)
}

// processesNaming are the processes whose command line contains s.
func processesNaming(s string) []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		var pid int
		if _, err := fmt.Sscanf(e.Name(), "%d", &pid); err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(b, []byte(s)) {
			out = append(out, pid)
		}
	}
	return out
}

// unmountUnder lazily unmounts every mount point under dir, deepest first.
func unmountUnder(dir string) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return
	}
	var points []string
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			points = append(points, f[4])
		}
	}
	for i := len(points) - 1; i >= 0; i-- {
		unix.Unmount(points[i], unix.MNT_DETACH)
	}
}

// ListenIn makes a listener of network ("tcp", "unix") at addr in the
// network namespace of process pid (abstract unix sockets belong to one).
func ListenIn(pid int, network, addr string) (net.Listener, error) {
	return inNetns(fmt.Sprintf("/proc/%d/ns/net", pid), func() (net.Listener, error) { return net.Listen(network, addr) })
}

// DialIn connects to addr over network, within d, from the network
// namespace at ns (/var/run/netns/NAME, /proc/PID/ns/net).
func DialIn(ns, network, addr string, d time.Duration) (net.Conn, error) {
	return inNetns(ns, func() (net.Conn, error) { return net.DialTimeout(network, addr, d) })
}

// inNetns runs f on a thread in the network namespace at path: the
// sockets it makes belong to that namespace.
func inNetns[T any](path string, f func() (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	go func() {
		// The thread that enters the namespace never serves another
		// goroutine: it ends locked, with this one.
		runtime.LockOSThread()
		var zero T
		ns, err := os.Open(path)
		if err != nil {
			ch <- result{zero, err}
			return
		}
		defer ns.Close()
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- result{zero, fmt.Errorf("setns: %w", err)}
			return
		}
		v, err := f()
		ch <- result{v, err}
	}()
	r := <-ch
	return r.v, r.err
}

// PolicyDirEnv is hutch-runc's environment variable for the directory of
// the node's policies (ociruntime.PolicyDirEnv), for an engine whose
// runtime takes no arguments (containerd's runc shim).
const PolicyDirEnv = "HUTCH_RUNC_POLICY_DIR"

// RuntimeEnv is hutch-runc's environment variable for the low-level
// runtime's path (ociruntime.RuntimeEnv), for an engine whose runtime
// takes no arguments (containerd's runc shim).
const RuntimeEnv = "HUTCH_RUNC_RUNTIME"

// RuncJoinsUserLast reports whether the node's runc (the one on PATH)
// joins namespaces by path before the user namespace: see JoinsUserLast.
func RuncJoinsUserLast(t testing.TB) bool {
	t.Helper()
	return JoinsUserLast(t, "runc")
}

// JoinsUserLast reports whether runc (1.2 and later) gives containers
// that join namespaces by path (a pod's) a user namespace under
// hutch-runc: runc 1.1 could not exec into them, and hutch-runc then
// gives them none.
func JoinsUserLast(t testing.TB, runc string) bool {
	t.Helper()
	out, err := exec.Command(runc, "--version").Output()
	if err != nil {
		t.Fatalf("%s --version: %v", runc, err)
	}
	var major, minor int
	if _, err := fmt.Sscanf(string(out), "runc version %d.%d", &major, &minor); err != nil {
		t.Fatalf("%s --version: %q: %v", runc, out, err)
	}
	return major > 1 || major == 1 && minor >= 2
}

// LoopbackPolicy writes the node policy NAME.yaml into dir: domain at the
// host's 127.0.0.1 on port (a LoopbackUpstream's) as the one destination
// allowed.
func LoopbackPolicy(t testing.TB, dir, name, domain string, port int) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name+".yaml"), []byte(fmt.Sprintf(`network:
  allowed_domains: ["%s:%d"]
  hosts: ["%[1]s:127.0.0.1"]
  allow_private: ["127.0.0.1/32"]
`, domain, port)), 0o644); err != nil {
		t.Fatal(err)
	}
}

// LoopbackUpstream serves body on a new port of the host's 127.0.0.1
// until the test ends and returns the port: an upstream that a node
// policy allows (pinned to 127.0.0.1, allow_private 127.0.0.1/32).
func LoopbackUpstream(t testing.TB, body string) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go http.Serve(l, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, body) }))
	return l.Addr().(*net.TCPAddr).Port
}
