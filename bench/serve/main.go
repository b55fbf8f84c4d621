//go:build linux

// Command serve measures `hutch serve` through its Go SDK (package client):
// it starts a daemon of its own on a unix socket in -work, and reports in
// one run
//
//   - create → first exec output → destroy: a sandbox is created, runs
//     `echo ok` to completion (Client.Run) and is destroyed, -n times; p50
//     and p99 of the create alone, of the time to the output ("cold"), of
//     the destroy and of the whole cycle. When `hutch serve -h` lists a
//     -warm flag, the same again against a second daemon started with
//     --warm -warm, each cycle once its pool is full again ("warm");
//     otherwise it says "warm: not available".
//   - exec round trip on a live sandbox: `true` run to completion
//     (Client.Run, one HTTP request) and through the streaming exec
//     (Client.Exec over an upgraded connection, output read to its end and
//     the exit status waited for), -e times each.
//   - execs per second with -c concurrent clients (each its own Client and
//     connections) running `true` on one sandbox, and on -c sandboxes (one
//     each), for -dur each.
//   - idle memory per sandbox with -idle sandboxes alive: the drop of
//     MemAvailable (/proc/meminfo) divided by their number, the growth of
//     the daemon's resident set, the proportional set size (PSS) of the
//     sandboxes' processes, and the kernel's unreclaimable slab, page
//     tables and kernel stacks.
//   - with -runc and -bundle, runc as the peer in the same run: one
//     container started with `runc run -d`, then the round trip of
//     `runc exec ID true`; and create → start → `runc exec ID echo ok` →
//     `runc delete -f` as the cold peer. Ratios hutch/runc are printed.
//
// The targets are printed next to the figures. The daemon is
// stopped (SIGTERM to its pid, SIGKILL if it outlasts the grace period)
// and every runc container this run made is deleted before it exits; it
// also gets SIGTERM if this process dies (Pdeathsig).
package main

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hutch-sandbox/hutch/bench/report"
	"github.com/hutch-sandbox/hutch/client"
)

// The targets.
const (
	targetWarm       = 5 * time.Millisecond  // warm create-to-first-output p50
	targetCold       = 25 * time.Millisecond // cold create-to-first-output p50
	targetExec       = 2 * time.Millisecond  // exec round trip p50
	targetThroughput = 500.0                 // execs/s with concurrent clients
	targetIdleMiB    = 2.0                   // MiB per idle sandbox
)

type config struct {
	hutch, work         string
	n, e, c, idle, runN int
	warm                int
	dur                 time.Duration
	runc, bundle        string
	prefix              string
	markdown            bool
}

func main() {
	var cfg config
	flag.StringVar(&cfg.hutch, "hutch", "", "the hutch binary")
	flag.StringVar(&cfg.work, "work", "", "a fresh directory for the daemon's socket, state and log (mode 0711 or wider)")
	flag.IntVar(&cfg.n, "n", 200, "create → output → destroy cycles")
	flag.IntVar(&cfg.e, "e", 2000, "exec round trips per way")
	flag.IntVar(&cfg.c, "c", 16, "concurrent clients in the throughput phase")
	flag.DurationVar(&cfg.dur, "dur", 3*time.Second, "length of each throughput run")
	flag.IntVar(&cfg.idle, "idle", 500, "idle sandboxes alive for the memory figure (0: skip)")
	flag.IntVar(&cfg.warm, "warm", 4, "warm pool size when the daemon has a -warm flag")
	flag.StringVar(&cfg.runc, "runc", "", "runc binary (empty: no peer)")
	flag.StringVar(&cfg.bundle, "bundle", "", "runc bundle whose process runs until killed")
	flag.StringVar(&cfg.prefix, "prefix", "hutchserve-"+strconv.Itoa(os.Getpid())+"-", "prefix of the runc container ids")
	flag.IntVar(&cfg.runN, "runc-n", 200, "runc samples per way")
	flag.BoolVar(&cfg.markdown, "markdown", false, "print markdown tables")
	flag.Parse()
	if cfg.hutch == "" || cfg.work == "" {
		fmt.Fprintln(os.Stderr, "serve: -hutch and -work are required")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := run(ctx, cfg)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "serve:", err)
		os.Exit(1)
	}
}

