package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/cgroups/cgroupstest"
)

// testPause drives hutch pause and resume against the daemon d: a busy
// process of a paused sandbox stops using the CPU and goes on once it is
// resumed; exec in a paused sandbox, pausing it twice and another
// tenant's pause are refused; hutch rm ends a paused sandbox and leaves
// no process and no cgroup. A second sandbox stays paused, for the
// daemon's shutdown to end.
func testPause(t *testing.T, d *daemonProc) {
	r := d.admin(t, "create", "--label", "suite=pause")
	wantOK(t, r)
	id := lastLine(r.stdout)
	marker := "hutch-e2e-busy-" + strconv.Itoa(os.Getpid())
	// Busy in bursts, not spinning: a spinning process took a core from
	// the rest of the suite for as long as the test ran.
	busy := startMarked(t, d, id, marker, `setsid sh -c 'while :; do i=0; while [ $i -lt 3000 ]; do i=$((i+1)); done; sleep 0.05; done; : %s' >/dev/null 2>&1 </dev/null &`)
	pid1 := namespacePID1(t, d, busy.pidns)
	dirs := cgroupstest.SandboxDirs(t, pid1.pid)
	if !usesCPU(busy.pid) {
		t.Fatal("the busy process uses no CPU time")
	}

	r = d.admin(t, "pause", id)
	if wantOK(t, r); strings.TrimSpace(r.stdout) != id {
		t.Errorf("pause printed %q", r.stdout)
	}
	r = d.admin(t, "ls", "-q", "--state", "paused")
	if wantOK(t, r); !strings.Contains(r.stdout, id) {
		t.Errorf("ls --state paused: %q", r.stdout)
	}
	t0 := cpuTicks(busy.pid)
	time.Sleep(500 * time.Millisecond)
	if t1 := cpuTicks(busy.pid); t1 != t0 {
		t.Errorf("paused, the busy process went on from %d to %d ticks", t0, t1)
	}
	start := time.Now()
	r = d.admin(t, "exec", id, "--", "true")
	if wantCode(t, r, 125); !strings.Contains(r.stderr, "409") || !strings.Contains(r.stderr, "paused") {
		t.Errorf("exec while paused: %s", r)
	}
	if took := time.Since(start); took > time.Minute {
		t.Errorf("exec while paused took %s: it waited for the sandbox instead of refusing", took)
	}
	r = d.admin(t, "pause", id)
	if wantCode(t, r, 1); !strings.Contains(r.stderr, "409") {
		t.Errorf("pause twice: %s", r)
	}
	r = d.admin(t, "token", "create", "--tenant", "pause-other", "--state-dir", d.stateDir)
	wantOK(t, r)
	r = d.as(t, d.tcp, lastLine(r.stdout), nil, "resume", id)
	if wantCode(t, r, 1); !strings.Contains(r.stderr, "404") {
		t.Errorf("another tenant resumes the sandbox: %s", r)
	}

	r = d.admin(t, "resume", id)
	if wantOK(t, r); strings.TrimSpace(r.stdout) != id {
		t.Errorf("resume printed %q", r.stdout)
	}
	if !usesCPU(busy.pid) {
		t.Error("resumed, the busy process uses no CPU time")
	}
	r = d.admin(t, "exec", id, "--", "echo", "ok")
	if wantOK(t, r); r.stdout != "ok\n" {
		t.Errorf("exec after resume: %q", r.stdout)
	}
	r = d.admin(t, "resume", id)
	if wantCode(t, r, 1); !strings.Contains(r.stderr, "409") {
		t.Errorf("resume a running sandbox: %s", r)
	}
	wantOK(t, d.admin(t, "pause", id))
	wantOK(t, d.admin(t, "rm", id))
	for _, p := range []sandboxProc{busy, {pid: pid1.pid, start: pid1.start}} {
		if p.alive() {
			t.Errorf("process %d of the paused sandbox survived rm", p.pid)
		}
	}
	for _, dir := range dirs {
		if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("cgroup %s remains after rm (stat: %v)", dir, err)
		}
	}
	r = d.admin(t, "events", id)
	wantOK(t, r)
	var types []string
	for _, l := range lines(r.stdout) {
		if f := strings.Fields(l); len(f) > 1 {
			types = append(types, f[1])
		}
	}
	if got := strings.Join(types, ","); !strings.Contains(got, ",paused,resumed,") || !strings.HasSuffix(got, ",paused,destroyed,ended") {
		t.Errorf("events:\n%s", r.stdout)
	}

	testPauseNoMemory(t, d)

	r = d.admin(t, "create", "--label", "suite=pause")
	wantOK(t, r)
	wantOK(t, d.admin(t, "pause", lastLine(r.stdout)))
}

