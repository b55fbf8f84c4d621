package kernel

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// testTimeout is generous: the machines running the tests are busy, and a
// Python kernel takes seconds to start there.
const testTimeout = 2 * time.Minute

// python is Debian's Python, which python3-ipykernel installs into (a
// python3 earlier on PATH may be another one).
const python = "/usr/bin/python3"

// needIPyKernel skips the test (or fails it under HUTCH_TEST_ROOT=1) when
// python3 has no ipykernel.
func needIPyKernel(t testing.TB, modules ...string) {
	t.Helper()
	for _, m := range append([]string{"ipykernel"}, modules...) {
		err := exec.Command(python, "-c", "import "+m).Run()
		testutil.Need(t, err == nil, python+" cannot import "+m+" (Debian: python3-"+m+")")
	}
}

// startKernel starts an ipykernel for one test and closes it at the end.
func startKernel(t testing.TB, cfg Config) *Kernel {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if cfg.Argv == nil {
		cfg.Argv = []string{python, "-m", "ipykernel_launcher", "-f", ConnectionFileArg, "--InteractiveShell.colors=NoColor"}
	}
	k, err := Start(ctx, cfg)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { k.Close() })
	return k
}

// run executes code and returns its outputs and reply.
func run(t testing.TB, k *Kernel, code string) ([]Output, Reply) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	var outs []Output
	r, err := k.Execute(ctx, code, ExecuteOptions{}, func(o Output) { outs = append(outs, o) })
	if err != nil {
		t.Fatalf("Execute(%q): %v", code, err)
	}
	return outs, r
}

// wantStdout runs code and checks what it printed.
func wantStdout(t testing.TB, k *Kernel, code, want string) {
	t.Helper()
	if outs, _ := run(t, k, code); stream(outs, "stdout") != want {
		t.Errorf("%q printed %q, want %q (outputs %#v)", code, stream(outs, "stdout"), want, outs)
	}
}

func results(outs []Output) (main []*Result, display []*Result) {
	for _, o := range outs {
		if r, ok := o.(*Result); ok {
			if r.Main {
				main = append(main, r)
			} else {
				display = append(display, r)
			}
		}
	}
	return
}

func stream(outs []Output, name string) string {
	var b strings.Builder
	for _, o := range outs {
		if s, ok := o.(*Stream); ok && s.Name == name {
			b.WriteString(s.Text)
		}
	}
	return b.String()
}

func firstError(outs []Output) *Error {
	for _, o := range outs {
		if e, ok := o.(*Error); ok {
			return e
		}
	}
	return nil
}

func TestPython(t *testing.T) {
	needIPyKernel(t)
	dir := t.TempDir()
	k := startKernel(t, Config{Dir: dir, Env: append(os.Environ(), "HUTCH_KERNEL_TEST=from-env")})

	t.Run("value", func(t *testing.T) {
		outs, r := run(t, k, "1+1")
		main, _ := results(outs)
		if len(main) != 1 {
			t.Fatalf("want one execute_result, got %#v", outs)
		}
		if s, _ := main[0].Text("text/plain"); s != "2" {
			t.Errorf("text/plain = %q, want 2", s)
		}
		if r.Status != "ok" || r.ExecutionCount == 0 || main[0].ExecutionCount != r.ExecutionCount {
			t.Errorf("reply %+v, result count %d", r, main[0].ExecutionCount)
		}
		var in *Input
		for _, o := range outs {
			if i, ok := o.(*Input); ok {
				in = i
			}
		}
		if in == nil || in.ExecutionCount != r.ExecutionCount {
			t.Errorf("execute_input %+v, reply count %d", in, r.ExecutionCount)
		}
	})
	t.Run("stdout", func(t *testing.T) {
		outs, _ := run(t, k, "print('hello')\nimport sys; print('oops', file=sys.stderr)")
		if got := stream(outs, "stdout"); got != "hello\n" {
			t.Errorf("stdout %q", got)
		}
		if got := stream(outs, "stderr"); got != "oops\n" {
			t.Errorf("stderr %q", got)
		}
		for _, o := range outs {
			if s, ok := o.(*Stream); ok && s.Time.IsZero() {
				t.Errorf("stream without a time: %+v", s)
			}
		}
	})
	t.Run("state, dir and env", func(t *testing.T) {
		run(t, k, "x = 41")
		outs, _ := run(t, k, "import os; print(x + 1, os.getcwd(), os.environ['HUTCH_KERNEL_TEST'])")
		if got, want := stream(outs, "stdout"), "42 "+dir+" from-env\n"; got != want {
			t.Errorf("stdout %q, want %q", got, want)
		}
	})
	t.Run("exception", func(t *testing.T) {
		outs, r := run(t, k, "raise ValueError('bad value')")
		e := firstError(outs)
		if e == nil || e.Name != "ValueError" || e.Value != "bad value" || len(e.Traceback) == 0 {
			t.Fatalf("error output %+v in %#v", e, outs)
		}
		if !strings.Contains(strings.Join(e.Traceback, "\n"), "ValueError") {
			t.Errorf("traceback %q", e.Traceback)
		}
		if r.Status != "error" || r.Error == nil || r.Error.Name != "ValueError" {
			t.Errorf("reply %+v", r)
		}
		// The kernel goes on, also right after an error (ipykernel aborts
		// requests arriving just after one when stop_on_error is set).
		for range 5 {
			run(t, k, "1/0")
			if outs, r := run(t, k, "print(x)"); stream(outs, "stdout") != "41\n" {
				t.Fatalf("right after an exception: %#v %+v", outs, r)
			}
		}
	})
	t.Run("silent", func(t *testing.T) {
		_, r := run(t, k, "y = 5\ny")
		before := r.ExecutionCount
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		var silent []Output
		if _, err := k.Execute(ctx, "z = y * 2\nz", ExecuteOptions{Silent: true}, func(o Output) { silent = append(silent, o) }); err != nil {
			t.Fatal(err)
		}
		if len(silent) != 0 {
			t.Errorf("silent execution gave %#v", silent)
		}
		outs, r := run(t, k, "z")
		if main, _ := results(outs); len(main) != 1 || main[0].Data["text/plain"] != "10" || r.ExecutionCount != before+1 {
			t.Errorf("after silent: %#v, count %d then %d", outs, before, r.ExecutionCount)
		}
	})
}

