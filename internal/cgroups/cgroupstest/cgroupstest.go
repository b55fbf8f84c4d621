// Package cgroupstest helps tests find the cgroups of sandboxes.
package cgroupstest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/cgroups"
)

// SandboxDirs lists the cgroup directories, in every hierarchy, of the
// sandbox whose PID 1 is host process pid: its groups (named hutch-…) are
// made beneath the daemon's own cgroup, which is the test's. It fails the
// test when there are none or one is missing.
func SandboxDirs(t testing.TB, pid int) []string {
	t.Helper()
	info, err := cgroups.Available()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for line := range strings.Lines(string(b)) {
		f := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(f) != 3 || !strings.HasPrefix(filepath.Base(f[2]), "hutch-") {
			continue
		}
		name := filepath.Base(f[2])
		if f[1] == "" {
			dirs = append(dirs, filepath.Join(info.Unified, name))
			continue
		}
		for _, c := range strings.Split(f[1], ",") {
			if where, ok := info.Controllers[c]; ok && where.Version == 1 {
				dirs = append(dirs, filepath.Join(where.Path, name))
				break
			}
		}
	}
	if len(dirs) == 0 {
		t.Fatalf("the sandbox's PID 1 (host pid %d) is in no cgroup of its own:\n%s", pid, b)
	}
	for _, d := range dirs {
		if _, err := os.Stat(d); err != nil {
			t.Fatalf("the sandbox's cgroup: %v", err)
		}
	}
	return dirs
}
