package daemon

import (
	"context"
	"math"
	"runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/cgroups"
)

// What a sandbox uses, over time: the reaper samples every running
// sandbox every Config.MetricsInterval (its cgroup's CPU time and memory,
// and how full the tmpfs of its root layer is), and keeps the samples of
// the last metricsWindow in a ring of the sandbox's, dropped when the
// sandbox ends. A sandbox paused to disk has no processes, so no samples
// while it sleeps.

// Defaults of the sampling.
const (
	// defaultMetricsInterval is how often each sandbox is sampled (E2B
	// samples every 5 s).
	defaultMetricsInterval = 5 * time.Second
	// metricsWindow is how far back a sandbox's samples go.
	metricsWindow = time.Hour
	// maxSamples bounds a sandbox's ring, whatever the interval.
	maxSamples = 3600
)

// Usage is one sample of what a sandbox used.
type Usage struct {
	// Time is when it was taken.
	Time time.Time `json:"time"`
	// CPUCount is the CPUs the sandbox may use: its policy's
	// resources.cpus rounded up, else the host's.
	CPUCount int `json:"cpu_count"`
	// CPUPercent is the CPU time it used since the sample before, as a
	// share of CPUs (its resources.cpus, else the host's) over that
	// interval, in percent (0 to 100); 0 in its first sample.
	CPUPercent float64 `json:"cpu_percent"`
	// MemoryBytes is the memory its cgroup is charged now (page cache
	// and its RAM-backed file systems included, as its limit counts it);
	// MemoryCacheBytes the part of it that is page cache and tmpfs;
	// MemoryLimit its memory limit.
	MemoryBytes      int64 `json:"memory_bytes"`
	MemoryCacheBytes int64 `json:"memory_cache_bytes"`
	MemoryLimit      int64 `json:"memory_limit"`
	// MemoryAnonBytes is the part of MemoryBytes that is its processes'
	// anonymous memory: what it uses less its cache is at least that.
	MemoryAnonBytes int64 `json:"-"`
	// DiskBytes is what its writable root layer holds, DiskLimit the
	// layer's size (both 0 for a sandbox without one).
	DiskBytes int64 `json:"disk_bytes"`
	DiskLimit int64 `json:"disk_limit"`
}

// Monitor is what a front end needs for sandbox metrics; *Manager
// implements it.
type Monitor interface {
	// Usage returns the samples of tenant's sandbox id taken from since
	// to until (either zero: unbounded), oldest first. A sandbox that
	// does not run has none; one of another tenant is not found.
	Usage(ctx context.Context, tenant, id string, since, until time.Time) ([]Usage, error)
}

var _ Monitor = (*Manager)(nil)

// usageReader is an instance whose cgroup can be read (a
// *sandbox.Sandbox, the gVisor tier's served sandbox).
type usageReader interface {
	Usage() (cgroups.Usage, error)
}

// usageRing is one sandbox's samples, and the CPU time of the last one.
type usageRing struct {
	mu      sync.Mutex
	samples []Usage // at most cap, oldest at start
	start   int
	lastCPU int64 // nanoseconds
	lastAt  time.Time
	// of is the instance lastCPU was read from: a sandbox started again
	// from disk has a new cgroup, whose count starts again.
	of instance
}

// add appends u, dropping the oldest beyond max.
func (r *usageRing) add(u Usage, max int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.samples) < max {
		r.samples = append(r.samples, u)
		return
	}
	r.samples[r.start] = u
	r.start = (r.start + 1) % len(r.samples)
}

// between returns the samples from since to until (zero: unbounded).
func (r *usageRing) between(since, until time.Time) []Usage {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := []Usage{}
	for i := range r.samples {
		u := r.samples[(r.start+i)%len(r.samples)]
		if (since.IsZero() || !u.Time.Before(since)) && (until.IsZero() || !u.Time.After(until)) {
			out = append(out, u)
		}
	}
	return out
}

// Usage returns the samples of tenant's sandbox id (see Monitor).
func (m *Manager) Usage(ctx context.Context, tenant, id string, since, until time.Time) ([]Usage, error) {
	if err := m.enter(); err != nil {
		return nil, err
	}
	defer m.leave()
	if _, err := m.row(ctx, tenant, id); err != nil {
		return nil, err
	}
	m.usageMu.Lock()
	r := m.usage[id]
	m.usageMu.Unlock()
	if r == nil {
		return []Usage{}, nil
	}
	return r.between(since, until), nil
}