func TestPythonPlotAndDataFrame(t *testing.T) {
	needIPyKernel(t, "matplotlib", "pandas")
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "MPLBACKEND=") {
			env = append(env, kv)
		}
	}
	k := startKernel(t, Config{Env: env})

	// ipykernel's own default backend (matplotlib-inline) turns a shown
	// figure into display_data with image/png.
	outs, _ := run(t, k, "import matplotlib.pyplot as plt; plt.plot([1,2]); plt.show()")
	if !hasPNG(outs) {
		t.Errorf("default backend: no image/png display_data in %#v", outs)
	}
	// Forcing Agg replaces that backend: plt.show() then displays nothing
	// (so a server must leave the backend alone).
	outs, _ = run(t, k, "import matplotlib; matplotlib.use('Agg'); import matplotlib.pyplot as plt; plt.plot([1,2]); plt.show()")
	if hasPNG(outs) {
		t.Logf("with Agg forced this ipykernel still displays the figure")
	}

	outs, _ = run(t, k, "import pandas as pd\npd.DataFrame({'a': [1, 2, 3], 'b': ['x', 'y', 'z']})")
	main, _ := results(outs)
	if len(main) != 1 {
		t.Fatalf("DataFrame: %#v", outs)
	}
	html, _ := main[0].Text("text/html")
	plain, _ := main[0].Text("text/plain")
	if !strings.Contains(html, "<table") || !strings.Contains(plain, "a  b") {
		t.Errorf("DataFrame text/html %q, text/plain %q", html, plain)
	}
}

func hasPNG(outs []Output) bool {
	_, display := results(outs)
	for _, r := range display {
		if s, ok := r.Text("image/png"); ok && s != "" {
			return true
		}
	}
	return false
}

func TestInterrupt(t *testing.T) {
	needIPyKernel(t)
	k := startKernel(t, Config{})
	run(t, k, "kept = 'yes'")

	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	started := make(chan struct{})
	var once sync.Once
	var outs []Output
	var reply Reply
	var err error
	done := make(chan struct{})
	go func() {
		defer close(done)
		reply, err = k.Execute(ctx, "print('looping', flush=True)\nwhile True: pass", ExecuteOptions{}, func(o Output) {
			outs = append(outs, o)
			if _, ok := o.(*Stream); ok {
				once.Do(func() { close(started) })
			}
		})
	}()
	select {
	case <-started:
	case <-done:
		t.Fatalf("execution ended before the interrupt: %v %#v", err, outs)
	}
	if err := k.Interrupt(); err != nil {
		t.Fatalf("Interrupt: %v", err)
	}
	<-done
	if err != nil {
		t.Fatalf("Execute: %v", err)
	}
	if e := firstError(outs); e == nil || e.Name != "KeyboardInterrupt" {
		t.Errorf("want KeyboardInterrupt, got %#v", outs)
	}
	if reply.Status != "error" {
		t.Errorf("reply %+v", reply)
	}
	wantStdout(t, k, "print(kept)", "yes\n")
	// The interrupt reaches no later execution, nor does one asked while
	// nothing runs.
	wantStdout(t, k, "s = 0\nfor i in range(2000000): s += i % 3\nprint(s)", "1999999\n")
	if err := k.Interrupt(); err != nil {
		t.Fatalf("Interrupt with nothing running: %v", err)
	}
	wantStdout(t, k, "import time\ntime.sleep(0.3)\nprint(kept)", "yes\n")
}

