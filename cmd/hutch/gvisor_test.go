package main

import (
	"os"
	"strings"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/gvisor"
)

// TestGVisorRefusals checks what hutch refuses under --tier gvisor before
// anything runs: what the tier cannot honour yet (S2), and a missing or
// wrong runsc, with the command that installs the right one.
func TestGVisorRefusals(t *testing.T) {
	t.Parallel()
	self, err := os.Executable() // a Go binary, not runsc
	if err != nil {
		t.Fatal(err)
	}
	noRunsc := t.TempDir() // a PATH without runsc
	tests := []struct {
		name string
		args []string
		path string // PATH; stdPath when empty
		want []string
	}{
		{"net host", []string{"--tier", "gvisor", "--net", "host", "--", "true"}, "",
			[]string{`"host" is not supported under tier "gvisor"`}},
		{"unknown tier", []string{"--tier", "kvm", "--", "true"}, "", []string{`--tier: unknown tier "kvm"`}},
		{"runsc without gvisor", []string{"--runsc", "/bin/true", "--", "true"}, "", []string{"--runsc is for --tier gvisor only"}},
		{"directfs without gvisor", []string{"--gvisor-directfs", "--", "true"}, "", []string{"--gvisor-directfs is for --tier gvisor only"}},
		{"no runsc", []string{"--tier", "gvisor", "--", "true"}, noRunsc,
			[]string{"none on PATH", gvisor.InstallCommand, "GOBIN"}},
		{"not runsc", []string{"--tier", "gvisor", "--runsc", self, "--", "true"}, "",
			[]string{"not gVisor's", gvisor.InstallCommand}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			env := baseEnv(dir)
			if tt.path != "" {
				env[0] = "PATH=" + tt.path
			}
			r := hutch(t, invocation{dir: dir, env: env, args: append([]string{"run"}, tt.args...)})
			wantCode(t, r, 125)
			for _, w := range tt.want {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, r)
				}
			}
		})
	}
}

// TestPolicyShowTier checks that hutch policy show names the tier.
func TestPolicyShowTier(t *testing.T) {
	t.Parallel()
	for tier, args := range map[string][]string{"namespace": nil, "gvisor": {"--tier", "gvisor"}} {
		r := hutch(t, invocation{args: append([]string{"policy", "show"}, args...)})
		wantOK(t, r)
		if !strings.Contains(r.stdout, "\ntier: "+tier+"\n") {
			t.Errorf("policy show does not name tier %s:\n%s", tier, r.stdout)
		}
	}
}