// daemon is a `hutch serve` started by this run.
type daemon struct {
	cmd  *exec.Cmd
	dir  string
	host string
	log  string
	done chan struct{}
}

// startDaemon starts `hutch serve` with its socket and state in a new
// directory under work, and waits until it answers.
func startDaemon(ctx context.Context, cfg config, name string, extra ...string) (*daemon, error) {
	dir := filepath.Join(cfg.work, name)
	if err := os.Mkdir(dir, 0o711); err != nil {
		return nil, err
	}
	d := &daemon{dir: dir, host: "unix://" + filepath.Join(dir, "hutch.sock"), log: filepath.Join(dir, "serve.log"), done: make(chan struct{})}
	logf, err := os.Create(d.log)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	most := max(cfg.idle, cfg.c) + 50
	args := append([]string{"serve", "--socket", filepath.Join(dir, "hutch.sock"), "--state-dir", filepath.Join(dir, "state"),
		"--max-sandboxes", strconv.Itoa(most)}, extra...)
	if servesFlag(cfg.hutch, "max-memory") {
		// Every sandbox has a memory limit (1g by default), which the
		// tenant's quota (half of the host's memory by default) adds up:
		// room for the most sandboxes the run makes.
		args = append(args, "--tenant-memory", strconv.Itoa(most)+"g")
	}
	d.cmd = exec.Command(cfg.hutch, args...)
	d.cmd.Stdout, d.cmd.Stderr = logf, logf
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := d.cmd.Start(); err != nil {
		return nil, err
	}
	// The pid, for the script's cleanup should this process be killed.
	_ = os.WriteFile(filepath.Join(dir, "serve.pid"), []byte(strconv.Itoa(d.cmd.Process.Pid)+"\n"), 0o644)
	go func() { _ = d.cmd.Wait(); close(d.done) }()
	c, err := client.New(d.host, "")
	if err != nil {
		d.stop()
		return nil, err
	}
	for end := time.Now().Add(15 * time.Second); ; {
		hctx, cancel := context.WithTimeout(ctx, time.Second)
		err = c.Health(hctx)
		cancel()
		if err == nil {
			return d, nil
		}
		select {
		case <-d.done:
			return nil, fmt.Errorf("hutch serve exited: %s", tail(d.log))
		default:
		}
		if time.Now().After(end) || ctx.Err() != nil {
			d.stop()
			return nil, fmt.Errorf("hutch serve does not answer: %v; %s", err, tail(d.log))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop ends the daemon by its pid: SIGTERM (it destroys its sandboxes),
// SIGKILL after 60 s.
func (d *daemon) stop() {
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(60 * time.Second):
		_ = d.cmd.Process.Kill()
		<-d.done
	}
}

func (d *daemon) pid() int { return d.cmd.Process.Pid }

// tail is the end of a log file.
func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return strings.TrimSpace(string(b))
}

// servesWarm reports whether `hutch serve -h` lists a -warm flag.
func servesWarm(hutch string) bool {
	return servesFlag(hutch, "warm")
}

// servesFlag reports whether `hutch serve -h` lists the flag -name.
func servesFlag(hutch, name string) bool {
	out, _ := exec.Command(hutch, "serve", "-h").CombinedOutput()
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		if len(f) > 0 && (f[0] == "-"+name || f[0] == "--"+name) {
			return true
		}
	}
	return false
}

