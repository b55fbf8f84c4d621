package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestServeApprovals drives hutch serve's approvals with the CLI: a
// sandbox whose policy asks about git push holds hutch exec of it;
// hutch approvals lists the question (and shows it by its id), hutch
// approvals answer deny refuses it (exec fails, not_approved, and the
// command never ran) and answer once lets the next one run.
func TestServeApprovals(t *testing.T) {
	d := startDaemonWith(t, nil, "--approval-timeout", "10m")
	pol := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, pol, "approvals:\n  preset: full\n  commands:\n    - ask: [git, push]\n", 0o644)
	r := d.admin(t, "create", "--policy", pol)
	wantOK(t, r)
	id := lastLine(r.stdout)

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
	r = d.admin(t, "approvals")
	if wantOK(t, r); !strings.Contains(r.stdout, apr) || !strings.Contains(r.stdout, id) || !strings.Contains(r.stdout, "touch denied; git push") {
		t.Errorf("hutch approvals: %s", r)
	}
	r = d.admin(t, "approvals", apr)
	if wantOK(t, r); !strings.Contains(r.stdout, "command:  git push") || !strings.Contains(r.stdout, "ask: [git, push]") {
		t.Errorf("hutch approvals %s: %s", apr, r)
	}
	wantOK(t, d.admin(t, "approvals", "answer", apr, "deny"))
	if r := <-done; r.code == 0 || !strings.Contains(r.stderr, "not_approved") || !strings.Contains(r.stderr, "git push") {
		t.Errorf("exec denied: %s", r)
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
}
