// Package cgroups puts a sandbox's processes into a cgroup of their own with
// memory, CPU and process-count limits, kills all of them at once, and reports
// what the kernel counted (memory peak, OOM kills) so the user can be told why
// a command died.
//
// A Group nests under the calling process's own cgroup in every hierarchy it
// uses, so a sandbox never gets more than its caller has. Each controller is
// taken from cgroup v2 when the caller's v2 cgroup offers it (it is listed in
// cgroup.controllers), else from the cgroup v1 hierarchy it is mounted in; so
// pure v2, pure v1 and hybrid machines all work, and one Group may span both.
// Where a v2 hierarchy is mounted, a Group always has a v2 directory, even when
// every limit lives in v1, for its cgroup.kill and cgroup.freeze.
//
// cgroup v2 lets a non-root cgroup that holds processes hand no controllers to
// its children (the "no internal processes" rule). When the caller's own v2
// cgroup is in that state and the caller is its only process (a daemon in a
// systemd unit with Delegate=yes, PID 1 of a container, a command started by
// systemd-run --scope), Create moves the caller into the leaf
// <own>/hutch-supervisor, which empties <own> so that it may enable the
// controllers; groups are still made in <own>. When other processes share the
// caller's cgroup, Create fails with an error that says so.
//
// Errors wrap ErrNotSupported when the machine lacks what a limit needs, and
// ErrPermission (which matches ErrNotSupported too) when the caller may not
// manage its cgroups, so a caller can fail closed or fall back on purpose.
package cgroups

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

var (
	// ErrNotSupported is wrapped by errors about a limit this machine cannot
	// enforce: no such controller, or no cgroup support at all.
	ErrNotSupported = errors.New("cgroups not supported")
	// ErrPermission is wrapped by errors about cgroups the caller may not
	// change, e.g. an ordinary user without a delegated cgroup. Such errors
	// match ErrNotSupported as well.
	ErrPermission error = permissionError{}
)

// permissionError is ErrPermission: a value of its own type, not one built
// with fmt.Errorf, so that package initialization (at every start of
// hutch) has nothing to do for it.
type permissionError struct{}

func (permissionError) Error() string { return "no permission to manage cgroups" }
func (permissionError) Unwrap() error { return ErrNotSupported }

// tagged prints as err but also matches kind with errors.Is.
type tagged struct{ err, kind error }

func (t tagged) Error() string   { return t.err.Error() }
func (t tagged) Unwrap() []error { return []error{t.err, t.kind} }

// Limits are the resource limits of one Group. A zero field sets no limit,
// and a Group whose Limits are all zero creates nothing.
type Limits struct {
	// MemoryBytes caps the memory the group's processes may use. Swap is
	// capped too wherever the kernel accounts it (v2 memory.swap.max 0, v1
	// memory.memsw.limit_in_bytes equal to the limit), so the limit cannot be
	// dodged by swapping. A process that exceeds it is OOM-killed.
	MemoryBytes int64
	// CPUs caps CPU time, in CPUs: 1.5 allows 150ms of CPU time in every
	// 100ms period, spread over any number of CPUs.
	CPUs float64
	// Pids caps the number of processes and threads in the group; fork and
	// clone fail beyond it.
	Pids int64
}

// maxCPUs bounds Limits.CPUs so that its quota fits the kernel's range.
const maxCPUs = 1 << 20

// Validate reports a negative or out-of-range limit.
func (l Limits) Validate() error {
	switch {
	case l.MemoryBytes < 0:
		return fmt.Errorf("cgroups: memory limit %d: must not be negative", l.MemoryBytes)
	case l.Pids < 0:
		return fmt.Errorf("cgroups: pids limit %d: must not be negative", l.Pids)
	case !(l.CPUs >= 0 && l.CPUs <= maxCPUs): // also catches NaN
		return fmt.Errorf("cgroups: cpu limit %v: must be between 0 and %d", l.CPUs, maxCPUs)
	}
	return nil
}

// Stats is what the kernel counted for a Group. Fields of a controller the
// group does not limit stay zero.
type Stats struct {
	// MemoryCurrent is the memory charged to the group now, in bytes.
	MemoryCurrent int64
	// MemoryPeak is the most memory ever charged to the group, in bytes; 0
	// where the kernel does not record it (v2 before Linux 5.19).
	MemoryPeak int64
	// MemoryLimitHits counts how often usage hit the limit, where the kernel
	// counts it (v2 memory.events max, v1 memory.failcnt plus
	// memory.memsw.failcnt).
	MemoryLimitHits int64
	// OOMKills counts processes the OOM killer killed in the group (v2
	// memory.events oom_kill, v1 memory.oom_control oom_kill).
	OOMKills int64
	// PidsCurrent is the number of processes and threads in the group.
	PidsCurrent int64
	// PidsLimitHits counts forks refused by the pids limit (pids.events max).
	PidsLimitHits int64
}

