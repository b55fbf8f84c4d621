package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/testutil"
)

func TestUsage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		args      []string
		code      int
		stdout    string // regexp the output must match, "" for any
		stderrHas string
	}{
		{name: "no arguments", args: nil, code: 2, stderrHas: "Usage:"},
		{name: "unknown command", args: []string{"frobnicate"}, code: 2, stderrHas: `unknown command "frobnicate"`},
		{name: "version", args: []string{"version"}, code: 0, stdout: `^hutch \S+\n$`},
		{name: "--version", args: []string{"--version"}, code: 0, stdout: `^hutch \S+\n$`},
		{name: "help", args: []string{"help"}, code: 0, stdout: `(?s)Usage:.*hutch run`},
		{name: "policy without show", args: []string{"policy"}, code: 2, stderrHas: "hutch policy show"},
		{name: "policy show with an argument", args: []string{"policy", "show", "extra"}, code: 125, stderrHas: "no arguments"},
		{name: "run without a command", args: []string{"run"}, code: 125, stderrHas: "no command given"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := hutch(t, invocation{args: tc.args})
			wantCode(t, r, tc.code)
			if tc.stdout != "" && !regexp.MustCompile(tc.stdout).MatchString(r.stdout) {
				t.Errorf("stdout %q does not match %q", r.stdout, tc.stdout)
			}
			if !strings.Contains(r.stderr, tc.stderrHas) {
				t.Errorf("stderr %q does not contain %q", r.stderr, tc.stderrHas)
			}
		})
	}
	t.Run("usage lists the commands", func(t *testing.T) {
		t.Parallel()
		r := hutch(t, invocation{})
		for _, want := range []string{"hutch run", "hutch policy show", "hutch version"} {
			if !strings.Contains(r.stderr, want) {
				t.Errorf("usage does not mention %q:\n%s", want, r.stderr)
			}
		}
		if r.stdout != "" {
			t.Errorf("usage went to stdout: %q", r.stdout)
		}
	})
}

