package api

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// TestUnixPeerUserNamespace: on the unix socket, a peer in another user
// namespace than the daemon's (as every hutch sandbox is) is answered 403
// with a code and a message, and logged; its request never reaches the
// handler. A peer in the daemon's user namespace, even in another pid
// namespace (a container without user namespace remapping), is served.
// The socket is open to everyone, so that nothing but the check stands
// in the way.
func TestUnixPeerUserNamespace(t *testing.T) {
	curl, err := exec.LookPath("curl")
	testutil.Need(t, err == nil, "needs curl")
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "hutch.sock")
	ls, err := Listen(sock, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(sock, 0o666); err != nil {
		t.Fatal(err)
	}
	var reached atomic.Int32
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		w.WriteHeader(http.StatusOK)
	})
	var log testutil.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, h, slog.New(slog.NewTextHandler(&log, nil)), ls...) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()

	get := func(attr *syscall.SysProcAttr) (int, string) {
		t.Helper()
		cmd := exec.Command(curl, "-sS", "--max-time", "20", "--unix-socket", sock, "-w", "\n%{http_code}", "http://hutch/v1/sandboxes", "-X", "POST", "-d", "{}")
		cmd.SysProcAttr = attr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("curl: %v\n%s", err, out)
		}
		i := strings.LastIndexByte(string(out), '\n')
		code, err := strconv.Atoi(string(out[i+1:]))
		if err != nil {
			t.Fatalf("curl's output %q", out)
		}
		return code, string(out[:i])
	}

	// The daemon's own user namespace: served.
	if code, body := get(nil); code != http.StatusOK {
		t.Fatalf("a peer in the daemon's user namespace: %d %s", code, body)
	}
	uid, gid := os.Getuid(), os.Getgid()
	for _, tc := range []struct {
		name string
		attr *syscall.SysProcAttr
	}{
		{"root of a user namespace", &syscall.SysProcAttr{
			Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS,
			UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: uid, Size: 1}},
			GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: gid, Size: 1}},
		}},
		{"same ids, other user namespace", &syscall.SysProcAttr{
			Cloneflags:  syscall.CLONE_NEWUSER,
			UidMappings: []syscall.SysProcIDMap{{ContainerID: uid, HostID: uid, Size: 1}},
			GidMappings: []syscall.SysProcIDMap{{ContainerID: gid, HostID: gid, Size: 1}},
		}},
	} {
		before := reached.Load()
		code, body := get(tc.attr)
		var e ErrorBody
		if code != http.StatusForbidden || json.Unmarshal([]byte(body), &e) != nil || e.Code != CodePermissionDenied || !strings.Contains(e.Message, "another user namespace") {
			t.Errorf("%s: %d %s, want 403 %s naming the user namespace", tc.name, code, body, CodePermissionDenied)
		}
		if reached.Load() != before {
			t.Errorf("%s: the request reached the handler", tc.name)
		}
	}
	if !strings.Contains(log.String(), "refused a connection on the unix socket") {
		t.Errorf("the refusals are not logged:\n%s", log.String())
	}
	if os.Geteuid() == 0 {
		// A container without a user namespace of its own.
		code, body := get(&syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID | syscall.CLONE_NEWNS | syscall.CLONE_NEWUTS | syscall.CLONE_NEWIPC})
		if code != http.StatusOK {
			t.Errorf("a peer in another pid namespace, same user namespace: %d %s", code, body)
		}
	}
}
