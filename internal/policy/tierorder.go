package policy

import "slices"

// TierRank is the strength of tier's isolation, its place in Tiers
// (namespace 0 < gvisor 1 < microvm 2); -1 for a tier Tiers does not list.
func TierRank(tier string) int {
	return slices.Index(Tiers, tier)
}

// TierAtLeast reports whether tier isolates at least as strongly as floor
// (both among Tiers): what hutch serve --min-tier asks of every sandbox.
func TierAtLeast(tier, floor string) bool {
	r := TierRank(tier)
	return r >= 0 && r >= TierRank(floor)
}

// StrongerTier is the stronger of two tiers of Tiers.
func StrongerTier(a, b string) string {
	if TierRank(b) > TierRank(a) {
		return b
	}
	return a
}
