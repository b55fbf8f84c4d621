package cgroups

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/testutil"
	"golang.org/x/sys/unix"
)

// helperEnv names the helper a re-executed test binary runs instead of the
// tests; each helper first waits for its stdin to close, so the test can put
// it in a group before it does anything.
const helperEnv = "HUTCH_CGROUPS_HELPER"

func TestMain(m *testing.M) {
	helper, ok := helpers[os.Getenv(helperEnv)]
	if !ok {
		os.Exit(m.Run())
	}
	if _, err := io.Copy(io.Discard, os.Stdin); err != nil {
		fmt.Println("read stdin:", err)
		os.Exit(1)
	}
	helper()
	os.Exit(0)
}

var helpers = map[string]func(){
	// alloc touches 100MiB, and says so if it survives.
	"alloc": func() {
		b := make([]byte, 100<<20)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		runtime.KeepAlive(b)
		fmt.Println("survived")
	},
	// busy holds 32MiB and burns 200ms of CPU time, says so, and waits
	// to be killed.
	"busy": func() {
		b := make([]byte, 32<<20)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		for {
			var ru syscall.Rusage
			if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
				fmt.Println("getrusage:", err)
				return
			}
			if time.Duration(ru.Utime.Nano()+ru.Stime.Nano()) >= busyCPU {
				break
			}
		}
		fmt.Println("done")
		time.Sleep(time.Hour)
		runtime.KeepAlive(b)
	},
	// enable runs enable for the v2 cgroup and controller in its arguments,
	// then prints its own v2 cgroup, or the error.
	"enable": func() {
		own, ctl := os.Getenv("HUTCH_CGROUPS_OWN"), os.Getenv("HUTCH_CGROUPS_CTL")
		if err := enable(own, []string{ctl}); err != nil {
			fmt.Printf("error notsupported=%v: %v\n", errors.Is(err, ErrNotSupported), err)
			return
		}
		self, _ := os.ReadFile("/proc/self/cgroup")
		for line := range strings.Lines(string(self)) {
			if p, ok := strings.CutPrefix(line, "0::"); ok {
				fmt.Print("cgroup ", p)
			}
		}
	},
	// unprivileged drops root and tries to create a group.
	"unprivileged": func() {
		if err := syscall.Setgid(65534); err != nil {
			fmt.Println("setgid:", err)
			return
		}
		if err := syscall.Setuid(65534); err != nil {
			fmt.Println("setuid:", err)
			return
		}
		g, err := Create(uniqueName(), Limits{Pids: 5})
		if err == nil {
			g.Destroy()
		}
		fmt.Printf("permission=%v notsupported=%v: %v\n", errors.Is(err, ErrPermission), errors.Is(err, ErrNotSupported), err)
	},
}

// busyCPU is the CPU time the busy helper burns.
const busyCPU = 200 * time.Millisecond

func uniqueName() string {
	b := make([]byte, 6)
	rand.Read(b)
	return "hutch-test-" + hex.EncodeToString(b)
}

// newGroup creates a group for the test and destroys it when the test ends,
// checking that no directory is left behind.
func newGroup(t *testing.T, l Limits) *Group {
	t.Helper()
	testutil.RequireRoot(t)
	g, err := Create(uniqueName(), l)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { destroy(t, g) })
	return g
}

func destroy(t *testing.T, g *Group) {
	t.Helper()
	if err := g.Destroy(); err != nil {
		t.Errorf("destroy: %v", err)
	}
	for _, d := range g.Paths() {
		if _, err := os.Stat(d); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s left behind (stat: %v)", d, err)
		}
	}
}

// start starts cmd held at its stdin, adds it to g, and returns its stdout
// once it runs on. The process is killed when the test ends.
func start(t *testing.T, g *Group, cmd *exec.Cmd) *bufio.Reader {
	t.Helper()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if cmd.Stderr == nil {
		cmd.Stderr = os.Stderr
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	if err := g.Add(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	stdin.Close()
	return bufio.NewReader(stdout)
}

func helperCmd(name string, env ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), append(env, helperEnv+"="+name)...)
	return cmd
}

