package agent

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func TestExec(t *testing.T) {
	noLeaks(t)
	dir := t.TempDir()
	c, _ := agentPair(t, ServeOptions{DefaultDir: dir, DefaultEnv: []string{"A=1", "B=2", "PATH=" + os.Getenv("PATH")}}, false)
	tests := []struct {
		name  string
		req   ExecRequest
		stdin string
		want  result
	}{
		{"echo", ExecRequest{Args: []string{"echo", "hello"}}, "", result{stdout: "hello\n"}},
		{"exit code", ExecRequest{Args: []string{"sh", "-c", "exit 3"}}, "", result{status: ExitStatus{Code: 3}}},
		{"stderr", ExecRequest{Args: []string{"sh", "-c", "echo out; echo oops >&2; exit 1"}}, "", result{stdout: "out\n", stderr: "oops\n", status: ExitStatus{Code: 1}}},
		{"killed", ExecRequest{Args: []string{"sh", "-c", "kill -TERM $$"}}, "", result{status: ExitStatus{Code: 143, Signal: 15}}},
		{"cat", ExecRequest{Args: []string{"cat"}, Stdin: true}, "some input\n", result{stdout: "some input\n"}},
		{"no stdin reads /dev/null", ExecRequest{Args: []string{"cat"}}, "", result{}},
		{"env merged", ExecRequest{Args: []string{"sh", "-c", "echo $A$B$C"}, Env: []string{"B=3", "C=4"}}, "", result{stdout: "134\n"}},
		{"default dir", ExecRequest{Args: []string{"pwd"}}, "", result{stdout: dir + "\n"}},
		{"dir", ExecRequest{Args: []string{"pwd"}, Dir: "/"}, "", result{stdout: "/\n"}},
		{"absolute path", ExecRequest{Args: []string{"/bin/sh", "-c", "echo abs"}}, "", result{stdout: "abs\n"}},
		{"background keeps output open", ExecRequest{Args: []string{"sh", "-c", "(sleep 0.3; echo late) & echo early"}}, "", result{stdout: "early\nlate\n"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := run(t, c, tt.req, tt.stdin)
			if got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestExecOverNetPipe(t *testing.T) {
	noLeaks(t)
	c, _ := agentPair(t, ServeOptions{}, true)
	data := strings.Repeat("0123456789abcdef", 100<<10) // 1.6 MB, several windows
	got := run(t, c, ExecRequest{Args: []string{"cat"}, Stdin: true}, data)
	if got.stdout != data || got.status != (ExitStatus{}) {
		t.Errorf("cat over net.Pipe: %d bytes, status %+v", len(got.stdout), got.status)
	}
}

func TestExecLargeStdin(t *testing.T) {
	noLeaks(t)
	c, _ := agentPair(t, ServeOptions{}, false)
	data := make([]byte, 8<<20)
	rand.Read(data)
	got := run(t, c, ExecRequest{Args: []string{"cat"}, Stdin: true}, string(data))
	if got.stdout != string(data) {
		t.Errorf("cat returned %d bytes, not the %d written", len(got.stdout), len(data))
	}
}

func TestExecStdinAfterExit(t *testing.T) {
	noLeaks(t)
	c, _ := agentPair(t, ServeOptions{}, false)
	p, err := c.Exec(context.Background(), ExecRequest{Args: []string{"true"}, Stdin: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Wait(); err != nil {
		t.Fatal(err)
	}
	// The command never reads: writes end with an error, not a hang.
	_, err = p.Stdin.Write(make([]byte, 4*window))
	if !errors.Is(err, io.ErrClosedPipe) {
		t.Errorf("write to the stdin of an ended command: %v, want io.ErrClosedPipe", err)
	}
	if err := p.Stdin.Close(); err != nil {
		t.Errorf("close stdin: %v", err)
	}
}

func TestExecErrors(t *testing.T) {
	noLeaks(t)
	dir := t.TempDir()
	notExec := filepath.Join(dir, "script")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\necho hi\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	c, _ := agentPair(t, ServeOptions{}, false)
	tests := []struct {
		name   string
		req    ExecRequest
		code   string
		msg    string
		target error
	}{
		{"not found", ExecRequest{Args: []string{"no-such-command-hutch"}}, CodeNotFound, "no-such-command-hutch: command not found", os.ErrNotExist},
		{"not found path", ExecRequest{Args: []string{"/no/such/cmd"}}, CodeNotFound, "/no/such/cmd: command not found", os.ErrNotExist},
		{"not executable", ExecRequest{Args: []string{notExec}}, CodePermissionDenied, notExec + ": permission denied", os.ErrPermission},
		{"directory", ExecRequest{Args: []string{dir}}, CodePermissionDenied, dir + ": permission denied", os.ErrPermission},
		{"not executable in PATH", ExecRequest{Args: []string{"script"}, Env: []string{"PATH=" + dir}}, CodePermissionDenied, "script: permission denied", os.ErrPermission},
		{"directory in PATH is skipped", ExecRequest{Args: []string{"sub"}, Env: []string{"PATH=" + dir}}, CodeNotFound, "sub: command not found", os.ErrNotExist},
		{"empty PATH entry is the working dir", ExecRequest{Args: []string{"script"}, Env: []string{"PATH=:/nonexistent"}, Dir: dir}, CodePermissionDenied, "script: permission denied", os.ErrPermission},
		{"missing dir", ExecRequest{Args: []string{"true"}, Dir: "/no/such/dir"}, CodeNotFound, "chdir /no/such/dir: no such file or directory", os.ErrNotExist},
		{"dir is a file", ExecRequest{Args: []string{"true"}, Dir: notExec}, CodeNotDir, "chdir " + notExec + ": not a directory", syscall.ENOTDIR},
		{"relative dir", ExecRequest{Args: []string{"true"}, Dir: "tmp"}, CodeInvalid, `exec dir "tmp": path is not absolute`, os.ErrInvalid},
		{"no args", ExecRequest{}, CodeInvalid, "exec: no command", os.ErrInvalid},
		{"NUL in args", ExecRequest{Args: []string{"echo", "a\x00b"}}, CodeInvalid, "exec echo: argument or environment contains NUL", os.ErrInvalid},
		{"negative timeout", ExecRequest{Args: []string{"true"}, Timeout: -1}, CodeInvalid, "exec true: negative timeout", os.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := c.Exec(context.Background(), tt.req)
			if err == nil {
				p.Wait()
				t.Fatalf("exec %q started pid %d", tt.req.Args, p.PID)
			}
			e := agentError(t, err, tt.code)
			if e.Message != tt.msg {
				t.Errorf("message %q, want %q", e.Message, tt.msg)
			}
			if !errors.Is(err, tt.target) {
				t.Errorf("errors.Is(%v, %v) is false", err, tt.target)
			}
		})
	}
	// Messages are bounded, whatever the request.
	long := strings.Repeat("c", 20<<10)
	_, err := c.Exec(context.Background(), ExecRequest{Args: []string{long}})
	if e := agentError(t, err, CodeNotFound); len(e.Message) > maxMessage+len("…") || !strings.HasPrefix(e.Message, "ccc") {
		t.Errorf("message of %d bytes", len(e.Message))
	}
	// The client checks some of these itself; the agent checks them too.
	for _, m := range []*request{
		{Op: opExec},
		{Op: opExec, Args: []wstr{"true"}, Dir: "rel"},
		{Op: opExec, Args: []wstr{"true"}, Timeout: -5},
		{Op: "frobnicate"},
	} {
		_, _, err := c.roundTrip(context.Background(), m, nil)
		agentError(t, err, CodeInvalid)
	}
}

func TestSignal(t *testing.T) {
	noLeaks(t)
	c, _ := agentPair(t, ServeOptions{}, false)
	ctx := context.Background()
	p, err := c.Exec(ctx, ExecRequest{Args: []string{"sleep", "100"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("signal: %v", err)
	}
	st, err := p.Wait()
	if err != nil || st != (ExitStatus{Code: 143, Signal: 15}) {
		t.Errorf("after SIGTERM: %+v, %v", st, err)
	}
	if err := p.Signal(syscall.SIGTERM); !errors.Is(err, os.ErrProcessDone) {
		t.Errorf("signal after exit: %v, want os.ErrProcessDone", err)
	}
	// Out of range signals are refused by the agent.
	q, err := c.Exec(ctx, ExecRequest{Args: []string{"sleep", "100"}})
	if err != nil {
		t.Fatal(err)
	}
	agentError(t, q.Signal(syscall.Signal(200)), CodeInvalid)
	agentError(t, q.Resize(10, 10), CodeInvalid)
	if err := q.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if st, _ := q.Wait(); st.Signal != 9 {
		t.Errorf("after SIGKILL: %+v", st)
	}
}

// readAllWithin reads r to its end, failing the test if that takes longer
// than d (a process still holds the other end).
func readAllWithin(t *testing.T, r io.Reader, d time.Duration) string {
	t.Helper()
	type res struct {
		b   []byte
		err error
	}
	ch := make(chan res, 1)
	go func() {
		b, err := io.ReadAll(r)
		ch <- res{b, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("read: %v", r.err)
		}
		return string(r.b)
	case <-time.After(d):
		t.Fatalf("output still open after %v", d)
	}
	return ""
}

func TestSignalHitsProcessGroup(t *testing.T) {
	noLeaks(t)
	c, _ := agentPair(t, ServeOptions{}, false)
	p, err := c.Exec(context.Background(), ExecRequest{Args: []string{"sh", "-c", "sleep 100 & sleep 100 & echo started; wait"}})
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 8)
	if n, err := io.ReadFull(p.Stdout, buf); n != 8 || err != nil {
		t.Fatalf("read: %q %v", buf[:n], err)
	}
	if err := p.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	st, err := p.Wait()
	if err != nil || st.Signal != 9 || st.Code != 137 || st.TimedOut {
		t.Errorf("status %+v, %v", st, err)
	}
	// Both sleeps held stdout: it ends only if they died with the shell.
	readAllWithin(t, p.Stdout, 5*time.Second)
	readAllWithin(t, p.Stderr, 5*time.Second)
}

func TestTimeout(t *testing.T) {
	noLeaks(t)
	c, _ := agentPair(t, ServeOptions{}, false)
	start := time.Now()
	p, err := c.Exec(context.Background(), ExecRequest{Args: []string{"sh", "-c", "sleep 100 & sleep 100"}, Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	st, err := p.Wait()
	if err != nil || st != (ExitStatus{Code: 137, Signal: 9, TimedOut: true}) {
		t.Errorf("status %+v, %v", st, err)
	}
	if d := time.Since(start); d < 200*time.Millisecond || d > 10*time.Second {
		t.Errorf("timed out after %v", d)
	}
	readAllWithin(t, p.Stdout, 5*time.Second)
	// A command that ends in time is not marked.
	got := run(t, c, ExecRequest{Args: []string{"true"}, Timeout: time.Minute}, "")
	if got.status != (ExitStatus{}) {
		t.Errorf("quick command: %+v", got.status)
	}
}

func TestTTY(t *testing.T) {
	noLeaks(t)
	c, _ := agentPair(t, ServeOptions{}, false)
	t.Run("isatty", func(t *testing.T) {
		got := run(t, c, ExecRequest{Args: []string{"sh", "-c", "test -t 0 && test -t 1 && test -t 2 && echo tty; tty; echo $TERM"}, TTY: true}, "")
		if !strings.Contains(got.stdout, "tty\r\n/dev/pts/") || !strings.Contains(got.stdout, "xterm-256color") || got.stderr != "" || got.status.Code != 0 {
			t.Errorf("got %+v", got)
		}
	})
	t.Run("size", func(t *testing.T) {
		got := run(t, c, ExecRequest{Args: []string{"stty", "size"}, TTY: true, Rows: 30, Cols: 100}, "")
		if got.stdout != "30 100\r\n" {
			t.Errorf("stty size: %q", got.stdout)
		}
		got = run(t, c, ExecRequest{Args: []string{"stty", "size"}, TTY: true}, "")
		if got.stdout != "24 80\r\n" {
			t.Errorf("stty size by default: %q", got.stdout)
		}
	})
	t.Run("resize", func(t *testing.T) {
		p, err := c.Exec(context.Background(), ExecRequest{Args: []string{"sh", "-c", "read line; stty size; echo got $line"}, TTY: true, Stdin: true})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Resize(40, 120); err != nil {
			t.Fatalf("resize: %v", err)
		}
		if _, err := io.WriteString(p.Stdin, "go\n"); err != nil {
			t.Fatal(err)
		}
		out := readAllWithin(t, p.Stdout, 10*time.Second)
		if !strings.Contains(out, "40 120\r\n") || !strings.Contains(out, "got go") {
			t.Errorf("output %q", out)
		}
		if st, err := p.Wait(); err != nil || st.Code != 0 {
			t.Errorf("status %+v, %v", st, err)
		}
	})
	t.Run("close stdin sends EOF", func(t *testing.T) {
		got := run(t, c, ExecRequest{Args: []string{"cat"}, TTY: true, Stdin: true}, "line\n")
		if got.stdout != "line\r\nline\r\n" || got.status.Code != 0 { // echoed, then cat's copy
			t.Errorf("got %+v", got)
		}
	})
}

func TestConcurrentExecs(t *testing.T) {
	noLeaks(t)
	c, _ := agentPair(t, ServeOptions{}, false)
	const n = 50
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got := run(t, c, ExecRequest{Args: []string{"sh", "-c", "sleep 0.1; echo $0; exit $(($0 % 7))", strconv.Itoa(i)}}, "")
			if got.stdout != strconv.Itoa(i)+"\n" || got.status.Code != i%7 {
				errs <- fmt.Errorf("command %d: %+v", i, got)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestListProcesses(t *testing.T) {
	noLeaks(t)
	c, _ := agentPair(t, ServeOptions{}, false)
	ctx := context.Background()
	before := time.Now()
	var ps []*Process
	for _, arg := range []string{"100", "101"} {
		p, err := c.Exec(ctx, ExecRequest{Args: []string{"sleep", arg}})
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	list, err := c.ListProcesses(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 {
		t.Fatalf("listed %+v", list)
	}
	for i, info := range list {
		if info.PID != ps[i].PID || !slices.Equal(info.Args, []string{"sleep", strconv.Itoa(100 + i)}) || info.Started.Before(before.Add(-time.Second)) {
			t.Errorf("process %d: %+v", i, info)
		}
	}
	// Arguments are listed up to 4 KiB.
	long, err := c.Exec(ctx, ExecRequest{Args: []string{"sh", "-c", "sleep 102", strings.Repeat("a", 5000)}})
	if err != nil {
		t.Fatal(err)
	}
	list, err = c.ListProcesses(ctx)
	if err != nil || len(list) != 3 || list[2].PID != long.PID || !slices.Equal(list[2].Args, []string{"sh", "-c", "sleep 102", strings.Repeat("a", maxPSArgs-13)}) {
		t.Errorf("with long arguments: %d processes, %v", len(list), err)
	}
	long.Signal(syscall.SIGKILL)
	long.Wait()
	ps[0].Signal(syscall.SIGKILL)
	ps[0].Wait()
	list, err = c.ListProcesses(ctx)
	if err != nil || len(list) != 1 || list[0].PID != ps[1].PID {
		t.Errorf("after one ended: %+v, %v", list, err)
	}
	ps[1].Signal(syscall.SIGKILL)
	ps[1].Wait()
}

func TestExecCanceled(t *testing.T) {
	noLeaks(t)
	c, _ := agentPair(t, ServeOptions{}, false)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.Exec(ctx, ExecRequest{Args: []string{"sleep", "100"}}); !errors.Is(err, context.Canceled) {
		t.Errorf("exec with a canceled context: %v", err)
	}
}

// TestFlowControl checks that the agent reads a command's output only as
// fast as the client consumes it: a command writing 100 MB to a slow reader
// never makes either side buffer more than a window.
func TestFlowControl(t *testing.T) {
	noLeaks(t)
	c, s := agentPair(t, ServeOptions{}, false)
	const total = 100_000_000
	p, err := c.Exec(context.Background(), ExecRequest{Args: []string{"head", "-c", strconv.Itoa(total), "/dev/zero"}})
	if err != nil {
		t.Fatal(err)
	}
	check := func(consumed int64) {
		t.Helper()
		if read := s.outRead.Load(); read > consumed+window {
			t.Fatalf("the agent read %d bytes of output, the client consumed %d: more than a window (%d) ahead", read, consumed, window)
		}
	}
	time.Sleep(300 * time.Millisecond) // nobody reads
	check(0)
	consumed := drainSlowly(t, p.Stdout, 16<<10, func(i int, consumed int64) {
		if consumed < 4<<20 && i%16 == 0 {
			time.Sleep(time.Millisecond) // slow at first
			check(consumed)
		}
	})
	check(consumed)
	if consumed != total {
		t.Errorf("read %d bytes, want %d", consumed, total)
	}
	if st, err := p.Wait(); err != nil || st.Code != 0 {
		t.Errorf("status %+v, %v", st, err)
	}
}

// TestCloseEndsEverything closes the client while commands run and reads
// block: every call fails, Serve returns nil, the commands are killed.
func TestCloseEndsEverything(t *testing.T) {
	noLeaks(t)
	c, _ := agentPair(t, ServeOptions{}, false)
	ctx := context.Background()
	p, err := c.Exec(ctx, ExecRequest{Args: []string{"sleep", "100"}})
	if err != nil {
		t.Fatal(err)
	}
	q, err := c.Exec(ctx, ExecRequest{Args: []string{"cat"}, Stdin: true})
	if err != nil {
		t.Fatal(err)
	}
	readErr := make(chan error, 1)
	go func() {
		_, err := io.ReadAll(p.Stdout)
		readErr <- err
	}()
	time.Sleep(50 * time.Millisecond)
	if err := c.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if err := <-readErr; !errors.Is(err, ErrClosed) {
		t.Errorf("read after close: %v, want ErrClosed", err)
	}
	if _, err := p.Wait(); !errors.Is(err, ErrClosed) {
		t.Errorf("wait after close: %v", err)
	}
	if _, err := q.Stdin.Write([]byte("x")); !errors.Is(err, ErrClosed) {
		t.Errorf("write after close: %v", err)
	}
	if _, err := c.Stat(ctx, "/"); !errors.Is(err, ErrClosed) {
		t.Errorf("stat after close: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("second close: %v", err)
	}
	// The agent saw its connection end and killed its commands.
	for _, pid := range []int{p.PID, q.PID} {
		deadline := time.Now().Add(10 * time.Second)
		for syscall.Kill(pid, 0) != syscall.ESRCH {
			if time.Now().After(deadline) {
				t.Fatalf("process %d still exists after the client closed", pid)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

func BenchmarkExecRoundTrip(b *testing.B) {
	c, _ := agentPair(b, ServeOptions{}, false)
	ctx := context.Background()
	req := ExecRequest{Args: []string{"true"}}
	var out bytes.Buffer
	for b.Loop() {
		p, err := c.Exec(ctx, req)
		if err != nil {
			b.Fatal(err)
		}
		out.Reset()
		io.Copy(&out, p.Stdout)
		io.Copy(&out, p.Stderr)
		if st, err := p.Wait(); err != nil || st.Code != 0 {
			b.Fatalf("true: %+v, %v", st, err)
		}
	}
}

// TestOutputBeforeExit: everything a command wrote before it ended reaches
// the client before its exit, even when the client reads late and the
// agent held output back for lack of credit when the command ended (the
// exit used to be sent after a fixed grace, and the rest was lost).
func TestOutputBeforeExit(t *testing.T) {
	noLeaks(t)
	c, _ := agentPair(t, ServeOptions{}, false)
	const total = window + 60<<10 // the window, and more than fits a pipe's default buffer past it
	p, err := c.Exec(context.Background(), ExecRequest{Args: []string{"sh", "-c", "head -c " + strconv.Itoa(total) + " /dev/zero; (sleep 3; echo late) &"}})
	if err != nil {
		t.Fatal(err)
	}
	waited := make(chan struct{})
	go func() { _, _ = p.Wait(); close(waited) }()
	// Nobody reads: the agent is out of credit when the command ends, and
	// holds the exit back until the client took the rest.
	select {
	case <-waited:
		t.Fatal("the exit came while output the command wrote before it was still held back")
	case <-time.After(4 * exitGrace):
	}
	out, err := io.ReadAll(p.Stdout)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) < total {
		t.Errorf("read %d bytes before the end, want %d", len(out), total)
	}
	if st, err := p.Wait(); err != nil || st.Code != 0 {
		t.Errorf("status %+v, %v", st, err)
	}
}

// TestUsage: the agent answers what its cgroup used — the CPU time of the
// commands it ran included — as a pod's agent answers for its container.
func TestUsage(t *testing.T) {
	c, _ := agentPair(t, ServeOptions{}, false)
	ctx := context.Background()
	before, err := c.Usage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if before.CPU <= 0 || before.Memory <= 0 {
		t.Fatalf("usage %+v: no CPU time or memory", before)
	}
	if r := run(t, c, ExecRequest{Args: []string{"sh", "-c", "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done"}}, ""); r.status.Code != 0 {
		t.Fatalf("the busy loop: %+v", r)
	}
	after, err := c.Usage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after.CPU-before.CPU < int64(10*time.Millisecond) {
		t.Errorf("CPU time %d ns, then %d ns after a busy loop", before.CPU, after.CPU)
	}
}
