package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/agent"
	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/store"
	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// TestMain lets this test binary be the agent of the sandboxes the tests
// start: sandbox.Start execs hutch's own binary, here the test binary, as
// "hutch agent".
func TestMain(m *testing.M) {
	agent.MainIfAgent()
	code := m.Run()
	testutil.RemoveBuilds() // the static agent of TestCreateFromImage
	os.Exit(code)
}

// testWriter sends the manager's records to the test's log.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// newManager starts a manager on a fresh state directory; it is closed
// when the test ends (unless the test closed it).
func newManager(t *testing.T, cfg Config) *Manager {
	t.Helper()
	testutil.RequireRoot(t)
	if cfg.StateDir == "" {
		cfg.StateDir = stateDir(t)
	}
	m, err := New(cfg, slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil && !errors.Is(err, ErrUnavailable) {
			t.Errorf("close: %v", err)
		}
	})
	return m
}

// stateDir is a fresh state directory, removed when the test ends. It is
// not under /tmp, which every sandbox replaces with a tmpfs of its own: a
// sandbox sees the real one through the host's root, as it would see
// /var/lib/hutch.
func stateDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("/var/tmp", "hutch-daemon-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// testCtx bounds one call of a test: a bound for a hung call only, not a
// measure (a create waits its turn behind others on a busy machine).
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// run runs script with sh in sandbox id and returns its output (stdout then
// stderr) and exit code.
func run(ctx context.Context, m *Manager, tenant, id, script string) (string, int, error) {
	c, err := m.Agent(ctx, tenant, id)
	if err != nil {
		return "", 0, err
	}
	p, err := c.Exec(ctx, agent.ExecRequest{Args: []string{"sh", "-c", script}})
	if err != nil {
		return "", 0, err
	}
	var out, errOut bytes.Buffer
	done := make(chan struct{})
	go func() { _, _ = io.Copy(&errOut, p.Stderr); close(done) }()
	_, _ = io.Copy(&out, p.Stdout)
	<-done
	st, err := p.Wait()
	if err != nil {
		return "", 0, err
	}
	return out.String() + errOut.String(), st.Code, nil
}

func mustRun(t *testing.T, m *Manager, tenant, id, script string) string {
	t.Helper()
	out, code, err := run(testCtx(t), m, tenant, id, script)
	if err != nil {
		t.Fatalf("run %q: %v", script, err)
	}
	if code != 0 {
		t.Fatalf("run %q: exit code %d\n%s", script, code, out)
	}
	return out
}

func mustCreate(t *testing.T, m *Manager, tenant string, r CreateRequest) Info {
	t.Helper()
	info, err := m.Create(testCtx(t), tenant, r)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	return info
}

// gone reports whether host process pid no longer exists (a zombie
// counts as gone: it runs nothing).
func gone(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && b[i+2] == 'Z'
}

// withMarker lists host processes whose command line contains marker.
func withMarker(t *testing.T, marker string) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && bytes.Contains(b, []byte(marker)) && !gone(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// hostPID is the host pid of the PID 1 of sandbox id.
func hostPID(t *testing.T, m *Manager, id string) int {
	t.Helper()
	sb, err := m.st.GetSandbox(context.Background(), "", id)
	if err != nil {
		t.Fatal(err)
	}
	if sb.PID <= 0 {
		t.Fatalf("sandbox %s has no pid recorded", id)
	}
	return sb.PID
}

// TestCreateExec: a sandbox runs commands in its workspace, a directory of
// its own writable root; nothing it writes reaches the host.
func TestCreateExec(t *testing.T) {
	m := newManager(t, Config{})
	info := mustCreate(t, m, "a", CreateRequest{Labels: map[string]string{"team": "x"}, Env: map[string]string{"GREETING": "hello"}})
	if !validID(info.ID) || info.State != store.StateRunning || info.Tenant != "a" || info.Labels["team"] != "x" {
		t.Errorf("info %+v", info)
	}
	if info.Workspace != DefaultWorkspace {
		t.Errorf("workspace %q, want %q", info.Workspace, DefaultWorkspace)
	}
	// The daemon's defaults are the sandbox's limits, and say so.
	if r := info.Resources; r.MemoryBytes != m.cfg.DefaultMemory || r.DiskBytes != m.cfg.DefaultDisk || r.MemoryBytes == 0 {
		t.Errorf("resources %+v, want the defaults (memory %d, disk %d)", r, m.cfg.DefaultMemory, m.cfg.DefaultDisk)
	}
	if d := time.Until(info.ExpiresAt); d < 4*time.Minute || d > 5*time.Minute {
		t.Errorf("expires in %s, want the default 5m", d)
	}
	out := mustRun(t, m, "a", info.ID, `echo "$GREETING from $PWD"; echo made >made-here; echo home=$HOME`)
	if want := "hello from " + info.Workspace + "\n"; !strings.HasPrefix(out, want) || !strings.Contains(out, "home=/root") {
		t.Errorf("output %q, want %q and home=/root", out, want)
	}
	if out := mustRun(t, m, "a", info.ID, `cat /workspace/made-here`); out != "made\n" {
		t.Errorf("the command's file: %q", out)
	}
	if _, err := os.Stat(filepath.Join("/workspace", "made-here")); err == nil {
		t.Error("the command's file reached the host")
	}
	c, err := m.Agent(testCtx(t), "a", info.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.WriteFile(testCtx(t), filepath.Join(info.Workspace, "from-client"), strings.NewReader("hi"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out := mustRun(t, m, "a", info.ID, `cat from-client`); out != "hi" {
		t.Errorf("the client's file: %q", out)
	}
	// The sandbox sees the daemon's state directory empty.
	out = mustRun(t, m, "a", info.ID, fmt.Sprintf(`cat %s/state.db >/dev/null 2>&1 && echo read-state; ls -A %s; true`, m.cfg.StateDir, m.cfg.StateDir))
	if out != "" {
		t.Errorf("the sandbox reached the daemon's state: %q", out)
	}

	got, err := m.Get(testCtx(t), "a", info.ID)
	if err != nil || got.ID != info.ID || got.State != store.StateRunning {
		t.Errorf("get: %+v, %v", got, err)
	}
	list, err := m.List(testCtx(t), "a", map[string]string{"team": "x"}, "")
	if err != nil || len(list) != 1 || list[0].ID != info.ID {
		t.Errorf("list: %+v, %v", list, err)
	}
	if err := m.Destroy(testCtx(t), "a", info.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(m.cfg.StateDir, "sandboxes", info.ID)); !os.IsNotExist(err) {
		t.Errorf("the sandbox's directory remains: %v", err)
	}
	got, err = m.Get(testCtx(t), "a", info.ID)
	if err != nil || got.State != store.StateStopped {
		t.Errorf("get after destroy: %+v, %v", got, err)
	}
	if list, err := m.List(testCtx(t), "a", nil, ""); err != nil || len(list) != 0 {
		t.Errorf("list after destroy: %+v, %v", list, err)
	}
	if list, err := m.List(testCtx(t), "a", nil, store.StateStopped); err != nil || len(list) != 1 {
		t.Errorf("list of stopped: %+v, %v", list, err)
	}
	if err := m.Destroy(testCtx(t), "a", info.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("second destroy: %v, want ErrNotFound", err)
	}
	if _, err := m.Agent(testCtx(t), "a", info.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("agent after destroy: %v, want ErrNotFound", err)
	}
}

// TestTenantIsolation: a tenant cannot see, use or end another tenant's
// sandbox, and one sandbox cannot reach another's workspace.
func TestTenantIsolation(t *testing.T) {
	m := newManager(t, Config{})
	ctx := testCtx(t)
	a := mustCreate(t, m, "a", CreateRequest{Labels: map[string]string{"k": "v"}})
	b := mustCreate(t, m, "b", CreateRequest{Labels: map[string]string{"k": "v"}})
	mustRun(t, m, "a", a.ID, `echo secret >note; chmod 644 note`)

	if _, err := m.Get(ctx, "b", a.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("get: %v, want ErrNotFound", err)
	}
	if _, err := m.Agent(ctx, "b", a.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("agent: %v, want ErrNotFound", err)
	}
	if _, err := m.Extend(ctx, "b", a.ID, time.Minute); !errors.Is(err, ErrNotFound) {
		t.Errorf("extend: %v, want ErrNotFound", err)
	}
	if err := m.Destroy(ctx, "b", a.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("destroy: %v, want ErrNotFound", err)
	}
	list, err := m.List(ctx, "b", map[string]string{"k": "v"}, "")
	if err != nil || len(list) != 1 || list[0].ID != b.ID {
		t.Errorf("b's list: %+v, %v", list, err)
	}
	// Tenant "" is the daemon's own view: every sandbox.
	if got, err := m.Get(ctx, "", a.ID); err != nil || got.Tenant != "a" {
		t.Errorf("get as the daemon: %+v, %v", got, err)
	}
	// b's sandbox has a workspace of its own, and sees the daemon's state
	// directory, where the sandboxes' directories are, empty.
	out, _, err := run(ctx, m, "b", b.ID, fmt.Sprintf(`cat %[1]s/note 2>&1 || echo no-read; ls %[2]s/sandboxes 2>&1 || echo no-list`, a.Workspace, m.cfg.StateDir))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, "secret") || !strings.Contains(out, "no-read") || !strings.Contains(out, "no-list") {
		t.Errorf("b's sandbox reached a's workspace:\n%s", out)
	}
	if got := mustRun(t, m, "a", a.ID, `cat note`); got != "secret\n" {
		t.Errorf("a's note: %q", got)
	}
}

// TestQuota: a tenant has at most MaxSandboxes sandboxes at once.
func TestQuota(t *testing.T) {
	m := newManager(t, Config{MaxSandboxes: 2})
	ctx := testCtx(t)
	first := mustCreate(t, m, "a", CreateRequest{})
	mustCreate(t, m, "a", CreateRequest{})
	if _, err := m.Create(ctx, "a", CreateRequest{}); !errors.Is(err, ErrQuota) {
		t.Fatalf("third create: %v, want ErrQuota", err)
	}
	mustCreate(t, m, "b", CreateRequest{}) // another tenant's quota
	if err := m.Destroy(ctx, "a", first.ID); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, m, "a", CreateRequest{})
	if n, err := m.st.CountSandboxes(ctx, "a"); err != nil || n != 2 {
		t.Errorf("tenant a has %d sandboxes (%v), want 2", n, err)
	}
}

// TestMemoryQuota: with TenantMemory, the memory limits of a tenant's
// sandboxes add up to at most that; DefaultMemory fills in for a policy
// without a limit, and without it such a policy is refused.
func TestMemoryQuota(t *testing.T) {
	m := newManager(t, Config{TenantMemory: 300 << 20, DefaultMemory: 128 << 20})
	ctx := testCtx(t)
	first := mustCreate(t, m, "a", CreateRequest{})
	mustCreate(t, m, "a", CreateRequest{})
	_, err := m.Create(ctx, "a", CreateRequest{})
	if !errors.Is(err, ErrQuota) || !strings.Contains(err.Error(), "quota of 300m") {
		t.Fatalf("a third 128m sandbox: %v, want ErrQuota naming the memory quota", err)
	}
	var small policy.Spec
	small.Resources.MemoryBytes = 32 << 20
	mustCreate(t, m, "a", CreateRequest{Policy: small})
	mustCreate(t, m, "b", CreateRequest{}) // another tenant's quota
	// The default is the sandbox's own memory limit.
	if sb, err := m.st.GetSandbox(ctx, "a", first.ID); err != nil || !strings.Contains(string(sb.Spec), `"memory":134217728`) {
		t.Errorf("the sandbox's policy: %s, %v", sb.Spec, err)
	}
	if err := m.Destroy(ctx, "a", first.ID); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, m, "a", CreateRequest{})

	// Without a default, a sandbox gets 1 GiB, or the tenant's quota if
	// that is smaller.
	m2 := newManager(t, Config{TenantMemory: 300 << 20})
	info := mustCreate(t, m2, "a", CreateRequest{})
	if sb, err := m2.st.GetSandbox(ctx, "a", info.ID); err != nil || !strings.Contains(string(sb.Spec), `"memory":314572800`) {
		t.Errorf("the sandbox's policy: %s, %v", sb.Spec, err)
	}
	for _, c := range []Config{{TenantMemory: -1}, {DefaultMemory: 1}, {TenantMemory: 64 << 20, DefaultMemory: 128 << 20}, {DefaultMemory: 2 << 30, MaxMemory: 1 << 30}, {MaxTmp: 1}} {
		c.StateDir = t.TempDir()
		if _, err := New(c, nil); !errors.Is(err, ErrInvalid) {
			t.Errorf("New(%+v) = %v, want ErrInvalid", c, err)
		}
	}
}

// assertEnded checks that sandbox id ended within d: its record is
// stopped, its directory gone and its PID 1 too.
func assertEnded(t *testing.T, m *Manager, id string, pid int, d time.Duration) {
	t.Helper()
	var sb store.Sandbox
	if !testutil.Eventually(d, func() bool {
		var err error
		sb, err = m.st.GetSandbox(context.Background(), "", id)
		return err == nil && sb.State == store.StateStopped
	}) {
		t.Fatalf("sandbox %s is still %s after %s", id, sb.State, d)
	}
	if _, err := os.Stat(filepath.Join(m.sbRoot, id)); !os.IsNotExist(err) {
		t.Errorf("the sandbox's directory remains: %v", err)
	}
	if !gone(pid) {
		t.Errorf("PID 1 (host pid %d) still runs", pid)
	}
}

// TestTimeout: a sandbox ends at its timeout; Extend moves it.
func TestTimeout(t *testing.T) {
	t.Parallel()
	m := newManager(t, Config{MaxTimeout: time.Hour})
	ctx := testCtx(t)
	short := mustCreate(t, m, "a", CreateRequest{Timeout: 2 * time.Second})
	extended := mustCreate(t, m, "a", CreateRequest{Timeout: 2 * time.Second})
	pid := hostPID(t, m, short.ID)
	if _, err := m.Extend(ctx, "a", extended.ID, 2*time.Hour); !errors.Is(err, ErrInvalid) {
		t.Errorf("extend past the maximum: %v, want ErrInvalid", err)
	}
	info, err := m.Extend(ctx, "a", extended.ID, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Until(info.ExpiresAt); d < 50*time.Second || d > time.Minute {
		t.Errorf("extended to expire in %s, want 1m", d)
	}
	assertEnded(t, m, short.ID, pid, 5*time.Second)
	if got, err := m.Get(ctx, "a", extended.ID); err != nil || got.State != store.StateRunning {
		t.Errorf("the extended sandbox: %+v, %v", got, err)
	}
	if _, err := m.Extend(ctx, "a", short.ID, time.Minute); !errors.Is(err, ErrNotFound) {
		t.Errorf("extend an ended sandbox: %v, want ErrNotFound", err)
	}
}

// TestIdleTimeout: a sandbox ends once unused for its idle timeout; an
// Agent call counts as use.
func TestIdleTimeout(t *testing.T) {
	t.Parallel()
	m := newManager(t, Config{})
	ctx := testCtx(t)
	info := mustCreate(t, m, "a", CreateRequest{IdleTimeout: time.Second})
	pid := hostPID(t, m, info.ID)
	for range 8 {
		if _, err := m.Agent(ctx, "a", info.ID); err != nil {
			t.Fatalf("agent while in use: %v", err)
		}
		time.Sleep(250 * time.Millisecond)
	}
	assertEnded(t, m, info.ID, pid, 4*time.Second)
}

// TestIdleWhileCommandRuns: a command that runs quietly keeps its sandbox
// from ending for idleness; once it ended, the idle timeout applies.
func TestIdleWhileCommandRuns(t *testing.T) {
	t.Parallel()
	m := newManager(t, Config{})
	ctx := testCtx(t)
	info := mustCreate(t, m, "a", CreateRequest{IdleTimeout: time.Second})
	pid := hostPID(t, m, info.ID)
	done := make(chan error, 1)
	go func() {
		_, _, err := run(ctx, m, "a", info.ID, "sleep 3")
		done <- err
	}()
	time.Sleep(2500 * time.Millisecond) // past the idle timeout and a reaper round
	if got, err := m.Get(ctx, "a", info.ID); err != nil || got.State != store.StateRunning {
		t.Fatalf("with a command running: %+v, %v; want running", got, err)
	}
	if err := <-done; err != nil {
		t.Fatalf("the command: %v", err)
	}
	assertEnded(t, m, info.ID, pid, 5*time.Second)
}

// TestSandboxEnds: a sandbox whose PID 1 ends on its own is recorded as
// stopped and cleaned up.
func TestSandboxEnds(t *testing.T) {
	m := newManager(t, Config{})
	info := mustCreate(t, m, "a", CreateRequest{})
	pid := hostPID(t, m, info.ID)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	assertEnded(t, m, info.ID, pid, 5*time.Second)
	if _, err := m.Agent(testCtx(t), "a", info.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("agent: %v, want ErrNotFound", err)
	}
}

// startDaemon starts a process in sandbox id that leaves its session and
// outlives the command that started it; its command line holds marker.
func startDaemon(t *testing.T, m *Manager, id, marker string) {
	t.Helper()
	mustRun(t, m, "", id, fmt.Sprintf(`setsid sh -c 'sleep 1000; : %s' >/dev/null 2>&1 </dev/null &`, marker))
	if !testutil.Eventually(time.Minute, func() bool { return len(withMarker(t, marker)) > 0 }) {
		t.Fatal("the daemon process did not start")
	}
}

// TestDestroyKillsEverything: destroying a sandbox ends every process in
// it, daemons included (S4).
func TestDestroyKillsEverything(t *testing.T) {
	m := newManager(t, Config{})
	info := mustCreate(t, m, "a", CreateRequest{})
	pid := hostPID(t, m, info.ID)
	marker := "hutch-destroy-marker-" + strconv.Itoa(os.Getpid())
	startDaemon(t, m, info.ID, marker)
	if err := m.Destroy(testCtx(t), "a", info.ID); err != nil {
		t.Fatal(err)
	}
	assertEnded(t, m, info.ID, pid, time.Second)
	if left := withMarker(t, marker); len(left) > 0 {
		t.Errorf("processes of the sandbox remain: %v", left)
	}
}

// crash drops m as a daemon killed with SIGKILL would: nothing is torn
// down, only what the kernel releases is released (the store's files, the
// state directory's lock, and the descriptors of the sandboxes that
// outlive it: their agents' connections, their proxies' sockets).
func crash(m *Manager) {
	m.mu.Lock()
	m.closed = true
	ls := slices.Collect(maps.Values(m.live))
	m.mu.Unlock()
	close(m.stop)
	<-m.reaperDone
	for _, l := range ls {
		if isLasting(l.dir) {
			l.pauseMu.Lock()
			loosen(l)
			l.pauseMu.Unlock()
		}
	}
	m.st.Close()
	m.lock.Close()
}

// TestRecoverAfterCrash: a daemon started after another one died takes
// again the sandbox the dead one left running (its processes run on, it
// runs commands), records as stopped those that are gone, and removes the
// directories of none.
func TestRecoverAfterCrash(t *testing.T) {
	testutil.RequireRoot(t)
	dir := stateDir(t)
	old, err := New(Config{StateDir: dir}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	info := mustCreate(t, old, "a", CreateRequest{})
	pid := hostPID(t, old, info.ID)
	marker := "hutch-crash-marker-" + strconv.Itoa(os.Getpid())
	startDaemon(t, old, info.ID, marker)
	// Records of a sandbox whose PID 1 is long gone, and a directory
	// without a record.
	if err := old.st.InsertSandbox(context.Background(), store.Sandbox{
		ID: "sb-aaaaaaaaaaaa", Tenant: "a", State: store.StateRunning, Created: time.Now(),
		PID: pid, PIDStart: 1, Dir: filepath.Join(dir, "sandboxes", "sb-aaaaaaaaaaaa"),
	}); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "sandboxes", "sb-bbbbbbbbbbbb", "workspace"), 0o700); err != nil {
		t.Fatal(err)
	}
	crash(old)

	m := newManager(t, Config{StateDir: dir})
	if got, err := m.Get(testCtx(t), "a", info.ID); err != nil || got.State != store.StateRunning {
		t.Fatalf("the sandbox left running, after the restart: %+v, %v", got, err)
	}
	if gone(pid) || len(withMarker(t, marker)) == 0 {
		t.Errorf("the sandbox's processes did not run on: PID 1 gone %v, marked %v", gone(pid), withMarker(t, marker))
	}
	if out := mustRun(t, m, "a", info.ID, "echo again"); out != "again\n" {
		t.Errorf("output %q", out)
	}
	if sb, err := m.st.GetSandbox(context.Background(), "", "sb-aaaaaaaaaaaa"); err != nil || sb.State != store.StateStopped {
		t.Errorf("the record of a long gone sandbox: %+v, %v", sb, err)
	}
	if entries, err := os.ReadDir(m.sbRoot); err != nil || len(entries) != 1 || entries[0].Name() != info.ID {
		t.Errorf("in the sandboxes directory: %v, %v; want %s's only", entries, err, info.ID)
	}
	if err := m.Destroy(testCtx(t), "a", info.ID); err != nil {
		t.Fatal(err)
	}
	assertEnded(t, m, info.ID, pid, time.Second)
	if left := withMarker(t, marker); len(left) > 0 {
		t.Errorf("processes of the sandbox remain: %v", left)
	}
	// The new daemon works.
	info = mustCreate(t, m, "a", CreateRequest{})
	if out := mustRun(t, m, "a", info.ID, "echo ok"); out != "ok\n" {
		t.Errorf("output %q", out)
	}
}

// TestStateDirLocked: two daemons never share a state directory.
func TestStateDirLocked(t *testing.T) {
	m := newManager(t, Config{})
	if _, err := New(Config{StateDir: m.cfg.StateDir}, nil); !errors.Is(err, ErrUnavailable) {
		t.Errorf("second daemon on the same state directory: %v, want ErrUnavailable", err)
	}
}

// TestInvalid: bad requests fail with ErrInvalid and leave nothing behind.
func TestInvalid(t *testing.T) {
	m := newManager(t, Config{MaxTimeout: time.Hour})
	no := false
	many := map[string]string{}
	for i := range MaxLabels + 1 {
		many[strconv.Itoa(i)] = "v"
	}
	for _, tc := range []struct {
		name string
		r    CreateRequest
		want string
	}{
		{"memory below the minimum", CreateRequest{Policy: policy.Spec{Resources: policy.Resources{MemoryBytes: 1}}}, "resources.memory"},
		{"bad network mode", CreateRequest{Policy: policy.Spec{Network: policy.Network{Mode: "wide-open"}}}, "network.mode"},
		{"a secret without its value", CreateRequest{Policy: policy.Spec{Secrets: []policy.Secret{{Name: "T", Hosts: []string{"example.com"}, From: policy.SecretFromRequest}}}}, "secret T: the request carries no value"},
		{"a secret from the daemon's environment that is not set", CreateRequest{Operator: true, Policy: policy.Spec{Secrets: []policy.Secret{{Name: "HUTCH_TEST_UNSET_SECRET", Hosts: []string{"example.com"}}}}}, "hutch's environment has no HUTCH_TEST_UNSET_SECRET"},
		{"a tenant's secret from the daemon's environment", CreateRequest{Policy: policy.Spec{Secrets: []policy.Secret{{Name: "HOME", Hosts: []string{"example.com"}}}}}, "secrets[0].from"},
		{"host network", CreateRequest{Policy: policy.Spec{Network: policy.Network{Mode: "host"}}}, "network.mode"},
		{"host network refused by the policy", CreateRequest{Policy: policy.Spec{Network: policy.Network{Mode: "host", AllowHost: &no}}}, "network.mode"},
		{"allow_write", CreateRequest{Policy: policy.Spec{Filesystem: policy.Filesystem{AllowWrite: []string{"/etc/cron.d"}}}}, "allow_write"},
		{"allow_read", CreateRequest{Policy: policy.Spec{Filesystem: policy.Filesystem{AllowRead: []string{"/root"}}}}, "allow_read"},
		{"no default denies", CreateRequest{Policy: policy.Spec{Filesystem: policy.Filesystem{NoDefaultDenies: true}}}, "no_default_denies"},
		{"root", CreateRequest{Policy: policy.Spec{Root: "/srv"}}, "root"},
		{"best effort", CreateRequest{Policy: policy.Spec{BestEffort: true}}, "best_effort"},
		{"home path", CreateRequest{Policy: policy.Spec{Filesystem: policy.Filesystem{DenyRead: []string{"~/x"}}}}, "home"},
		{"timeout", CreateRequest{Timeout: 2 * time.Hour}, "timeout"},
		{"policy timeout", CreateRequest{Policy: policy.Spec{Resources: policy.Resources{Timeout: 2 * time.Hour}}}, "timeout"},
		{"negative timeout", CreateRequest{Timeout: -time.Second}, "timeout"},
		{"idle timeout", CreateRequest{IdleTimeout: -time.Second}, "idle timeout"},
		{"empty label key", CreateRequest{Labels: map[string]string{"": "v"}}, "label"},
		{"long label", CreateRequest{Labels: map[string]string{"k": strings.Repeat("v", MaxLabelValue+1)}}, "label"},
		{"many labels", CreateRequest{Labels: many}, "labels"},
		{"env name", CreateRequest{Env: map[string]string{"A=B": "v"}}, "env: invalid variable name"},
		{"env value", CreateRequest{Env: map[string]string{"A": "v\x00"}}, "NUL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := m.Create(testCtx(t), "a", tc.r)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("create: %v, want ErrInvalid mentioning %q", err, tc.want)
			}
		})
	}
	if _, err := m.Create(testCtx(t), "", CreateRequest{}); !errors.Is(err, ErrInvalid) {
		t.Errorf("create without tenant: %v, want ErrInvalid", err)
	}
	if _, err := m.List(testCtx(t), "a", nil, "asleep"); !errors.Is(err, ErrInvalid) {
		t.Errorf("list by an unknown state: %v, want ErrInvalid", err)
	}
	for _, id := range []string{"sb-nosuchsandbx", "../../etc", ""} {
		if _, err := m.Get(testCtx(t), "a", id); !errors.Is(err, ErrNotFound) {
			t.Errorf("get %q: %v, want ErrNotFound", id, err)
		}
	}
	if list, err := m.st.ListSandboxes(context.Background(), store.Filter{}); err != nil || len(list) != 0 {
		t.Errorf("records left: %+v, %v", list, err)
	}
	if entries, err := os.ReadDir(m.sbRoot); err != nil || len(entries) != 0 {
		t.Errorf("directories left: %v, %v", entries, err)
	}
}

