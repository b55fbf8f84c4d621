package ociruntime

import (
	"os"
	"path/filepath"
	"testing"
)

// TestAllocateIDs: blocks of host ids are taken lowest first, one per
// container, released by their owner only; a block whose owner's state is
// gone is taken again.
func TestAllocateIDs(t *testing.T) {
	dir, states := t.TempDir(), t.TempDir()
	owner := func(name string) string {
		p := filepath.Join(states, name)
		if err := os.MkdirAll(p, 0o700); err != nil {
			t.Fatal(err)
		}
		return p
	}
	a, b := owner("a"), owner("b")
	ba, err := allocateIDs(dir, a)
	if err != nil || ba != idBase {
		t.Fatalf("first block: %d %v", ba, err)
	}
	bb, err := allocateIDs(dir, b)
	if err != nil || bb != idBase+idBlock {
		t.Fatalf("second block: %d %v", bb, err)
	}
	releaseIDs(dir, b)
	if bb2, err := allocateIDs(dir, b); err != nil || bb2 != bb {
		t.Errorf("a released block is taken again: %d %v", bb2, err)
	}
	// a's state is gone (its runtime died before poststop): its block
	// is free for c.
	if err := os.RemoveAll(a); err != nil {
		t.Fatal(err)
	}
	if bc, err := allocateIDs(dir, owner("c")); err != nil || bc != idBase {
		t.Errorf("a stale block is not taken again: %d %v", bc, err)
	}
}