func TestNoLimitsIsNoop(t *testing.T) {
	g, err := Create("unused", Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if p := g.Paths(); len(p) != 0 {
		t.Errorf("Paths = %v, want none", p)
	}
	if _, ok := g.FD(); ok {
		t.Error("FD ok for an empty group")
	}
	if s, err := g.Stats(); err != nil || s != (Stats{}) {
		t.Errorf("Stats = %+v, %v", s, err)
	}
	for name, f := range map[string]func() error{"Add": func() error { return g.Add(1) }, "Kill": g.Kill, "Destroy": g.Destroy} {
		if err := f(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestCreateRejects(t *testing.T) {
	tests := []struct {
		name    string
		l       Limits
		wantErr string
	}{
		{"", Limits{Pids: 1}, `cgroups: invalid group name ""`},
		{"a/b", Limits{Pids: 1}, `cgroups: invalid group name "a/b"`},
		{"..", Limits{Pids: 1}, `cgroups: invalid group name ".."`},
		{supervisor, Limits{Pids: 1}, `cgroups: invalid group name "hutch-supervisor"`},
		{"ok", Limits{Pids: -1}, "cgroups: pids limit -1: must not be negative"},
	}
	for _, tt := range tests {
		if _, err := Create(tt.name, tt.l); errString(err) != tt.wantErr {
			t.Errorf("Create(%q, %+v) err = %v, want %q", tt.name, tt.l, err, tt.wantErr)
		}
	}
}

func TestAvailable(t *testing.T) {
	info, err := Available()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("cgroup v2: %q", info.Unified)
	for _, c := range []string{"memory", "cpu", "pids", "freezer"} {
		t.Logf("%s: %+v", c, info.Controllers[c])
	}
	for c, where := range info.Controllers {
		if where.Version == 2 && where.Path != info.Unified || where.Version != 1 && where.Version != 2 {
			t.Errorf("%s: %+v is not consistent with v2 at %q", c, where, info.Unified)
		}
		if _, err := os.Stat(where.Path); err != nil {
			t.Errorf("%s: %v", c, err)
		}
	}
}

func TestLimitsWritten(t *testing.T) {
	g := newGroup(t, Limits{MemoryBytes: 48 << 20, CPUs: 1.5, Pids: 33})
	info, _ := Available()
	want := map[string]map[bool]map[string]string{ // controller, v2: file: content
		"memory": {true: {"memory.max": "50331648"}, false: {"memory.limit_in_bytes": "50331648"}},
		"cpu":    {true: {"cpu.max": "150000 100000"}, false: {"cpu.cfs_quota_us": "150000", "cpu.cfs_period_us": "100000"}},
		"pids":   {true: {"pids.max": "33"}, false: {"pids.max": "33"}},
	}
	for c, byVersion := range want {
		where := info.Controllers[c]
		dir := filepath.Join(where.Path, filepath.Base(g.Paths()[0]))
		if !slices.Contains(g.Paths(), dir) {
			t.Errorf("%s: %s not among %v", c, dir, g.Paths())
			continue
		}
		for file, content := range byVersion[where.Version == 2] {
			b, err := os.ReadFile(filepath.Join(dir, file))
			if got := strings.TrimSpace(string(b)); err != nil || got != content {
				t.Errorf("%s/%s = %q, %v; want %q", dir, file, got, err, content)
			}
		}
	}
}

func TestPidsLimit(t *testing.T) {
	g := newGroup(t, Limits{Pids: 20})
	script := `read _; i=0; while [ $i -lt 50 ]; do sleep 600 >/dev/null 2>&1 & i=$((i+1)); echo $i; done`
	var stderr strings.Builder
	cmd := exec.Command("sh", "-c", script)
	cmd.Stderr = &stderr
	out := start(t, g, cmd)
	last := ""
	for {
		line, err := out.ReadString('\n')
		if err != nil {
			break
		}
		last = strings.TrimSpace(line)
	}
	err := cmd.Wait()
	forks, _ := strconv.Atoi(last)
	if err == nil || forks >= 50 || forks == 0 {
		t.Fatalf("forked %d of 50 sleeps (exit: %v, stderr %q); want the fork to fail at pids.max 20", forks, err, stderr.String())
	}
	s, err := g.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if s.PidsCurrent > 20 || s.PidsCurrent < int64(forks) || s.PidsLimitHits == 0 {
		t.Errorf("stats %+v after %d forks: want PidsCurrent in [%d, 20] and PidsLimitHits > 0", s, forks, forks)
	}
	t.Logf("forked %d sleeps, then %q; %+v", forks, strings.TrimSpace(stderr.String()), s)
}

func TestMemoryLimitOOM(t *testing.T) {
	const limit = 32 << 20
	g := newGroup(t, Limits{MemoryBytes: limit})
	cmd := helperCmd("alloc")
	out := start(t, g, cmd)
	output, _ := io.ReadAll(out)
	err := cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("helper ended with %v, output %q; want SIGKILL by the OOM killer", err, output)
	}
	s, err := g.Stats()
	if err != nil {
		t.Fatal(err)
	}
	// MemoryLimitHits is not checked: some kernels (6.18, v1) do not count
	// them. The peak may pass the limit by a charge batch.
	if n, err := g.OOMKills(); err != nil || n != s.OOMKills {
		t.Errorf("OOMKills() = %d, %v; want Stats' %d", n, err, s.OOMKills)
	}
	if s.OOMKills == 0 || s.MemoryPeak > limit+1<<20 {
		t.Errorf("stats %+v: want OOMKills > 0, MemoryPeak near %d at most", s, limit)
	}
	t.Logf("%+v", s)
}

// TestUsage reads the CPU time and memory of a process that held 32MiB
// and burned about busyCPU, in a group Create made (v2 cpu.stat, or v1) and in
// the same group found by Named.
func TestUsage(t *testing.T) {
	g := newGroup(t, Limits{MemoryBytes: 256 << 20})
	out := start(t, g, helperCmd("busy"))
	if line, err := out.ReadString('\n'); line != "done\n" {
		t.Fatalf("helper said %q, %v", line, err)
	}
	found, err := Named(filepath.Base(g.Paths()[0]))
	if err != nil {
		t.Fatal(err)
	}
	for name, g := range map[string]*Group{"created": g, "named": found} {
		u, err := g.Usage()
		if err != nil {
			t.Fatal(err)
		}
		// The process's own count (getrusage) and the group's are made
		// differently: about the same, not equal.
		if u.CPU < int64(busyCPU)/2 || u.Memory < 32<<20 || u.MemoryCache < 0 || u.MemoryCache > u.Memory {
			t.Errorf("%s: usage %+v: want CPU about %d or more, Memory >= 32MiB, a cache within it", name, u, busyCPU)
		}
		// The helper holds its 32MiB as anonymous memory.
		if u.MemoryAnon < 32<<20 || u.MemoryAnon > u.Memory+1<<20 {
			t.Errorf("%s: usage %+v: want MemoryAnon >= 32MiB, within Memory", name, u)
		}
		t.Logf("%s: %+v", name, u)
	}
}

// TestKill kills a process that ignores SIGTERM, a grandchild in a session
// of its own, and 30 siblings, by each method Kill may use.
func TestKill(t *testing.T) {
	info, _ := Available()
	tests := []struct {
		name  string
		setup func(g *Group) string // returns why the method is missing here, if it is
	}{
		{"as created", func(g *Group) string { return "" }},
		{"cgroup.kill", func(g *Group) string {
			if g.kill == "" {
				return "no cgroup v2"
			}
			if _, err := os.Stat(g.kill); err != nil {
				return "no cgroup.kill (Linux 5.14)"
			}
			return ""
		}},
		{"cgroup.freeze", func(g *Group) string {
			g.kill = ""
			if !strings.HasSuffix(g.freeze.file, "/cgroup.freeze") {
				return "no cgroup.freeze (Linux 5.2)"
			}
			return ""
		}},
		{"v1 freezer", func(g *Group) string {
			g.kill = ""
			if c, ok := info.Controllers["freezer"]; !ok || c.Version != 1 {
				return "no cgroup v1 freezer hierarchy"
			}
			if err := g.useV1Freezer(info, filepath.Base(g.Paths()[0])); err != nil {
				t.Fatal(err)
			}
			return ""
		}},
		{"signals only", func(g *Group) string {
			g.kill, g.freeze = "", freezer{}
			return ""
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newGroup(t, Limits{Pids: 64})
			if why := tt.setup(g); why != "" {
				t.Skip(why)
			}
			script := `trap '' TERM
read _
setsid sh -c 'echo $$; exec sleep 600 >/dev/null 2>&1' &
for i in $(seq 30); do sleep 600 >/dev/null 2>&1 & done
echo started
wait`
			cmd := exec.Command("sh", "-c", script)
			out := start(t, g, cmd)
			// The grandchild's pid and "started" come from two processes, in either order.
			var grandchild int
			for _, line := range []string{readLine(t, out), readLine(t, out)} {
				if line != "started\n" {
					grandchild, _ = strconv.Atoi(strings.TrimSpace(line))
				}
			}
			if grandchild <= 0 {
				t.Fatal("script printed no grandchild pid")
			}
			if session(t, grandchild) == session(t, cmd.Process.Pid) {
				t.Fatal("the grandchild did not get a session of its own")
			}
			cmd.Process.Signal(syscall.SIGTERM)
			unix.Kill(grandchild, unix.SIGTERM)
			if err := g.Kill(); err != nil {
				t.Fatal(err)
			}
			if pids, err := g.procs(); err != nil || len(pids) != 0 {
				t.Errorf("after Kill the group holds %v (%v)", pids, err)
			}
			err := cmd.Wait()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Errorf("shell ended with %v, want SIGKILL", err)
			}
			if s := state(grandchild); s != "" && s != "Z" {
				t.Errorf("grandchild %d is still alive (state %s)", grandchild, s)
			}
		})
	}
}

func readLine(t *testing.T, r *bufio.Reader) string {
	t.Helper()
	line, err := r.ReadString('\n')
	if err != nil {
		t.Fatalf("read from process: %v", err)
	}
	return line
}

// stat returns the fields of /proc/pid/stat after the command name, or nil
// if there is no such process.
func stat(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	_, rest, _ := strings.Cut(string(b), ") ")
	return strings.Fields(rest)
}

func state(pid int) string {
	if f := stat(pid); len(f) > 0 {
		return f[0]
	}
	return ""
}

func session(t *testing.T, pid int) string {
	f := stat(pid)
	if len(f) < 4 {
		t.Fatalf("no process %d", pid)
	}
	return f[3]
}

func TestDestroyKills(t *testing.T) {
	g := newGroup(t, Limits{Pids: 10, MemoryBytes: 64 << 20})
	cmd := exec.Command("sleep", "600")
	start(t, g, cmd)
	destroy(t, g)
	if err := cmd.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Errorf("sleep ended with %v, want killed", err)
	}
}

// TestFD clones a process straight into a group that lives in cgroup v2
// alone (made here from the v2 directory only when the limits are in v1).
func TestFD(t *testing.T) {
	g := newGroup(t, Limits{Pids: 10})
	if _, ok := g.FD(); ok != (len(g.Paths()) == 1 && g.v2 != "") {
		t.Errorf("FD ok = %v for %v", ok, g.Paths())
	}
	info, _ := Available()
	testutil.Need(t, info.Unified != "", "no cgroup v2 hierarchy")
	g2 := &Group{}
	t.Cleanup(func() { destroy(t, g2) })
	if err := g2.makePart(uniqueName(), Limits{}, part{own: info.Unified, v2: true}); err != nil {
		t.Fatal(err)
	}
	fd, ok := g2.FD()
	if !ok {
		t.Fatalf("FD not ok for %v", g2.Paths())
	}
	cmd := exec.Command("sleep", "600")
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	pids, err := readPids(g2.v2 + "/cgroup.procs")
	if err != nil || !slices.Equal(pids, []int{cmd.Process.Pid}) {
		t.Errorf("%s holds %v (%v), want [%d]", g2.v2, pids, err, cmd.Process.Pid)
	}
}

// TestEnableMovesLoneCaller checks the cgroup v2 "no internal processes"
// rule end to end: a process alone in its cgroup moves into the supervisor
// leaf and gets the controller enabled; one that shares it gets an error.
func TestEnableMovesLoneCaller(t *testing.T) {
	testutil.RequireRoot(t)
	info, _ := Available()
	testutil.Need(t, info.Unified != "", "no cgroup v2 hierarchy")
	var ctl string
	for c, where := range info.Controllers {
		if where.Version == 2 && (ctl == "" || c < ctl) {
			ctl = c
		}
	}
	testutil.Need(t, ctl != "", "no controller in cgroup v2")
	// The test's own cgroup stands in for the caller's parent.
	base := info.Unified + "/cgroup.subtree_control"
	before, _ := os.ReadFile(base)
	if err := writeFile(base, "+"+ctl); err != nil {
		t.Skipf("the test's own cgroup %s cannot enable %s for its children (%v)", info.Unified, ctl, err)
	}
	if !slices.Contains(strings.Fields(string(before)), ctl) {
		t.Cleanup(func() { writeFile(base, "-"+ctl) })
	}
	tests := []struct {
		name    string
		others  bool
		wantOut string // a prefix of the helper's output
	}{
		{"alone", false, "cgroup /"},
		{"shared", true, "error notsupported=true: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			own := filepath.Join(info.Unified, uniqueName())
			if err := os.Mkdir(own, 0o755); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				// Clears own of any process left, then removes it and its children.
				g := &Group{dirs: []string{own + "/" + supervisor, own}}
				if err := g.Destroy(); err != nil {
					t.Error(err)
				}
			})
			ownGroup := &Group{dirs: []string{own}}
			if tt.others {
				start(t, ownGroup, exec.Command("sleep", "600"))
			}
			cmd := helperCmd("enable", "HUTCH_CGROUPS_OWN="+own, "HUTCH_CGROUPS_CTL="+ctl)
			out, _ := io.ReadAll(start(t, ownGroup, cmd))
			if err := cmd.Wait(); err != nil || !strings.HasPrefix(string(out), tt.wantOut) {
				t.Fatalf("helper: %v, printed %q; want %q...", err, out, tt.wantOut)
			}
			if tt.others {
				if !strings.Contains(string(out), "holds 1 other processes") {
					t.Errorf("error does not say why: %q", out)
				}
				return
			}
			if want := strings.TrimPrefix(own, info.Unified) + "/" + supervisor + "\n"; !strings.HasSuffix(string(out), want) {
				t.Errorf("helper printed %q, want it in %q", out, want)
			}
			ctls, _ := os.ReadFile(own + "/cgroup.subtree_control")
			if !slices.Contains(strings.Fields(string(ctls)), ctl) {
				t.Errorf("%s/cgroup.subtree_control = %q, want %s", own, ctls, ctl)
			}
		})
	}
}

