package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// approvalPolicy is a policy under which every command asks but rm, which
// is denied.
const approvalPolicy = `approvals:
  preset: none
  default: ask
  commands:
    - deny: [rm]
`

func writeApprovalPolicy(t *testing.T) (file, report string) {
	t.Helper()
	dir := t.TempDir()
	file = filepath.Join(dir, "policy.yaml")
	writeFile(t, file, approvalPolicy, 0o644)
	return file, filepath.Join(dir, "report.jsonl")
}

// TestApprovalPrompt drives hutch run's question on a real terminal: each
// answer, the timeout, a deny rule that asks no one.
func TestApprovalPrompt(t *testing.T) {
	t.Parallel()
	testutil.RequireRoot(t)
	answer := func(t *testing.T, key string, extra ...string) (out string, code int, file, report string) {
		file, report = writeApprovalPolicy(t)
		term := newTerminal(t, 24, 100)
		args := append([]string{"--policy", file, "--report", report}, extra...)
		_, waited := startOnTerminal(t, term, append(args, "--", "echo", "ran-the-command")...)
		term.waitFor(t, "approval needed to run this command")
		term.waitFor(t, " ? ")
		if key != "" {
			if _, err := term.master.Write([]byte(key)); err != nil {
				t.Fatal(err)
			}
		}
		code = exitCode(t, waited)
		<-term.done
		return term.shown(), code, file, report
	}
	t.Run("once", func(t *testing.T) {
		t.Parallel()
		out, code, file, report := answer(t, "o")
		if code != 0 || !strings.Contains(out, "ran-the-command") {
			t.Fatalf("exit %d:\n%s", code, out)
		}
		for _, want := range []string{"echo ran-the-command", "no rule matches", "[o] allow once", "[a] allow always (adds it to " + file} {
			if !strings.Contains(out, want) {
				t.Errorf("the question lacks %q:\n%s", want, out)
			}
		}
		rep, _ := os.ReadFile(report)
		if !strings.Contains(string(rep), `"action":"approval"`) || !strings.Contains(string(rep), `"by":"terminal"`) || !strings.Contains(string(rep), `"answer":"once"`) {
			t.Errorf("the report lacks the decision:\n%s", rep)
		}
		if s, err := policy.Load(file); err != nil || len(s.Approvals.Approved) != 0 {
			t.Errorf("once changed the policy file: %v %v", s.Approvals.Approved, err)
		}
	})
	t.Run("deny", func(t *testing.T) {
		t.Parallel()
		out, code, _, report := answer(t, "d")
		if code != 126 || strings.Contains(out, "\nran-the-command\n") || !strings.Contains(out, "not approved") {
			t.Fatalf("exit %d:\n%s", code, out)
		}
		rep, _ := os.ReadFile(report)
		if !strings.Contains(string(rep), `"decision":"deny"`) {
			t.Errorf("the report lacks the refusal:\n%s", rep)
		}
	})
	t.Run("always", func(t *testing.T) {
		t.Parallel()
		out, code, file, _ := answer(t, "a")
		if code != 0 || !strings.Contains(out, "ran-the-command") {
			t.Fatalf("exit %d:\n%s", code, out)
		}
		s, err := policy.Load(file)
		if err != nil || len(s.Approvals.Approved) != 1 || s.Approvals.Approved[0] != "echo ran-the-command" {
			t.Fatalf("policy file after always: %v %v", s.Approvals.Approved, err)
		}
		// The next run, with no one to ask, runs it.
		r := noTerminalRun(t, "--policy", file, "--", "echo", "ran-the-command")
		if r.code != 0 || !strings.Contains(r.stdout, "ran-the-command") {
			t.Errorf("after always: %s", r)
		}
	})
	t.Run("timeout", func(t *testing.T) {
		t.Parallel()
		out, code, _, report := answer(t, "", "--approval-timeout", "1s")
		if code != 126 || !strings.Contains(out, "no answer in time") {
			t.Fatalf("exit %d:\n%s", code, out)
		}
		rep, _ := os.ReadFile(report)
		if !strings.Contains(string(rep), `"by":"timeout"`) {
			t.Errorf("the report lacks the timeout:\n%s", rep)
		}
	})
	t.Run("keys the prompt does not know are ignored", func(t *testing.T) {
		t.Parallel()
		out, code, _, _ := answer(t, "xq\r\x1b[Ao")
		if code != 0 || !strings.Contains(out, "ran-the-command") {
			t.Fatalf("exit %d:\n%s", code, out)
		}
	})
	t.Run("a deny rule asks no one", func(t *testing.T) {
		t.Parallel()
		file, _ := writeApprovalPolicy(t)
		term := newTerminal(t, 24, 100)
		_, waited := startOnTerminal(t, term, "--policy", file, "--", "rm", "-f", "x")
		code := exitCode(t, waited)
		<-term.done
		out := term.shown()
		if code != 126 || strings.Contains(out, "approval needed") || !strings.Contains(out, "deny: [rm]") {
			t.Errorf("exit %d:\n%s", code, out)
		}
	})
}

