//go:build linux

package escape

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// daemons starts three processes that try to outlive the sandbox, each
// ignoring SIGTERM, SIGHUP and SIGINT and touching a heartbeat file in the
// workspace every 50ms: one in a new session (setsid), one under nohup,
// and one double-forked (its parent exits at once, so it is reparented).
// The script waits until all three beat.
const daemons = `
setsid sh -c 'trap "" TERM HUP INT; while :; do touch beat1; sleep 0.05; done' </dev/null >/dev/null 2>&1 &
nohup sh -c 'trap "" TERM HUP INT; while :; do touch beat2; sleep 0.05; done' </dev/null >/dev/null 2>&1 &
sh -c 'sh -c "trap \"\" TERM HUP INT; while :; do touch beat3; sleep 0.05; done" </dev/null >/dev/null 2>&1 & exit 0'
while [ ! -e beat1 ] || [ ! -e beat2 ] || [ ! -e beat3 ]; do sleep 0.05; done
echo started
`

var beats = []string{"beat1", "beat2", "beat3"}

// quiet fails the test if a heartbeat file still changes after the
// sandbox ended. Call it after waitNoMarked: by then nothing should beat.
func quiet(t *testing.T, ws string) {
	t.Helper()
	mtimes := func() map[string]time.Time {
		m := map[string]time.Time{}
		for _, b := range beats {
			if fi, err := os.Stat(filepath.Join(ws, b)); err == nil {
				m[b] = fi.ModTime()
			}
		}
		return m
	}
	before := mtimes()
	time.Sleep(300 * time.Millisecond)
	for b, mt := range mtimes() {
		if !mt.Equal(before[b]) {
			t.Errorf("S4 violated: %s is still being touched after the sandbox ended", b)
		}
	}
}

// markerFlags sets a fresh marker in the sandbox's environment.
func markerFlags() (string, []string) {
	m := randomName("m")
	return m, []string{"--env", markerVar + "=" + m}
}

// TestItem09_Daemons: setsid, nohup and double-forked daemons that ignore
// SIGTERM all die when the command exits (S4); hutch returns the
// command's exit status, and afterwards no process of the sandbox remains
// on the host and no heartbeat file changes.
func TestItem09_Daemons(t *testing.T) {
	forEachMode(t, func(t *testing.T, sb *harness) {
		marker, flags := markerFlags()
		r := sb.run(opts{flags: flags}, daemons+"exit 3")
		if r.code != 3 || !strings.Contains(r.stdout, "started") {
			t.Fatalf("want the daemons started and exit 3\n%s", r)
		}
		waitNoMarked(t, marker)
		quiet(t, sb.ws)
	})
}

// TestItem09_Timeout: --timeout 1s kills a command sleeping for 100s
// together with its daemons (S4); hutch returns 124 and says so.
func TestItem09_Timeout(t *testing.T) {
	forEachMode(t, func(t *testing.T, sb *harness) {
		marker, flags := markerFlags()
		timeout := "1s"
		if sb.gvisor() {
			// The timeout counts gVisor's start too.
			timeout = "10s"
		}
		r := sb.run(opts{flags: append(flags, "--timeout", timeout), deadline: 3 * time.Minute}, daemons+"sleep 100")
		if r.code != 124 || !strings.Contains(r.stderr, "timed out") {
			t.Errorf("want exit 124 and a timeout message\n%s", r)
		}
		if !strings.Contains(r.stdout, "started") {
			t.Errorf("the daemons did not start before the timeout\n%s", r)
		}
		waitNoMarked(t, marker)
		quiet(t, sb.ws)
	})
}

// TestItem09_SupervisorKilled: when hutch itself is killed with SIGKILL
// (it gets no chance to clean up), every process of its sandbox dies too
// (S4).
func TestItem09_SupervisorKilled(t *testing.T) {
	forEachMode(t, func(t *testing.T, sb *harness) {
		marker, flags := markerFlags()
		p := sb.start(opts{flags: flags}, append(append([]string{"run"}, flags...), "--", "/bin/sh", "-c", daemons+"echo ready > ready; sleep 1000")...)
		ready := filepath.Join(sb.ws, "ready")
		deadline := time.Now().Add(2 * time.Minute)
		for !exists(ready) {
			if time.Now().After(deadline) {
				_ = p.cmd.Process.Kill()
				t.Fatalf("the sandbox never became ready\n%s", p.wait())
			}
			time.Sleep(20 * time.Millisecond)
		}
		// Under gVisor the sandbox's processes are not host processes
		// (they carry no marker there): what runs on the host for it is
		// runsc and its sandbox and gofer, hutch's descendants.
		held := descendants(p.cmd.Process.Pid)
		if !sb.gvisor() && len(markedProcs(marker)) == 0 || sb.gvisor() && len(held) == 0 {
			_ = p.cmd.Process.Kill()
			t.Fatalf("no sandbox process found on the host while the sandbox runs: the check below could not fail")
		}
		if err := p.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		p.o.noCheck = true
		if r := p.wait(); r.code != 137 {
			t.Errorf("hutch was killed with SIGKILL, want status 137, got %d", r.code)
		}
		waitNoMarked(t, marker)
		waitGone(t, held)
		quiet(t, sb.ws)
		if sb.gvisor() {
			// What the killed hutch left on the host, its state
			// directory with the workspace's binds in it, is swept by
			// the next gVisor sandbox: after one, nothing holds the
			// workspace.
			if r := sb.run(opts{}, "true"); r.code != 0 {
				t.Fatalf("the next sandbox: %s", r)
			}
			// Another sandbox starting meanwhile holds a copy of the
			// host's mounts for a moment (it drops the state
			// directory's): a minute to let go.
			var m []string
			if !testutil.Eventually(time.Minute, func() bool { m = mountsOf(sb.ws); return len(m) == 0 }) {
				t.Errorf("the workspace is still mounted on the host after the next sandbox swept:\n%s", strings.Join(m, "\n"))
			}
		}
	})
}

// mountsOf lists the host's mounts (this process's mountinfo lines) of
// dir or of something in it.
func mountsOf(dir string) []string {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	var m []string
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 4 && (f[3] == dir || strings.HasPrefix(f[3], dir+"/")) {
			m = append(m, l)
		}
	}
	return m
}

// waitGone fails the test unless every pid of pids (a sandbox's host
// processes) is gone within a generous deadline, and kills what is left.
func waitGone(t *testing.T, pids []int) {
	t.Helper()
	if !testutil.Eventually(time.Minute, func() bool { return !slices.ContainsFunc(pids, alive) }) {
		for _, p := range pids {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
		t.Fatalf("S4 violated: the sandbox's host processes %v outlived hutch", pids)
	}
}
