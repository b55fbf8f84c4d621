// Package testutil holds the helpers hutch's tests share: the one gate for
// tests that need root or a kernel feature. Such a test skips with its reason
// on a developer laptop but fails when HUTCH_TEST_ROOT=1 (as CI sets), so CI
// can never be green by skipping.
package testutil

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Strict reports whether tests run under HUTCH_TEST_ROOT=1, where a missing
// privilege or kernel feature is a failure instead of a skip.
func Strict() bool { return os.Getenv("HUTCH_TEST_ROOT") == "1" }

// Need skips the test with reason when ok is false, or fails it in strict
// mode.
func Need(t testing.TB, ok bool, reason string) {
	t.Helper()
	if ok {
		return
	}
	if Strict() {
		t.Fatalf("HUTCH_TEST_ROOT=1 but this test cannot run: %s", reason)
	}
	t.Skipf("skipping: %s (set HUTCH_TEST_ROOT=1 to make this a failure)", reason)
}

// RequireRoot skips (or fails in strict mode) unless the test runs as root.
func RequireRoot(t testing.TB) {
	t.Helper()
	Need(t, os.Geteuid() == 0, "needs root")
}

// RunscEnv names the environment variable that gives the tests of the
// gVisor tier their runsc binary; without it they look for runsc on PATH.
const RunscEnv = "HUTCH_TEST_RUNSC"

// Runsc returns the runsc binary for tests of the gVisor tier, which need
// root: $HUTCH_TEST_RUNSC, else runsc on PATH. Without one the test skips
// with the reason, or fails when HUTCH_TEST_ROOT=1. It does not check the
// version: the tests do, with the tier's own check.
func Runsc(t testing.TB) string {
	t.Helper()
	RequireRoot(t)
	if p := os.Getenv(RunscEnv); p != "" {
		_, err := os.Stat(p)
		Need(t, err == nil, fmt.Sprintf("%s=%s: %v", RunscEnv, p, err))
		return p
	}
	p, err := exec.LookPath("runsc")
	Need(t, err == nil, "needs gVisor's runsc on PATH or in $"+RunscEnv+" (see the README's test command)")
	return p
}

// RunscShimEnv names the environment variable that gives the tests of the
// gVisor tier in a cluster gVisor's containerd shim,
// containerd-shim-runsc-v1, built from the same module version as runsc
// (scripts/test.sh builds both into one directory and sets it).
const RunscShimEnv = "HUTCH_TEST_RUNSC_SHIM"

// RunscShimName is the name of gVisor's containerd shim, which containerd
// derives from the runtime type io.containerd.runsc.v1.
const RunscShimName = "containerd-shim-runsc-v1"

// RunscShim returns gVisor's containerd shim for tests of the gVisor tier
// in a cluster: $HUTCH_TEST_RUNSC_SHIM, else the one beside Runsc's
// binary, else one on PATH. Without one the test skips with the reason,
// or fails when HUTCH_TEST_ROOT=1.
func RunscShim(t testing.TB) string {
	t.Helper()
	RequireRoot(t)
	p := os.Getenv(RunscShimEnv)
	if p == "" {
		beside := filepath.Join(filepath.Dir(Runsc(t)), RunscShimName)
		if _, err := os.Stat(beside); err == nil {
			return beside
		}
		var err error
		p, err = exec.LookPath(RunscShimName)
		Need(t, err == nil, "needs gVisor's "+RunscShimName+" in $"+RunscShimEnv+", beside runsc or on PATH (scripts/test.sh builds it)")
	}
	_, err := os.Stat(p)
	Need(t, err == nil, fmt.Sprintf("%s=%s: %v", RunscShimEnv, p, err))
	return p
}

// The environment variables that give the tests hutch's own images: the
// tarballs scripts/base-image.sh builds (its --no-import prints the path;
// scripts/test.sh sets them).
const (
	BaseImageEnv            = "HUTCH_TEST_BASE_IMAGE"
	CodeInterpreterImageEnv = "HUTCH_TEST_CODE_INTERPRETER_IMAGE"
)