// sampleUsage samples each of list, the running sandboxes, whose last
// sample is an interval old (or that has none). It runs in the reaper,
// under reapMu. The samples are read up to maxUsageReads at once: a remote
// sandbox's is a question to its agent, over the network.
func (m *Manager) sampleUsage(now time.Time, list []*live) {
	every := m.cfg.MetricsInterval
	keep := min(int(metricsWindow/every), maxSamples)
	slots := make(chan struct{}, maxUsageReads)
	var wg sync.WaitGroup
	for _, l := range list {
		read := m.usageOf(l)
		if read == nil || l.tenant == warmTenant {
			continue
		}
		m.usageMu.Lock()
		r := m.usage[l.id]
		if r == nil {
			r = &usageRing{}
			m.usage[l.id] = r
		}
		m.usageMu.Unlock()
		if r.of != l.inst {
			r.of, r.lastAt = l.inst, time.Time{}
		}
		// The reaper's rounds come every reapEvery: half of one is slack.
		if !r.lastAt.IsZero() && now.Sub(r.lastAt) < every-reapEvery/2 {
			continue
		}
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-slots; wg.Done() }()
			cg, err := read()
			if err != nil {
				m.log.Debug("sample sandbox usage", "sandbox", l.id, "err", err)
				return
			}
			u := Usage{
				Time:             now,
				CPUCount:         int(math.Ceil(l.cpus())),
				MemoryBytes:      cg.Memory,
				MemoryCacheBytes: cg.MemoryCache,
				MemoryAnonBytes:  cg.MemoryAnon,
				MemoryLimit:      l.resources.MemoryBytes,
			}
			if !r.lastAt.IsZero() {
				wall := now.Sub(r.lastAt)
				u.CPUPercent = max(0, min(100, float64(cg.CPU-r.lastCPU)/(float64(wall)*l.cpus())*100))
				u.CPUPercent = math.Round(u.CPUPercent*100) / 100
			}
			r.lastCPU, r.lastAt = cg.CPU, now
			u.DiskBytes, u.DiskLimit = layerDisk(l.keep)
			r.add(u, keep)
		}()
	}
	wg.Wait()
}

// maxUsageReads is how many sandboxes' samples are read at once.
const maxUsageReads = 16

// usageOf is how l's usage is read: its cgroup on this machine, or, for a
// remote sandbox (a cluster's pod, whose cgroup is on its node), its
// agent's answer within busyTimeout; nil when it cannot be (paused).
func (m *Manager) usageOf(l *live) func() (cgroups.Usage, error) {
	if c, ok := l.inst.(usageReader); ok {
		return c.Usage
	}
	m.mu.Lock()
	client, paused := l.client, l.paused
	m.mu.Unlock()
	if m.remote(l.tier) == nil || client == nil || paused {
		return nil
	}
	return func() (cgroups.Usage, error) {
		ctx, cancel := context.WithTimeout(context.Background(), busyTimeout)
		defer cancel()
		u, err := client.Usage(ctx)
		return cgroups.Usage{CPU: u.CPU, Memory: u.Memory, MemoryCache: u.MemoryCache}, err
	}
}

// dropUsage forgets the samples of sandbox id, once it ended.
func (m *Manager) dropUsage(id string) {
	m.usageMu.Lock()
	delete(m.usage, id)
	m.usageMu.Unlock()
}

// cpus is the CPUs l may use: its policy's limit, else the host's.
func (l *live) cpus() float64 {
	if l.resources.CPUs > 0 {
		return l.resources.CPUs
	}
	return float64(runtime.NumCPU())
}

// layerDisk is what the tmpfs attached at dir (a sandbox's root layer)
// holds and its size; zeros when dir is "" or no tmpfs.
func layerDisk(dir string) (used, size int64) {
	if dir == "" {
		return 0, 0
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil || st.Type != unix.TMPFS_MAGIC {
		return 0, 0
	}
	bs := int64(st.Bsize)
	return int64(st.Blocks-st.Bfree) * bs, int64(st.Blocks) * bs
}
