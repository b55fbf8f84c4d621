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

// TestJoinsUserLast: runc 1.2 and later join a pod's namespaces before
// the user namespace, 1.1 does not, a runtime not named runc does; each
// runc is asked its version once per process, however often it is asked.
func TestJoinsUserLast(t *testing.T) {
	runc := func(version string) (path, calls string) {
		dir := t.TempDir()
		path, calls = filepath.Join(dir, "runc"), filepath.Join(dir, "calls")
		script := "#!/bin/sh\necho >>" + calls + "\necho 'runc version " + version + "'\necho 'spec: 1.2.0'\n"
		if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		return path, calls
	}
	for _, c := range []struct {
		version string
		want    bool
	}{{"1.1.5", false}, {"1.2.0", true}, {"1.5.3", true}, {"2.0.0", true}, {"garbled", false}} {
		path, calls := runc(c.version)
		for range 3 {
			if got := joinsUserLast(path); got != c.want {
				t.Errorf("runc %s: joinsUserLast = %v, want %v", c.version, got, c.want)
			}
		}
		if b, err := os.ReadFile(calls); err != nil || len(b) != 1 {
			t.Errorf("runc %s: asked its version %d times (%v), want once", c.version, len(b), err)
		}
	}
	if !joinsUserLast(filepath.Join(t.TempDir(), "crun")) {
		t.Error("crun: joinsUserLast = false, want true")
	}
}
