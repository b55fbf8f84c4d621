package ocitest

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/hutch-sandbox/hutch/internal/image/imagetest"
	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// TestImage is the name of the image ImageTar writes.
const TestImage = "hutch.test/oci:1"

// ImageTar writes the tests' image as a `docker save` tarball: busybox
// with the applets the tests use, and two programs built from hutch's
// tests in /bin — fetch (an HTTP client that honours the proxy variables,
// test/oci/fetch) and the escape suite's attacker (test/escape/attacker).
func ImageTar(t *testing.T) string {
	t.Helper()
	var entries []imagetest.Entry
	for _, n := range []string{"grep", "sleep", "unshare", "wget", "nc", "kill", "ps", "head", "tr", "sed", "env", "nslookup", "true"} {
		entries = append(entries, imagetest.Symlink("bin/"+n, "busybox"))
	}
	for name, pkg := range map[string]string{"fetch": "test/oci/fetch", "attacker": "test/escape/attacker"} {
		b, err := os.ReadFile(program(t, "github.com/hutch-sandbox/hutch/"+pkg))
		if err != nil {
			t.Fatal(err)
		}
		entries = append(entries, imagetest.File("bin/"+name, string(b), 0o755))
	}
	img := imagetest.BusyboxWith(t, func(ok bool, reason string) { testutil.Need(t, ok, reason) }, func(c *v1.Config) {
		c.Cmd = []string{"/bin/sh"}
	}, entries...)
	return imagetest.DockerSave(t, img, TestImage, t.TempDir())
}

var (
	programsMu  sync.Mutex
	programs    = map[string]string{}
	programsDir string
)

// program builds the Go program pkg once per test process (static) and
// returns its path; RemoveBuilds removes it.
func program(t *testing.T, pkg string) string {
	t.Helper()
	programsMu.Lock()
	defer programsMu.Unlock()
	if p, ok := programs[pkg]; ok {
		return p
	}
	if programsDir == "" {
		d, err := os.MkdirTemp("", "hutch-oci-programs-")
		if err != nil {
			t.Fatal(err)
		}
		programsDir = d
	}
	out := filepath.Join(programsDir, filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
	programs[pkg] = out
	return out
}
