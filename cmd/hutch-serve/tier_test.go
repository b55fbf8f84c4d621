package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/microvm"
)

// TestServeTierFlags: an unknown --default-tier or --min-tier is a usage
// error (exit 2) naming the flag and the tiers, before anything starts;
// so is the microvm tier where the host cannot run it, naming what it
// lacks (without KVM: --allow-emulation).
func TestServeTierFlags(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		flags []string
		want  string
	}{
		{[]string{"--default-tier", "kvm"}, `hutch: --default-tier: unknown tier "kvm" (allowed: "namespace", "gvisor", "microvm")`},
		{[]string{"--min-tier", "VM"}, `hutch: --min-tier: unknown tier "VM" (allowed: "namespace", "gvisor", "microvm")`},
		{[]string{"--kubernetes", "--default-tier", "microvm"}, `hutch: --default-tier: hutch serve cannot run the microvm tier: its sandboxes run on this machine only, not as pods (--kubernetes)`},
	}
	if _, ok := microvm.Check("", false); !ok {
		for _, f := range []string{"default-tier", "min-tier"} {
			cases = append(cases, struct {
				flags []string
				want  string
			}{[]string{"--" + f, "microvm"}, "hutch: --" + f + ": hutch serve cannot run the microvm tier: "})
		}
	}
	for _, c := range cases {
		var stderr bytes.Buffer
		args := append([]string{"--socket", filepath.Join(dir, "s.sock"), "--state-dir", filepath.Join(dir, "state")}, c.flags...)
		if code := cmdServe(args, &stderr); code != 2 || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("hutch serve %q: exit %d\n%s\nwant exit 2 and %q", c.flags, code, stderr.String(), c.want)
		}
	}
}
