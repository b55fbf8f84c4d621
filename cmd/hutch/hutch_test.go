package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// The tests in this package drive the built hutch binary the way a user
// would: flags, a working directory, an environment, pipes or a terminal,
// and they look only at exit codes, output and files on the host.

// TestMain removes the hutch build once every test is done; the testing
// package exits with m.Run's result.
func TestMain(m *testing.M) {
	m.Run()
	testutil.RemoveBuilds()
}

// stdPath is the PATH hutch gets in these tests: directories every sandbox
// can search, so that a missing command is reported as missing.
const stdPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// guard bounds one hutch invocation, so that a hang fails the test instead
// of the whole run. It is not a performance threshold: a microVM under
// emulation on a machine busy with the rest of the suite took more than
// a minute for what takes ten seconds alone.
const guard = 5 * time.Minute

// invocation is one run of the hutch binary.
type invocation struct {
	args  []string
	dir   string    // working directory; a fresh one when empty
	env   []string  // hutch's whole environment; baseEnv(dir) when nil
	stdin io.Reader // nil: no input
	uid   int       // run as this uid and gid (from a root test) when non-zero
	// fuse, when set, is a device node bound over /dev/fuse in a mount
	// namespace of hutch's own (root tests), so that a test chooses
	// whether hutch's user may open it.
	fuse string
	// noTTY runs hutch in a session of its own, without a controlling
	// terminal: nobody to ask, whether or not the test has a terminal.
	noTTY bool
}

// result is how hutch ended and what it printed.
type result struct {
	code           int
	stdout, stderr string
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// baseEnv is a plain user environment with home as HOME.
func baseEnv(home string) []string {
	return []string{"PATH=" + stdPath, "HOME=" + home, "LANG=C.UTF-8"}
}

// hutch runs the binary and returns its result; it fails the test only if
// hutch could not be started or did not end.
func hutch(t *testing.T, inv invocation) result {
	t.Helper()
	bin := testutil.Hutch(t)
	if inv.dir == "" {
		inv.dir = t.TempDir()
	}
	if inv.env == nil {
		inv.env = baseEnv(inv.dir)
	}
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, inv.args...)
	if inv.fuse != "" {
		drop := []string{}
		if inv.uid != 0 {
			drop = []string{"setpriv", fmt.Sprintf("--reuid=%d", inv.uid), fmt.Sprintf("--regid=%d", inv.uid), "--clear-groups"}
		}
		script := `mount --bind "$0" /dev/fuse && exec "$@"`
		cmd = exec.CommandContext(ctx, "/bin/sh", append(append([]string{"-c", script, inv.fuse}, drop...), append([]string{bin}, inv.args...)...)...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
		inv.uid = 0 // setpriv drops to it
	}
	cmd.Dir = inv.dir
	cmd.Env = inv.env
	cmd.Stdin = inv.stdin
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if inv.uid != 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{
			Uid: uint32(inv.uid), Gid: uint32(inv.uid), Groups: []uint32{},
		}}
	}
	if inv.noTTY {
		if cmd.SysProcAttr == nil {
			cmd.SysProcAttr = &syscall.SysProcAttr{}
		}
		cmd.SysProcAttr.Setsid = true
	}
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("hutch %q did not end within %s\nstdout:\n%s\nstderr:\n%s", inv.args, guard, stdout.String(), stderr.String())
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("hutch %q: %v", inv.args, err)
	}
	return result{code: cmd.ProcessState.ExitCode(), stdout: stdout.String(), stderr: stderr.String()}
}

// sandboxed runs `hutch run ARGS` in a fresh workspace (or inv.dir) and
// returns the result. Every sandbox test needs root (the gate skips on a
// laptop and fails under HUTCH_TEST_ROOT=1).
func sandboxed(t *testing.T, inv invocation) result {
	t.Helper()
	testutil.RequireRoot(t)
	inv.args = append([]string{"run"}, inv.args...)
	return hutch(t, inv)
}

// sh returns `hutch run` arguments that run script with sh -c, after flags.
func sh(script string, flags ...string) []string {
	return append(flags, "--", "sh", "-c", script)
}

// wantCode fails the test unless r ended with code.
func wantCode(t *testing.T, r result, code int) {
	t.Helper()
	if r.code != code {
		t.Fatalf("want exit %d, got %s", code, r)
	}
}

// wantOK fails the test unless r ended with 0.
func wantOK(t *testing.T, r result) {
	t.Helper()
	wantCode(t, r, 0)
}

// writeFile writes a file the test needs, failing the test on error.
func writeFile(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

// hostDir makes a directory outside /tmp, which every sandbox replaces with
// its own: a path there is visible in the sandbox as the host has it.
func hostDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("/var/tmp", "hutch-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// lines splits output into its non-empty lines.
func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}
