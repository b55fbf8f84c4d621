package peercred

import (
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// helperEnv makes the test binary a peer: it connects to the socket the
// variable names, writes one byte, and waits for the connection to end
// (or, with "exit:" before the path, exits at once).
const helperEnv = "PEERCRED_TEST_PEER"

func TestMain(m *testing.M) {
	if path := os.Getenv(helperEnv); path != "" {
		exitNow := strings.HasPrefix(path, "exit:")
		c, err := net.Dial("unix", strings.TrimPrefix(path, "exit:"))
		if err != nil {
			os.Exit(3)
		}
		if _, err := c.Write([]byte{1}); err != nil {
			os.Exit(4)
		}
		if !exitNow {
			_, _ = io.Copy(io.Discard, c)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// peerOf starts the test binary as a peer with attr (nil: a plain child),
// accepts its connection and returns what Of says, the child's pid and a
// function that ends it.
func peerOf(t *testing.T, attr *syscall.SysProcAttr, exitNow bool) (Peer, int, error) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "s")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := os.Chmod(sock, 0o777); err != nil {
		t.Fatal(err)
	}
	target := sock
	if exitNow {
		target = "exit:" + sock
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env = []string{helperEnv + "=" + target}
	cmd.SysProcAttr = attr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var b [1]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		t.Fatalf("read from the peer: %v", err)
	}
	if exitNow {
		_ = cmd.Wait() // reaped: its pid may be reused
	} else {
		defer func() {
			c.Close()
			_ = cmd.Wait()
		}()
	}
	p, err := Of(c.(*net.UnixConn))
	return p, cmd.Process.Pid, err
}

// TestSameProcess: a connection of the test's own process is in its own
// user namespace, with its pid and ids.
func TestSameProcess(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "s")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	d, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p, err := Of(c.(*net.UnixConn))
	if err != nil || !p.SameUserNS || p.PID != os.Getpid() || p.UID != uint32(os.Getuid()) || p.GID != uint32(os.Getgid()) {
		t.Errorf("Of = %+v, %v; want this process in its own user namespace", p, err)
	}
}

// TestOtherUserNamespace: a process in a user namespace of its own — as
// every hutch sandbox is — is told apart, even when it is root there.
func TestOtherUserNamespace(t *testing.T) {
	uid, gid := os.Getuid(), os.Getgid()
	attr := &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: uid, Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: gid, Size: 1}},
	}
	p, pid, err := peerOf(t, attr, false)
	if err != nil || p.SameUserNS || p.PID != pid || p.UID != uint32(uid) {
		t.Errorf("Of = %+v, %v; want pid %d in another user namespace", p, err, pid)
	}
}

// TestOtherPidNamespace: a process in a pid (and mount) namespace of its
// own but the same user namespace — a container without user namespace
// remapping — is in the caller's user namespace, named by the caller's
// pid for it.
func TestOtherPidNamespace(t *testing.T) {
	testutil.RequireRoot(t)
	p, pid, err := peerOf(t, &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID | syscall.CLONE_NEWNS}, false)
	if err != nil || !p.SameUserNS || p.PID != pid {
		t.Errorf("Of = %+v, %v; want pid %d in the same user namespace", p, err, pid)
	}
}

// TestExitedPeer: a peer that exited (and was reaped, so that its pid
// may be reused) cannot be placed: an error, never a verdict about
// whichever process has its pid now.
func TestExitedPeer(t *testing.T) {
	p, _, err := peerOf(t, nil, true)
	if err == nil {
		t.Errorf("Of = %+v for a peer that exited, want an error", p)
	}
	t.Logf("Of: %v", err)
}