// TestConcurrent: many sandboxes created, used and destroyed at once.
func TestConcurrent(t *testing.T) {
	m := newManager(t, Config{})
	const n = 20
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			ctx := testCtx(t)
			tenant := fmt.Sprintf("t%d", i%3)
			info, err := m.Create(ctx, tenant, CreateRequest{Env: map[string]string{"N": strconv.Itoa(i)}})
			if err != nil {
				errs <- err
				return
			}
			out, code, err := run(ctx, m, tenant, info.ID, `echo $N; echo $N >n`)
			if err != nil || code != 0 || out != strconv.Itoa(i)+"\n" {
				errs <- fmt.Errorf("sandbox %d: output %q, code %d, %v", i, out, code, err)
			}
			if err := m.Destroy(ctx, tenant, info.ID); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n, err := m.st.CountSandboxes(context.Background(), ""); err != nil || n != 0 {
		t.Errorf("%d sandboxes not stopped (%v)", n, err)
	}
	if entries, err := os.ReadDir(m.sbRoot); err != nil || len(entries) != 0 {
		t.Errorf("directories left: %v, %v", entries, err)
	}
}

// TestClose: Close ends every sandbox; afterwards every call is refused.
func TestClose(t *testing.T) {
	m := newManager(t, Config{})
	ctx := testCtx(t)
	var infos []Info
	for range 3 {
		infos = append(infos, mustCreate(t, m, "a", CreateRequest{}))
	}
	pids := []int{}
	for _, info := range infos {
		pids = append(pids, hostPID(t, m, info.ID))
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	for i, pid := range pids {
		if !gone(pid) {
			t.Errorf("PID 1 of %s (host pid %d) still runs", infos[i].ID, pid)
		}
	}
	if entries, err := os.ReadDir(m.sbRoot); err != nil || len(entries) != 0 {
		t.Errorf("directories left: %v, %v", entries, err)
	}
	id := infos[0].ID
	if _, err := m.Create(ctx, "a", CreateRequest{}); !errors.Is(err, ErrUnavailable) {
		t.Errorf("create: %v", err)
	}
	if _, err := m.Get(ctx, "a", id); !errors.Is(err, ErrUnavailable) {
		t.Errorf("get: %v", err)
	}
	if _, err := m.List(ctx, "a", nil, ""); !errors.Is(err, ErrUnavailable) {
		t.Errorf("list: %v", err)
	}
	if err := m.Destroy(ctx, "a", id); !errors.Is(err, ErrUnavailable) {
		t.Errorf("destroy: %v", err)
	}
	if _, err := m.Extend(ctx, "a", id, time.Minute); !errors.Is(err, ErrUnavailable) {
		t.Errorf("extend: %v", err)
	}
	if _, err := m.Agent(ctx, "a", id); !errors.Is(err, ErrUnavailable) {
		t.Errorf("agent: %v", err)
	}
	if err := m.Close(); !errors.Is(err, ErrUnavailable) {
		t.Errorf("second close: %v", err)
	}
	// The records say so.
	m2 := newManager(t, Config{StateDir: m.cfg.StateDir})
	for _, info := range infos {
		if got, err := m2.Get(ctx, "a", info.ID); err != nil || got.State != store.StateStopped {
			t.Errorf("%s after close: %+v, %v", info.ID, got, err)
		}
	}
}

// TestActivityRecorded: the last activity reaches the store, at most every
// flushEvery.
func TestActivityRecorded(t *testing.T) {
	m := newManager(t, Config{})
	ctx := testCtx(t)
	info := mustCreate(t, m, "a", CreateRequest{})
	before, err := m.st.GetSandbox(ctx, "a", info.ID)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond)
	if _, err := m.Agent(ctx, "a", info.ID); err != nil {
		t.Fatal(err)
	}
	m.reap(time.Now()) // too soon after the last write
	if sb, _ := m.st.GetSandbox(ctx, "a", info.ID); !sb.LastActive.Equal(before.LastActive) {
		t.Errorf("last activity written %s after the previous write", sb.LastActive.Sub(before.LastActive))
	}
	m.reap(time.Now().Add(flushEvery))
	if sb, _ := m.st.GetSandbox(ctx, "a", info.ID); !sb.LastActive.After(before.LastActive) {
		t.Errorf("last activity %s not written (was %s)", sb.LastActive, before.LastActive)
	}
}

