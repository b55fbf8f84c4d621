package sandbox

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/agent"
	"github.com/hutch-sandbox/hutch/internal/hostperm"
	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// TestMain lets this test binary be the agent of the sandboxes the tests
// start: Start execs hutch's own binary, which here is the test binary,
// as "hutch agent".
func TestMain(m *testing.M) {
	agent.MainIfAgent()
	os.Exit(m.Run())
}

// startAgent starts a long-lived sandbox and connects to its agent; both
// end with the test.
func startAgent(t *testing.T, cfg Config) (*Sandbox, *agent.Client, context.Context) {
	t.Helper()
	sb, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Close() })
	c := agent.NewClient(sb.Conn())
	t.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return sb, c, ctx
}

// TestStart: a long-lived sandbox runs hutch's agent as its PID 1, which
// runs commands in the sandbox (in its workspace, as the sandbox's
// identity, under its isolation) and serves files there; closing the
// sandbox ends every process in it.
func TestStart(t *testing.T) {
	testutil.RequireRoot(t)
	ws := t.TempDir()
	var s policy.Spec
	if err := s.Normalize(ws, t.TempDir()); err != nil {
		t.Fatal(err)
	}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	sb, c, ctx := startAgent(t, Config{Spec: s, Environ: []string{"PATH=/usr/bin:/bin", "HOME=/tmp"}})

	run := func(script string) (string, agent.ExitStatus) {
		t.Helper()
		p, err := c.Exec(ctx, agent.ExecRequest{Args: []string{"sh", "-c", script}})
		if err != nil {
			t.Fatalf("exec %q: %v", script, err)
		}
		var out, errOut bytes.Buffer
		done := make(chan struct{})
		go func() { _, _ = io.Copy(&errOut, p.Stderr); close(done) }()
		_, _ = io.Copy(&out, p.Stdout)
		<-done
		out.Write(errOut.Bytes())
		st, err := p.Wait()
		if err != nil {
			t.Fatalf("wait %q: %v", script, err)
		}
		return out.String(), st
	}
	out, st := run(`echo "pid1=$(tr '\0' ' ' </proc/1/cmdline)"; echo "cwd=$PWD"; echo "host=$(hostname)"; id -u; touch /etc/x 2>&1 || echo ro; echo made >made-here; exit 7`)
	if st.Code != 7 {
		t.Errorf("exit status %+v, want code 7\n%s", st, out)
	}
	for _, want := range []string{"pid1=hutch agent", "cwd=" + ws, "host=hutch", "ro"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if b, err := os.ReadFile(filepath.Join(ws, "made-here")); err != nil || string(b) != "made\n" {
		t.Errorf("the command's file in the workspace: %q, %v", b, err)
	}
	if _, err := c.WriteFile(ctx, filepath.Join(ws, "from-daemon"), strings.NewReader("hello"), 0o644); err != nil {
		t.Fatalf("write file: %v", err)
	}
	var got bytes.Buffer
	if _, err := c.ReadFile(ctx, filepath.Join(ws, "from-daemon"), &got); err != nil || got.String() != "hello" {
		t.Errorf("read back %q, %v", got.String(), err)
	}
	// The agent reads files as the sandbox sees them: its /etc/shadow is
	// not the host's to read.
	if _, err := c.ReadFile(ctx, "/etc/shadow", io.Discard); err == nil {
		t.Errorf("the agent read /etc/shadow")
	}

	// A daemon process in the sandbox dies with it (S4).
	p, err := c.Exec(ctx, agent.ExecRequest{Args: []string{"sh", "-c", "setsid sleep 1000 >/dev/null 2>&1 & echo $!"}})
	if err != nil {
		t.Fatal(err)
	}
	pidOut, _ := io.ReadAll(p.Stdout)
	_, _ = p.Wait()
	if len(bytes.TrimSpace(pidOut)) == 0 {
		t.Fatal("no pid of the daemon process")
	}
	if err := sb.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	select {
	case <-sb.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the sandbox did not end")
	}
	// The sandbox's PID 1 is gone, and with it its pid namespace.
	if err := syscall.Kill(sb.PID(), 0); err == nil {
		t.Errorf("PID 1 (host pid %d) still exists", sb.PID())
	}
}

// TestStartPID1: the agent, PID 1 of a long-lived sandbox, is not
// dumpable, so the commands (which run as its uid) can neither open its
// memory nor read its environment, and its streams are the sandbox's
// /dev/null, not those of the process that started the sandbox (a
// daemon's log): nothing of the host reaches the sandbox through PID 1
// (ESCAPES 27). A command holds its own streams and nothing else (not the
// seccomp listener the agent serves: its workspace is the host's, so the
// agent answers the umask calls the filter hands over).
func TestStartPID1(t *testing.T) {
	testutil.RequireRoot(t)
	ws := t.TempDir()
	var s policy.Spec
	if err := s.Normalize(ws, t.TempDir()); err != nil {
		t.Fatal(err)
	}
	sb, c, ctx := startAgent(t, Config{Spec: s, Environ: []string{"PATH=/usr/bin:/bin", "HOME=/tmp"}})
	p, err := c.Exec(ctx, agent.ExecRequest{Args: []string{"sh", "-c", `
head -c 1 /proc/1/environ >/dev/null 2>&1 && echo environ-readable
(exec 3<>/proc/1/mem) 2>/dev/null && echo mem-writable
ls /proc/self/fd | tr '\n' ' '`}})
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(io.MultiReader(p.Stdout, p.Stderr))
	if _, err := p.Wait(); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), "readable") || strings.Contains(string(out), "writable") {
		t.Errorf("PID 1 is open to its commands:\n%s", out)
	}
	// ls lists its own directory's descriptor too.
	if got := strings.Fields(string(out)); len(got) != 4 || got[0] != "0" || got[1] != "1" || got[2] != "2" {
		t.Errorf("a command's descriptors: %q, want 0, 1, 2 (and ls's own)", out)
	}
	// The workspace is the host's: the agent answers the umask calls the
	// filter hands over (dash's umask reads it with umask(0), then sets it
	// back), umask 0 is not set, and new files are not writable by others.
	p, err = c.Exec(ctx, agent.ExecRequest{Args: []string{"sh", "-c", "umask; umask 0; umask; rm -f f; touch f; stat -c %a f"}})
	if err != nil {
		t.Fatal(err)
	}
	out, _ = io.ReadAll(io.MultiReader(p.Stdout, p.Stderr))
	if _, err := p.Wait(); err != nil {
		t.Fatal(err)
	}
	um := hostperm.SandboxUmask(hostperm.Umask())
	if want := fmt.Sprintf("%04o\n%04o\n%o\n", um, um, 0o666&^um); string(out) != want {
		t.Errorf("umask in a sandbox with host paths to write: %q, want %q", out, want)
	}
	for fd := range 3 {
		var st syscall.Stat_t
		path := fmt.Sprintf("/proc/%d/fd/%d", sb.PID(), fd)
		if err := syscall.Stat(path, &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFCHR || st.Rdev != 1<<8|3 {
			link, _ := os.Readlink(path)
			t.Errorf("the agent's descriptor %d is %q (%v), want /dev/null", fd, link, err)
		}
	}
}

