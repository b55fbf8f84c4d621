package main

import (
	"bufio"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// running is a hutch started in the background whose stdout the test reads.
type running struct {
	cmd    *exec.Cmd
	out    *bufio.Reader
	waited chan error
}

// startHutch starts `hutch run ARGS` in a fresh workspace and waits until
// the command prints "ready".
func startHutch(t *testing.T, args ...string) *running {
	t.Helper()
	testutil.RequireRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	t.Cleanup(cancel)
	ws := t.TempDir()
	cmd := exec.CommandContext(ctx, testutil.Hutch(t), append([]string{"run"}, args...)...)
	cmd.Dir = ws
	cmd.Env = baseEnv(ws)
	cmd.WaitDelay = 5 * time.Second
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := &running{cmd: cmd, out: bufio.NewReader(stdout), waited: make(chan error, 1)}
	if line, err := r.out.ReadString('\n'); err != nil || line != "ready\n" {
		_ = cmd.Process.Kill()
		t.Fatalf("sandbox did not get ready: %q, %v", line, err)
	}
	go func() {
		_, _ = io.Copy(io.Discard, r.out)
		r.waited <- cmd.Wait()
	}()
	return r
}

// TestSignalForwarding checks that signals sent to hutch reach the command.
func TestSignalForwarding(t *testing.T) {
	t.Parallel()
	for _, sig := range []struct {
		signal syscall.Signal
		name   string
	}{
		{syscall.SIGTERM, "TERM"}, {syscall.SIGINT, "INT"}, {syscall.SIGHUP, "HUP"}, {syscall.SIGUSR1, "USR1"},
	} {
		t.Run(sig.name, func(t *testing.T) {
			t.Parallel()
			// The signal is sent as soon as the command has started; the
			// trap runs once the short sleep the signal also hits ends. The
			// loop is bounded so that a lost signal fails with exit 9
			// instead of hanging.
			script := "trap 'exit 5' " + sig.name + "; echo ready; i=0; while [ $i -lt 50 ]; do sleep 0.1; i=$((i+1)); done; exit 9"
			r := startHutch(t, "--", "sh", "-c", script)
			if err := r.cmd.Process.Signal(sig.signal); err != nil {
				t.Fatal(err)
			}
			err := <-r.waited
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 5 {
				t.Errorf("after SIG%s: got %v, want exit 5 from the command's trap", sig.name, err)
			}
		})
	}
}

// TestKilledHutchKillsSandbox checks S4: when hutch itself is killed, every
// process of its sandbox ends.
func TestKilledHutchKillsSandbox(t *testing.T) {
	t.Parallel()
	r := startHutch(t, "--", "sh", "-c", "sleep 300 & (sleep 300 &) ; sleep 300 & echo ready; wait")
	procs := descendants(t, r.cmd.Process.Pid)
	if len(procs) < 4 { // init, sh and three sleeps
		t.Fatalf("sandbox processes: %v, want init, sh and the sleeps", procs)
	}
	if err := r.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-r.waited
	deadline := time.Now().Add(guard)
	for _, pid := range procs {
		for alive(pid) {
			if time.Now().After(deadline) {
				t.Fatalf("sandbox process %d outlived hutch", pid)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// descendants lists every process below pid on the host.
func descendants(t *testing.T, pid int) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	children := map[int][]int{}
	for _, e := range entries {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, ok := parentOf(n); ok {
			children[ppid] = append(children[ppid], n)
		}
	}
	var out []int
	queue := children[pid]
	for len(queue) > 0 {
		p := queue[0]
		queue = append(queue[1:], children[p]...)
		out = append(out, p)
	}
	return out
}

// parentOf reads the parent pid of pid from /proc.
func parentOf(pid int) (int, bool) {
	st, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	i := strings.LastIndexByte(string(st), ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(st[i+1:])) // state ppid ...
	if len(f) < 2 {
		return 0, false
	}
	ppid, err := strconv.Atoi(f[1])
	return ppid, err == nil
}

// alive reports whether pid is a live process (not gone, not a zombie).
func alive(pid int) bool {
	st, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(st), ')')
	return i >= 0 && i+2 < len(st) && st[i+2] != 'Z'
}