func run(ctx context.Context, cfg config) error {
	if err := os.Chmod(cfg.work, 0o711); err != nil {
		return err
	}
	d, err := startDaemon(ctx, cfg, "cold")
	if err != nil {
		return err
	}
	defer d.stop()
	c, err := client.New(d.host, "")
	if err != nil {
		return err
	}
	r := &figures{markdown: cfg.markdown}
	r.versions = hutchVersion(cfg.hutch)

	// a. create → first output → destroy, cold.
	cold, err := cycles(ctx, c, cfg.n, nil)
	if err != nil {
		return fmt.Errorf("cold cycles: %w", err)
	}
	r.cold = &cold

	// b. exec round trips on a live sandbox.
	sb, err := c.Create(ctx, client.CreateOptions{Timeout: time.Hour})
	if err != nil {
		return err
	}
	if r.execRun, err = roundTrips(ctx, cfg.e, func() error { return runTrue(ctx, c, sb.ID) }); err != nil {
		return fmt.Errorf("exec (run): %w", err)
	}
	if r.execStream, err = roundTrips(ctx, cfg.e, func() error { return streamTrue(ctx, c, sb.ID) }); err != nil {
		return fmt.Errorf("exec (stream): %w", err)
	}

	// c. throughput with concurrent clients, one sandbox and one each.
	one := make([]string, cfg.c)
	for i := range one {
		one[i] = sb.ID
	}
	if r.tputOne, err = throughput(ctx, d.host, one, cfg.dur); err != nil {
		return fmt.Errorf("throughput on one sandbox: %w", err)
	}
	many, err := createN(ctx, c, cfg.c, 4)
	if err != nil {
		return err
	}
	if r.tputMany, err = throughput(ctx, d.host, many, cfg.dur); err != nil {
		return fmt.Errorf("throughput on %d sandboxes: %w", cfg.c, err)
	}
	if err := destroyAll(ctx, c, append(many, sb.ID), 4); err != nil {
		return err
	}
	r.c = cfg.c

	// d. idle memory.
	if cfg.idle > 0 {
		if r.mem, err = idleMemory(ctx, c, d.pid(), cfg.idle); err != nil {
			return fmt.Errorf("idle memory: %w", err)
		}
	}

	// Warm pool, when the daemon has one.
	if servesWarm(cfg.hutch) {
		wd, err := startDaemon(ctx, cfg, "warm", "--warm", strconv.Itoa(cfg.warm))
		if err != nil {
			return fmt.Errorf("a daemon with --warm: %w", err)
		}
		wc, err := client.New(wd.host, "")
		if err == nil {
			// Before each cycle, wait until the pool is full again
			// (hutch_warm_sandboxes{template=""} in GET /metrics).
			full := func() error { return waitWarm(ctx, wd.dir, cfg.warm) }
			var warm cycleTimes
			warm, err = cycles(ctx, wc, cfg.n, full)
			r.warm = &warm
			r.warmN = cfg.warm
		}
		wd.stop()
		if err != nil {
			r.warm, r.warmErr = nil, err
		}
	}

	// e. runc.
	if cfg.runc != "" && cfg.bundle != "" {
		r.runcVersion = firstLine(cfg.runc, "--version")
		if r.runcExec, r.runcCold, err = runcPeer(ctx, cfg); err != nil {
			return fmt.Errorf("runc: %w", err)
		}
	}
	r.print()
	return nil
}

func hutchVersion(hutch string) string { return firstLine(hutch, "version") }

func firstLine(name string, args ...string) string {
	out, _ := exec.Command(name, args...).Output()
	l, _, _ := strings.Cut(string(out), "\n")
	return strings.TrimSpace(l)
}

// cycleTimes are the times of create → output → destroy cycles.
type cycleTimes struct {
	create, output, destroy, total []time.Duration // the create alone; to the output; the destroy alone; the whole cycle
}

// cycles creates a sandbox, runs `echo ok` in it and destroys it, n times
// after a few untimed ones; before each, it calls before (if not nil).
func cycles(ctx context.Context, c *client.Client, n int, before func() error) (cycleTimes, error) {
	var ct cycleTimes
	for i := -5; i < n; i++ {
		if before != nil {
			if err := before(); err != nil {
				return ct, err
			}
		}
		t0 := time.Now()
		sb, err := c.Create(ctx, client.CreateOptions{Timeout: time.Minute})
		if err != nil {
			return ct, err
		}
		tc := time.Now()
		res, err := c.Run(ctx, sb.ID, client.Command{Args: []string{"echo", "ok"}})
		t1 := time.Now()
		if err == nil && (res.Code != 0 || string(res.Stdout) != "ok\n") {
			err = fmt.Errorf("echo ok: exit code %d, output %q %q", res.Code, res.Stdout, res.Stderr)
		}
		if derr := c.Destroy(ctx, sb.ID); err == nil {
			err = derr
		}
		t2 := time.Now()
		if err != nil {
			return ct, err
		}
		if i >= 0 {
			ct.create = append(ct.create, tc.Sub(t0))
			ct.output = append(ct.output, t1.Sub(t0))
			ct.destroy = append(ct.destroy, t2.Sub(t1))
			ct.total = append(ct.total, t2.Sub(t0))
		}
	}
	return ct, nil
}