// noTerminalRun runs hutch run in a session of its own, with no
// controlling terminal.
func noTerminalRun(t *testing.T, args ...string) result {
	t.Helper()
	testutil.RequireRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	dir := t.TempDir()
	cmd := exec.CommandContext(ctx, testutil.Hutch(t), append([]string{"run"}, args...)...)
	cmd.Dir, cmd.Env = dir, baseEnv(dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("hutch did not end within %s", guard)
	}
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatal(err)
	}
	return result{code: cmd.ProcessState.ExitCode(), stdout: stdout.String(), stderr: stderr.String()}
}

// TestApprovalNoTerminal checks that with no terminal to ask on, ask is
// deny, with a message that names the rule and how to allow the command,
// and the command never runs.
func TestApprovalNoTerminal(t *testing.T) {
	t.Parallel()
	file, _ := writeApprovalPolicy(t)
	marker := filepath.Join(t.TempDir(), "ran")
	r := noTerminalRun(t, "--policy", file, "--allow-write", filepath.Dir(marker), "--", "touch", marker)
	if r.code != 126 {
		t.Fatalf("want 126: %s", r)
	}
	for _, want := range []string{"not approved", "touch " + marker, "no terminal to ask on", "approvals.approved"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q: %s", want, r)
		}
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the command ran")
	}
	// Compound input: every simple command must be allowed.
	r = noTerminalRun(t, "--policy", file, "--", "sh", "-c", "true; rm -rf /tmp/nothing-here")
	if r.code != 126 || !strings.Contains(r.stderr, "deny: [rm]") {
		t.Errorf("compound: %s", r)
	}
}

// TestApprovalNetworkOnTerminal asks about a host no rule allows while the
// command runs on a pty of its own: the question is on the user's
// terminal, the key that answers it never reaches the command, and the
// proxy connects only when the answer allows.
func TestApprovalNetworkOnTerminal(t *testing.T) {
	t.Parallel()
	testutil.RequireRoot(t)
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "hello-from-upstream")
	}))
	t.Cleanup(upstream.Close)
	port := upstream.Listener.Addr().(*net.TCPAddr).Port
	for _, tc := range []struct{ key, want, notWant string }{
		{"o", "hello-from-upstream", ""},
		{"d", "curl-failed", "hello-from-upstream"},
	} {
		t.Run(tc.key, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			file := filepath.Join(dir, "policy.yaml")
			writeFile(t, file, "network:\n  on_unknown: ask\n", 0o644)
			report := filepath.Join(dir, "report.jsonl")
			script := fmt.Sprintf(`echo ready
curl -fsS --max-time 100 http://approve.test:%d/ || echo curl-failed
echo
read x
echo "got:$x"`, port)
			term := newTerminal(t, 24, 120)
			_, waited := startOnTerminal(t, term, "--policy", file, "--report", report, "--net", "proxy",
				"--allow-private", "127.0.0.1/32", "--add-host", "approve.test:127.0.0.1", "--", "sh", "-c", script)
			term.waitFor(t, "ready\n")
			term.waitFor(t, "approval needed to let the sandbox connect")
			term.waitFor(t, fmt.Sprintf("approve.test:%d", port))
			if _, err := term.master.Write([]byte(tc.key)); err != nil {
				t.Fatal(err)
			}
			term.waitFor(t, tc.want)
			if _, err := term.master.Write([]byte("typed\r")); err != nil {
				t.Fatal(err)
			}
			if code := exitCode(t, waited); code != 0 {
				t.Errorf("exit %d", code)
			}
			<-term.done
			out := term.shown()
			if !strings.Contains(out, "got:typed\n") {
				t.Errorf("the command's input is not exactly what was typed after the answer:\n%s", out)
			}
			if tc.notWant != "" && strings.Contains(out, tc.notWant) {
				t.Errorf("refused, yet the upstream answered:\n%s", out)
			}
			rep, _ := os.ReadFile(report)
			if !strings.Contains(string(rep), `"kind":"network"`) || !strings.Contains(string(rep), `"by":"terminal"`) {
				t.Errorf("the report lacks the decision:\n%s", rep)
			}
		})
	}
}