func TestRestart(t *testing.T) {
	needIPyKernel(t)
	k := startKernel(t, Config{})
	run(t, k, "gone = 1")
	oldPid, oldFile := k.Pid(), k.ConnectionFile()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if err := k.Restart(ctx); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	outs, _ := run(t, k, "gone")
	if e := firstError(outs); e == nil || e.Name != "NameError" {
		t.Errorf("want NameError after restart, got %#v", outs)
	}
	if k.Pid() == oldPid || processExists(oldPid) {
		t.Errorf("old kernel pid %d still there (new %d)", oldPid, k.Pid())
	}
	if _, err := os.Stat(oldFile); !os.IsNotExist(err) {
		t.Errorf("old connection file %s: %v", oldFile, err)
	}
}

func TestKernelDiesMidExecution(t *testing.T) {
	needIPyKernel(t)
	k := startKernel(t, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	_, err := k.Execute(ctx, "import os, signal\nprint('bye', flush=True)\nos.kill(os.getpid(), signal.SIGKILL)", ExecuteOptions{}, nil)
	if !errors.Is(err, ErrDied) {
		t.Fatalf("want ErrDied, got %v", err)
	}
	// The Kernel can be brought back.
	if err := k.Restart(ctx); err != nil {
		t.Fatalf("Restart after death: %v", err)
	}
	wantStdout(t, k, "print('back')", "back\n")
}

func TestClose(t *testing.T) {
	needIPyKernel(t)
	k := startKernel(t, Config{})
	// A child of the kernel in its process group goes too.
	outs, _ := run(t, k, "import subprocess; p = subprocess.Popen(['sleep', '600']); print(p.pid)")
	var child int
	if _, err := fmt.Sscan(stream(outs, "stdout"), &child); err != nil {
		t.Fatalf("child pid: %v in %#v", err, outs)
	}
	pid, file := k.Pid(), k.ConnectionFile()
	if err := k.Close(); err != nil {
		t.Fatal(err)
	}
	if processExists(pid) {
		t.Errorf("kernel pid %d still exists after Close", pid)
	}
	// The orphaned child is reaped by init, not by us: wait for it to go.
	deadline := time.Now().Add(testTimeout)
	for processExists(child) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if processExists(child) {
		t.Errorf("kernel's child %d still exists after Close", child)
	}
	if _, err := os.Stat(file); !os.IsNotExist(err) {
		t.Errorf("connection file %s: %v", file, err)
	}
	if _, err := os.Stat(strings.TrimSuffix(file, "/connection.json")); !os.IsNotExist(err) {
		t.Errorf("connection dir: %v", err)
	}
	if _, err := k.Execute(context.Background(), "1", ExecuteOptions{}, nil); !errors.Is(err, ErrClosed) {
		t.Errorf("Execute after Close: %v", err)
	}
}

func TestStartFails(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	_, err := Start(ctx, Config{Argv: []string{"sh", "-c", "echo no kernel here >&2; exit 3"}})
	if !errors.Is(err, ErrDied) || !strings.Contains(err.Error(), "no kernel here") {
		t.Fatalf("want ErrDied naming the output, got %v", err)
	}
}

// processExists reports whether pid is a live (not zombie) process.
func processExists(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// state is the field after the parenthesised command name
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

func BenchmarkExecute(b *testing.B) {
	needIPyKernel(b)
	k := startKernel(b, Config{})
	run(b, k, "1+1")
	b.ResetTimer()
	for b.Loop() {
		run(b, k, "1+1")
	}
}

func TestMessageLimit(t *testing.T) {
	needIPyKernel(t)
	k := startKernel(t, Config{MaxMessageBytes: 1 << 20})
	outs, r := run(t, k, "from IPython.display import display\ndisplay({'text/plain': 'x' * (2 << 20)}, raw=True)\nprint('after')")
	var dropped *Dropped
	for _, o := range outs {
		if d, ok := o.(*Dropped); ok {
			dropped = d
		}
		if res, ok := o.(*Result); ok {
			t.Errorf("oversized result delivered: %d bytes", len(res.Data["text/plain"].(string)))
		}
	}
	if dropped == nil || dropped.Size <= 1<<20 || !strings.Contains(dropped.Reason, "limit") {
		t.Errorf("want a Dropped marker, got %#v", outs)
	}
	if r.Status != "ok" || stream(outs, "stdout") != "after\n" {
		t.Errorf("execution around the drop: %+v %#v", r, outs)
	}
}

func TestFloodSlowConsumer(t *testing.T) {
	needIPyKernel(t)
	k := startKernel(t, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	var b strings.Builder
	n := 0
	_, err := k.Execute(ctx, "for i in range(5000): print(i, flush=True)", ExecuteOptions{}, func(o Output) {
		if s, ok := o.(*Stream); ok {
			b.WriteString(s.Text)
			if n++; n%50 == 0 {
				time.Sleep(time.Millisecond) // a consumer slower than the kernel
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(b.String(), "\n4999\n") {
		t.Errorf("output ends %q", b.String()[max(0, b.Len()-40):])
	}
}

// TestIdleDropped: an execution whose idle status the kernel never
// sends (dropped from a full queue; here the kernel is made to skip it)
// ends once its reply is in and iopub stayed quiet for idleGrace, saying
// so; the next execution runs as usual.
func TestIdleDropped(t *testing.T) {
	needIPyKernel(t)
	defer func(d time.Duration) { idleGrace = d }(idleGrace)
	idleGrace = time.Second
	k := startKernel(t, Config{})
	outs, r := run(t, k, `k = get_ipython().kernel
publish = k._publish_status
def skip_idle(status, *args, **kwargs):
    if status == "idle":
        k._publish_status = publish
        return
    return publish(status, *args, **kwargs)
k._publish_status = skip_idle
print("ran", flush=True)`)
	if r.Status != "ok" || stream(outs, "stdout") != "ran\n" {
		t.Errorf("the execution: %+v %#v", r, outs)
	}
	var dropped *Dropped
	for _, o := range outs {
		if d, ok := o.(*Dropped); ok {
			dropped = d
		}
	}
	if dropped == nil || dropped.MsgType != "status" || !strings.Contains(dropped.Reason, "no idle status") {
		t.Errorf("want a Dropped status, got %#v", outs)
	}
	wantStdout(t, k, "print('next')", "next\n")
}

func TestExecuteContextEnds(t *testing.T) {
	needIPyKernel(t)
	k := startKernel(t, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	_, err := k.Execute(ctx, "print('spinning', flush=True)\nwhile True: pass", ExecuteOptions{}, func(o Output) {
		if _, ok := o.(*Stream); ok {
			cancel()
		}
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("want context.Canceled, got %v", err)
	}
	// The loop was interrupted: the next execution runs.
	wantStdout(t, k, "print('next')", "next\n")
}

func TestCloseMidExecution(t *testing.T) {
	needIPyKernel(t)
	k := startKernel(t, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	_, err := k.Execute(ctx, "print('busy', flush=True)\nimport time\nwhile True: time.sleep(1)", ExecuteOptions{}, func(o Output) {
		if _, ok := o.(*Stream); ok {
			go k.Close()
		}
	})
	if !errors.Is(err, ErrDied) {
		t.Fatalf("want ErrDied, got %v", err)
	}
}

func TestConcurrentExecutesTakeTurns(t *testing.T) {
	needIPyKernel(t)
	k := startKernel(t, Config{})
	var wg sync.WaitGroup
	got := make([]string, 4)
	for i := range got {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			var outs []Output
			if _, err := k.Execute(ctx, "import time; time.sleep(0.05); print("+strconv.Itoa(i)+")", ExecuteOptions{}, func(o Output) { outs = append(outs, o) }); err != nil {
				t.Errorf("execution %d: %v", i, err) // not Fatal: another goroutine
			}
			got[i] = stream(outs, "stdout")
		})
	}
	wg.Wait()
	for i, s := range got {
		if want := strconv.Itoa(i) + "\n"; s != want {
			t.Errorf("execution %d printed %q, want %q", i, s, want)
		}
	}
}

func TestOOMScoreAdj(t *testing.T) {
	needIPyKernel(t)
	k := startKernel(t, Config{OOMScoreAdj: 900})
	b, err := os.ReadFile("/proc/" + strconv.Itoa(k.Pid()) + "/oom_score_adj")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(b)); got != "900" {
		t.Fatalf("the kernel's oom_score_adj is %s, want 900", got)
	}
}
