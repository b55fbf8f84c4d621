package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/policy"
)

// upstreamManager is a manager of tier whose sandboxes' proxies let
// through 127.0.0.1 (the operator's --allow-private), and the port of an
// upstream there (upstream).
func upstreamManager(t *testing.T, tier string) (*Manager, string) {
	t.Helper()
	cfg := tierConfig(t, tier)
	cfg.AllowPrivate = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
	port := upstream(t)
	return newManager(t, cfg), port
}

// TestUpdateNetwork: a running sandbox's egress rules change in its
// proxy at once, under each tier: it cannot reach a loopback upstream
// (which the operator opened for every sandbox) until its rules allow
// the upstream's name, then can, then cannot once it is offline again.
// The new rules are recorded and checked as a create's: another tenant's
// sandbox is not found, and a tenant may not open what only the operator
// may.
func TestUpdateNetwork(t *testing.T) {
	for _, tier := range []string{policy.TierNamespace, policy.TierGVisor} {
		t.Run(tier, func(t *testing.T) {
			m, port := upstreamManager(t, tier)
			pins := []string{"up.test:127.0.0.1", "other.test:127.0.0.1"}
			info := mustCreate(t, m, "a", CreateRequest{Policy: policy.Spec{Tier: tier, Network: policy.Network{
				AllowedDomains: []string{"other.test:" + port},
				Hosts:          pins,
			}}})
			fetch := `curl -sS --max-time 10 -o /dev/null -w "%{http_code}\n" http://up.test:` + port + `/x; curl -sS --max-time 10 http://up.test:` + port + `/x || true`
			reaches := func() bool {
				out, _, err := run(testCtx(t), m, "a", info.ID, fetch)
				if err != nil {
					t.Fatal(err)
				}
				return strings.Contains(out, "upstream saw up.test:"+port+"/x")
			}
			if reaches() {
				t.Fatal("the sandbox reached up.test before its rules allowed it")
			}

			ctx := testCtx(t)
			nw, err := m.UpdateNetwork(ctx, "a", info.ID, policy.Network{AllowedDomains: []string{"UP.test:" + port}, Hosts: pins}, false)
			if err != nil {
				t.Fatal(err)
			}
			if nw.Mode != "proxy" || !slices.Equal(nw.AllowedDomains, []string{"up.test:" + port}) {
				t.Errorf("the new rules, normalized: %+v", nw)
			}
			if !reaches() {
				t.Fatal("the sandbox did not reach up.test once its rules allowed it")
			}
			sb, err := m.st.GetSandbox(ctx, "a", info.ID)
			if err != nil {
				t.Fatal(err)
			}
			var spec policy.Spec
			if err := json.Unmarshal(sb.Spec, &spec); err != nil || !slices.Equal(spec.Network.AllowedDomains, nw.AllowedDomains) {
				t.Errorf("the recorded policy's network: %+v, %v", spec.Network, err)
			}

			if nw, err = m.UpdateNetwork(ctx, "a", info.ID, policy.Network{Mode: "none"}, false); err != nil || nw.Mode != "none" {
				t.Fatalf("offline: %+v, %v", nw, err)
			}
			if reaches() {
				t.Fatal("the sandbox reached up.test once offline")
			}

			for _, bad := range []struct {
				tenant string
				nw     policy.Network
				want   error
			}{
				{"b", policy.Network{AllowedDomains: []string{"up.test:" + port}}, ErrNotFound},
				{"a", policy.Network{AllowedCIDRs: []string{"10.0.0.0/8"}}, ErrInvalid},
				{"a", policy.Network{AllowedDomains: []string{"*"}, AllowPrivate: []string{"0.0.0.0/0"}}, ErrInvalid},
				{"a", policy.Network{Mode: "host"}, ErrInvalid},
				{"a", policy.Network{AllowedDomains: []string{"exa mple.com"}}, ErrInvalid},
			} {
				if _, err := m.UpdateNetwork(ctx, bad.tenant, info.ID, bad.nw, false); !errors.Is(err, bad.want) {
					t.Errorf("tenant %s, %+v: %v, want %v", bad.tenant, bad.nw, err, bad.want)
				}
			}
			if reaches() {
				t.Fatal("a refused update opened the sandbox")
			}
			ch, err := m.Events(context.Background(), "a", info.ID, 0)
			if err != nil {
				t.Fatal(err)
			}
			if err := m.Destroy(ctx, "a", info.ID); err != nil {
				t.Fatal(err)
			}
			var changes int
			for e := range ch {
				if e.Type == EventNetwork {
					changes++
				}
			}
			if changes != 2 {
				t.Errorf("%d network events, want 2", changes)
			}
		})
	}
}
