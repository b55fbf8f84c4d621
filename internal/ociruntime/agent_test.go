package ociruntime

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// TestAgentPort: the annotation dev.hutch.agent is a TCP port, written as
// one; anything else is refused with an error that names it.
func TestAgentPort(t *testing.T) {
	for v, want := range map[string]int{"1": 1, "7443": 7443, "65535": 65535} {
		if got, err := agentPort(map[string]string{AnnotationAgent: v}); err != nil || got != want {
			t.Errorf("%q: %d %v, want %d", v, got, err, want)
		}
	}
	if got, err := agentPort(map[string]string{AnnotationPolicy: "web"}); err != nil || got != 0 {
		t.Errorf("no annotation: %d %v", got, err)
	}
	for _, v := range []string{"", "0", "65536", "-1", "+80", "080", "80 ", "http", "8080/tcp", "1e3"} {
		_, err := agentPort(map[string]string{AnnotationAgent: v})
		if err == nil || !strings.Contains(err.Error(), "annotation "+AnnotationAgent) || !strings.Contains(err.Error(), "not a TCP port") {
			t.Errorf("%q: %v", v, err)
		}
	}
}

// TestHardenAgent: with an agent's port the container's process is
// hutch's agent listening on it, behind hutch's init under runc, alone
// under gVisor, whose container gets the binary for it; the spec's
// environment, working directory and user stay.
func TestHardenAgent(t *testing.T) {
	for _, tier := range []string{"", TierGVisor} {
		s := testSpec()
		s.Process.Env = []string{"PATH=/bin", "HUTCH_AGENT_TOKEN=t"}
		s.Process.Cwd = "/work"
		s.Process.User.UID = 1000
		orig := *s.Process
		c, err := Harden(s, "/bundle", Options{Binary: "/usr/bin/hutch-runc", StateDir: "/run/hutch-runc/hutch/c1", Tier: tier, AgentPort: 7443})
		if err != nil {
			t.Fatal(err)
		}
		want := []string{InitPath, "agent", "--listen", ":7443"}
		if tier == "" {
			want = append(c.InitArgs(), want...)
		}
		if !reflect.DeepEqual(s.Process.Args, want) || !s.Process.NoNewPrivileges {
			t.Errorf("tier %q: process %q nnp %v, want %q", tier, s.Process.Args, s.Process.NoNewPrivileges, want)
		}
		if !reflect.DeepEqual(s.Process.Env, orig.Env) || s.Process.Cwd != orig.Cwd || !reflect.DeepEqual(s.Process.User, orig.User) {
			t.Errorf("tier %q: env %q cwd %q user %+v changed", tier, s.Process.Env, s.Process.Cwd, s.Process.User)
		}
		if !slices.ContainsFunc(s.Mounts, func(m specs.Mount) bool { return m.Destination == InitPath && m.Source == "/usr/bin/hutch-runc" }) {
			t.Errorf("tier %q: no binary at %s: %+v", tier, InitPath, s.Mounts)
		}
	}
}

// TestAgentFirewall: with an agent's port the container's table filters
// what comes in — the loopback, known connections, neighbour discovery,
// TCP to that port, and a refusal of the rest — besides what goes out;
// without it nothing filters what comes in.
func TestAgentFirewall(t *testing.T) {
	testutil.RequireRoot(t)
	for _, port := range []int{0, 7443} {
		err := inNewNetns(func(ns int) error {
			if err := egressFirewall(ns, port); err != nil {
				return err
			}
			c, err := nftables.New(nftables.WithNetNSFd(ns))
			if err != nil {
				return err
			}
			chains, err := c.ListChains()
			if err != nil {
				return err
			}
			var in *nftables.Chain
			for _, ch := range chains {
				if ch.Hooknum != nil && *ch.Hooknum == *nftables.ChainHookInput {
					in = ch
				}
			}
			if port == 0 {
				if in != nil {
					t.Errorf("no agent: a chain on input: %s", in.Name)
				}
				return nil
			}
			if in == nil || in.Table.Name != firewallTable || in.Policy == nil || *in.Policy != nftables.ChainPolicyDrop {
				t.Fatalf("agent port %d: no input chain of policy drop in %s: %+v", port, firewallTable, chains)
			}
			rules, err := c.GetRules(in.Table, in)
			if err != nil {
				return err
			}
			dport := binaryutil.BigEndian.PutUint16(uint16(port))
			found := false
			for _, r := range rules {
				var cmp bool
				for _, e := range r.Exprs {
					if c, ok := e.(*expr.Cmp); ok && reflect.DeepEqual(c.Data, dport) {
						cmp = true
					}
					if v, ok := e.(*expr.Verdict); ok && v.Kind == expr.VerdictAccept && cmp {
						found = true
					}
				}
			}
			if !found {
				t.Errorf("agent port %d: no rule accepts it: %d rules", port, len(rules))
			}
			if last := rules[len(rules)-1].Exprs; len(last) != 1 {
				t.Errorf("agent port %d: the last rule is not a refusal of the rest: %+v", port, last)
			} else if _, ok := last[0].(*expr.Reject); !ok {
				t.Errorf("agent port %d: the last rule is not a refusal of the rest: %+v", port, last)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}
