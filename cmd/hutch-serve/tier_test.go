package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
)

// TestServeTierFlags: an unknown --default-tier or --min-tier is a usage
// error (exit 2) naming the flag and the tiers, before anything starts.
func TestServeTierFlags(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		flags []string
		want  string
	}{
		{[]string{"--default-tier", "kvm"}, `hutch: --default-tier: unknown tier "kvm" (allowed: "namespace", "gvisor", "microvm")`},
		{[]string{"--min-tier", "VM"}, `hutch: --min-tier: unknown tier "VM" (allowed: "namespace", "gvisor", "microvm")`},
		{[]string{"--min-tier", "microvm"}, `hutch: --min-tier: hutch serve does not run the microvm tier yet (hutch run --tier microvm does; see docs/microvm.md)`},
		{[]string{"--default-tier", "microvm"}, `hutch: --default-tier: hutch serve does not run the microvm tier yet (hutch run --tier microvm does; see docs/microvm.md)`},
	} {
		var stderr bytes.Buffer
		args := append([]string{"--socket", filepath.Join(dir, "s.sock"), "--state-dir", filepath.Join(dir, "state")}, c.flags...)
		if code := cmdServe(args, &stderr); code != 2 || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("hutch serve %q: exit %d\n%s\nwant exit 2 and %q", c.flags, code, stderr.String(), c.want)
		}
	}
}