// waitWarm waits until the daemon in dir reports n warm sandboxes ready
// (the gauge hutch_warm_sandboxes of GET /metrics), for up to 30 s.
func waitWarm(ctx context.Context, dir string, n int) error {
	sock := filepath.Join(dir, "hutch.sock")
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
	defer hc.CloseIdleConnections()
	var last string
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(2 * time.Millisecond) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://hutch/metrics", nil)
		if err != nil {
			return err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, `hutch_warm_sandboxes{template=""} `); ok {
				last = v
				if f, err := strconv.ParseFloat(v, 64); err == nil && f >= float64(n) {
					return nil
				}
			}
		}
	}
	return fmt.Errorf("the warm pool did not fill to %d in 30 s (hutch_warm_sandboxes %q)", n, last)
}

// runTrue runs `true` to completion.
func runTrue(ctx context.Context, c *client.Client, id string) error {
	res, err := c.Run(ctx, id, client.Command{Args: []string{"true"}})
	if err == nil && res.Code != 0 {
		err = fmt.Errorf("true: exit code %d", res.Code)
	}
	return err
}

// streamTrue runs `true` through the streaming exec: output read to its
// end, exit status waited for.
func streamTrue(ctx context.Context, c *client.Client, id string) error {
	p, err := c.Exec(ctx, id, client.Command{Args: []string{"true"}})
	if err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, p.Stderr); close(done) }()
	_, _ = io.Copy(io.Discard, p.Stdout)
	<-done
	st, err := p.Wait()
	if err == nil && st.Code != 0 {
		err = fmt.Errorf("true: exit code %d", st.Code)
	}
	return err
}

// roundTrips times fn n times after 20 untimed calls.
func roundTrips(ctx context.Context, n int, fn func() error) ([]time.Duration, error) {
	ds := make([]time.Duration, 0, n)
	for i := -20; i < n; i++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		t0 := time.Now()
		if err := fn(); err != nil {
			return nil, err
		}
		if i >= 0 {
			ds = append(ds, time.Since(t0))
		}
	}
	return ds, nil
}

// throughput runs `true` in a loop from one client per entry of ids (the
// sandbox it uses) for dur, after a short warm-up, and returns execs/s.
func throughput(ctx context.Context, host string, ids []string, dur time.Duration) (float64, error) {
	var (
		count    atomic.Int64
		counting atomic.Bool
		stop     atomic.Bool
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
	)
	for _, id := range ids {
		c, err := client.New(host, "")
		if err != nil {
			return 0, err
		}
		wg.Go(func() {
			for !stop.Load() {
				if err := runTrue(ctx, c, id); err != nil {
					errOnce.Do(func() { firstErr = err })
					stop.Store(true)
					return
				}
				if counting.Load() {
					count.Add(1)
				}
			}
		})
	}
	time.Sleep(300 * time.Millisecond)
	counting.Store(true)
	t0 := time.Now()
	time.Sleep(dur)
	counting.Store(false)
	n := count.Load()
	el := time.Since(t0)
	stop.Store(true)
	wg.Wait()
	if firstErr != nil {
		return 0, firstErr
	}
	return float64(n) / el.Seconds(), nil
}

// createN creates n sandboxes with w workers.
func createN(ctx context.Context, c *client.Client, n, w int) ([]string, error) {
	ids := make([]string, n)
	err := parallel(n, w, func(i int) error {
		sb, err := c.Create(ctx, client.CreateOptions{Timeout: time.Hour})
		if err == nil {
			ids[i] = sb.ID
		}
		return err
	})
	if err != nil {
		var made []string
		for _, id := range ids {
			if id != "" {
				made = append(made, id)
			}
		}
		_ = destroyAll(context.Background(), c, made, w)
		return nil, err
	}
	return ids, nil
}

