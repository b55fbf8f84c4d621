package webui

import (
	"os"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/testutil"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testutil.RemoveBuilds()
	os.Exit(code)
}
