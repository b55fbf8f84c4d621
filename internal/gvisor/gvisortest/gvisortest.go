//go:build linux

// Package gvisortest gives tests a gVisor runtime of their own.
package gvisortest

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/gvisor"
	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/sandbox"
	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// Runtime is a gVisor runtime with the test's runsc (testutil.Runsc: the
// test skips without one, or fails under HUTCH_TEST_ROOT) and a state
// directory of the test's own for runsc, which must be empty when the test
// ends (the test fails otherwise), and is removed then.
func Runtime(t *testing.T) *gvisor.Runtime {
	t.Helper()
	testutil.RequireRoot(t)
	bin, err := gvisor.Find(testutil.Runsc(t))
	if err != nil {
		t.Fatalf("the test's runsc: %v", err)
	}
	base := filepath.Join("/run", "hutch-gvisor-test-"+sandbox.RandomID())
	t.Cleanup(func() {
		entries, _ := os.ReadDir(base)
		for _, e := range entries {
			t.Errorf("gVisor state left behind: %s", filepath.Join(base, e.Name()))
		}
		_ = unix.Unmount(base, unix.MNT_DETACH)
		_ = os.Remove(base)
	})
	return &gvisor.Runtime{Runsc: bin, StateDir: base}
}

// Runtimes are a daemon's runtimes of both tiers: the namespace tier's
// and Runtime's.
func Runtimes(t *testing.T) map[string]sandbox.Runtime {
	t.Helper()
	return map[string]sandbox.Runtime{
		policy.TierNamespace: sandbox.Namespaces{},
		policy.TierGVisor:    Runtime(t),
	}
}
