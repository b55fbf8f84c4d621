package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestServeKilled: `hutch serve` killed with SIGKILL takes its sandboxes
// with it (their PID 1 has a parent-death signal), running, paused or
// warm; the next daemon on the same state directory finds their records,
// directories and cgroups and cleans them all up, and works.
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
	cgroupDirs := func() []string {
		var out []string
		for _, id := range ids {
			m, _ := filepath.Glob("/sys/fs/cgroup/*/hutch-" + id)
			n, _ := filepath.Glob("/sys/fs/cgroup/hutch-" + id)
			deeper, _ := filepath.Glob("/sys/fs/cgroup/*/*/hutch-" + id)
			out = append(append(append(out, m...), n...), deeper...)
		}
		return out
	}
	if len(cgroupDirs()) == 0 {
		t.Fatal("the sandboxes have no cgroup directories named after them")
	}

	if err := d.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-d.exited
	deadline := time.Now().Add(guard)
	for _, p := range procs {
		for p.alive() && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if p.alive() {
			t.Errorf("sandbox process %d (pid ns %s) outlived the daemon", p.pid, p.pidns)
		}
	}

	d.start(t)
	if dirs := cgroupDirs(); len(dirs) > 0 {
		t.Errorf("cgroups left after the restart: %v", dirs)
	}
	for _, id := range ids {
		if _, err := os.Stat(filepath.Join(d.stateDir, "sandboxes", id)); !os.IsNotExist(err) {
			t.Errorf("the directory of %s remains: %v", id, err)
		}
	}
	r := d.admin(t, "ls")
	wantOK(t, r)
	for _, id := range ids {
		if strings.Contains(r.stdout, id) {
			t.Errorf("hutch ls still lists %s:\n%s", id, r.stdout)
		}
	}
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
