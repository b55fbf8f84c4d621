package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// TestReviewApplyFileRules: what hutch run --review wrote is applied by
// hutch changes apply under the approvals.files rules of a policy: with
// no terminal to ask on, an ask rule refuses the apply, naming the rule
// and how to allow it, and a deny rule refuses it even with --yes-files;
// the workspace stays as it was. --yes-files then applies.
func TestReviewApplyFileRules(t *testing.T) {
	testutil.RequireRoot(t)
	ws := t.TempDir()
	writeFile(t, filepath.Join(ws, "Makefile"), "all:\n", 0o644)
	writeFile(t, filepath.Join(ws, "main.go"), "package main\n", 0o644)
	state := hostDir(t)
	env := append(baseEnv(ws), "XDG_STATE_HOME="+state)
	run := func(args ...string) result {
		t.Helper()
		return hutch(t, invocation{args: args, dir: ws, env: env, noTTY: true})
	}
	r := run(append([]string{"run", "--review"}, sh("echo 'all: evil' > Makefile; mkdir -p .github/workflows; echo on > .github/workflows/ci.yml; echo more >> main.go")...)...)
	wantOK(t, r)
	m := summaryID.FindStringSubmatch(r.stderr)
	if m == nil {
		t.Fatalf("no change set:\n%s", r)
	}
	id := m[1]
	policyDir := t.TempDir()
	ask := filepath.Join(policyDir, "ask.yaml")
	writeFile(t, ask, "approvals:\n  files:\n    - ask: [Makefile, \".github/**\"]\n", 0o644)
	deny := filepath.Join(policyDir, "deny.yaml")
	writeFile(t, deny, "approvals:\n  files:\n    - ask: [Makefile]\n    - deny: [\"**/*.go\"]\n", 0o644)
	unchanged := func(what string) {
		t.Helper()
		if b, _ := os.ReadFile(filepath.Join(ws, "Makefile")); string(b) != "all:\n" {
			t.Errorf("%s: the Makefile changed: %q", what, b)
		}
		if _, err := os.Stat(filepath.Join(ws, ".github")); !os.IsNotExist(err) {
			t.Errorf("%s: .github reached the workspace: %v", what, err)
		}
	}

	r = run("changes", "apply", id, "--policy", ask)
	if r.code != 1 {
		t.Fatalf("apply under an ask rule, no terminal: %s", r)
	}
	for _, want := range []string{"not approved under approvals.files ask: [\"Makefile\", \".github/**\"] (" + ask + ":3)", "  Makefile\n", "  .github/workflows/ci.yml\n", "no terminal to ask on", "--yes-files"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("the refusal lacks %q:\n%s", want, r.stderr)
		}
	}
	unchanged("ask")

	r = run("changes", "apply", id, "--policy", deny, "--yes-files")
	if r.code != 1 || !strings.Contains(r.stderr, "1 path denied by approvals.files deny: [\"**/*.go\"] ("+deny+":4)") || !strings.Contains(r.stderr, "  main.go\n") {
		t.Fatalf("apply under a deny rule: %s", r)
	}
	unchanged("deny")

	r = run("changes", "apply", id, "--policy", ask, "--yes-files")
	wantOK(t, r)
	if b, _ := os.ReadFile(filepath.Join(ws, ".github/workflows/ci.yml")); string(b) != "on\n" {
		t.Errorf("after --yes-files: ci.yml %q\n%s", b, r)
	}
}

// TestReviewRecordsFileRules: the approvals.files rules of the policy a
// review-mode run ran under go with its change set, so that applying it
// without any --policy still obeys them.
func TestReviewRecordsFileRules(t *testing.T) {
	testutil.RequireRoot(t)
	ws := t.TempDir()
	writeFile(t, filepath.Join(ws, "Makefile"), "all:\n", 0o644)
	state := hostDir(t)
	env := append(baseEnv(ws), "XDG_STATE_HOME="+state)
	run := func(args ...string) result {
		t.Helper()
		return hutch(t, invocation{args: args, dir: ws, env: env, noTTY: true})
	}
	pol := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, pol, "approvals:\n  files:\n    - deny: [Makefile]\n", 0o644)
	r := run(append([]string{"run", "--review", "--policy", pol}, sh("echo 'all: evil' > Makefile")...)...)
	wantOK(t, r)
	if strings.Contains(r.stderr, "not approved") {
		t.Fatalf("a files-only policy asked about the command:\n%s", r)
	}
	m := summaryID.FindStringSubmatch(r.stderr)
	if m == nil {
		t.Fatalf("no change set:\n%s", r)
	}
	r = run("changes", "apply", m[1], "--yes-files")
	if r.code != 1 || !strings.Contains(r.stderr, "denied by approvals.files deny: [\"Makefile\"]") {
		t.Fatalf("apply of a set made under a deny file rule: %s", r)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "Makefile")); string(b) != "all:\n" {
		t.Errorf("the Makefile changed: %q", b)
	}
}
