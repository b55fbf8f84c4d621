package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
)

// TestServeKilled: `hutch serve` killed with SIGKILL leaves its
// sandboxes running (TestServeReadopt); the next daemon on the same state
// directory takes the running one again, and ends those it cannot take —
// paused, warm — cleaning up their records, directories and cgroups, and
// works.
func TestServeKilled(t *testing.T) {
	d := startDaemon(t)
	var ids []string
	for range 2 {
		r := d.admin(t, "create", "--memory", "64m")
		wantOK(t, r)
		ids = append(ids, lastLine(r.stdout))
	}
	wantOK(t, d.admin(t, "exec", ids[0], "--", "sh", "-c", "setsid sleep 1000 >/dev/null 2>&1 &"))
	wantOK(t, d.admin(t, "pause", ids[1]))
	procs := sandboxProcs(t, d.cmd.Process.Pid)
	if len(procs) < 4 { // two PID 1s, sleep, and the warm sandboxes' PID 1s
		t.Fatalf("%d sandbox processes before the kill, want at least 4", len(procs))
	}
	t.Cleanup(func() {
		for _, p := range procs {
			p.kill()
		}
	})
	kept := map[int]bool{}
	for _, p := range procs {
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", p.pid)); err == nil && strings.Contains(string(b), "hutch-"+ids[0]) {
			kept[p.pid] = true
		}
	}
	if len(kept) < 2 {
		t.Fatalf("%d processes of the running sandbox, want PID 1 and sleep", len(kept))
	}
	cgroupDirs := func(ids ...string) []string {
		var out []string
		for _, id := range ids {
			m, _ := filepath.Glob("/sys/fs/cgroup/*/hutch-" + id)
			n, _ := filepath.Glob("/sys/fs/cgroup/hutch-" + id)
			deeper, _ := filepath.Glob("/sys/fs/cgroup/*/*/hutch-" + id)
			out = append(append(append(out, m...), n...), deeper...)
		}
		return out
	}
	if len(cgroupDirs(ids...)) == 0 {
		t.Fatal("the sandboxes have no cgroup directories named after them")
	}

	if err := d.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-d.exited
	d.start(t)
	for _, p := range procs {
		if kept[p.pid] != p.alive() {
			t.Errorf("sandbox process %d (pid ns %s): alive %v after the restart, want %v", p.pid, p.pidns, p.alive(), kept[p.pid])
		}
	}
	if dirs := cgroupDirs(ids[1]); len(dirs) > 0 {
		t.Errorf("cgroups left after the restart: %v", dirs)
	}
	if _, err := os.Stat(filepath.Join(d.stateDir, "sandboxes", ids[1])); !os.IsNotExist(err) {
		t.Errorf("the directory of %s remains: %v", ids[1], err)
	}
	r := d.admin(t, "ls")
	wantOK(t, r)
	if strings.Contains(r.stdout, ids[1]) || !strings.Contains(r.stdout, ids[0]) {
		t.Errorf("hutch ls lists, after the restart (want %s only):\n%s", ids[0], r.stdout)
	}
	ids = ids[1:] // the one ended
	// The restarted daemon serves.
	r = d.admin(t, "create")
	wantOK(t, r)
	r = d.admin(t, "exec", lastLine(r.stdout), "--", "echo", "alive")
	if wantOK(t, r); r.stdout != "alive\n" {
		t.Errorf("exec after the restart: %q", r.stdout)
	}
	// Nothing of the old sandboxes (those created, and the warm ones the
	// restarted daemon says it stopped) is mounted anywhere the host can
	// see: under the state directory only root layers are, of the
	// restarted daemon's own sandboxes (where snapshots copy them from;
	// its warm pool may be starting more meanwhile).
	old := map[string]bool{}
	for _, id := range ids {
		old[id] = true
	}
	for _, m := range regexp.MustCompile(`leftover sandbox stopped" sandbox=(sb-[a-z0-9]+)`).FindAllStringSubmatch(d.log.String(), -1) {
		old[m[1]] = true
	}
	if len(old) <= len(ids) {
		t.Errorf("the restarted daemon stopped none of the killed one's warm sandboxes:\n%s", d.log.String())
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(mi), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 || !strings.HasPrefix(f[4], d.stateDir) {
			continue
		}
		rel, _ := filepath.Rel(filepath.Join(d.stateDir, "sandboxes"), f[4])
		id, rest, _ := strings.Cut(rel, "/")
		if rest != "layer" || old[id] {
			t.Errorf("a mount under the state directory that is no root layer of the restarted daemon's sandboxes: %s", line)
		}
	}
}