// destroyAll destroys the sandboxes with w workers.
func destroyAll(ctx context.Context, c *client.Client, ids []string, w int) error {
	return parallel(len(ids), w, func(i int) error { return c.Destroy(ctx, ids[i]) })
}

// parallel calls fn(0..n-1) on w goroutines; the first error is returned.
func parallel(n, w int, fn func(int) error) error {
	var (
		next atomic.Int64
		mu   sync.Mutex
		err1 error
		wg   sync.WaitGroup
	)
	for range w {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := fn(i); err != nil {
					mu.Lock()
					if err1 == nil {
						err1 = err
					}
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	return err1
}

// memStats are the idle-memory figures, in bytes per sandbox.
type memStats struct {
	n                  int
	avail, rss         float64
	pss, pssAnon       float64 // the sandboxes' processes: all, anonymous
	pssFile            float64 // and file-backed (the hutch binary, shared)
	shmem              float64 // tmpfs and shared memory (Shmem)
	kernel             float64 // SUnreclaim + PageTables + KernelStack
	createPerS         float64
	availBefore, after uint64
}

// idleMemory creates n sandboxes, lets them settle and measures what they
// take; then destroys them.
func idleMemory(ctx context.Context, c *client.Client, daemonPID, n int) (*memStats, error) {
	settle := func() { time.Sleep(2 * time.Second) }
	settle()
	m0, err := meminfo()
	if err != nil {
		return nil, err
	}
	rss0 := rss(daemonPID)
	t0 := time.Now()
	ids, err := createN(ctx, c, n, 4)
	if err != nil {
		return nil, err
	}
	el := time.Since(t0)
	settle()
	m1, err := meminfo()
	rss1 := rss(daemonPID)
	ps := descendantsPSS(daemonPID)
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
	return &memStats{
		n:           n,
		avail:       (float64(m0["MemAvailable"]) - float64(m1["MemAvailable"])) / f,
		rss:         (float64(rss1) - float64(rss0)) / f,
		pss:         float64(ps.total) / f,
		pssAnon:     float64(ps.anon) / f,
		pssFile:     float64(ps.file) / f,
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

// pss is a sum of smaps_rollup figures, in bytes.
type pss struct{ total, anon, file, shmem uint64 }

// descendantsPSS sums the Pss of every process below pid (not pid
// itself).
func descendantsPSS(pid int) pss {
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
	var sum pss
	queue := slices.Clone(children[pid])
	for len(queue) > 0 {
		p := queue[0]
		queue = append(queue[1:], children[p]...)
		addPSS(&sum, p)
	}
	return sum
}

// addPSS adds the Pss figures of pid to sum.
func addPSS(sum *pss, pid int) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/smaps_rollup")
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 2 {
			continue
		}
		v, _ := strconv.ParseUint(fs[1], 10, 64)
		v <<= 10
		switch fs[0] {
		case "Pss:":
			sum.total += v
		case "Pss_Anon:":
			sum.anon += v
		case "Pss_File:":
			sum.file += v
		case "Pss_Shmem:":
			sum.shmem += v
		}
	}
}

// runcPeer measures runc: exec round trips in one running container, and
// create → start → exec echo → delete cycles.
func runcPeer(ctx context.Context, cfg config) (execs []time.Duration, cold cycleTimes, err error) {
	rc := func(args ...string) *exec.Cmd {
		cmd := exec.CommandContext(ctx, cfg.runc, args...)
		cmd.Dir = cfg.bundle
		return cmd
	}
	check := func(cmd *exec.Cmd) ([]byte, error) {
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return out, fmt.Errorf("%s: %v: %s", strings.Join(cmd.Args, " "), err, strings.TrimSpace(stderr.String()))
		}
		return out, nil
	}
	// detached runs `runc run -d` or `runc create`: the container's
	// process gets runc's stdio, so it must be /dev/null, not a pipe this
	// process would wait on; runc's own errors go to a log file.
	runcLog := filepath.Join(cfg.work, "runc.log")
	detached := func(args ...string) error {
		cmd := rc(append([]string{"--log", runcLog}, args...)...)
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("%s: %v: %s", strings.Join(cmd.Args, " "), err, tail(runcLog))
		}
		return nil
	}
	del := func(id string) { _ = exec.Command(cfg.runc, "delete", "-f", id).Run() }

	id := cfg.prefix + "exec"
	if err := detached("run", "-d", "--bundle", cfg.bundle, id); err != nil {
		return nil, cold, err
	}
	defer del(id)
	execs, err = roundTrips(ctx, cfg.runN, func() error {
		_, err := check(rc("exec", id, "true"))
		return err
	})
	if err != nil {
		return nil, cold, err
	}
	for i := -3; i < cfg.runN; i++ {
		id := cfg.prefix + "cold-" + strconv.Itoa(i+3)
		t0 := time.Now()
		err := detached("create", "--bundle", cfg.bundle, id)
		if err == nil {
			_, err = check(rc("start", id))
		}
		tc := time.Now()
		var out []byte
		if err == nil {
			out, err = check(rc("exec", id, "echo", "ok"))
		}
		t1 := time.Now()
		if err == nil && string(out) != "ok\n" {
			err = fmt.Errorf("runc exec echo ok: output %q", out)
		}
		if derr := exec.Command(cfg.runc, "delete", "-f", id).Run(); err == nil && derr != nil {
			err = fmt.Errorf("runc delete -f %s: %v", id, derr)
		}
		t2 := time.Now()
		if err != nil {
			del(id)
			return nil, cold, err
		}
		if i >= 0 {
			cold.create = append(cold.create, tc.Sub(t0))
			cold.output = append(cold.output, t1.Sub(t0))
			cold.destroy = append(cold.destroy, t2.Sub(t1))
			cold.total = append(cold.total, t2.Sub(t0))
		}
	}
	return execs, cold, nil
}

