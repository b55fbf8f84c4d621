package daemon

import (
	"errors"
	"strings"
	"testing"
)

// TestSnapshotName: a snapshot's name may start as its ids do (E2B's SDK
// tests name theirs "snap-test-…"), but never have an id's form, which
// would make a lookup by name ambiguous.
func TestSnapshotName(t *testing.T) {
	for _, name := range []string{"", "sdk-snap", "snap-test-1764680000000", "snap-filter-test-a.b_c", "0"} {
		if err := checkSnapshotName(name); err != nil {
			t.Errorf("name %q refused: %v", name, err)
		}
	}
	for _, name := range []string{newSnapID(), "snap-aaaaaaaaaaaa", "-x", "Upper", "a/b", strings.Repeat("a", 65)} {
		if err := checkSnapshotName(name); !errors.Is(err, ErrInvalid) {
			t.Errorf("name %q: %v, want refused", name, err)
		}
	}
}
