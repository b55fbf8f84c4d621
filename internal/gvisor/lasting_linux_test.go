package gvisor

import (
	"errors"
	"net"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// stand starts a process standing in for a sandbox's Sentry and returns
// its pidfd; kill ends it.
func stand(t *testing.T) (pidfd int, kill func()) {
	t.Helper()
	cmd := exec.Command("sleep", "600")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pidfd, err := unix.PidfdOpen(cmd.Process.Pid, 0)
	if err != nil {
		t.Fatal(err)
	}
	kill = func() { cmd.Process.Kill(); cmd.Wait() }
	t.Cleanup(func() { kill(); unix.Close(pidfd) })
	return pidfd, kill
}

// TestWaitListening: the agent's directory is locked only once its socket
// listens, not as soon as the socket's file is there (gVisor's gofer
// still works on the file between its bind and its listen, and fails if
// the directory is locked meanwhile); a sandbox that ends first, or an
// agent that never listens, ends the wait with an error.
func TestWaitListening(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "agent.sock")
	pidfd, _ := stand(t)

	// Bound, not listening: the gofer between its bind and its listen.
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: sock}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- waitListening(sock, pidfd, time.Hour) }()
	select {
	case err := <-done:
		t.Fatalf("waitListening returned (%v) while the socket was bound but not listening", err)
	case <-time.After(300 * time.Millisecond):
	}
	if err := unix.Listen(fd, 4); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("waitListening on a listening socket: %v", err)
	}

	// The sandbox ends before anything listens.
	other := filepath.Join(t.TempDir(), "agent.sock")
	pidfd2, kill := stand(t)
	go func() { done <- waitListening(other, pidfd2, time.Hour) }()
	kill()
	if err := <-done; !errors.Is(err, errSandboxEnded) {
		t.Fatalf("waitListening after the sandbox ended: %v, want %v", err, errSandboxEnded)
	}

	// Nothing listens within the time allowed.
	if err := waitListening(other, pidfd, 50*time.Millisecond); err == nil {
		t.Fatal("waitListening with nothing at the path returned no error")
	}

	// A listener: no error, at once.
	l, err := net.Listen("unix", filepath.Join(t.TempDir(), "l.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := waitListening(l.Addr().String(), pidfd, time.Hour); err != nil {
		t.Fatal(err)
	}
}
