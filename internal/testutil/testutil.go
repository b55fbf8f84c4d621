// Package testutil holds the helpers hutch's tests share: the one gate for
// tests that need root or a kernel feature. Such a test skips with its reason
// on a developer laptop but fails when HUTCH_TEST_ROOT=1 (as CI sets), so CI
// can never be green by skipping.
package testutil

import (
	"os"
	"testing"
)

// Strict reports whether tests run under HUTCH_TEST_ROOT=1, where a missing
// privilege or kernel feature is a failure instead of a skip.
func Strict() bool { return os.Getenv("HUTCH_TEST_ROOT") == "1" }

// Need skips the test with reason when ok is false, or fails it in strict
// mode.
func Need(t testing.TB, ok bool, reason string) {
	t.Helper()
	if ok {
		return
	}
	if Strict() {
		t.Fatalf("HUTCH_TEST_ROOT=1 but this test cannot run: %s", reason)
	}
	t.Skipf("skipping: %s (set HUTCH_TEST_ROOT=1 to make this a failure)", reason)
}

// RequireRoot skips (or fails in strict mode) unless the test runs as root.
func RequireRoot(t testing.TB) {
	t.Helper()
	Need(t, os.Geteuid() == 0, "needs root")
}
