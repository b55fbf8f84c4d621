package ociruntime

import (
	"strings"
	"testing"
)

// TestGVisorNetworkHost: under the gVisor tier every command of runsc gets
// --network=host, and a --network that gVisor's shim gives (its
// runsc_config) is dropped, whatever its spelling; under runc nothing is
// added.
func TestGVisorNetworkHost(t *testing.T) {
	for _, tc := range []struct {
		tier string
		args []string
		want string
	}{
		{TierGVisor, []string{"--root=/r", "--network=sandbox", "--debug", "kill", "c1", "9"}, "--root /R/runsc --network=host --debug kill c1 9"},
		{TierGVisor, []string{"--network", "sandbox", "state", "c2"}, "--root /R/runsc --network=host state c2"},
		{TierGVisor, []string{"--root=/r", "wait", "c3"}, "--root /R/runsc --network=host wait c3"},
		{"", []string{"--root=/r", "kill", "c4", "9"}, "--root /R/runc kill c4 9"},
	} {
		cl, err := parseCmdline(tc.args)
		if err != nil {
			t.Fatal(err)
		}
		r := &runtime{root: "/R", tier: tc.tier}
		out, err := r.backendArgs(cl)
		if err != nil {
			t.Fatalf("%q: %v", tc.args, err)
		}
		if got := strings.Join(out, " "); got != tc.want {
			t.Errorf("tier %q, %q:\n got %s\nwant %s", tc.tier, tc.args, got, tc.want)
		}
	}
}
