//go:build linux

package main

import (
	"bufio"
	"cmp"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hutch-sandbox/hutch/client"
)

// memStats are the idle-memory figures, in bytes per sandbox.
type memStats struct {
	n                  int
	avail, rss         float64
	pss                pss     // the sandboxes' processes
	roles              []role  // the same by process name, largest first
	cgroup             float64 // usage of the sandboxes' memory cgroups
	cgroups            float64 // memory cgroups per sandbox (0: none found)
	shmem              float64 // tmpfs and shared memory (Shmem)
	kernel             float64 // SUnreclaim + PageTables + KernelStack
	createPerS         float64
	availBefore, after uint64
}

// pss is a sum of smaps_rollup figures, in bytes.
type pss struct{ total, anon, file, shmem float64 }

// role is the memory of the sandboxes' processes of one name.
type role struct {
	name  string  // see procName
	procs float64 // processes per sandbox
	pss
}

// idleMemory creates n sandboxes of tier, lets them settle and measures
// what they take; then destroys them.
func idleMemory(ctx context.Context, c *client.Client, daemonPID int, tier string, n int) (*memStats, error) {
	settle := func() { time.Sleep(2 * time.Second) }
	settle()
	m0, err := meminfo()
	if err != nil {
		return nil, err
	}
	rss0 := rss(daemonPID)
	t0 := time.Now()
	ids, err := createN(ctx, c, tier, n, 4)
	if err != nil {
		return nil, err
	}
	el := time.Since(t0)
	settle()
	m1, err := meminfo()
	rss1 := rss(daemonPID)
	procs := descendants(daemonPID)
	sum, roles := procPSS(procs)
	cg, cgs := cgroupUsage(daemonPID, procs)
	if err == nil {
		// Every sandbox still answers.
		err = runTrue(ctx, c, ids[len(ids)-1])
	}
	derr := destroyAll(ctx, c, ids, 4)
	if err != nil {
		return nil, err
	}
	if derr != nil {
		return nil, derr
	}
	f := float64(n)
	kern := func(m map[string]uint64) float64 {
		return float64(m["SUnreclaim"] + m["PageTables"] + m["KernelStack"])
	}
	per := func(p pss) pss { return pss{p.total / f, p.anon / f, p.file / f, p.shmem / f} }
	for i := range roles {
		roles[i].procs /= f
		roles[i].pss = per(roles[i].pss)
	}
	return &memStats{
		n:           n,
		avail:       (float64(m0["MemAvailable"]) - float64(m1["MemAvailable"])) / f,
		rss:         (float64(rss1) - float64(rss0)) / f,
		pss:         per(sum),
		roles:       roles,
		cgroup:      cg / f,
		cgroups:     float64(cgs) / f,
		shmem:       (float64(m1["Shmem"]) - float64(m0["Shmem"])) / f,
		kernel:      (kern(m1) - kern(m0)) / f,
		createPerS:  f / el.Seconds(),
		availBefore: m0["MemAvailable"],
		after:       m1["MemAvailable"],
	}, nil
}

// meminfo reads /proc/meminfo, in bytes.
func meminfo() (map[string]uint64, error) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return nil, err
	}
	m := map[string]uint64{}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		v, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil {
			continue
		}
		if len(f) == 3 && f[2] == "kB" {
			v <<= 10
		}
		m[strings.TrimSuffix(f[0], ":")] = v
	}
	return m, nil
}

// rss is the resident set of pid, in bytes.
func rss(pid int) uint64 { return statusField(pid, "VmRSS:") }

// statusField reads a kB field of /proc/PID/status, in bytes.
func statusField(pid int, name string) uint64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == name {
			v, _ := strconv.ParseUint(f[1], 10, 64)
			return v << 10
		}
	}
	return 0
}

// descendants lists every process below pid (not pid itself). A served
// sandbox's processes are all there: the namespace tier's agent is the
// daemon's child; under gVisor `runsc run` is, and runsc's gofer and
// Sentry (runsc-sandbox) are its children, the Sentry's stub processes
// theirs.
func descendants(pid int) []int {
	children := map[int][]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if pp := int(statusField(p, "PPid:") >> 10); pp > 0 {
			children[pp] = append(children[pp], p)
		}
	}
	var all []int
	queue := slices.Clone(children[pid])
	for len(queue) > 0 {
		p := queue[0]
		queue = append(queue[1:], children[p]...)
		all = append(all, p)
	}
	return all
}

