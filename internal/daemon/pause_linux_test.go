package daemon

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/agent"
	"github.com/hutch-sandbox/hutch/internal/cgroups/cgroupstest"
	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/store"
	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// cpuTicks is the CPU time host process pid has used, in clock ticks
// (utime + stime of /proc/PID/stat), -1 if it is gone.
func cpuTicks(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return -1
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		return -1
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return u + s
}

// startBusy starts a process in sandbox id that uses the CPU forever, in
// bursts (a spinning one took a core from the rest of the suite for as
// long as the test ran), outside the command's session; it returns its
// host pid.
func startBusy(t *testing.T, m *Manager, id string) int {
	t.Helper()
	marker := fmt.Sprintf("hutch-busy-%d-%s", os.Getpid(), id)
	mustRun(t, m, "", id, fmt.Sprintf(`setsid sh -c 'while :; do i=0; while [ $i -lt 3000 ]; do i=$((i+1)); done; sleep 0.05; done; : %s' >/dev/null 2>&1 </dev/null &`, marker))
	var pids []int
	if !testutil.Eventually(time.Minute, func() bool { pids = withMarker(t, marker); return len(pids) == 1 }) {
		t.Fatalf("the busy process did not start (%v)", pids)
	}
	return pids[0]
}

// assertNoCgroups checks that the directories dirs are gone.
func assertNoCgroups(t *testing.T, dirs []string) {
	t.Helper()
	for _, d := range dirs {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("cgroup %s remains (stat: %v)", d, err)
		}
	}
}

// advances reports whether host process pid uses CPU time within d.
func advances(pid int, d time.Duration) bool {
	t0 := cpuTicks(pid)
	return testutil.Eventually(d, func() bool { return cpuTicks(pid) > t0 })
}

// TestPauseResume: a paused sandbox's processes stop, commands and files
// are refused at once, a second pause and another tenant's pause are
// refused; resumed, they go on; destroyed while paused, nothing remains.
func TestPauseResume(t *testing.T) {
	t.Parallel()
	m := newManager(t, Config{})
	ctx := testCtx(t)
	info := mustCreate(t, m, "a", CreateRequest{})
	pid1 := hostPID(t, m, info.ID)
	dirs := cgroupstest.SandboxDirs(t, pid1)
	busy := startBusy(t, m, info.ID)
	if !advances(busy, time.Minute) {
		t.Fatal("the busy process uses no CPU time")
	}

	if _, err := m.Pause(ctx, "b", info.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("another tenant's pause: %v, want ErrNotFound", err)
	}
	if _, err := m.Resume(ctx, "a", info.ID); !errors.Is(err, ErrConflict) {
		t.Errorf("resume a running sandbox: %v, want ErrConflict", err)
	}
	got, err := m.Pause(ctx, "a", info.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != store.StatePaused {
		t.Errorf("pause: state %q, want paused", got.State)
	}
	if got, err := m.Get(ctx, "a", info.ID); err != nil || got.State != store.StatePaused {
		t.Errorf("get: %+v, %v; want paused", got, err)
	}
	if list, err := m.List(ctx, "a", nil, store.StatePaused); err != nil || len(list) != 1 || list[0].ID != info.ID {
		t.Errorf("list paused: %+v, %v", list, err)
	}
	if counts, err := m.Counts(ctx); err != nil || counts[nsState(store.StatePaused)] != 1 {
		t.Errorf("counts %v, %v; want 1 paused", counts, err)
	}
	t0 := cpuTicks(busy)
	time.Sleep(500 * time.Millisecond)
	if t1 := cpuTicks(busy); t1 != t0 {
		t.Errorf("paused, the busy process went on from %d to %d ticks", t0, t1)
	}
	start := time.Now()
	_, err = m.Agent(ctx, "a", info.ID)
	if !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "paused") {
		t.Errorf("agent while paused: %v, want ErrConflict saying it is paused", err)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("agent while paused took %s: it waited for the sandbox instead of refusing", d)
	}
	if _, err := m.Pause(ctx, "a", info.ID); !errors.Is(err, ErrConflict) {
		t.Errorf("pause twice: %v, want ErrConflict", err)
	}

	got, err = m.Resume(ctx, "a", info.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != store.StateRunning {
		t.Errorf("resume: state %q, want running", got.State)
	}
	if !advances(busy, time.Minute) {
		t.Error("resumed, the busy process uses no CPU time")
	}
	if out := mustRun(t, m, "a", info.ID, "echo ok"); out != "ok\n" {
		t.Errorf("exec after resume: %q", out)
	}

	if _, err := m.Pause(ctx, "a", info.ID); err != nil {
		t.Fatal(err)
	}
	if err := m.Destroy(ctx, "a", info.ID); err != nil {
		t.Fatalf("destroy a paused sandbox: %v", err)
	}
	assertEnded(t, m, info.ID, pid1, time.Second)
	if !gone(busy) {
		t.Errorf("the busy process (host pid %d) remains", busy)
	}
	assertNoCgroups(t, dirs)

	ch, err := m.Events(ctx, "a", info.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for e := range ch {
		types = append(types, e.Type)
	}
	want := []string{EventCreated, EventStarted, EventExec, EventExit, EventPaused, EventResumed, EventExec, EventExit, EventPaused, EventDestroyed, EventEnded}
	if got := strings.Join(types, ","); !strings.Contains(got, "paused,resumed") || !strings.HasSuffix(got, "paused,destroyed,ended") {
		t.Errorf("events %v, want %v (exec events as they come)", types, want)
	}
}

// TestPausedTimeout: the timeout of a paused sandbox still ends it. Its
// memory limit puts it in a cgroup v1 hierarchy too on a hybrid machine.
func TestPausedTimeout(t *testing.T) {
	t.Parallel()
	m := newManager(t, Config{})
	ctx := testCtx(t)
	var r CreateRequest
	r.Timeout = 2 * time.Second
	r.Policy.Resources.MemoryBytes = 512 << 20
	info := mustCreate(t, m, "a", r)
	if out := mustRun(t, m, "a", info.ID, "echo ok"); out != "ok\n" {
		t.Fatalf("exec: %q", out)
	}
	pid1 := hostPID(t, m, info.ID)
	dirs := cgroupstest.SandboxDirs(t, pid1)
	if _, err := m.Pause(ctx, "a", info.ID); err != nil {
		t.Fatal(err)
	}
	assertEnded(t, m, info.ID, pid1, 6*time.Second)
	assertNoCgroups(t, dirs)
}

// TestPausedNotIdle: a paused sandbox does not idle out, and its idle
// timeout counts from its resumption.
func TestPausedNotIdle(t *testing.T) {
	t.Parallel()
	m := newManager(t, Config{})
	ctx := testCtx(t)
	info := mustCreate(t, m, "a", CreateRequest{IdleTimeout: 2 * time.Second})
	if _, err := m.Pause(ctx, "a", info.ID); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3500 * time.Millisecond)
	if got, err := m.Get(ctx, "a", info.ID); err != nil || got.State != store.StatePaused {
		t.Fatalf("paused past its idle timeout: %+v, %v; want still paused", got, err)
	}
	if _, err := m.Resume(ctx, "a", info.ID); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1200 * time.Millisecond)
	if got, err := m.Get(ctx, "a", info.ID); err != nil || got.State != store.StateRunning {
		t.Fatalf("resumed 1.2s ago with a 2s idle timeout: %+v, %v; want running", got, err)
	}
}

