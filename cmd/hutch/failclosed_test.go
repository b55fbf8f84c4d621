package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFailClosed (S2): when a layer cannot be set up, hutch refuses to run,
// names the missing feature and the flag that accepts less, and the command
// does not run; with --best-effort it runs and says what it dropped. User
// namespaces are the sandbox itself: nothing runs without them. Missing
// features are simulated with HUTCH_TEST_MISSING, which can only take
// layers away.
func TestFailClosed(t *testing.T) {
	tests := []struct {
		feature    string
		name       string // how hutch names it
		bestEffort bool   // whether --best-effort can run without it
	}{
		{"userns", "user namespaces", false},
		{"idmap", "idmapped", true},
		{"landlock", "landlock", true},
		{"seccomp", "seccomp", true},
	}
	for _, tc := range tests {
		t.Run(tc.feature, func(t *testing.T) {
			t.Parallel()
			ws := hostDir(t)
			env := append(baseEnv(ws), "HUTCH_TEST_MISSING="+tc.feature)
			marker := filepath.Join(ws, "ran")

			r := sandboxed(t, invocation{dir: ws, env: env, args: sh("touch ran")})
			wantCode(t, r, 125)
			if !strings.Contains(r.stderr, tc.name) || !strings.Contains(r.stderr, "missing kernel feature") {
				t.Errorf("the error does not name the missing %s:\n%s", tc.name, r)
			}
			if tc.bestEffort && !strings.Contains(r.stderr, "--best-effort") {
				t.Errorf("the error does not name --best-effort:\n%s", r)
			}
			if _, err := os.Stat(marker); err == nil {
				t.Fatalf("the command ran although %s is missing", tc.name)
			}

			r = sandboxed(t, invocation{dir: ws, env: env, args: sh("touch ran 2>/dev/null; echo done", "--best-effort")})
			if !tc.bestEffort {
				wantCode(t, r, 125)
				if _, err := os.Stat(marker); err == nil {
					t.Fatalf("the command ran without %s", tc.name)
				}
				return
			}
			wantOK(t, r)
			if !strings.Contains(r.stdout, "done") {
				t.Errorf("the command did not run under --best-effort:\n%s", r)
			}
			if !strings.Contains(r.stderr, "running without "+tc.name) {
				t.Errorf("--best-effort did not say it runs without %s:\n%s", tc.name, r)
			}
		})
	}
}