// TestProxy: a served sandbox in network mode "proxy" reaches an allowed
// host through its own egress proxy (here a loopback upstream pinned by
// name, which the operator's configuration opened for every sandbox), and
// nothing else.
func TestProxy(t *testing.T) {
	m := newManager(t, Config{AllowPrivate: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "upstream saw %s%s\n", r.Host, r.URL.Path)
	})}
	go func() { _ = srv.Serve(l) }()
	defer srv.Close()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	info := mustCreate(t, m, "alice", CreateRequest{Policy: policy.Spec{Network: policy.Network{
		AllowedDomains: []string{"up.test:" + port},
		Hosts:          []string{"up.test:127.0.0.1", "other.test:127.0.0.1"},
	}}})
	out := mustRun(t, m, "alice", info.ID, `curl -sS --max-time 10 http://up.test:`+port+`/ok; curl -sS --max-time 10 -o /dev/null -w "%{http_code}\n" http://other.test:`+port+`/no; curl -sS --noproxy '*' --max-time 5 http://127.0.0.1:`+port+`/direct || echo direct-failed`)
	for _, want := range []string{"upstream saw up.test:" + port + "/ok", "403", "direct-failed"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "/no") || strings.Contains(out, "/direct") {
		t.Errorf("a refused request reached the upstream:\n%s", out)
	}

	// The metrics: the refusal counted at once, the bytes once the
	// sandbox ended. Other tests' proxies may add to the same counters.
	if v := EgressRefused.With().Value(); v < 1 {
		t.Errorf("egress refusals counted: %v", v)
	}
	if c, err := m.Counts(context.Background()); err != nil || c[nsState(store.StateRunning)] != 1 || c[nsState(store.StateStarting)] != 0 || c[nsState(store.StateStopping)] != 0 {
		t.Errorf("counts %v, %v", c, err)
	}
	in, outBytes := EgressBytes.With("in").Value(), EgressBytes.With("out").Value()
	if err := m.Destroy(context.Background(), "alice", info.ID); err != nil {
		t.Fatal(err)
	}
	if d := EgressBytes.With("in").Value() - in; d <= 0 {
		t.Errorf("bytes in grew by %v", d)
	}
	if d := EgressBytes.With("out").Value() - outBytes; d <= 0 {
		t.Errorf("bytes out grew by %v", d)
	}
	if c, err := m.Counts(context.Background()); err != nil || c[nsState(store.StateRunning)] != 0 {
		t.Errorf("counts after destroy %v, %v", c, err)
	}

	// The refusal is in the sandbox's events, with where it went.
	ch, err := m.Events(context.Background(), "alice", info.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	var refused []Event
	var types []string
	for e := range ch {
		types = append(types, e.Type)
		if e.Type == EventEgressRefused {
			refused = append(refused, e)
		}
	}
	if len(refused) == 0 || refused[0].Data["host"] != "other.test" || refused[0].Data["reason"] == "" {
		t.Errorf("egress refusals in the events: %+v", refused)
	}
	if types[len(types)-2] != EventDestroyed || types[len(types)-1] != EventEnded {
		t.Errorf("events %v, want destroyed then ended last", types)
	}
}