// TestClosePaused: closing the daemon ends its paused sandboxes.
func TestClosePaused(t *testing.T) {
	t.Parallel()
	m := newManager(t, Config{})
	ctx := testCtx(t)
	info := mustCreate(t, m, "a", CreateRequest{})
	pid1 := hostPID(t, m, info.ID)
	dirs := cgroupstest.SandboxDirs(t, pid1)
	busy := startBusy(t, m, info.ID)
	if _, err := m.Pause(ctx, "a", info.ID); err != nil {
		t.Fatal(err)
	}
	closed := make(chan error, 1)
	go func() { closed <- m.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("close did not return")
	}
	if !gone(pid1) || !gone(busy) {
		t.Errorf("processes remain: PID 1 (%d) gone %v, busy (%d) gone %v", pid1, gone(pid1), busy, gone(busy))
	}
	assertNoCgroups(t, dirs)
}

// TestRecoverPaused: a daemon started after another one died with a
// paused sandbox ends it: no process and no cgroup of it remain.
func TestRecoverPaused(t *testing.T) {
	testutil.RequireRoot(t)
	dir := stateDir(t)
	old, err := New(Config{StateDir: dir}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	info := mustCreate(t, old, "a", CreateRequest{})
	pid1 := hostPID(t, old, info.ID)
	dirs := cgroupstest.SandboxDirs(t, pid1)
	busy := startBusy(t, old, info.ID)
	if _, err := old.Pause(testCtx(t), "a", info.ID); err != nil {
		t.Fatal(err)
	}
	crash(old)
	m := newManager(t, Config{StateDir: dir})
	if !gone(pid1) || !gone(busy) {
		t.Errorf("processes remain: PID 1 (%d) gone %v, busy (%d) gone %v", pid1, gone(pid1), busy, gone(busy))
	}
	assertNoCgroups(t, dirs)
	if sb, err := m.st.GetSandbox(testCtx(t), "", info.ID); err != nil || sb.State != store.StateStopped {
		t.Errorf("record %+v, %v; want stopped", sb, err)
	}
}

// TestPauseFilesOnly: a pause without memory, in either tier, kills every
// process of the sandbox but its agent — a background process, a command
// running through the agent (it ends with SIGKILL), a process forking as
// fast as it can — and keeps its files (root layer, workspace; /tmp in
// the namespace tier, gVisor boots a new kernel with a new one); its
// paused event says memory false; resumed, the sandbox runs commands
// afresh with none of those processes, and a later pause with memory
// works as ever.
func TestPauseFilesOnly(t *testing.T) {
	bothTiers(t, func(t *testing.T, m *Manager, tier string) {
		ctx := longCtx(t)
		info := mustCreate(t, m, "a", CreateRequest{})
		marker := fmt.Sprintf("hutch-files-only-%d-%s", os.Getpid(), info.ID)
		mustRun(t, m, "a", info.ID, `echo layer >/etc/hutch-layer-file; echo tmp >/tmp/tmp-file; echo ws >ws-file; `+
			`nohup sh -c 'sleep 1000; : `+marker+`' >/dev/null 2>&1 & `+
			`nohup sh -c 'while :; do (sleep 1000 &) ; done; : `+marker+`' >/dev/null 2>&1 &`)
		c, err := m.Agent(ctx, "a", info.ID)
		if err != nil {
			t.Fatal(err)
		}
		inFlight, err := c.Exec(ctx, agent.ExecRequest{Args: []string{"sleep", "1000"}})
		if err != nil {
			t.Fatal(err)
		}
		if tier == policy.TierNamespace {
			if !testutil.Eventually(time.Minute, func() bool { return len(withMarker(t, marker)) == 2 }) {
				t.Fatalf("the background processes did not start (%v)", withMarker(t, marker))
			}
		}
		events, err := m.Events(ctx, "a", info.ID, 0)
		if err != nil {
			t.Fatal(err)
		}

		got, err := m.PauseWith(ctx, "a", info.ID, PauseOptions{FilesOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		if got.State != store.StatePaused {
			t.Errorf("state after the pause: %q", got.State)
		}
		if st, err := inFlight.Wait(); err != nil || st.Signal != int(unix.SIGKILL) {
			t.Errorf("the command in flight: %+v, %v; want killed by SIGKILL", st, err)
		}
		if tier == policy.TierNamespace {
			if pids := withMarker(t, marker); len(pids) != 0 {
				t.Errorf("paused without memory, processes remain on the host: %v", pids)
			}
		}
		if withMem, err := m.PausedWithMemory(ctx, "a", info.ID); err != nil || withMem {
			t.Errorf("paused with memory: %v, %v; want false", withMem, err)
		}
		for e := range events {
			if e.Type == EventPaused {
				if mem, ok := e.Data["memory"]; !ok || mem != false {
					t.Errorf("paused event %+v: want memory false", e.Data)
				}
				if to := e.Data["to"]; (tier == policy.TierGVisor) != (to == "disk") {
					t.Errorf("paused event %+v in tier %s", e.Data, tier)
				}
				break
			}
		}
		if _, err := m.PauseWith(ctx, "a", info.ID, PauseOptions{FilesOnly: true}); !errors.Is(err, ErrConflict) {
			t.Errorf("pause twice: %v, want ErrConflict", err)
		}

		if got, err := m.Resume(ctx, "a", info.ID); err != nil || got.State != store.StateRunning {
			t.Fatalf("resume: %+v, %v", got, err)
		}
		if withMem, err := m.PausedWithMemory(ctx, "a", info.ID); err != nil || withMem {
			t.Errorf("running, paused with memory: %v, %v; want false", withMem, err)
		}
		// Booted again cold: gVisor's new kernel has a new /tmp (a
		// tmpfs of the sandbox's, as a machine's that boots again);
		// the namespace tier's is the one it had.
		out := mustRun(t, m, "a", info.ID, `cat /etc/hutch-layer-file ws-file; cat /tmp/tmp-file 2>/dev/null; for f in /proc/[0-9]*/cmdline; do tr '\0' ' ' <$f; echo; done`)
		want := "layer\nws\ntmp\n"
		if tier == policy.TierGVisor {
			want = "layer\nws\n"
		}
		if !strings.HasPrefix(out, want) || (tier == policy.TierGVisor && strings.Contains(out, "tmp\n")) {
			t.Errorf("the files after the resume: %q", out)
		}
		if strings.Contains(out, "sleep") || strings.Contains(out, marker) {
			t.Errorf("processes left after the resume:\n%s", out)
		}

		// A pause with memory after it keeps the processes, as ever.
		mustRun(t, m, "a", info.ID, `nohup sh -c 'sleep 1000; : `+marker+`' >/dev/null 2>&1 &`)
		if _, err := m.Pause(ctx, "a", info.ID); err != nil {
			t.Fatal(err)
		}
		if withMem, err := m.PausedWithMemory(ctx, "a", info.ID); err != nil || !withMem {
			t.Errorf("paused with memory: %v, %v; want true", withMem, err)
		}
		if _, err := m.Resume(ctx, "a", info.ID); err != nil {
			t.Fatal(err)
		}
		if out := mustRun(t, m, "a", info.ID, `for f in /proc/[0-9]*/cmdline; do tr '\0' ' ' <$f; echo; done`); !strings.Contains(out, marker) {
			t.Errorf("a pause with memory lost the background process:\n%s", out)
		}
		if err := m.Destroy(ctx, "a", info.ID); err != nil {
			t.Fatal(err)
		}
	})
}