// BaseImage returns the tarball of hutch's base image ($HUTCH_TEST_BASE_IMAGE)
// for a test that imports it, which needs root. Without root or the
// tarball the test skips with the reason, or fails when HUTCH_TEST_ROOT=1.
func BaseImage(t testing.TB) string {
	t.Helper()
	return builtImage(t, BaseImageEnv, "base image", "")
}

// CodeInterpreterImage is BaseImage for hutch's code-interpreter image
// ($HUTCH_TEST_CODE_INTERPRETER_IMAGE, built by scripts/base-image.sh
// --code-interpreter).
func CodeInterpreterImage(t testing.TB) string {
	t.Helper()
	return builtImage(t, CodeInterpreterImageEnv, "code-interpreter image", " --code-interpreter")
}

func builtImage(t testing.TB, env, what, flag string) string {
	t.Helper()
	RequireRoot(t)
	p := os.Getenv(env)
	Need(t, p != "", "$"+env+" names no tarball of hutch's "+what+" (scripts/base-image.sh"+flag+" --no-import builds it and prints its path; scripts/test.sh sets it)")
	_, err := os.Stat(p)
	Need(t, err == nil, fmt.Sprintf("%s=%s: %v", env, p, err))
	return p
}

var (
	buildOnce sync.Once
	buildPath string
	buildErr  error
)

// BinEnv names a directory of hutch's binaries built for the tests
// (scripts/test.sh builds them once for every package's tests): hutch,
// hutch-serve, hutch-agent and hutch-runc. Unset, each test process builds
// its own.
const BinEnv = "HUTCH_TEST_BIN"

// Hutch builds the hutch binary once per test process (CGO disabled, as
// released) into a world-readable directory, so tests can also run it as an
// unprivileged user, and returns its path. hutch-serve (the daemon's
// binary, which hutch serve and hutch token run) and hutch-agent (the
// sandboxes' PID 1, which hutch serve finds there) are built next to it.
// With $HUTCH_TEST_BIN set, it is the binary there.
func Hutch(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		buildPath, buildErr = Build("hutch", "github.com/hutch-sandbox/hutch/cmd/hutch", "github.com/hutch-sandbox/hutch/cmd/hutch-serve", "github.com/hutch-sandbox/hutch/cmd/hutch-agent")
	})
	if buildErr != nil {
		t.Fatalf("build hutch: %v", buildErr)
	}
	return buildPath
}

// Build returns the path of the binary name of $HUTCH_TEST_BIN when that
// is set; else it builds pkgs (CGO disabled, as released; name is one of
// them) into a new world-readable directory and returns name's path there,
// which RemoveBuilt removes.
func Build(name string, pkgs ...string) (string, error) {
	if dir := os.Getenv(BinEnv); dir != "" {
		p := filepath.Join(dir, name)
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("$%s: %w", BinEnv, err)
		}
		return p, nil
	}
	dir, err := os.MkdirTemp("", name+"-bin-")
	if err == nil {
		err = os.Chmod(dir, 0o755)
	}
	if err != nil {
		return "", err
	}
	cmd := exec.Command("go", append([]string{"build", "-o", dir + "/"}, pkgs...)...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return filepath.Join(dir, name), nil
}

// RemoveBuilt removes what Build built at path (not $HUTCH_TEST_BIN's).
func RemoveBuilt(path string) {
	if path != "" && os.Getenv(BinEnv) == "" {
		os.RemoveAll(filepath.Dir(path))
	}
}

// UnprivilegedUID is the uid and gid tests use to run hutch as an ordinary
// user. No account needs to exist for it.
const UnprivilegedUID = 4242

// OwnedDir makes a fresh directory owned by uid (when running as root), for
// use as a workspace of a sandbox started by that user. It is removed when
// the test ends.
func OwnedDir(t testing.TB, uid int) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "hutch-ws-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// A sandbox that has just ended may still hold what it had in
		// the workspace for a moment: try again before giving up. A
		// gVisor sandbox whose supervisor was killed is ended by its
		// reaper, which a busy machine delays past 10 s (the escape
		// suite's TestItem09_SupervisorKilled left its workspace so).
		var err error
		if !Eventually(time.Minute, func() bool { err = os.RemoveAll(dir); return err == nil }) {
			t.Logf("workspace %s left behind: %v", dir, err)
		}
	})
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		if err := os.Chown(dir, uid, uid); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// RemoveBuilds removes the binary Hutch built, if any. Packages that use
// Hutch call it from TestMain once m.Run is done.
func RemoveBuilds() { RemoveBuilt(buildPath) }