// testPauseNoMemory drives hutch pause --no-memory: a background process
// of the sandbox is killed, a file it wrote stays; the paused event says
// memory false; resumed, commands run.
func testPauseNoMemory(t *testing.T, d *daemonProc) {
	r := d.admin(t, "create", "--label", "suite=pause")
	wantOK(t, r)
	id := lastLine(r.stdout)
	marker := "hutch-e2e-files-only-" + strconv.Itoa(os.Getpid())
	startMarked(t, d, id, marker, `echo kept >/etc/hutch-kept; nohup sh -c 'sleep 1000; : %s' >/dev/null 2>&1 &`)
	r = d.admin(t, "pause", "--no-memory", id)
	if wantOK(t, r); strings.TrimSpace(r.stdout) != id {
		t.Errorf("pause --no-memory printed %q", r.stdout)
	}
	if p, ok := findMarked(t, d, marker); ok {
		t.Errorf("process %d survived the pause without memory", p.pid)
	}
	wantOK(t, d.admin(t, "resume", id))
	r = d.admin(t, "exec", id, "--", "cat", "/etc/hutch-kept")
	if wantOK(t, r); r.stdout != "kept\n" {
		t.Errorf("the file after the resume: %q", r.stdout)
	}
	wantOK(t, d.admin(t, "rm", id))
	r = d.admin(t, "events", id)
	if wantOK(t, r); !regexp.MustCompile(`paused +memory=false`).MatchString(r.stdout) {
		t.Errorf("events:\n%s", r.stdout)
	}
}

// startMarked runs script (a format whose %s is marker) in sandbox id of
// d, which starts a background process whose command line holds marker,
// and returns that process once it runs.
func startMarked(t *testing.T, d *daemonProc, id, marker, script string) sandboxProc {
	t.Helper()
	wantOK(t, d.admin(t, "exec", id, "--", "sh", "-c", fmt.Sprintf(script, marker)))
	for end := time.Now().Add(guard); ; time.Sleep(20 * time.Millisecond) {
		if p, ok := findMarked(t, d, marker); ok {
			return p
		}
		if time.Now().After(end) {
			t.Fatal("the marked process did not start")
		}
	}
}

// findMarked finds the process of a sandbox of d whose command line holds
// marker.
func findMarked(t *testing.T, d *daemonProc, marker string) (sandboxProc, bool) {
	for _, p := range sandboxProcs(t, d.cmd.Process.Pid) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p.pid))
		if err == nil && strings.Contains(string(b), marker) && p.alive() {
			return p, true
		}
	}
	return sandboxProc{}, false
}

// namespacePID1 is the PID 1 of the sandbox of d whose pid namespace is
// pidns.
func namespacePID1(t *testing.T, d *daemonProc, pidns string) sandboxProc {
	t.Helper()
	for _, p := range sandboxProcs(t, d.cmd.Process.Pid) {
		if p.pidns != pidns {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.pid))
		if err != nil {
			continue
		}
		for line := range strings.Lines(string(b)) {
			if f := strings.Fields(line); len(f) > 1 && f[0] == "NSpid:" && f[len(f)-1] == "1" {
				return p
			}
		}
	}
	t.Fatalf("no PID 1 in pid namespace %s", pidns)
	return sandboxProc{}
}

// cpuTicks is the CPU time host process pid used, in clock ticks; -1 if
// it is gone.
func cpuTicks(pid int) int64 {
	f, err := procStat(pid)
	if err != nil {
		return -1
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return u + s
}

// usesCPU reports whether host process pid uses CPU time within 5 s.
func usesCPU(pid int) bool {
	t0 := cpuTicks(pid)
	for end := time.Now().Add(time.Minute); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if cpuTicks(pid) > t0 {
			return true
		}
	}
	return false
}