func TestUnprivileged(t *testing.T) {
	testutil.RequireRoot(t)
	cmd := helperCmd("unprivileged")
	cmd.Stdin = strings.NewReader("")
	out, err := cmd.Output()
	if err != nil || !strings.HasPrefix(string(out), "permission=true notsupported=true: cgroups: ") {
		t.Errorf("unprivileged Create: %v, printed %q; want ErrPermission", err, out)
	}
	t.Logf("%s", out)
}

func BenchmarkCreateDestroy(b *testing.B) {
	testutil.RequireRoot(b)
	l := Limits{MemoryBytes: 256 << 20, CPUs: 2, Pids: 256}
	prefix := uniqueName()
	for i := 0; b.Loop(); i++ {
		g, err := Create(prefix+"-"+strconv.Itoa(i), l)
		if err != nil {
			b.Fatal(err)
		}
		if err := g.Destroy(); err != nil {
			b.Fatal(err)
		}
	}
}

// TestFreeze freezes a process that appends to a file as fast as it can,
// checks that the file stops growing, thaws it, checks that it grows
// again, then freezes it once more and destroys the frozen group, by each
// freezer and each way Kill may end the processes.
func TestFreeze(t *testing.T) {
	info, _ := Available()
	tests := []struct {
		name  string
		setup func(g *Group) string // returns why the variant is missing here, if it is
	}{
		{"as created", func(g *Group) string { return "" }},
		{"v1 freezer", func(g *Group) string {
			if c, ok := info.Controllers["freezer"]; !ok || c.Version != 1 {
				return "no cgroup v1 freezer hierarchy"
			}
			if err := g.useV1Freezer(info, filepath.Base(g.Paths()[0])); err != nil {
				t.Fatal(err)
			}
			return ""
		}},
		{"v1 freezer without cgroup.kill", func(g *Group) string {
			if c, ok := info.Controllers["freezer"]; !ok || c.Version != 1 {
				return "no cgroup v1 freezer hierarchy"
			}
			g.kill = ""
			if err := g.useV1Freezer(info, filepath.Base(g.Paths()[0])); err != nil {
				t.Fatal(err)
			}
			return ""
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			testutil.RequireRoot(t)
			g, err := CreateAlways(uniqueName(), Limits{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { destroy(t, g) })
			if len(g.Paths()) == 0 {
				t.Fatal("CreateAlways made no directory")
			}
			if why := tt.setup(g); why != "" {
				testutil.Need(t, false, why)
			}
			file := filepath.Join(t.TempDir(), "count")
			cmd := exec.Command("sh", "-c", `read _; while :; do echo x; done >> "$1"`, "sh", file)
			start(t, g, cmd)
			size := func() int64 {
				fi, err := os.Stat(file)
				if err != nil {
					return 0
				}
				return fi.Size()
			}
			if !testutil.Eventually(time.Minute, func() bool { return size() > 0 }) {
				t.Fatal("the process wrote nothing")
			}

			if err := g.Freeze(); err != nil {
				t.Fatal(err)
			}
			if frozen, err := g.frozen(); err != nil || !frozen {
				t.Fatalf("after Freeze the kernel reports frozen = %v (%v)", frozen, err)
			}
			before := size()
			time.Sleep(300 * time.Millisecond)
			if after := size(); after != before {
				t.Fatalf("frozen, the file grew from %d to %d bytes", before, after)
			}
			if err := g.Thaw(); err != nil {
				t.Fatal(err)
			}
			if !testutil.Eventually(time.Minute, func() bool { return size() > before }) {
				t.Fatalf("thawed, the file stayed at %d bytes", before)
			}

			if err := g.Freeze(); err != nil {
				t.Fatal(err)
			}
			pid := cmd.Process.Pid
			destroy(t, g)
			if pids, err := g.procs(); err != nil || len(pids) != 0 {
				t.Errorf("after Destroy the group holds %v (%v)", pids, err)
			}
			err = cmd.Wait()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Errorf("the process ended with %v, want SIGKILL", err)
			}
			if s := state(pid); s != "" {
				t.Errorf("process %d is still there (state %s)", pid, s)
			}
		})
	}
}

