package sandbox

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/agent"
	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// TestMain lets this test binary be the agent of the sandboxes the tests
// start: Start execs hutch's own binary, which here is the test binary,
// as "hutch agent".
func TestMain(m *testing.M) {
	if len(os.Args) == 2 && os.Args[1] == "agent" {
		os.Exit(agent.Main(os.Stderr))
	}
	os.Exit(m.Run())
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
	sb, err := Start(Config{Spec: s, Environ: []string{"PATH=/usr/bin:/bin", "HOME=/tmp"}})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	c := agent.NewClient(sb.Conn())
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

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
