package policy

import "testing"

// TestTierOrder: namespace < gvisor, every tier of Tiers ranked in its
// place; an unknown tier is at least nothing and below everything.
func TestTierOrder(t *testing.T) {
	if TierRank(TierNamespace) != 0 || TierRank(TierGVisor) != 1 || TierRank("kvm") != -1 || TierRank("") != -1 {
		t.Errorf("ranks: namespace %d, gvisor %d, kvm %d, empty %d", TierRank(TierNamespace), TierRank(TierGVisor), TierRank("kvm"), TierRank(""))
	}
	if Tiers[0] != DefaultTier {
		t.Errorf("the weakest tier %q is not the default %q: --min-tier's default would refuse the default", Tiers[0], DefaultTier)
	}
	for _, c := range []struct {
		tier, min string
		want      bool
	}{
		{TierNamespace, TierNamespace, true},
		{TierGVisor, TierNamespace, true},
		{TierGVisor, TierGVisor, true},
		{TierNamespace, TierGVisor, false},
		{"kvm", TierNamespace, false},
		{"", TierNamespace, false},
	} {
		if got := TierAtLeast(c.tier, c.min); got != c.want {
			t.Errorf("TierAtLeast(%q, %q) = %v, want %v", c.tier, c.min, got, c.want)
		}
	}
	for _, c := range [][3]string{
		{TierNamespace, TierGVisor, TierGVisor},
		{TierGVisor, TierNamespace, TierGVisor},
		{TierNamespace, TierNamespace, TierNamespace},
	} {
		if got := StrongerTier(c[0], c[1]); got != c[2] {
			t.Errorf("StrongerTier(%q, %q) = %q, want %q", c[0], c[1], got, c[2])
		}
	}
}