// TestStartRootLayer: with a root layer, the sandbox's whole root is
// writable, files keep their host owners, writes never reach the host,
// hidden directories are empty, the layer's size is a hard limit, and the
// default deny-read paths stay masked.
func TestStartRootLayer(t *testing.T) {
	testutil.RequireRoot(t)
	// Host fixtures outside /tmp (which every sandbox replaces).
	fix, err := os.MkdirTemp("/var/lib", "hutch-layer-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(fix) })
	if err := os.Chmod(fix, 0o755); err != nil {
		t.Fatal(err)
	}
	owned := filepath.Join(fix, "owned")
	hidden := filepath.Join(fix, "hidden")
	removed := filepath.Join(fix, "sub", "removed")
	for _, f := range []struct{ path, text string }{
		{owned, "owned by 1234\n"}, {filepath.Join(hidden, "secret"), "host secret\n"}, {removed, "removed\n"},
	} {
		if err := os.MkdirAll(filepath.Dir(f.path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f.path, []byte(f.text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chown(owned, 1234, 1234); err != nil {
		t.Fatal(err)
	}

	var s policy.Spec
	if err := s.Normalize("/workspace", ""); err != nil {
		t.Fatal(err)
	}
	_, c, ctx := startAgent(t, Config{
		Spec:      s,
		Environ:   []string{"PATH=/usr/bin:/bin", "HOME=/root"},
		RootLayer: &RootLayer{SizeBytes: 16 << 20, Hide: []string{"/root", hidden}, Remove: []string{removed, "/nonexistent/file"}},
	})
	run := func(script string) (string, int) {
		t.Helper()
		p, err := c.Exec(ctx, agent.ExecRequest{Args: []string{"sh", "-c", script}})
		if err != nil {
			t.Fatalf("exec %q: %v", script, err)
		}
		out, _ := io.ReadAll(io.MultiReader(p.Stdout, p.Stderr))
		st, err := p.Wait()
		if err != nil {
			t.Fatalf("wait %q: %v", script, err)
		}
		return string(out), st.Code
	}
	hostname, err := os.ReadFile("/etc/hostname")
	if err != nil {
		t.Fatal(err)
	}

	out, code := run(`set -e
echo "cwd=$PWD uid=$(id -u)"
echo "passwd=$(stat -c %u:%g /etc/passwd) owned=$(stat -c %u:%g ` + owned + `)"
echo layer > /etc/hutch-layer-test
echo changed > /etc/hostname
mkdir -p /usr/local/lib/hutch-layer-test && echo pkg > /usr/local/lib/hutch-layer-test/f
rm ` + owned + `
echo "hidden=[$(ls -A ` + hidden + `)] root=[$(ls -A /root)] removed=[$(ls -A ` + filepath.Dir(removed) + `)]"
echo mine > ` + hidden + `/new && echo hidden-writable
echo home > ~/file && echo home-writable
cat /etc/shadow 2>/dev/null | head -c 5 || true; echo "shadow-end"
`)
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	for _, want := range []string{
		"cwd=/workspace uid=0", "passwd=0:0 owned=1234:1234", "hidden=[] root=[] removed=[]",
		"hidden-writable", "home-writable", "\nshadow-end",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// The layer's size is a hard limit.
	out, code = run(`dd if=/dev/zero of=/workspace/big bs=1M count=32 2>&1; rm -f /workspace/big; echo after > /workspace/small && cat /workspace/small`)
	if code != 0 || !strings.Contains(out, "No space left") || !strings.HasSuffix(out, "after\n") {
		t.Errorf("filling the layer: exit %d:\n%s", code, out)
	}
	// Nothing the sandbox wrote reached the host.
	if _, err := os.Stat("/etc/hutch-layer-test"); err == nil {
		t.Error("/etc/hutch-layer-test appeared on the host")
	}
	if _, err := os.Stat("/usr/local/lib/hutch-layer-test"); err == nil {
		t.Error("/usr/local/lib/hutch-layer-test appeared on the host")
	}
	if b, _ := os.ReadFile("/etc/hostname"); !bytes.Equal(b, hostname) {
		t.Errorf("the host's /etc/hostname changed to %q", b)
	}
	if _, err := os.Stat(owned); err != nil {
		t.Errorf("the host's %s: %v", owned, err)
	}
	if b, err := os.ReadFile(filepath.Join(hidden, "secret")); err != nil || string(b) != "host secret\n" {
		t.Errorf("the host's hidden file: %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(hidden, "new")); err == nil {
		t.Error("a file written to a hidden directory reached the host")
	}
}
