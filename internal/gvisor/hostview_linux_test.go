package gvisor

import (
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/mountinfo"
	"github.com/hutch-sandbox/hutch/internal/testutil"
)

func TestStateDirs(t *testing.T) {
	mounts := mountinfo.Parse(`26 1 254:0 / / rw,relatime - ext4 /dev/vda rw
21 26 0:20 / /proc rw,relatime - proc proc rw
44 26 254:0 /run/hutch-gvisor /run/hutch-gvisor rw,relatime - ext4 /dev/vda rw
68 44 0:4 net:[4026532181] /run/hutch-gvisor/hutch-0123456789ab/state/null-netns rw - nsfs nsfs rw
71 26 254:0 / /run/hutch-gvisor-test-0123 rw - ext4 /dev/vda rw
73 71 254:0 / /run/hutch-gvisor-test-0123/hutch-0123456789ab/rootfs rw - ext4 /dev/vda rw
72 26 254:0 / /run/hutch-gvisorx rw - ext4 /dev/vda rw
74 26 254:0 / /run/hutch-gvisor rw - ext4 /dev/vda rw
`)
	for _, tc := range []struct {
		base string
		want []string
	}{
		{DefaultStateDir, []string{"/run/hutch-gvisor", "/run/hutch-gvisor-test-0123"}},
		{"/run/hutch-gvisorx", []string{"/run/hutch-gvisor", "/run/hutch-gvisor-test-0123", "/run/hutch-gvisorx"}},
		{"/elsewhere", []string{"/run/hutch-gvisor", "/run/hutch-gvisor-test-0123"}},
	} {
		if got := stateDirs(mounts, tc.base); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("stateDirs(%s) = %q, want %q", tc.base, got, tc.want)
		}
	}
}

func TestInnermost(t *testing.T) {
	roots := []string{"/a", "/a/b", "/c"}
	for p, want := range map[string]int{"/a/x": 0, "/a/b/x": 1, "/a/b": 1, "/a/bb": 0, "/c": 2, "/d": -1} {
		if got := innermost(p, roots); got != want {
			t.Errorf("innermost(%s) = %d, want %d", p, got, want)
		}
	}
}

// TestGoferView checks what gVisor's gofer serves, from its own mount
// namespace while a sandbox runs: no kernel filesystem of the host's,
// nothing of the state directory (other sandboxes' roots and sockets) but
// an empty tmpfs, and the workspace's protected paths read-only mounts on
// the host, in the area the gofer serves.
func TestGoferView(t *testing.T) {
	rt := testRuntime(t)
	ws := testutil.OwnedDir(t, testutil.UnprivilegedUID)
	if err := os.Mkdir(filepath.Join(ws, ".git"), 0o755); err != nil {
		t.Fatal(err)
	}
	ch := make(chan outcome, 1)
	go func() { ch <- run(t, rt, ws, nil, "sh", "-c", "echo > started; exec sleep 600") }()
	// Once the command runs, the gofer serves its view.
	var gofer int
	if !testutil.Eventually(time.Minute, func() bool {
		if _, err := os.Stat(filepath.Join(ws, "started")); err != nil {
			return false
		}
		for _, pid := range processesOf(rt.StateDir) {
			cmdline, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
			if strings.HasPrefix(string(cmdline), "runsc-gofer") {
				gofer = pid
				return true
			}
		}
		return false
	}) {
		endAll(t, rt.StateDir, ch)
		t.Fatal("the sandbox did not start")
	}
	mounts, err := mountinfo.Read(filepath.Join("/proc", strconv.Itoa(gofer), "mountinfo"))
	endAll(t, rt.StateDir, ch)
	if err != nil {
		t.Fatal(err)
	}
	readOnly := map[string]bool{}
	for _, m := range mounts {
		readOnly[m.Point] = m.ReadOnly()
		if kernelFilesystems[m.FSType] {
			t.Errorf("the gofer serves the host's %s at %s", m.FSType, m.Point)
		}
		if within(m.Point, rt.StateDir) && (m.Point != rt.StateDir || m.FSType != "tmpfs") {
			t.Errorf("the gofer serves the state directory's %s (%s)", m.Point, m.FSType)
		}
	}
	for _, p := range []string{".bashrc", ".git/hooks", ".git/config", ".vscode"} {
		if !readOnly[filepath.Join(ws, p)] {
			t.Errorf("%s is not a read-only mount in the gofer's view: %+v", p, mounts)
		}
	}
	if ro, ok := readOnly[ws]; !ok || ro {
		t.Errorf("the workspace is not a writable mount in the gofer's view: %+v", mounts)
	}
}