// figures holds every figure of a run and prints them.
type figures struct {
	markdown              bool
	versions, runcVersion string
	cold, warm            *cycleTimes
	warmN                 int
	warmErr               error
	execRun, execStream   []time.Duration
	c                     int
	tputOne, tputMany     float64
	mem                   *memStats
	runcExec              []time.Duration
	runcCold              cycleTimes
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d)/float64(time.Millisecond)) }

func ratio(a, b time.Duration) string {
	if b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", float64(a)/float64(b))
}

func met(ok bool) string {
	if ok {
		return "met"
	}
	return "not met"
}

func (r *figures) print() {
	if r.markdown {
		fmt.Printf("Versions: %s", r.versions)
		if r.runcVersion != "" {
			fmt.Printf(", %s", r.runcVersion)
		}
		fmt.Print(".\n\n")
	} else {
		fmt.Println(r.versions + "; " + r.runcVersion)
		fmt.Println()
	}
	hasRunc := len(r.runcExec) > 0

	t := report.NewTable(r.markdown, "latency", "n", "p50 ms", "p99 ms", "target (p50)", "status")
	lat := func(name string, ds []time.Duration, target time.Duration) {
		tg, st := "-", "-"
		if target > 0 {
			tg, st = "≤ "+ms(target), met(report.Percentile(ds, 50) <= target)
		}
		t.Row(name, strconv.Itoa(len(ds)), ms(report.Percentile(ds, 50)), ms(report.Percentile(ds, 99)), tg, st)
	}
	lat("hutch cold: create (until its answer)", r.cold.create, 0)
	lat("hutch cold: create → first output", r.cold.output, targetCold)
	lat("hutch cold: destroy", r.cold.destroy, 0)
	lat("hutch cold: create → output → destroy", r.cold.total, 0)
	if r.warm != nil {
		lat("hutch warm: create (until its answer)", r.warm.create, 0)
		lat("hutch warm: create → first output", r.warm.output, targetWarm)
		lat("hutch warm: create → output → destroy", r.warm.total, 0)
	}
	lat("hutch exec `true` (run to completion)", r.execRun, targetExec)
	lat("hutch exec `true` (streaming)", r.execStream, targetExec)
	if hasRunc {
		lat("runc: create → start", r.runcCold.create, 0)
		lat("runc: create → start → exec → first output", r.runcCold.output, 0)
		lat("runc: create → start → exec → delete", r.runcCold.total, 0)
		lat("runc exec `true` (container started once)", r.runcExec, 0)
	}
	t.Print(os.Stdout)
	if r.warmErr != nil {
		fmt.Printf("warm: failed: %v\n\n", r.warmErr)
	} else if r.warm == nil {
		fmt.Print("warm: not available (`hutch serve -h` lists no -warm flag)\n\n")
	} else {
		fmt.Printf("warm: a daemon started with --warm %d; each cycle starts once the pool is full again\n\n", r.warmN)
	}

	if hasRunc {
		rt := report.NewTable(r.markdown, "ratio hutch/runc", "p50", "p99")
		rt.Row("create → first output (cold)", ratio(report.Percentile(r.cold.output, 50), report.Percentile(r.runcCold.output, 50)),
			ratio(report.Percentile(r.cold.output, 99), report.Percentile(r.runcCold.output, 99)))
		rt.Row("create → output → destroy (cold)", ratio(report.Percentile(r.cold.total, 50), report.Percentile(r.runcCold.total, 50)),
			ratio(report.Percentile(r.cold.total, 99), report.Percentile(r.runcCold.total, 99)))
		rt.Row("exec round trip (run to completion)", ratio(report.Percentile(r.execRun, 50), report.Percentile(r.runcExec, 50)),
			ratio(report.Percentile(r.execRun, 99), report.Percentile(r.runcExec, 99)))
		rt.Row("exec round trip (streaming)", ratio(report.Percentile(r.execStream, 50), report.Percentile(r.runcExec, 50)),
			ratio(report.Percentile(r.execStream, 99), report.Percentile(r.runcExec, 99)))
		rt.Print(os.Stdout)
	}

	tt := report.NewTable(r.markdown, "throughput: `true` run to completion", "execs/s", "target", "status")
	tt.Row(fmt.Sprintf("%d clients, one sandbox", r.c), fmt.Sprintf("%.0f", r.tputOne), fmt.Sprintf("≥ %.0f", targetThroughput), met(r.tputOne >= targetThroughput))
	tt.Row(fmt.Sprintf("%d clients, %d sandboxes", r.c, r.c), fmt.Sprintf("%.0f", r.tputMany), fmt.Sprintf("≥ %.0f", targetThroughput), met(r.tputMany >= targetThroughput))
	if hasRunc {
		tt.Row("runc exec, one client (1 / p50)", fmt.Sprintf("%.0f", 1/report.Percentile(r.runcExec, 50).Seconds()), "-", "-")
	}
	tt.Print(os.Stdout)

	if r.mem != nil {
		m := r.mem
		mib := func(b float64) string { return fmt.Sprintf("%.2f", b/(1<<20)) }
		mt := report.NewTable(r.markdown, fmt.Sprintf("idle memory, %d sandboxes alive", m.n), "MiB per sandbox", "target", "status")
		mt.Row("MemAvailable drop / n", mib(m.avail), fmt.Sprintf("≤ %.0f", targetIdleMiB), met(m.avail/(1<<20) <= targetIdleMiB))
		mt.Row("daemon RSS growth / n", mib(m.rss), "-", "-")
		mt.Row("PSS of the sandboxes' processes / n", mib(m.pss), "-", "-")
		mt.Row("  of which anonymous", mib(m.pssAnon), "-", "-")
		mt.Row("  of which file-backed (shared binary)", mib(m.pssFile), "-", "-")
		mt.Row("Shmem growth (tmpfs) / n", mib(m.shmem), "-", "-")
		mt.Row("kernel: slab (unreclaimable) + page tables + stacks / n", mib(m.kernel), "-", "-")
		mt.Print(os.Stdout)
		fmt.Printf("created %d sandboxes at %.0f/s (4 clients); MemAvailable %.0f → %.0f MiB\n\n",
			m.n, m.createPerS, float64(m.availBefore)/(1<<20), float64(m.after)/(1<<20))
	}
}
