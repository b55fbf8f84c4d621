package agent

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/testutil"
	"golang.org/x/sys/unix"
)

// childEnv makes the test binary run as an agent (see agentChild).
const childEnv = "HUTCH_AGENT_TEST_CHILD"

func init() { childMain = agentChild }

// agentChild serves descriptor 3 with PID1 set, as a child subreaper: the
// kernel hands it the orphans of its commands, as it would to PID 1 of a
// sandbox.
func agentChild() int {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		fmt.Fprintf(os.Stderr, "agent child: subreaper: %v\n", err)
		return 2
	}
	f := os.NewFile(3, "agent")
	conn, err := net.FileConn(f)
	f.Close()
	if err != nil {
		fmt.Fprintf(os.Stderr, "agent child: %v\n", err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if err := Serve(conn, ServeOptions{PID1: true, Log: log, DefaultEnv: []string{"PATH=" + os.Getenv("PATH")}}); err != nil {
		fmt.Fprintf(os.Stderr, "agent child: %v\n", err)
		return 1
	}
	return 0
}

// childAgent is the test binary re-executed as an agent with PID1 set.
type childAgent struct {
	c   *Client
	pid int
}

func startChildAgent(t testing.TB) *childAgent {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "daemon"), os.NewFile(uintptr(fds[1]), "agent")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	// GORACE: a binary built with -race otherwise lingers a second at exit.
	cmd.Env = append(os.Environ(), childEnv+"=1", strings.TrimSpace("GORACE="+os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	cmd.ExtraFiles = []*os.File{theirs}
	stderr := &testutil.Buffer{}
	cmd.Stderr = stderr
	err = cmd.Start()
	theirs.Close()
	if err != nil {
		ours.Close()
		t.Fatal(err)
	}
	conn, err := net.FileConn(ours)
	ours.Close()
	if err != nil {
		t.Fatal(err)
	}
	c := NewClient(conn)
	t.Cleanup(func() {
		c.Close()
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("agent exited: %v", err)
			}
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			<-done
			t.Errorf("agent did not exit after its connection closed")
		}
		if t.Failed() {
			t.Logf("agent log:\n%s", stderr)
		}
	})
	return &childAgent{c: c, pid: cmd.Process.Pid}
}

// procStat returns the state and parent of pid, ok false once it is gone.
func procStat(pid int) (state byte, ppid int, ok bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, false
	}
	// pid (comm) state ppid ...; comm may hold anything but ')'s last.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 2 {
		return 0, 0, false
	}
	ppid, _ = strconv.Atoi(f[1])
	return f[0][0], ppid, true
}

// zombiesOf lists the zombie children of pid.
func zombiesOf(pid int) []int {
	var zs []int
	paths, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range paths {
		child, err := strconv.Atoi(filepath.Base(p))
		if err != nil {
			continue
		}
		if state, ppid, ok := procStat(child); ok && ppid == pid && state == 'Z' {
			zs = append(zs, child)
		}
	}
	return zs
}

// memory reads a field (VmRSS, VmHWM) of /proc/pid/status, in bytes.
func memory(t *testing.T, pid int, field string) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("%s: %q", field, line)
			}
			return kb << 10
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