// TestTimeoutEvents: a sandbox's event stream tells that it was created,
// started, timed out and ended, then closes; other tenants do not see it.
func TestTimeoutEvents(t *testing.T) {
	t.Parallel()
	m := newManager(t, Config{})
	ctx := testCtx(t)
	info := mustCreate(t, m, "a", CreateRequest{Timeout: 2 * time.Second})
	if _, err := m.Events(ctx, "b", info.ID, 0); !errors.Is(err, ErrNotFound) {
		t.Errorf("another tenant's events: %v, want ErrNotFound", err)
	}
	ch, err := m.Events(ctx, "a", info.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	timer := time.NewTimer(15 * time.Second)
	defer timer.Stop()
	for done := false; !done; {
		select {
		case e, ok := <-ch:
			if !ok {
				done = true
				break
			}
			types = append(types, e.Type)
		case <-timer.C:
			t.Fatalf("the stream did not end; got %v", types)
		}
	}
	want := []string{EventCreated, EventStarted, EventTimeout, EventEnded}
	if strings.Join(types, ",") != strings.Join(want, ",") {
		t.Fatalf("events %v, want %v", types, want)
	}
	// The log of the ended sandbox is kept: a late reader sees its end.
	ch, err = m.Events(ctx, "a", info.ID, 2)
	if err != nil {
		t.Fatal(err)
	}
	var late []string
	for e := range ch {
		late = append(late, e.Type)
	}
	if strings.Join(late, ",") != EventTimeout+","+EventEnded {
		t.Errorf("events since 2 of the ended sandbox: %v", late)
	}
}

// TestWritableRoot: a sandbox's root is its own copy of the host's: it
// installs into /usr/local and edits /etc as in a container, the host
// never changes, another sandbox sees none of it, and its policy's disk
// size bounds what it writes.
func TestWritableRoot(t *testing.T) {
	m := newManager(t, Config{})
	a := mustCreate(t, m, "a", CreateRequest{})
	b := mustCreate(t, m, "a", CreateRequest{})
	name := "hutch-root-test-" + a.ID
	out := mustRun(t, m, "a", a.ID, `printf '#!/bin/sh\necho installed\n' >/usr/local/bin/`+name+` && chmod +x /usr/local/bin/`+name+` && `+name+`; echo edited >>/etc/hosts; id -u; stat -c %U /etc/passwd`)
	if out != "installed\n0\nroot\n" {
		t.Errorf("output %q", out)
	}
	if _, err := os.Stat("/usr/local/bin/" + name); err == nil {
		t.Error("the sandbox's program reached the host")
	}
	if b, err := os.ReadFile("/etc/hosts"); err != nil || strings.Contains(string(b), "edited") {
		t.Errorf("the host's /etc/hosts: %q, %v", b, err)
	}
	if out := mustRun(t, m, "a", b.ID, `ls /usr/local/bin/`+name+` 2>/dev/null; grep -c edited /etc/hosts; true`); out != "0\n" {
		t.Errorf("another sandbox sees the first one's files: %q", out)
	}

	var small policy.Spec
	small.Resources.DiskBytes = 16 << 20
	c := mustCreate(t, m, "a", CreateRequest{Policy: small})
	out, _, err := run(testCtx(t), m, "a", c.ID, `dd if=/dev/zero of=big bs=1M count=32 2>&1; rm big; echo ok >small && cat small`)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "No space left") || !strings.HasSuffix(out, "ok\n") {
		t.Errorf("a sandbox with 16m of disk wrote 32m:\n%s", out)
	}
	small.Resources.DiskBytes = 1 << 40
	if _, err := m.Create(testCtx(t), "a", CreateRequest{Policy: small}); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "resources.disk") {
		t.Errorf("a disk above the maximum: %v, want ErrInvalid naming resources.disk", err)
	}
}

