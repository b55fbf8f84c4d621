package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// TestServeTier: hutch serve refuses to start with a default or minimum
// tier it does not run (gvisor, for now), with a default weaker than the
// minimum, and with an unknown tier; a daemon of the namespace tier
// refuses hutch create --tier gvisor, saying why, creates a sandbox of its
// default tier without --tier, and hutch ls names it.
func TestServeTier(t *testing.T) {
	testutil.RequireRoot(t)
	for _, c := range []struct {
		flags []string
		code  int
		want  string
	}{
		{[]string{"--default-tier", "gvisor"}, 1, "hutch serve does not run the gvisor tier yet (it runs: namespace)"},
		{[]string{"--min-tier", "gvisor"}, 1, "hutch serve does not run the gvisor tier yet (it runs: namespace)"},
		{[]string{"--default-tier", "gvisor", "--min-tier", "gvisor"}, 1, "hutch serve does not run the gvisor tier yet"},
		{[]string{"--default-tier", "namespace", "--min-tier", "gvisor"}, 1, "the default tier namespace is weaker than the minimum tier gvisor"},
		{[]string{"--default-tier", "kvm"}, 2, `--default-tier: unknown tier "kvm"`},
		{[]string{"--min-tier", "vm"}, 2, `--min-tier: unknown tier "vm"`},
	} {
		base := t.TempDir()
		r := hutch(t, invocation{args: append([]string{"serve", "--socket", filepath.Join(base, "s.sock"), "--state-dir", filepath.Join(base, "state")}, c.flags...)})
		if r.code != c.code || !strings.Contains(r.stderr, c.want) {
			t.Errorf("hutch serve %q: %s\nwant exit %d and %q", c.flags, r, c.code, c.want)
		}
	}

	d := startDaemonWith(t, nil, "--default-tier", "namespace", "--min-tier", "namespace")
	r := d.admin(t, "create", "--tier", "gvisor")
	if r.code != 1 || !strings.Contains(r.stderr, "hutch serve does not run the gvisor tier yet") || !strings.Contains(r.stderr, "400 invalid") {
		t.Errorf("hutch create --tier gvisor: %s", r)
	}
	r = d.admin(t, "create", "--runsc", "/usr/local/bin/runsc")
	if r.code != 2 || !strings.Contains(r.stderr, "--runsc is for hutch run") {
		t.Errorf("hutch create --runsc: %s", r)
	}
	r = d.admin(t, "create", "--label", "suite=tier")
	wantOK(t, r)
	id := lastLine(r.stdout)
	r = d.admin(t, "ls", "--label", "suite=tier")
	wantOK(t, r)
	if ls := lines(r.stdout); len(ls) != 2 || !strings.HasPrefix(ls[0], "ID ") || !strings.Contains(ls[0], " TIER ") ||
		!strings.HasPrefix(ls[1], id) || !strings.Contains(ls[1], " running  namespace  -  ") {
		t.Errorf("hutch ls:\n%s", r.stdout)
	}
	r = d.admin(t, "create", "--tier", "namespace")
	wantOK(t, r)
}