// TestExitCodes checks the exit codes documented in hutch's usage: the
// command's own, 128+N for signal N, 124 on timeout, 125 when hutch failed,
// 126 when the command cannot be executed, 127 when it is not found.
func TestExitCodes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		// setup prepares the workspace and may return extra environment.
		setup     func(t *testing.T, ws string) []string
		code      int
		stderrHas []string
	}{
		{name: "success", args: []string{"--", "true"}, code: 0},
		{name: "command's own code", args: sh("exit 7"), code: 7},
		{name: "false", args: []string{"--", "false"}, code: 1},
		{name: "highest code", args: sh("exit 255"), code: 255},
		{
			name: "missing command", args: []string{"--", "no-such-command-hutch-test"}, code: 127,
			stderrHas: []string{"no-such-command-hutch-test", "not found"},
		},
		{
			name: "missing command by path", args: []string{"--", "./no-such-file"}, code: 127,
			stderrHas: []string{"no-such-file"},
		},
		{
			// A PATH entry the sandbox may not search (like root's ~/bin for
			// a sandbox that does not run as the host's root) must not turn
			// "not found" into "cannot execute": a shell says not found.
			name: "missing command with an unsearchable PATH entry",
			args: []string{"--", "no-such-command-hutch-test"},
			setup: func(t *testing.T, ws string) []string {
				locked := filepath.Join(ws, "locked")
				if err := os.Mkdir(locked, 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.Chown(locked, 4243, 4243); err != nil {
					t.Fatal(err)
				}
				return []string{"PATH=" + locked + ":" + stdPath}
			},
			code: 127, stderrHas: []string{"no-such-command-hutch-test"},
		},
		{
			name: "not executable", args: []string{"--", "./script.sh"},
			setup: func(t *testing.T, ws string) []string {
				writeFile(t, filepath.Join(ws, "script.sh"), "#!/bin/sh\necho hi\n", 0o644)
				return nil
			},
			code: 126, stderrHas: []string{"script.sh"},
		},
		{
			name: "directory", args: []string{"--", "./subdir"},
			setup: func(t *testing.T, ws string) []string {
				if err := os.Mkdir(filepath.Join(ws, "subdir"), 0o755); err != nil {
					t.Fatal(err)
				}
				return nil
			},
			code: 126, stderrHas: []string{"subdir"},
		},
		{
			name: "executable script", args: []string{"--", "./script.sh"},
			setup: func(t *testing.T, ws string) []string {
				writeFile(t, filepath.Join(ws, "script.sh"), "#!/bin/sh\nexit 3\n", 0o755)
				return nil
			},
			code: 3,
		},
		{name: "background process does not keep the sandbox", args: sh("sleep 30 & exit 4"), code: 4},
		{name: "killed by SIGTERM", args: sh("kill -TERM $$"), code: 143},
		{name: "killed by SIGKILL", args: sh("kill -KILL $$"), code: 137},
		{name: "killed by SIGSEGV", args: sh("kill -SEGV $$"), code: 139},
		{
			name: "timeout", args: []string{"--timeout", "1s", "--", "sleep", "30"}, code: 124,
			stderrHas: []string{"timed out"},
		},
		{
			name: "timeout kills the whole sandbox", args: sh("sleep 30 & sleep 30 & wait", "--timeout", "1s"), code: 124,
			stderrHas: []string{"timed out"},
		},
		{
			name: "bad memory size", args: []string{"--memory", "12q", "--", "true"}, code: 125,
			stderrHas: []string{"--memory", `"12q"`},
		},
		{
			name: "bad tmp size", args: []string{"--tmp-size", "lots", "--", "true"}, code: 125,
			stderrHas: []string{"--tmp-size", `"lots"`},
		},
		{
			name: "bad timeout", args: []string{"--timeout", "soon", "--", "true"}, code: 125,
			stderrHas: []string{"--timeout", "soon"},
		},
		{
			name: "memory below the minimum", args: []string{"--memory", "1k", "--", "true"}, code: 125,
			stderrHas: []string{"memory", "minimum"},
		},
		{
			name: "negative cpus", args: []string{"--cpus", "-1", "--", "true"}, code: 125,
			stderrHas: []string{"cpus"},
		},
		{
			name: "bad env", args: []string{"--env", "NOVALUE", "--", "true"}, code: 125,
			stderrHas: []string{"--env", "NOVALUE"},
		},
		{
			// A bad --pids or --cpus value is as much hutch's own error as a
			// bad --memory: 125, never a code the command could have returned.
			name: "bad pids number", args: []string{"--pids", "many", "--", "true"}, code: 125,
			stderrHas: []string{"-pids", "many"},
		},
		{
			name: "bad cpus number", args: []string{"--cpus", "half", "--", "true"}, code: 125,
			stderrHas: []string{"-cpus", "half"},
		},
		{
			name: "unknown flag", args: []string{"--no-such-flag", "--", "true"}, code: 125,
			stderrHas: []string{"no-such-flag"},
		},
		{
			name: "missing root", args: []string{"--root", "/nonexistent-hutch-root", "--", "true"}, code: 125,
			stderrHas: []string{"root", "/nonexistent-hutch-root", "does not exist"},
		},
		{
			name: "missing workspace", args: []string{"--workspace", "/nonexistent-hutch-ws", "--", "true"}, code: 125,
			stderrHas: []string{"workspace", "/nonexistent-hutch-ws"},
		},
		{
			name: "missing policy file", args: []string{"--policy", "/nonexistent-hutch.yaml", "--", "true"}, code: 125,
			stderrHas: []string{"/nonexistent-hutch.yaml"},
		},
		{
			name: "policy file with an unknown field", args: []string{"--policy", "policy.yaml", "--", "true"},
			setup: func(t *testing.T, ws string) []string {
				writeFile(t, filepath.Join(ws, "policy.yaml"), "resources:\n  memory: 64m\n  memroy: 1g\n", 0o644)
				return nil
			},
			code: 125, stderrHas: []string{"policy.yaml:3:3:", "memroy"},
		},
		{
			name: "policy and srt settings together", args: []string{"--policy", "p.yaml", "--srt-settings", "s.json", "--", "true"},
			setup: func(t *testing.T, ws string) []string {
				writeFile(t, filepath.Join(ws, "p.yaml"), "", 0o644)
				writeFile(t, filepath.Join(ws, "s.json"), "{}", 0o644)
				return nil
			},
			code: 125, stderrHas: []string{"--policy", "--srt-settings"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			testutil.RequireRoot(t) // before the setup, which may need it
			ws := t.TempDir()
			env := baseEnv(ws)
			if tc.setup != nil {
				env = append(env, tc.setup(t, ws)...) // the last of a name wins
			}
			r := sandboxed(t, invocation{args: tc.args, dir: ws, env: env})
			wantCode(t, r, tc.code)
			for _, want := range tc.stderrHas {
				if !strings.Contains(r.stderr, want) {
					t.Errorf("stderr does not contain %q:\n%s", want, r.stderr)
				}
			}
			if (tc.code == 124 || tc.code == 126 || tc.code == 127) && !strings.HasPrefix(r.stderr, "hutch: ") {
				t.Errorf("hutch's own failure should be explained on stderr starting with \"hutch: \", got %q", r.stderr)
			}
		})
	}
}
