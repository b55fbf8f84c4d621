//go:build linux

package escape

import (
	"crypto/x509"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// served is a `hutch serve` a test started: its unix socket, its TCP
// address, its state directory, and its log in a host file, where an
// operator would keep it.
type served struct {
	t    *testing.T
	cmd  *exec.Cmd
	dir  string // holds the socket, the state directory and the log
	sock string
	url  string // http://127.0.0.1:PORT with a TCP listener (https:// with --tls-cert)
	// roots, if not nil, verify the daemon's TLS certificate (--tls-cert).
	roots    *x509.CertPool
	stateDir string
	logPath  string
	exited   chan struct{}
}

// startServed starts `hutch serve` with a socket (and with tcp a TCP port)
// of its own in dir (made when empty) and flags, its stdout and stderr
// appended to a log file; the test's cleanup stops it as an operator would
// (SIGTERM: it destroys its sandboxes) and ends anything it started that
// is still there.
func startServed(t *testing.T, dir string, tcp bool, flags ...string) *served {
	t.Helper()
	return startServedEnv(t, dir, tcp, nil, flags...)
}

// startServedEnv is startServed with env added to the daemon's
// environment.
func startServedEnv(t *testing.T, dir string, tcp bool, env []string, flags ...string) *served {
	t.Helper()
	testutil.RequireRoot(t)
	if dir == "" {
		dir = hostDir(t, 0, "serve")
	}
	s := &served{t: t, dir: dir, sock: filepath.Join(dir, "hutch.sock"), stateDir: filepath.Join(dir, "state"),
		logPath: filepath.Join(dir, "daemon.log"), exited: make(chan struct{})}
	log, err := os.OpenFile(s.logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	args := []string{"serve", "--socket", s.sock, "--state-dir", s.stateDir}
	if tcp {
		args = append(args, "--listen", "127.0.0.1:0")
	}
	s.cmd = exec.Command(testutil.Hutch(t), append(args, flags...)...)
	s.cmd.Env = append([]string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + dir, "LANG=C"}, env...)
	s.cmd.Dir = dir
	s.cmd.Stdout, s.cmd.Stderr = log, log
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.cmd.Wait(); close(s.exited) }()
	t.Cleanup(func() { s.stop(t) })
	listening := regexp.MustCompile(`hutch: listening on (https?://\S+)`)
	deadline := time.Now().Add(60 * time.Second)
	for {
		out := s.logText()
		if m := listening.FindStringSubmatch(out); m != nil {
			s.url = m[1]
		}
		if strings.Contains(out, "hutch: listening on unix://"+s.sock) && (s.url != "" || !tcp) {
			return s
		}
		select {
		case <-s.exited:
			t.Fatalf("hutch serve ended at start:\n%s", out)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("hutch serve did not listen:\n%s", out)
		}
	}
}

// logText is what the daemon has logged so far.
func (s *served) logText() string {
	b, _ := os.ReadFile(s.logPath)
	return string(b)
}

// stop ends the daemon with SIGTERM (SIGKILL after a long while) and
// kills any process of its sandboxes still there.
func (s *served) stop(t *testing.T) {
	select {
	case <-s.exited:
		return
	default:
	}
	left := descendants(s.cmd.Process.Pid)
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(90 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
		t.Errorf("hutch serve did not stop on SIGTERM:\n%s", s.logText())
	}
	for _, pid := range left {
		if descendantOf(pid, 1) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	if t.Failed() {
		t.Logf("hutch serve's log:\n%s", clip(s.logText()))
	}
}