// Eventually polls cond every 10 ms for up to d and reports whether it
// became true: for what a test waits on without a signal to wait for.
func Eventually(d time.Duration, cond func() bool) bool {
	for end := time.Now().Add(d); ; {
		if cond() {
			return true
		}
		if time.Now().After(end) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Buffer is a bytes.Buffer safe for concurrent use: written by a process
// or a logger while the test reads it.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String returns what was written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// asUserEnv marks the test process RunAsUser started.
const asUserEnv = "HUTCH_TEST_AS_USER"

// AsUser reports whether this test process is the one RunAsUser started.
func AsUser() bool { return os.Getenv(asUserEnv) != "" }

// RunAsUser runs the tests of this test binary whose names match pattern
// (a -test.run expression) again, as UnprivilegedUID, and fails t unless
// they pass: for packages whose code also runs as an ordinary user's
// hutch. It needs root; in the process it started it does nothing.
func RunAsUser(t *testing.T, pattern string) {
	t.Helper()
	if AsUser() {
		t.Skip("already the ordinary user")
	}
	RequireRoot(t)
	// The test binary lies where only root may look: a copy the user can
	// run.
	self, err := os.ReadFile("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "hutch-as-user-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	bin := filepath.Join(dir, "test")
	if err := os.WriteFile(bin, self, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run="+pattern, "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), asUserEnv+"=1", "TMPDIR=/tmp")
	id := uint32(UnprivilegedUID)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: id, Gid: id, Groups: []uint32{}}}
	out, err := cmd.CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("\nPASS")) || bytes.Contains(out, []byte("--- SKIP")) {
		t.Errorf("as uid %d: %v\n%s", id, err, out)
	}
}

// Proc is a process, told apart from a later one of the same pid by its
// start time.
type Proc struct {
	PID   int
	start string // field 22 of /proc/PID/stat
}

// Alive reports whether the process still exists and is not a zombie.
func (p Proc) Alive() bool {
	st, err := procStat(p.PID)
	return err == nil && st.start == p.start && st.state != "Z"
}

// procStatus is what Descendants reads of /proc/PID/stat.
type procStatus struct {
	state, start string
	ppid         int
}

func procStat(pid int) (procStatus, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return procStatus{}, err
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 20 {
		return procStatus{}, fmt.Errorf("/proc/%d/stat: too short", pid)
	}
	ppid, _ := strconv.Atoi(f[1])
	return procStatus{state: f[0], start: f[19], ppid: ppid}, nil
}

// Descendants returns root and every process below it: what a test
// started (a browser and its helpers) and must find gone once it ended
// it.
func Descendants(root int) []Proc {
	entries, _ := os.ReadDir("/proc")
	stats := map[int]procStatus{}
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			if st, err := procStat(pid); err == nil {
				stats[pid] = st
			}
		}
	}
	var out []Proc
	for pid, st := range stats {
		for p, n := pid, 0; p > 1 && n < 1000; p, n = stats[p].ppid, n+1 {
			if p == root {
				out = append(out, Proc{PID: pid, start: st.start})
				break
			}
		}
	}
	return out
}

// StartLocked starts cmd from an OS thread of its own, locked until cmd
// ends, and returns a channel closed once it has been waited for. A
// parent-death signal (SysProcAttr.Pdeathsig) is sent when the thread
// that started the process ends, not the process: started from any
// thread, a daemon would be killed when a goroutine that locked that
// thread (to enter a namespace, say) ends.
func StartLocked(cmd *exec.Cmd) (<-chan struct{}, error) {
	started := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		err := cmd.Start()
		started <- err
		if err == nil {
			cmd.Wait()
			close(done)
		}
	}()
	return done, <-started
}