func TestPID1Exec(t *testing.T) {
	a := startChildAgent(t)
	tests := []struct {
		name  string
		req   ExecRequest
		stdin string
		want  result
	}{
		{"echo", ExecRequest{Args: []string{"echo", "hi"}}, "", result{stdout: "hi\n"}},
		{"exit code", ExecRequest{Args: []string{"sh", "-c", "exit 42"}}, "", result{status: ExitStatus{Code: 42}}},
		{"signal", ExecRequest{Args: []string{"sh", "-c", "kill -KILL $$"}}, "", result{status: ExitStatus{Code: 137, Signal: 9}}},
		{"cat", ExecRequest{Args: []string{"cat"}, Stdin: true}, "to and fro", result{stdout: "to and fro"}},
		{"timeout kills the group", ExecRequest{Args: []string{"sh", "-c", "sleep 100 & sleep 100"}, Timeout: 100 * time.Millisecond}, "", result{status: ExitStatus{Code: 137, Signal: 9, TimedOut: true}}},
		{"tty", ExecRequest{Args: []string{"sh", "-c", "test -t 1 && echo tty"}, TTY: true}, "", result{stdout: "tty\r\n"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := run(t, a.c, tt.req, tt.stdin); got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
	_, err := a.c.Exec(context.Background(), ExecRequest{Args: []string{"no-such-command-hutch"}})
	agentError(t, err, CodeNotFound)
}

// TestPID1ManyShortCommands races commands that end at once against the
// reaper: each status must reach its command.
func TestPID1ManyShortCommands(t *testing.T) {
	a := startChildAgent(t)
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 4 {
				code := (i + j) % 5
				got := run(t, a.c, ExecRequest{Args: []string{"sh", "-c", "exit " + strconv.Itoa(code)}}, "")
				if got.status.Code != code {
					t.Errorf("exit %d reported as %+v", code, got.status)
				}
			}
		}()
	}
	wg.Wait()
}

func TestPID1ReapsOrphans(t *testing.T) {
	a := startChildAgent(t)
	// The shell exits at once; its background sleeps are orphans that the
	// kernel hands to the agent.
	p, err := a.c.Exec(context.Background(), ExecRequest{Args: []string{"sh", "-c", "for i in 1 2 3 4 5; do sleep 0.5 & echo $!; done"}})
	if err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, p.Stderr)
	sc := bufio.NewScanner(p.Stdout)
	var orphans []int
	for len(orphans) < 5 && sc.Scan() {
		pid, err := strconv.Atoi(sc.Text())
		if err != nil {
			t.Fatalf("output %q", sc.Text())
		}
		orphans = append(orphans, pid)
	}
	if st, err := p.Wait(); err != nil || st.Code != 0 {
		t.Fatalf("shell: %+v, %v", st, err)
	}
	for _, pid := range orphans {
		if _, ppid, ok := procStat(pid); ok && ppid != a.pid {
			t.Errorf("orphan %d has parent %d, not the agent %d", pid, ppid, a.pid)
		}
	}
	io.Copy(io.Discard, p.Stdout) // ends when the sleeps did
	deadline := time.Now().Add(10 * time.Second)
	for _, pid := range orphans {
		for {
			state, ppid, ok := procStat(pid)
			if !ok || ppid != a.pid {
				break // reaped (its pid may already be someone else's)
			}
			if time.Now().After(deadline) {
				t.Fatalf("orphan %d still exists, state %c", pid, state)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if zs := zombiesOf(a.pid); len(zs) > 0 {
		t.Errorf("zombies left: %v", zs)
	}
}

// TestPID1BoundedMemory streams 100 MB of output to a slow reader and
// checks that the agent's memory stays bounded: it buffers at most a window
// per stream, however far ahead the command is.
func TestPID1BoundedMemory(t *testing.T) {
	a := startChildAgent(t)
	run(t, a.c, ExecRequest{Args: []string{"true"}}, "") // warm up
	base := memory(t, a.pid, "VmRSS")
	const total = 100_000_000
	p, err := a.c.Exec(context.Background(), ExecRequest{Args: []string{"head", "-c", strconv.Itoa(total), "/dev/zero"}})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // a reader that does not read at all
	stalled := memory(t, a.pid, "VmRSS")
	n := drainSlowly(t, p.Stdout, 32<<10, func(i int, _ int64) {
		if i%64 == 0 {
			time.Sleep(time.Millisecond) // slow
		}
	})
	if st, err := p.Wait(); err != nil || st.Code != 0 || n != total {
		t.Fatalf("head: %d bytes, %+v, %v", n, st, err)
	}
	peak := memory(t, a.pid, "VmHWM")
	t.Logf("agent RSS: %d KiB before, %d KiB with the reader stalled, peak %d KiB", base>>10, stalled>>10, peak>>10)
	if limit := base + 32<<20; peak > limit {
		t.Errorf("agent peak RSS %d KiB exceeds %d KiB: output is buffered without bound", peak>>10, limit>>10)
	}
}

// TestPID1IgnoresTermination: processes in the sandbox cannot end the
// agent with the signals that would end a Go program.
func TestPID1IgnoresTermination(t *testing.T) {
	a := startChildAgent(t)
	run(t, a.c, ExecRequest{Args: []string{"true"}}, "")
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP} {
		if err := syscall.Kill(a.pid, sig); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(100 * time.Millisecond)
	if got := run(t, a.c, ExecRequest{Args: []string{"echo", "alive"}}, ""); got.stdout != "alive\n" {
		t.Errorf("after signals: %+v", got)
	}
}

func BenchmarkExecRoundTripPID1(b *testing.B) {
	a := startChildAgent(b)
	ctx := context.Background()
	for b.Loop() {
		p, err := a.c.Exec(ctx, ExecRequest{Args: []string{"true"}})
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, p.Stdout)
		io.Copy(io.Discard, p.Stderr)
		if st, err := p.Wait(); err != nil || st.Code != 0 {
			b.Fatalf("true: %+v, %v", st, err)
		}
	}
}

// TestKillAllOnlyAsPID1: an agent that reaps orphans but is not PID 1 of a
// pid namespace (here a subreaper on the host) refuses to kill all, for
// kill(-1) would reach every process of the host its user may signal: its
// command runs on.
func TestKillAllOnlyAsPID1(t *testing.T) {
	a := startChildAgent(t)
	p, err := a.c.Exec(context.Background(), ExecRequest{Args: []string{"sleep", "1000"}})
	if err != nil {
		t.Fatal(err)
	}
	e := agentError(t, a.c.KillAll(context.Background()), CodeInvalid)
	if !strings.Contains(e.Message, "not PID 1") {
		t.Errorf("error %q does not say why", e.Message)
	}
	if state, _, ok := procStat(p.PID); !ok || state == 'Z' {
		t.Fatalf("the command ended (state %c)", state)
	}
	if err := p.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if st, err := p.Wait(); err != nil || st.Signal != int(syscall.SIGKILL) {
		t.Fatalf("wait: %+v, %v", st, err)
	}
}