// TestClosedHostFiles (escape item 3 for served sandboxes): through its
// idmapped layer a sandbox's root owns the host's root-owned files, so
// the files and directories the host closes to other users are not in
// its view at all, while what others may read stays readable.
func TestClosedHostFiles(t *testing.T) {
	testutil.RequireRoot(t)
	fix, err := os.MkdirTemp("/var/lib", "hutch-closed-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(fix) })
	for _, f := range []struct {
		path string
		mode os.FileMode
	}{{"secret", 0o600}, {"group-only", 0o640}, {"public", 0o644}, {"private/inside", 0o644}} {
		p := filepath.Join(fix, f.path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("host "+f.path+"\n"), f.mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(fix, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(fix, "private"), 0o700); err != nil {
		t.Fatal(err)
	}
	rescanClosed()
	m := newManager(t, Config{})
	sb := mustCreate(t, m, "a", CreateRequest{})
	out := mustRun(t, m, "a", sb.ID, fmt.Sprintf(`cd %s && for f in secret group-only public private/inside; do cat $f 2>/dev/null || echo "no $f"; done; ls -A private; cat /etc/shadow /etc/gshadow 2>/dev/null | head -c 10; echo end`, fix))
	if want := "no secret\nno group-only\nhost public\nno private/inside\nend\n"; out != want {
		t.Errorf("in the sandbox:\n%s\nwant:\n%s", out, want)
	}
	// The sandbox may still make its own files there.
	if out := mustRun(t, m, "a", sb.ID, fmt.Sprintf(`echo mine >%[1]s/secret && cat %[1]s/secret`, fix)); out != "mine\n" {
		t.Errorf("a file of the sandbox's own: %q", out)
	}
}

// TestRootCapabilities: the root of a served sandbox keeps, in its own
// user namespace, what package managers need — chown, file permissions,
// switching to its other ids, which drops them — and nothing that reaches
// beyond its files and ids: no mount, no ptrace, no raw network.
func TestRootCapabilities(t *testing.T) {
	_, err := exec.LookPath("setpriv")
	testutil.Need(t, err == nil, "setpriv (util-linux) is not installed")
	m := newManager(t, Config{})
	sb := mustCreate(t, m, "a", CreateRequest{})
	out, code, err := run(testCtx(t), m, "a", sb.ID, `
grep -E '^Cap(Eff|Bnd|Amb)' /proc/self/status | tr -d '\t' | tr '\n' ' '; echo
echo mine >f && chown 42:42 f && chmod 600 f && stat -c '%u:%g %a' f
cat f                                                  # root reads another uid's 0600 file
setpriv --reuid 42 --regid 42 --clear-groups sh -c 'id -u; grep CapEff /proc/self/status | tr -d "\t"; cat /etc/hostname >/dev/null && echo reads; { echo x >>/etc/hosts; } 2>/dev/null || echo "42 cannot write /etc/hosts"'
mount -t tmpfs t /mnt 2>/dev/null && echo MOUNTED || echo "no mount"
echo done`)
	if err != nil {
		t.Fatal(err)
	}
	want := "CapEff:00000000000004fb CapBnd:00000000000004fb CapAmb:00000000000004fb \n" +
		"42:42 600\nmine\n42\nCapEff:0000000000000000\nreads\n42 cannot write /etc/hosts\nno mount\ndone\n"
	if code != 0 || out != want {
		t.Errorf("exit %d, output:\n%s\nwant:\n%s", code, out, want)
	}
}
