package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestApprovalImports: rules from an approval rules file on top of srt's
// settings, and from Claude Code's settings, decide what hutch run runs:
// a command a rule denies never starts, the rest run in the sandbox.
func TestApprovalImports(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	srt := filepath.Join(dir, "srt-settings.json")
	writeFile(t, srt, `{"filesystem": {"allowWrite": ["."]}}`, 0o644)
	rules := filepath.Join(dir, "rules.yaml")
	writeFile(t, rules, "approvals:\n  preset: none\n  default: allow\n  commands:\n    - deny: [touch]\n", 0o644)
	claude := filepath.Join(dir, ".claude", "settings.json")
	if err := os.MkdirAll(filepath.Dir(claude), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, claude, `{
  "permissions": {
    "defaultMode": "bypassPermissions",
    "deny": ["Bash(touch:*)"]
  }
}`, 0o644)
	out := t.TempDir()
	marker := filepath.Join(out, "ran")
	for _, tc := range []struct {
		name  string
		flags []string
		rule  string
	}{
		{"srt and rules", []string{"--srt-settings", srt, "--approve-rules", rules}, "deny: [touch] (" + rules + ":5)"},
		{"claude", []string{"--claude-settings", claude}, "deny: [touch] (" + claude + ":4)"},
	} {
		report := filepath.Join(t.TempDir(), "report.jsonl")
		r := noTerminalRun(t, append(tc.flags, "--report", report, "--allow-write", out, "--", "touch", marker)...)
		if r.code != 126 || !strings.Contains(r.stderr, "not approved") || !strings.Contains(r.stderr, "rule deny: [touch]") {
			t.Errorf("%s: want 126 naming the rule: %s", tc.name, r)
		}
		// The report names the rule and where it is written.
		if data, err := os.ReadFile(report); err != nil || !strings.Contains(string(data), `"rule":"`+tc.rule+`"`) {
			t.Errorf("%s: report lacks rule %s: %s (%v)", tc.name, tc.rule, data, err)
		}
		if _, err := os.Stat(marker); err == nil {
			t.Fatalf("%s: the command ran", tc.name)
		}
		r = noTerminalRun(t, append(tc.flags, "--", "sh", "-c", "echo allowed")...)
		if r.code != 0 || r.stdout != "allowed\n" {
			t.Errorf("%s: want the command to run: %s", tc.name, r)
		}
	}
}
