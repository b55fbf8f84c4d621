package testutil

import (
	"os"
	"sync"
	"syscall"
	"testing"
)

// hostRootLock is the lock file of HostRootChanges and HostRootSteady,
// shared by every test process of a run.
const hostRootLock = "/run/hutch-test-host-root.lock"

// HostRootChanges holds the host root's lock alone until t ends: t makes
// paths on the host that sandboxes with the host's root see (a deny-read
// path of the defaults, which their view masks). A gVisor sandbox saved
// to disk is restored only onto the files it saw (runsc walks back to
// every directory it held, masks' mount points too), so such a path made
// or removed between a save and its restore would fail a test of
// another package that restores one (HostRootSteady). The tests of one
// process that call it share the lock. Without root, nothing is locked.
func HostRootChanges(t testing.TB) {
	t.Helper()
	changes.Lock()
	defer changes.Unlock()
	if changes.held == 0 {
		changes.f = hostRoot(t, syscall.LOCK_EX)
	}
	changes.held++
	t.Cleanup(func() {
		changes.Lock()
		defer changes.Unlock()
		if changes.held--; changes.held == 0 && changes.f != nil {
			changes.f.Close()
		}
	})
}

// changes is this process's hold of the lock by HostRootChanges.
var changes struct {
	sync.Mutex
	held int      // tests holding it
	f    *os.File // the lock file, locked
}

// HostRootSteady holds the host root's lock beside other tests that do
// the same until t ends, while no test changes the host root
// (HostRootChanges): for a test that saves a sandbox with the host's
// root to disk and restores it.
func HostRootSteady(t testing.TB) {
	t.Helper()
	if f := hostRoot(t, syscall.LOCK_SH); f != nil {
		t.Cleanup(func() { f.Close() })
	}
}

// hostRoot opens the host root's lock file and locks it (how: flock's
// LOCK_EX or LOCK_SH); without root, it returns nil.
func hostRoot(t testing.TB, how int) *os.File {
	t.Helper()
	if os.Geteuid() != 0 {
		return nil
	}
	f, err := os.OpenFile(hostRootLock, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(f.Fd()), how); err != nil {
		f.Close()
		t.Fatalf("lock %s: %v", hostRootLock, err)
	}
	return f
}
