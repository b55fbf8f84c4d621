package main

import (
	"bufio"
	"context"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// askingSandbox creates a sandbox whose policy asks about git push.
func askingSandbox(t *testing.T, d *daemonProc) string {
	t.Helper()
	pol := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, pol, "approvals:\n  preset: full\n  commands:\n    - ask: [git, push]\n", 0o644)
	r := d.admin(t, "create", "--policy", pol)
	wantOK(t, r)
	return lastLine(r.stdout)
}

// TestServeApprovals drives hutch serve's approvals with the CLI: a
// sandbox whose policy asks about git push holds hutch exec of it;
// hutch approvals lists the question (and shows it by its id), hutch
// approvals answer deny refuses it (exec fails, not_approved, exit 126,
// and the command never ran) and answer once lets the next one run.
// While it waits, exec says so and how to answer.
func TestServeApprovals(t *testing.T) {
	d := startDaemonWith(t, nil, "--approval-timeout", "10m")
	id := askingSandbox(t, d)

	// exec runs in the background; the question's id is returned.
	held := func(marker string) (<-chan result, string) {
		t.Helper()
		done := make(chan result, 1)
		go func() { done <- d.admin(t, "exec", id, "--", "sh", "-c", "touch "+marker+"; git push") }()
		var apr string
		deadline := time.Now().Add(guard)
		for apr == "" {
			if time.Now().After(deadline) {
				t.Fatalf("no question of %s within %s", id, guard)
			}
			select {
			case r := <-done:
				t.Fatalf("exec ended without a question: %s", r)
			case <-time.After(50 * time.Millisecond):
			}
			apr = lastLine(d.admin(t, "approvals", "-q", id).stdout)
		}
		return done, apr
	}
	ran := func(marker string) bool {
		return d.admin(t, "exec", id, "--", "test", "-e", marker).code == 0
	}

	done, apr := held("denied")
	r := d.admin(t, "approvals")
	if wantOK(t, r); !strings.Contains(r.stdout, apr) || !strings.Contains(r.stdout, id) || !strings.Contains(r.stdout, "touch denied; git push") {
		t.Errorf("hutch approvals: %s", r)
	}
	r = d.admin(t, "approvals", apr)
	if wantOK(t, r); !strings.Contains(r.stdout, "command:  git push") || !strings.Contains(r.stdout, "ask: [git, push]") {
		t.Errorf("hutch approvals %s: %s", apr, r)
	}
	wantOK(t, d.admin(t, "approvals", "answer", apr, "deny"))
	if r := <-done; r.code != 126 || !strings.Contains(r.stderr, "not_approved") || !strings.Contains(r.stderr, "git push") {
		t.Errorf("exec denied: %s; want exit 126", r)
	}
	if ran("denied") {
		t.Error("the denied command ran")
	}
	if r := d.admin(t, "approvals", "answer", apr, "once"); r.code == 0 || !strings.Contains(r.stderr, "404") {
		t.Errorf("answer again: %s", r)
	}

	done, apr = held("once")
	wantOK(t, d.admin(t, "approvals", "answer", apr, "once"))
	if r := <-done; strings.Contains(r.stderr, "not_approved") {
		t.Errorf("exec answered once: %s", r)
	}
	if !ran("once") {
		t.Error("the command answered once did not run")
	}

	// exec, waiting, says what for and how to answer.
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	cmd := exec.CommandContext(ctx, testutil.Hutch(t), "exec", id, "--", "git", "push", "--tags")
	cmd.Env = append(baseEnv(t.TempDir()), "HUTCH_HOST=unix://"+d.sock)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	errPipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(errPipe)
	var said strings.Builder
	for sc.Scan() {
		said.WriteString(sc.Text() + "\n")
		if strings.Contains(sc.Text(), "hutch approvals answer ") {
			break
		}
	}
	apr = lastLine(d.admin(t, "approvals", "-q", id).stdout)
	if !strings.Contains(said.String(), "waiting for approval "+apr) || !strings.Contains(said.String(), "asked by ask: [git, push]") {
		t.Errorf("exec's notice: %q (question %s)", said.String(), apr)
	}
	wantOK(t, d.admin(t, "approvals", "answer", apr, "deny"))
	go func() { _, _ = io.Copy(io.Discard, errPipe) }()
	if err := cmd.Wait(); cmd.ProcessState.ExitCode() != 126 {
		t.Errorf("exec denied: %v, want exit 126", err)
	}
}

// TestServeApprovalsOnTerminal: hutch exec on a terminal asks there
// about its own held command and answers through the API.
func TestServeApprovalsOnTerminal(t *testing.T) {
	d := startDaemonWith(t, nil, "--approval-timeout", "10m")
	id := askingSandbox(t, d)
	for _, tc := range []struct {
		key  string
		code int
		ran  bool
	}{{"o", 0, true}, {"d", 126, false}} {
		marker := "marker-" + tc.key
		term := newTerminal(t, 24, 120)
		ctx, cancel := context.WithTimeout(context.Background(), guard)
		defer cancel()
		cmd := exec.CommandContext(ctx, testutil.Hutch(t), "exec", id, "--", "sh", "-c", "touch "+marker+"; git push || true")
		cmd.Env = append(baseEnv(t.TempDir()), "HUTCH_HOST=unix://"+d.sock, "TERM=xterm")
		cmd.Stdin, cmd.Stdout, cmd.Stderr = term.slave, term.slave, term.slave
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		term.slave.Close()
		go term.read()
		term.waitFor(t, "approval needed to run this command")
		term.waitFor(t, "asked by ask: [git, push]")
		term.waitFor(t, " ? ")
		if strings.Contains(term.shown(), "[a] allow always") {
			t.Errorf("hutch exec offers to write an always answer to a file it has not:\n%s", term.shown())
		}
		if _, err := term.master.Write([]byte(tc.key)); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait()
		<-term.done
		if got := cmd.ProcessState.ExitCode(); got != tc.code {
			t.Errorf("answer %s: exit %d, want %d:\n%s", tc.key, got, tc.code, term.shown())
		}
		if ran := d.admin(t, "exec", id, "--", "test", "-e", marker).code == 0; ran != tc.ran {
			t.Errorf("answer %s: ran %v, want %v", tc.key, ran, tc.ran)
		}
	}
}