// TestFreezeNeedsFreezer checks that a group Create made without limits,
// which has no directory, refuses to freeze.
func TestFreezeNeedsFreezer(t *testing.T) {
	g, err := Create("unused", Limits{})
	if err != nil {
		t.Fatal(err)
	}
	for name, f := range map[string]func() error{"Freeze": g.Freeze, "Thaw": g.Thaw} {
		if err := f(); !errors.Is(err, ErrNotSupported) {
			t.Errorf("%s: %v, want ErrNotSupported", name, err)
		}
	}
}

// TestNamed finds the group of a frozen process whose Group is lost, by
// its name, with each freezer, and destroys it: the process dies and no
// directory is left.
func TestNamed(t *testing.T) {
	info, _ := Available()
	for _, v1 := range []bool{false, true} {
		t.Run(fmt.Sprintf("v1 freezer %v", v1), func(t *testing.T) {
			testutil.RequireRoot(t)
			g, err := CreateAlways(uniqueName(), Limits{MemoryBytes: 64 << 20})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { destroy(t, g) })
			if v1 {
				if c, ok := info.Controllers["freezer"]; !ok || c.Version != 1 {
					testutil.Need(t, false, "no cgroup v1 freezer hierarchy")
				}
				if err := g.useV1Freezer(info, filepath.Base(g.Paths()[0])); err != nil {
					t.Fatal(err)
				}
			}
			cmd := exec.Command("sleep", "600")
			start(t, g, cmd)
			if err := g.Freeze(); err != nil {
				t.Fatal(err)
			}
			found, err := Named(filepath.Base(g.Paths()[0]))
			if err != nil {
				t.Fatal(err)
			}
			if got, want := slices.Sorted(slices.Values(found.Paths())), slices.Sorted(slices.Values(g.Paths())); !slices.Equal(got, want) {
				t.Fatalf("Named found %v, want %v", got, want)
			}
			if none, err := Named("hutch-test-no-such-group"); err != nil || len(none.Paths()) != 0 {
				t.Errorf("Named of a group that does not exist: %v, %v", none.Paths(), err)
			}
			if _, err := Named("../escape"); err == nil {
				t.Error("Named accepted a path")
			}
			destroy(t, found)
			if err := cmd.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
				t.Errorf("sleep ended with %v, want killed", err)
			}
		})
	}
}

// TestOwnUsage: the caller's own cgroup counts its own CPU time.
func TestOwnUsage(t *testing.T) {
	g, err := Own()
	if err != nil {
		t.Fatal(err)
	}
	testutil.Need(t, len(g.Paths()) > 0, "no cgroup hierarchy is mounted")
	before, err := g.Usage()
	if err != nil {
		t.Fatal(err)
	}
	spin := time.Now()
	for time.Since(spin) < 50*time.Millisecond {
	}
	after, err := g.Usage()
	if err != nil {
		t.Fatal(err)
	}
	if before.Memory <= 0 || after.CPU-before.CPU < int64(20*time.Millisecond) {
		t.Errorf("own cgroup %v: usage %+v then %+v after 50 ms of spinning", g.Paths(), before, after)
	}
}
