//go:build linux

package k8s

import (
	"os"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/testutil"
	"github.com/hutch-sandbox/hutch/internal/testutil/ocitest"
)

// TestMain removes what the tests built (hutch-runc, the test image's
// programs, hutch for hutch serve) once every test is done.
func TestMain(m *testing.M) {
	code := m.Run()
	ocitest.RemoveBuilds()
	testutil.RemoveBuilds()
	os.Exit(code)
}
