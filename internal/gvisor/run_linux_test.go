package gvisor

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/sandbox"
	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// testRuntime returns the gVisor tier with the test's runsc (which must be
// the pinned version) and a state directory of the test's own; when the
// test ends it checks that nothing of runsc is left (S4) and removes the
// directory.
func testRuntime(t *testing.T) *Runtime {
	t.Helper()
	bin, err := Find(testutil.Runsc(t))
	if err != nil {
		t.Fatalf("the test's runsc: %v", err)
	}
	base := filepath.Join("/run", "hutch-gvisor-test-"+sandbox.RandomID())
	t.Cleanup(func() {
		if pids := processesOf(base); len(pids) > 0 {
			t.Errorf("processes of the sandbox outlived it: %v", pids)
			for _, p := range pids {
				_ = unix.Kill(p, unix.SIGKILL)
			}
		}
		entries, _ := os.ReadDir(base)
		for _, e := range entries {
			t.Errorf("state left behind: %s", filepath.Join(base, e.Name()))
			cleanup(bin, filepath.Join(base, e.Name()), e.Name(), nil)
		}
		_ = unix.Unmount(base, unix.MNT_DETACH)
		_ = os.Remove(base)
	})
	return &Runtime{Runsc: bin, StateDir: base}
}

// forFileAccess runs f as the subtests "gofer" (the default: every file
// operation of gVisor's kernel goes to its gofer) and "directfs"
// (Runtime.DirectFS), each with a runtime of its own (testRuntime).
func forFileAccess(t *testing.T, f func(t *testing.T, rt *Runtime)) {
	for _, directFS := range []bool{false, true} {
		name := "gofer"
		if directFS {
			name = "directfs"
		}
		t.Run(name, func(t *testing.T) {
			rt := testRuntime(t)
			rt.DirectFS = directFS
			f(t, rt)
		})
	}
}

// processesOf lists the processes whose command line names dir (runsc
// and its gofer and sandbox name their state directory).
func processesOf(dir string) []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(b, []byte(dir)) {
			out = append(out, pid)
		}
	}
	return out
}

// outcome is how a sandbox ended and what it printed.
type outcome struct {
	res            sandbox.Result
	err            error
	stdout, stderr string
}

func (o outcome) String() string {
	return fmt.Sprintf("exit %d (err %v)\nstdout:\n%s\nstderr:\n%s", o.res.ExitCode, o.err, o.stdout, o.stderr)
}