// procName names a process for the memory figures: its argv[0]'s base
// name, followed by argv[1] when that is not a flag ("hutch agent",
// "runsc", "runsc-gofer", "runsc-sandbox"); "[comm]" for a process
// without a command line (the Sentry's stub processes: "[exe]").
func procName(pid int) string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
	if args[0] == "" {
		comm, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
		return "[" + strings.TrimSpace(string(comm)) + "]"
	}
	name := filepath.Base(args[0])
	if len(args) > 1 && args[1] != "" && !strings.HasPrefix(args[1], "-") {
		name += " " + args[1]
	}
	return name
}

// procPSS sums the Pss figures of the processes, in all and by name
// (largest first).
func procPSS(pids []int) (pss, []role) {
	var sum pss
	by := map[string]*role{}
	for _, p := range pids {
		v, ok := readPSS(p)
		if !ok {
			continue
		}
		name := procName(p)
		r := by[name]
		if r == nil {
			r = &role{name: name}
			by[name] = r
		}
		r.procs++
		for _, s := range []*pss{&sum, &r.pss} {
			s.total += v.total
			s.anon += v.anon
			s.file += v.file
			s.shmem += v.shmem
		}
	}
	var roles []role
	for _, r := range by {
		roles = append(roles, *r)
	}
	slices.SortFunc(roles, func(a, b role) int { return cmp.Or(cmp.Compare(b.total, a.total), strings.Compare(a.name, b.name)) })
	return sum, roles
}

// readPSS reads the Pss figures of pid (smaps_rollup), in bytes.
func readPSS(pid int) (pss, bool) {
	var v pss
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/smaps_rollup")
	if err != nil {
		return v, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 2 {
			continue
		}
		n, _ := strconv.ParseUint(fs[1], 10, 64)
		b := float64(n << 10)
		switch fs[0] {
		case "Pss:":
			v.total = b
		case "Pss_Anon:":
			v.anon = b
		case "Pss_File:":
			v.file = b
		case "Pss_Shmem:":
			v.shmem = b
		}
	}
	return v, sc.Err() == nil
}

// cgroupUsage sums the memory usage of the memory cgroups the processes
// are in, but the daemon's own (cgroup v1's memory.usage_in_bytes when
// the memory controller is there, else v2's memory.current), and says how
// many cgroups that is. Each served sandbox has one: the namespace tier's
// holds its agent; under gVisor runsc makes it and puts the gofer and the
// Sentry in it (`runsc run` itself stays in the daemon's).
func cgroupUsage(daemonPID int, pids []int) (float64, int) {
	root, v1 := memController()
	if root == "" {
		return 0, 0
	}
	own := memCgroup(daemonPID, v1)
	seen := map[string]bool{}
	var sum float64
	for _, p := range pids {
		cg := memCgroup(p, v1)
		if cg == "" || cg == own || seen[cg] {
			continue
		}
		seen[cg] = true
		file := "memory.current"
		if v1 {
			file = "memory.usage_in_bytes"
		}
		b, err := os.ReadFile(filepath.Join(root, cg, file))
		if err != nil {
			continue
		}
		v, _ := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		sum += float64(v)
	}
	return sum, len(seen)
}

// memController is where the memory controller's hierarchy is mounted:
// cgroup v1's memory hierarchy if there is one (v1 true), else cgroup
// v2's when it has the controller; "" for neither.
func memController() (root string, v1 bool) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", false
	}
	var v2 string
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		i := slices.Index(f, "-")
		if i < 5 || len(f) < i+4 {
			continue
		}
		switch f[i+1] {
		case "cgroup":
			if slices.Contains(strings.Split(f[i+3], ","), "memory") {
				return f[4], true
			}
		case "cgroup2":
			if c, err := os.ReadFile(filepath.Join(f[4], "cgroup.controllers")); err == nil && slices.Contains(strings.Fields(string(c)), "memory") {
				v2 = f[4]
			}
		}
	}
	return v2, false
}

// memCgroup is pid's cgroup in the memory controller's hierarchy (v1's
// memory hierarchy, or v2's), "" if unknown.
func memCgroup(pid int, v1 bool) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.SplitN(l, ":", 3)
		if len(f) != 3 {
			continue
		}
		if v1 && slices.Contains(strings.Split(f[1], ","), "memory") || !v1 && f[0] == "0" && f[1] == "" {
			return f[2]
		}
	}
	return ""
}