// Usage is what a Group's processes use, as the kernel counts it: for
// metrics sampled over time. A field the group has no counter for stays
// zero.
type Usage struct {
	// CPU is the CPU time the group's processes used since it was made,
	// in nanoseconds (v2 cpu.stat usage_usec, every v2 cgroup has it; v1
	// cpuacct.usage).
	CPU int64
	// Memory is the memory charged to the group now, in bytes, page cache
	// and tmpfs included, as its limit counts it (v2 memory.current, v1
	// memory.usage_in_bytes).
	Memory int64
	// MemoryCache is the part of Memory that is page cache, tmpfs
	// included (v2 memory.stat file, v1 memory.stat cache).
	MemoryCache int64
	// MemoryAnon is the part of Memory that is the processes' anonymous
	// memory (v2 memory.stat anon, v1 memory.stat rss): read from the same
	// file as MemoryCache, it bounds Memory less MemoryCache from below
	// when Memory, read apart (v1's is approximate), comes out lower.
	MemoryAnon int64
}

// Info describes the caller's cgroups, as Available finds them.
type Info struct {
	// Unified is the caller's own cgroup v2 directory, "" when no cgroup v2
	// hierarchy is mounted.
	Unified string
	// Controllers maps each controller the caller can use (memory, cpu,
	// pids, freezer, ...) to the place Create would use it from.
	Controllers map[string]Controller
}

// Controller is where one controller lives for the caller.
type Controller struct {
	// Version is 2 for the unified hierarchy, 1 for a v1 hierarchy.
	Version int
	// Path is the caller's own cgroup directory in that hierarchy; groups
	// are made beneath it.
	Path string
}

// setting is one value written into one file of a group's directory.
type setting struct {
	file, value string
	optional    bool // skipped when the kernel lacks the file
}

// limiter is one controller a Limits field needs: when it is needed and
// which files set it, in the order they must be written.
type limiter struct {
	controller string
	needed     func(Limits) bool
	settings   func(l Limits, v2 bool) []setting
}

// limiters is every controller Limits can need, in the order Create sets
// them up.
var limiters = []limiter{
	{"memory", func(l Limits) bool { return l.MemoryBytes > 0 }, func(l Limits, v2 bool) []setting {
		n := itoa(l.MemoryBytes)
		if v2 {
			return []setting{{"memory.max", n, false}, {"memory.swap.max", "0", true}}
		}
		// memsw (memory+swap) may not be below the memory limit: set it second.
		return []setting{{"memory.limit_in_bytes", n, false}, {"memory.memsw.limit_in_bytes", n, true}}
	}},
	{"cpu", func(l Limits) bool { return l.CPUs > 0 }, func(l Limits, v2 bool) []setting {
		q, p := itoa(cpuQuota(l.CPUs)), itoa(cpuPeriod)
		if v2 {
			return []setting{{"cpu.max", q + " " + p, false}}
		}
		return []setting{{"cpu.cfs_period_us", p, false}, {"cpu.cfs_quota_us", q, false}}
	}},
	{"pids", func(l Limits) bool { return l.Pids > 0 }, func(l Limits, _ bool) []setting {
		return []setting{{"pids.max", itoa(l.Pids), false}}
	}},
}

const (
	// cpuPeriod is the CPU bandwidth period of every group, in microseconds.
	cpuPeriod = 100000
	// minCPUQuota is the smallest quota the kernel accepts, in microseconds.
	minCPUQuota = 1000
)

// cpuQuota is the CPU time per period, in microseconds, that cpus allows.
func cpuQuota(cpus float64) int64 {
	return max(int64(math.Round(cpus*cpuPeriod)), minCPUQuota)
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// parseCounter reads a number from the text of a cgroup file: the whole
// text when key is "", else the value on the line "key N". Anything else
// ("max", no such line) reads as 0.
func parseCounter(text, key string) int64 {
	for line := range strings.Lines(text) {
		f := strings.Fields(line)
		if key == "" && len(f) == 1 || len(f) == 2 && f[0] == key {
			n, _ := strconv.ParseInt(f[len(f)-1], 10, 64)
			return n
		}
	}
	return 0
}
