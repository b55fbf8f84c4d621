package changes

import (
	"bytes"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/approve"
	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// TestCLIFileRules: hutch changes apply matches approvals.files. Without
// a terminal, an ask rule refuses, naming the rule and --yes-files; a
// deny rule the set records refuses with --yes-files too; on a terminal
// (a real pty, hutch's controlling terminal), the person is asked, and
// "n" refuses and "y" applies. A refused apply leaves the workspace as it
// was.
func TestCLIFileRules(t *testing.T) {
	hutch := testutil.Hutch(t)
	ws := workspace(t, map[string]string{"Makefile": "all:\n", "main.go": "package main\n"})
	s := review(t, ws, `echo 'all: evil' > Makefile; echo more >> main.go; mkdir -p .github && echo x > .github/x.yml`)
	dir := t.TempDir()
	pol := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(pol, []byte("approvals:\n  files:\n    - ask: [Makefile, \".github/**\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("approvals:\n  files:\n    - ask: [/etc]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "XDG_STATE_HOME="+filepath.Dir(filepath.Dir(filepath.Dir(s.Dir()))))
	before := tree(t, ws)
	// run runs hutch changes apply with args in a session of its own:
	// with tty as its controlling terminal, else with none.
	run := func(want int, tty *os.File, args ...string) string {
		t.Helper()
		cmd := exec.Command(hutch, append([]string{"changes", "apply", s.ID()}, args...)...)
		cmd.Env = env
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if tty != nil {
			cmd.ExtraFiles = []*os.File{tty}
			cmd.SysProcAttr.Setctty, cmd.SysProcAttr.Ctty = true, 3
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if tty != nil {
			tty.Close() // hutch holds it now
		}
		cmd.Wait()
		if got := cmd.ProcessState.ExitCode(); got != want {
			t.Fatalf("hutch changes apply %v: exit %d, want %d\n%s", args, got, want, out.String())
		}
		return out.String()
	}
	untouched := func(what string) {
		t.Helper()
		if got := tree(t, ws); !maps.Equal(got, before) {
			t.Errorf("%s: the workspace changed", what)
		}
	}

	if out := run(2, nil, "--policy", bad); !strings.Contains(out, `bad.yaml:3:13: approvals.files[0].ask[0]: pattern "/etc"`) {
		t.Errorf("a bad policy: %s", out)
	}
	out := run(1, nil, "--policy", pol)
	for _, want := range []string{"3 paths not approved under approvals.files ask: [\"Makefile\", \".github/**\"] (" + pol + ":3)", "  .github/x.yml\n", "  Makefile\n", "--yes-files", "remove the rule"} {
		if !strings.Contains(out, want) {
			t.Errorf("no terminal: %q missing in\n%s", want, out)
		}
	}
	untouched("no terminal")

	// On a terminal: asked, and refused.
	answer := func(key string) string {
		t.Helper()
		master, tty := testutil.OpenPty(t)
		var shown syncText
		done := make(chan struct{})
		go func() {
			defer close(done)
			shown.copyFrom(master)
		}()
		go func() {
			if shown.waitFor("apply them? [y/N] ", 2*time.Minute) {
				master.Write([]byte(key + "\n"))
			}
		}()
		code := 1
		if key == "y" {
			code = 0
		}
		out := run(code, tty, "--policy", pol)
		master.Close()
		<-done
		if q := shown.String(); !strings.Contains(q, "approval needed to apply changes to these paths:") || !strings.Contains(q, "    Makefile\r\n") ||
			!strings.Contains(q, "asked by approvals.files ask:") {
			t.Errorf("the question on the terminal:\n%s", q)
		}
		return out
	}
	if out := answer("n"); !strings.Contains(out, "refused by terminal") {
		t.Errorf("answered n: %s", out)
	}
	untouched("answered n")

	// A deny rule recorded with the set refuses whatever is answered.
	if err := s.SetFileRules([]approve.FileRule{{Action: approve.Deny, Globs: []string{"main.go"}, Source: "run's policy"}}); err != nil {
		t.Fatal(err)
	}
	if out := run(1, nil, "--policy", pol, "--yes-files"); !strings.Contains(out, `1 path denied by approvals.files deny: ["main.go"] (run's policy)`) {
		t.Errorf("a deny rule of the set: %s", out)
	}
	untouched("denied")
	if err := s.SetFileRules(nil); err != nil {
		t.Fatal(err)
	}

	if out := answer("y"); !strings.Contains(out, "applied 4 paths") {
		t.Errorf("answered y: %s", out)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "Makefile")); string(b) != "all: evil\n" {
		t.Errorf("Makefile after the apply: %q", b)
	}
}

// syncText is what a terminal showed, read while it grows.
type syncText struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncText) copyFrom(f *os.File) {
	buf := make([]byte, 4096)
	for {
		n, err := f.Read(buf)
		s.mu.Lock()
		s.b.Write(buf[:n])
		s.mu.Unlock()
		if err != nil {
			return
		}
	}
}

func (s *syncText) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// waitFor waits until the text holds substr, for at most d.
func (s *syncText) waitFor(substr string, d time.Duration) bool {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if strings.Contains(s.String(), substr) {
			return true
		}
	}
	return false
}