// run runs args under gVisor in workspace ws with the spec change makes.
func run(t *testing.T, rt *Runtime, ws string, change func(*policy.Spec), args ...string) outcome {
	t.Helper()
	s := policy.Spec{Tier: policy.TierGVisor}
	s.Filesystem.Workspace = ws
	if change != nil {
		change(&s)
	}
	if err := s.Normalize(ws, ""); err != nil {
		t.Fatal(err)
	}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	stdout, err := os.Create(filepath.Join(dir, "stdout"))
	if err != nil {
		t.Fatal(err)
	}
	defer stdout.Close()
	stderr, err := os.Create(filepath.Join(dir, "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	defer stderr.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // a guard, not a threshold
	defer cancel()
	res, err := rt.Run(ctx, sandbox.Config{
		Spec:    s,
		Args:    args,
		Environ: []string{"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8", "ONLY_THIS=1", "HOME=" + ws},
		Stdout:  stdout,
		Stderr:  stderr,
		Log:     slog.New(slog.NewTextHandler(&testLog{t}, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	if ctx.Err() != nil {
		t.Fatalf("the sandbox did not end within the guard")
	}
	o := outcome{res: res, err: err}
	b, _ := os.ReadFile(stdout.Name())
	o.stdout = string(b)
	b, _ = os.ReadFile(stderr.Name())
	o.stderr = string(b)
	return o
}

// testLog writes hutch's debug log to the test's.
type testLog struct{ t *testing.T }

func (l *testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

func wantExit(t *testing.T, o outcome, code int) {
	t.Helper()
	if o.res.ExitCode != code {
		t.Fatalf("want exit %d, got %s", code, o)
	}
}

// TestKernel checks that the sandbox runs on gVisor's kernel: uname,
// /proc/version and the kernel log are gVisor's, not the host's.
func TestKernel(t *testing.T) {
	rt := testRuntime(t)
	ws := testutil.OwnedDir(t, testutil.UnprivilegedUID)
	o := run(t, rt, ws, nil, "sh", "-c", "uname -r; cat /proc/version; dmesg")
	wantExit(t, o, 0)
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		t.Fatal(err)
	}
	host := unix.ByteSliceToString(u.Release[:])
	lines := strings.SplitN(o.stdout, "\n", 3)
	if len(lines) < 3 {
		t.Fatalf("short output: %s", o)
	}
	if !strings.Contains(lines[0], "gvisor") || strings.Contains(lines[0], host) {
		t.Errorf("uname -r = %q: not gVisor's (the host's is %q)", lines[0], host)
	}
	if !strings.Contains(lines[1], "gvisor") || strings.Contains(lines[1], host) {
		t.Errorf("/proc/version = %q: not gVisor's", lines[1])
	}
	if !strings.Contains(lines[2], "gVisor") {
		t.Errorf("dmesg does not show gVisor's kernel log:\n%s", lines[2])
	}
}

// TestFilesystem checks the view, with either file access: the host's
// root read-only, the workspace writable with what is written there owned
// on the host by the workspace's owner, deny-read paths hidden,
// deny-write paths refused, no set-id file or file writable by others.
func TestFilesystem(t *testing.T) {
	forFileAccess(t, func(t *testing.T, rt *Runtime) {
		uid := testutil.UnprivilegedUID
		ws := testutil.OwnedDir(t, uid)
		for _, f := range []string{".bashrc", "keep.txt"} {
			if err := os.WriteFile(filepath.Join(ws, f), []byte("original\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(filepath.Join(ws, f), uid, uid); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(ws, "hidden.txt"), []byte("ws-secret\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		outside, err := os.MkdirTemp("/var/tmp", "hutch-test-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(outside) })
		if err := os.Chmod(outside, 0o755); err != nil {
			t.Fatal(err)
		}
		secretDir := filepath.Join(outside, "dir")
		secretFile := filepath.Join(outside, "file")
		if err := os.Mkdir(secretDir, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{filepath.Join(secretDir, "key"), secretFile} {
			if err := os.WriteFile(f, []byte("host-secret\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		script := `id -u; echo new > new.txt; mkdir sub && echo x > sub/y
	cat ` + secretFile + ` ` + secretDir + `/key hidden.txt
	echo changed > .bashrc || echo bashrc refused
	echo changed > keep.txt || echo keep refused
	mkdir .vscode || echo vscode refused
	echo x > /etc/hutch-test || echo etc refused
	echo x > ` + outside + `/x || echo outside refused
	chmod 4755 new.txt || echo setuid refused
	chmod 2755 new.txt || echo setgid refused
	chmod 0666 new.txt || echo others refused
	echo done`
		o := run(t, rt, ws, func(s *policy.Spec) {
			s.Filesystem.DenyRead = []string{secretDir, secretFile, filepath.Join(ws, "hidden.txt")}
			s.Filesystem.DenyWrite = []string{filepath.Join(ws, "keep.txt")}
		}, "sh", "-c", script)
		wantExit(t, o, 0)
		if got := strings.SplitN(o.stdout, "\n", 2)[0]; got != strconv.Itoa(uid) {
			t.Errorf("the command runs as %q, want the workspace's owner %d", got, uid)
		}
		for _, f := range []string{"new.txt", "sub", "sub/y"} {
			var st syscall.Stat_t
			if err := syscall.Lstat(filepath.Join(ws, f), &st); err != nil {
				t.Errorf("%s was not written to the host: %v\n%s", f, err, o)
				continue
			}
			if st.Uid != uint32(uid) || st.Gid != uint32(uid) {
				t.Errorf("%s is owned by %d:%d on the host, want %d:%d", f, st.Uid, st.Gid, uid, uid)
			}
			if st.Mode&0o7002 != 0 {
				t.Errorf("%s has mode %#o on the host: set-id or writable to others (ESCAPES 21)", f, st.Mode&0o7777)
			}
		}
		if strings.Contains(o.stdout, "secret") {
			t.Errorf("a deny-read path was read:\n%s", o)
		}
		for _, want := range []string{"bashrc refused", "keep refused", "vscode refused", "etc refused", "outside refused", "setuid refused", "setgid refused", "others refused", "done"} {
			if !strings.Contains(o.stdout, want) {
				t.Errorf("output lacks %q:\n%s", want, o)
			}
		}
		for _, f := range []string{".bashrc", "keep.txt"} {
			if b, _ := os.ReadFile(filepath.Join(ws, f)); string(b) != "original\n" {
				t.Errorf("%s changed on the host: %q", f, b)
			}
		}
		for _, p := range []string{filepath.Join(ws, ".vscode"), "/etc/hutch-test", filepath.Join(outside, "x")} {
			if _, err := os.Lstat(p); err == nil {
				t.Errorf("%s exists after the sandbox", p)
			}
		}
	})
}

// TestEnvironment checks that the command gets exactly the environment it
// was given (hutch run scrubs it before).
func TestEnvironment(t *testing.T) {
	rt := testRuntime(t)
	ws := testutil.OwnedDir(t, testutil.UnprivilegedUID)
	o := run(t, rt, ws, nil, "env")
	wantExit(t, o, 0)
	got := strings.Fields(o.stdout)
	want := []string{"LANG=C.UTF-8", "ONLY_THIS=1", "PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + ws}
	for _, kv := range got {
		if !contains(want, kv) {
			t.Errorf("the command got %q, which it was not given", kv)
		}
	}
	for _, kv := range want {
		if !contains(got, kv) {
			t.Errorf("the command did not get %q", kv)
		}
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// TestExitCodes checks the command's own code, 128+N for a signal, 127 for
// a missing command and 126 for one that cannot be executed.
func TestExitCodes(t *testing.T) {
	rt := testRuntime(t)
	ws := testutil.OwnedDir(t, testutil.UnprivilegedUID)
	tests := []struct {
		name string
		args []string
		code int
		err  string
	}{
		{"own code", []string{"sh", "-c", "exit 7"}, 7, ""},
		{"signal", []string{"sh", "-c", "kill -9 $$"}, 128 + 9, ""},
		{"not found", []string{"no-such-command-hutch-test"}, sandbox.ExitNotFound, "command not found"},
		{"not executable", []string{"/etc/passwd"}, sandbox.ExitNotExecutable, "cannot execute"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := run(t, rt, ws, nil, tt.args...)
			wantExit(t, o, tt.code)
			if tt.err != "" && (o.err == nil || !strings.Contains(o.err.Error(), tt.err)) {
				t.Errorf("error %v, want %q", o.err, tt.err)
			}
		})
	}
}

// TestEnds checks S4: a timeout kills the sandbox, and a process the
// command left in the background does not outlive it (testRuntime checks
// that no process of runsc is left).
func TestEnds(t *testing.T) {
	rt := testRuntime(t)
	ws := testutil.OwnedDir(t, testutil.UnprivilegedUID)
	t.Run("timeout", func(t *testing.T) {
		o := run(t, rt, ws, func(s *policy.Spec) { s.Resources.Timeout = time.Second }, "sleep", "600")
		wantExit(t, o, sandbox.ExitTimeout)
		if !o.res.TimedOut {
			t.Errorf("not marked as timed out: %s", o)
		}
		if pids := processesOf(rt.StateDir); len(pids) > 0 {
			t.Errorf("processes outlived the timeout: %v", pids)
		}
	})
	t.Run("background", func(t *testing.T) {
		o := run(t, rt, ws, nil, "sh", "-c", "sleep 600 & echo started")
		wantExit(t, o, 0)
		if pids := processesOf(rt.StateDir); len(pids) > 0 {
			t.Errorf("processes outlived the command: %v", pids)
		}
	})
}

// TestLimits checks the memory limit (gVisor's kernel reports it as the
// memory there is) and the pids limit.
func TestLimits(t *testing.T) {
	rt := testRuntime(t)
	ws := testutil.OwnedDir(t, testutil.UnprivilegedUID)
	o := run(t, rt, ws, func(s *policy.Spec) { s.Resources.MemoryBytes = 64 << 20; s.Resources.CPUs = 1 }, "head", "-1", "/proc/meminfo")
	wantExit(t, o, 0)
	if f := strings.Fields(o.stdout); len(f) < 2 || f[1] != "65536" {
		t.Errorf("MemTotal %q, want the limit, 65536 kB", o.stdout)
	}
	// The CPU limit is the cgroup's around gVisor's Sentry.
	done := make(chan outcome, 1)
	go func() {
		done <- run(t, rt, ws, func(s *policy.Spec) { s.Resources.CPUs = 0.5 }, "sh", "-c", "echo started; sleep 600")
	}()
	var quota string
	testutil.Eventually(time.Minute, func() bool {
		for _, pid := range sentries(rt.StateDir) {
			cg, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
			for _, l := range strings.Split(string(cg), "\n") {
				if f := strings.SplitN(l, ":", 3); len(f) == 3 && (f[1] == "cpu" || f[1] == "cpu,cpuacct" || f[1] == "") {
					for _, file := range []string{"/sys/fs/cgroup/cpu" + f[2] + "/cpu.cfs_quota_us", "/sys/fs/cgroup" + f[2] + "/cpu.max", "/sys/fs/cgroup/unified" + f[2] + "/cpu.max"} {
						if b, err := os.ReadFile(file); err == nil && !strings.HasPrefix(string(b), "max") && !strings.HasPrefix(string(b), "-1") {
							quota = strings.TrimSpace(string(b))
						}
					}
				}
			}
			if quota != "" {
				return true
			}
		}
		return false
	})
	endAll(t, rt.StateDir, done)
	if quota != "50000" && quota != "50000 100000" {
		t.Errorf("the Sentry's cgroup has CPU quota %q, want half a core (50000 per 100000)", quota)
	}
	o = run(t, rt, ws, func(s *policy.Spec) { s.Resources.Pids = 40 },
		"sh", "-c", "i=0; while [ $i -lt 200 ]; do sleep 600 & i=$((i+1)); done; echo all started")
	if o.res.ExitCode == 0 || strings.Contains(o.stdout, "all started") {
		t.Errorf("200 processes started under a limit of 40: %s", o)
	}
}

// TestRefuses checks what the tier refuses rather than drop (S2).
func TestRefuses(t *testing.T) {
	rt := &Runtime{Runsc: "/nonexistent/runsc"}
	s := policy.Spec{Tier: policy.TierGVisor}
	s.Network.Mode = "proxy"
	_, err := rt.Run(context.Background(), sandbox.Config{Spec: s, Args: []string{"true"}})
	if err == nil || !strings.Contains(err.Error(), "network mode proxy needs an egress proxy") {
		t.Errorf("network mode proxy without a proxy: %v", err)
	}
	s.Network.Mode = "host"
	if _, err := rt.Run(context.Background(), sandbox.Config{Spec: s, Args: []string{"true"}}); err == nil || !strings.Contains(err.Error(), `"host" is not supported under tier "gvisor"`) {
		t.Errorf("network mode host: %v", err)
	}
	if _, err := rt.Start(sandbox.Config{Spec: s}); err == nil {
		t.Error("Start of a policy the tier refuses (network mode host) did not fail")
	}
}

// TestRootsDoNotNest checks that a sandbox's root, a clone of the host's
// mount tree, holds no copy of the roots of the sandboxes already running.
func TestRootsDoNotNest(t *testing.T) {
	rt := testRuntime(t)
	ws := testutil.OwnedDir(t, testutil.UnprivilegedUID)
	var done []chan outcome
	for i := 0; i < 2; i++ {
		ch := make(chan outcome, 1)
		done = append(done, ch)
		go func() { ch <- run(t, rt, ws, nil, "sleep", "600") }()
		want := i + 1
		if !testutil.Eventually(time.Minute, func() bool { return len(sentries(rt.StateDir)) == want }) {
			endAll(t, rt.StateDir, done...)
			t.Fatalf("sandbox %d did not start", want)
		}
	}
	info, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(info), "\n") {
		f := strings.Fields(l)
		if len(f) < 5 || strings.Count(f[4], rt.StateDir) < 2 {
			continue
		}
		// The one mount there: the empty tmpfs that stands for the
		// state directory in the root's copy.
		if sep := slices.Index(f, "-"); strings.HasSuffix(f[4], "/rootfs"+rt.StateDir) && sep > 0 && sep+1 < len(f) && f[sep+1] == "tmpfs" {
			continue
		}
		t.Errorf("a sandbox's root holds another's: %s", l)
	}
	endAll(t, rt.StateDir, done...)
}

// endAll ends the sandboxes below dir, which the test started in the
// background, by killing runsc and its processes (a Sentry may still be
// re-executing itself when the test looks), and waits for their runs.
func endAll(t *testing.T, dir string, done ...chan outcome) {
	t.Helper()
	guard := time.After(2 * time.Minute) // a guard, not a threshold
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for _, ch := range done {
		for waiting := true; waiting; {
			for _, pid := range processesOf(dir) {
				_ = unix.Kill(pid, unix.SIGKILL)
			}
			select {
			case <-ch:
				waiting = false
			case <-tick.C:
			case <-guard:
				t.Fatal("a sandbox did not end after its processes were killed")
			}
		}
	}
}

// sentries lists the Sentry processes of the sandboxes below dir.
func sentries(dir string) []int {
	var out []int
	for _, pid := range processesOf(dir) {
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if bytes.HasPrefix(cmdline, []byte("runsc-sandbox")) {
			out = append(out, pid)
		}
	}
	return out
}

// TestRootOwnedWorkspace: a workspace of root's makes the command root
// inside gVisor but no owner of the host's files: a file only root may
// read stays closed to it (S1), as in the namespace tier, while what it
// writes in the workspace lands there as root's; also when the way to the
// workspace is a directory others cannot search (as /root is for
// /root/project); with either file access (with direct access the Sentry
// holds file capabilities, over the sandbox's ids only).
func TestRootOwnedWorkspace(t *testing.T) {
	forFileAccess(t, func(t *testing.T, rt *Runtime) {
		open, err := os.MkdirTemp("/var/tmp", "hutch-test-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(open) })
		if err := os.Chmod(open, 0o755); err != nil {
			t.Fatal(err)
		}
		secret := filepath.Join(open, "root-only")
		if err := os.WriteFile(secret, []byte("root-secret\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		for _, way := range []struct {
			name string
			mode os.FileMode
		}{{"open way", 0o755}, {"closed way", 0o700}} {
			t.Run(way.name, func(t *testing.T) {
				parent, err := os.MkdirTemp("/var/tmp", "hutch-test-")
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { os.RemoveAll(parent) })
				if err := os.Chmod(parent, way.mode); err != nil {
					t.Fatal(err)
				}
				ws := filepath.Join(parent, "project")
				if err := os.Mkdir(ws, 0o755); err != nil {
					t.Fatal(err)
				}
				o := run(t, rt, ws, nil, "sh", "-c", "id -u; pwd; cat "+secret+" || echo secret refused; echo new > new.txt && echo written")
				wantExit(t, o, 0)
				if strings.Contains(o.stdout, "root-secret") || !strings.Contains(o.stdout, "secret refused") {
					t.Errorf("the command read a file only the host's root may read:\n%s", o)
				}
				if lines := strings.Split(o.stdout, "\n"); len(lines) < 2 || lines[0] != "0" || lines[1] != ws {
					t.Errorf("want root in the workspace %s:\n%s", ws, o)
				}
				var st syscall.Stat_t
				if err := syscall.Lstat(filepath.Join(ws, "new.txt"), &st); err != nil {
					t.Fatalf("new.txt was not written to the host: %v\n%s", err, o)
				}
				if st.Uid != 0 || st.Gid != 0 {
					t.Errorf("new.txt is owned by %d:%d on the host, want root's", st.Uid, st.Gid)
				}
			})
		}
	})
}

// TestDenyReadSockets: a deny-read path that is a unix socket (as
// /run/docker.sock on a Docker host) is an empty file in the view, and
// the sandbox starts: gVisor's gofer cannot mount over a socket, so hutch
// masks it on the host. One in the workspace is refused, not left open.
func TestDenyReadSockets(t *testing.T) {
	rt := testRuntime(t)
	ws := testutil.OwnedDir(t, testutil.UnprivilegedUID)
	outside, err := os.MkdirTemp("/var/tmp", "hutch-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(outside) })
	if err := os.Chmod(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	listen := func(p string) {
		l, err := net.Listen("unix", p)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		if err := os.Chmod(p, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	sock := filepath.Join(outside, "daemon.sock")
	listen(sock)
	o := run(t, rt, ws, func(s *policy.Spec) { s.Filesystem.DenyRead = []string{sock} }, "sh", "-c",
		"if [ -S "+sock+" ]; then echo socket; elif [ -f "+sock+" ] && [ ! -s "+sock+" ]; then echo empty; fi")
	wantExit(t, o, 0)
	if strings.TrimSpace(o.stdout) != "empty" {
		t.Errorf("want the socket masked by an empty file:\n%s", o)
	}
	inside := filepath.Join(ws, "agent.sock")
	listen(inside)
	o = run(t, rt, ws, func(s *policy.Spec) { s.Filesystem.DenyRead = []string{inside} }, "true")
	if o.res.ExitCode == 0 || o.err == nil || !strings.Contains(o.err.Error(), "cannot be masked") {
		t.Errorf("a socket to hide in the workspace was not refused:\n%s", o)
	}
}
