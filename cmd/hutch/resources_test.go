package main

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/testutil"
)

func TestResourceLimits(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		args      []string
		code      int // -1: any non-zero code
		stdout    string
		stderrHas string
	}{
		{
			// Background sleeps outlive the loop; they die with the sandbox.
			name:      "pids",
			args:      sh(`i=0; while [ $i -lt 64 ]; do sleep 30 & i=$((i+1)); done; echo forked all`, "--pids", "32"),
			code:      -1,
			stderrHas: "fork",
		},
		{
			name:      "memory",
			args:      sh(`x=$(head -c 200000000 /dev/zero | tr '\0' a); echo ${#x}`, "--memory", "32m"),
			code:      137,
			stderrHas: "hutch: the sandbox ran out of memory (limit 32m)",
		},
		{
			name:      "tmp size",
			args:      sh(`head -c 2000000 /dev/zero > /tmp/big`, "--tmp-size", "1m"),
			code:      1,
			stderrHas: "No space left on device",
		},
		{
			name:   "tmp size leaves room below the limit",
			args:   sh(`head -c 500000 /dev/zero > /tmp/small && wc -c < /tmp/small`, "--tmp-size", "1m"),
			code:   0,
			stdout: "500000\n",
		},
		{
			name: "cpus",
			args: []string{"--cpus", "0.5", "--", "true"},
			code: 0,
		},
		{
			name:   "memory within the limit",
			args:   sh(`x=$(head -c 1000000 /dev/zero | tr '\0' a); echo ${#x}`, "--memory", "64m"),
			code:   0,
			stdout: "1000000\n",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := sandboxed(t, invocation{args: tc.args})
			if tc.code == -1 {
				if r.code == 0 {
					t.Errorf("want failure, got %s", r)
				}
			} else {
				wantCode(t, r, tc.code)
			}
			if r.stdout != tc.stdout {
				t.Errorf("stdout: got %q, want %q", r.stdout, tc.stdout)
			}
			if !strings.Contains(r.stderr, tc.stderrHas) {
				t.Errorf("stderr does not contain %q:\n%s", tc.stderrHas, r.stderr)
			}
		})
	}
}

// TestCPULimitInCgroup checks, while the sandbox runs, that its cgroup's
// CPU bandwidth is --cpus.
func TestCPULimitInCgroup(t *testing.T) {
	t.Parallel()
	testutil.RequireRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	ws := t.TempDir()
	cmd := exec.CommandContext(ctx, testutil.Hutch(t), "run", "--cpus", "0.5", "--", "sh", "-c", "echo started; read x; exit 0")
	cmd.Dir = ws
	cmd.Env = baseEnv(ws)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stdin.Close()
		go io.Copy(io.Discard, stdout)
		if err := cmd.Wait(); err != nil {
			t.Errorf("hutch: %v", err)
		}
	}()
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "started\n" {
		t.Fatalf("sandbox did not start: %q, %v", line, err)
	}
	init := childOf(t, cmd.Process.Pid)
	quota, period := cpuBandwidth(t, init)
	if got := float64(quota) / float64(period); got != 0.5 {
		t.Errorf("cgroup cpu bandwidth of the sandbox: %d/%d = %g cores, want 0.5", quota, period, got)
	}
}

// childOf returns the first child process of pid.
func childOf(t *testing.T, pid int) int {
	t.Helper()
	procs := descendants(t, pid)
	for _, p := range procs {
		if ppid, ok := parentOf(p); ok && ppid == pid {
			return p
		}
	}
	t.Fatalf("no child of hutch (pid %d) found", pid)
	return 0
}

// cpuBandwidth reads the CPU quota and period of pid's cgroup, from cgroup
// v2's cpu.max or v1's cpu controller.
func cpuBandwidth(t *testing.T, pid int) (quota, period int64) {
	t.Helper()
	cg, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	paths := map[string]string{} // controller ("" for v2) → path
	for _, l := range lines(string(cg)) {
		f := strings.SplitN(l, ":", 3)
		if len(f) != 3 {
			continue
		}
		for _, c := range strings.Split(f[1], ",") {
			paths[c] = f[2]
		}
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var tried []string
	for _, l := range lines(string(mi)) {
		pre, post, ok := strings.Cut(l, " - ")
		if !ok {
			continue
		}
		mf, pf := strings.Fields(pre), strings.Fields(post)
		if len(mf) < 5 || len(pf) < 3 {
			continue
		}
		root, mnt := mf[3], mf[4]
		rel := func(p string) string { return filepath.Join(mnt, strings.TrimPrefix(p, root)) }
		switch pf[0] {
		case "cgroup2":
			p, ok := paths[""]
			if !ok {
				continue
			}
			file := filepath.Join(rel(p), "cpu.max")
			tried = append(tried, file)
			b, err := os.ReadFile(file)
			if err != nil {
				continue
			}
			f := strings.Fields(string(b))
			if len(f) == 2 {
				q, err1 := strconv.ParseInt(f[0], 10, 64)
				p, err2 := strconv.ParseInt(f[1], 10, 64)
				if err1 == nil && err2 == nil {
					return q, p
				}
			}
			t.Fatalf("%s: %q", file, b)
		case "cgroup":
			isCPU := false
			for _, o := range strings.Split(pf[2], ",") {
				isCPU = isCPU || o == "cpu"
			}
			p, ok := paths["cpu"]
			if !isCPU || !ok {
				continue
			}
			dir := rel(p)
			tried = append(tried, dir)
			q, err1 := os.ReadFile(filepath.Join(dir, "cpu.cfs_quota_us"))
			per, err2 := os.ReadFile(filepath.Join(dir, "cpu.cfs_period_us"))
			if err1 != nil || err2 != nil {
				continue
			}
			qn, err1 := strconv.ParseInt(strings.TrimSpace(string(q)), 10, 64)
			pn, err2 := strconv.ParseInt(strings.TrimSpace(string(per)), 10, 64)
			if err1 != nil || err2 != nil {
				t.Fatalf("%s: quota %q period %q", dir, q, per)
			}
			return qn, pn
		}
	}
	t.Fatalf("no cpu controller found for pid %d (cgroup %q; tried %q)", pid, cg, tried)
	return 0, 0
}
