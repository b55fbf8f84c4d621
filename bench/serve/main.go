//go:build linux

// Command serve measures `hutch serve` through its Go SDK (package client),
// for each isolation tier of -tiers (namespace, gvisor, microvm): it
// starts a daemon of its own per tier on a unix socket in -work, with that
// tier as its --default-tier (and -runsc as the gvisor tier's --runsc;
// --allow-emulation for the microvm tier, whose guests run under QEMU's
// software emulation where the host has no KVM they can use), and
// reports in one run (the latencies' samples interleaved between the
// tiers, so that they see the same load on the machine; the throughput
// and the idle memory one tier after the other)
//
//   - create → first exec output → destroy: a sandbox is created, runs
//     `echo ok` to completion (Client.Run) and is destroyed, -n times; p50,
//     p90 and p99 of the create alone, of the time to the output ("cold"),
//     of the destroy and of the whole cycle. When `hutch serve -h` lists a
//     -warm flag, the same again against a second daemon per tier started
//     with --warm -warm, each cycle once every pool is full again
//     ("warm"); otherwise it says "warm: not available". The time of the
//     first command alone (from the create's answer to the output) too.
//   - exec round trip on a live sandbox: `true` run to completion
//     (Client.Run, one HTTP request) and through the streaming exec
//     (Client.Exec over an upgraded connection, output read to its end and
//     the exit status waited for), -e times each.
//   - execs per second with -c concurrent clients (each its own Client and
//     connections) running `true` on one sandbox, and on -c sandboxes (one
//     each), for -dur each.
//   - idle memory per sandbox with -idle sandboxes alive (a count per
//     tier): the drop of MemAvailable (/proc/meminfo) divided by their
//     number, the growth of the daemon's resident set, the proportional
//     set size (PSS) of the sandboxes' processes (every process below the
//     daemon: the agents; under gVisor runsc, its gofer, its Sentry and
//     the Sentry's stubs), in all and by process name, the usage of the
//     sandboxes' memory cgroups, and the kernel's unreclaimable slab, page
//     tables and kernel stacks.
//   - with -runc and -bundle, runc as the peer in the same run: one
//     container started with `runc run -d`, then the round trip of
//     `runc exec ID true`; and create → start → `runc exec ID echo ok` →
//     `runc delete -f` as the cold peer. Ratios to runc are printed.
//
// With more than one tier, a table puts the tiers' main figures side by
// side with their ratios to the first tier's. The targets (the
// daemon's, set for the namespace tier) are printed next to the namespace
// tier's figures. Every daemon is stopped (SIGTERM to its pid, which
// destroys its sandboxes; SIGKILL if it outlasts the grace period) and
// every runc container this run made is deleted before it exits; a daemon
// also gets SIGTERM if this process dies (Pdeathsig).
package main

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
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
	pools "github.com/hutch-sandbox/hutch/bench/served"
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
	hutch, work  string
	n, e, c      int
	runN         int
	warm         int
	tiers        []string       // the isolation tiers measured, in order
	idle         map[string]int // idle sandboxes per tier (0: skip)
	runsc        string         // runsc for the gvisor tier ("": runsc on PATH)
	dur          time.Duration
	runc, bundle string
	prefix       string
	markdown     bool
}

// The tiers the daemon knows, as hutch serve --default-tier names them.
var knownTiers = []string{"namespace", "gvisor", "microvm"}

func main() {
	var cfg config
	var tiers, idle string
	flag.StringVar(&cfg.hutch, "hutch", "", "the hutch binary")
	flag.StringVar(&cfg.work, "work", "", "a fresh directory for the daemon's socket, state and log (mode 0711 or wider)")
	flag.IntVar(&cfg.n, "n", 200, "create → output → destroy cycles")
	flag.IntVar(&cfg.e, "e", 2000, "exec round trips per way")
	flag.IntVar(&cfg.c, "c", 16, "concurrent clients in the throughput phase")
	flag.DurationVar(&cfg.dur, "dur", 3*time.Second, "length of each throughput run")
	flag.StringVar(&tiers, "tiers", "namespace", "isolation tiers to measure, comma-separated (namespace, gvisor, microvm), each with a daemon of that --default-tier")
	flag.StringVar(&cfg.runsc, "runsc", "", "runsc binary for the gvisor tier (hutch serve --runsc; empty: runsc on PATH)")
	flag.StringVar(&idle, "idle", "500,gvisor=20", "idle sandboxes alive for the memory figure: N for every tier, then TIER=N for one (0: skip)")
	flag.IntVar(&cfg.warm, "warm", 4, "warm pool size when the daemon has a -warm flag")
	flag.StringVar(&cfg.runc, "runc", "", "runc binary (empty: no peer)")
	flag.StringVar(&cfg.bundle, "bundle", "", "runc bundle whose process runs until killed")
	flag.StringVar(&cfg.prefix, "prefix", "hutchserve-"+strconv.Itoa(os.Getpid())+"-", "prefix of the runc container ids")
	flag.IntVar(&cfg.runN, "runc-n", 200, "runc samples per way")
	flag.BoolVar(&cfg.markdown, "markdown", false, "print markdown tables")
	flag.Parse()
	var err error
	if cfg.tiers, err = parseTiers(tiers); err == nil {
		cfg.idle, err = parseIdle(idle, cfg.tiers)
	}
	if err == nil && (cfg.hutch == "" || cfg.work == "") {
		err = errors.New("-hutch and -work are required")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "serve:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err = run(ctx, cfg)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "serve:", err)
		os.Exit(1)
	}
}

// parseTiers reads -tiers: known tiers, comma-separated, each once.
func parseTiers(s string) ([]string, error) {
	var tiers []string
	for _, t := range strings.Split(s, ",") {
		t = strings.TrimSpace(t)
		switch {
		case !slices.Contains(knownTiers, t):
			return nil, fmt.Errorf("-tiers: unknown tier %q (known: %s)", t, strings.Join(knownTiers, ", "))
		case slices.Contains(tiers, t):
			return nil, fmt.Errorf("-tiers: %s twice", t)
		}
		tiers = append(tiers, t)
	}
	return tiers, nil
}

// parseIdle reads -idle for the tiers: "N" sets every tier's count, a
// later "TIER=N" one tier's.
func parseIdle(s string, tiers []string) (map[string]int, error) {
	idle := map[string]int{}
	for _, item := range strings.Split(s, ",") {
		tier, num, one := strings.Cut(strings.TrimSpace(item), "=")
		if !one {
			num = tier
		} else if !slices.Contains(knownTiers, tier) {
			return nil, fmt.Errorf("-idle: unknown tier %q in %q", tier, item)
		}
		n, err := strconv.Atoi(num)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("-idle: %q is not a count of sandboxes", item)
		}
		for _, t := range tiers {
			if !one || t == tier {
				idle[t] = n
			}
		}
	}
	return idle, nil
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
	most := cfg.c
	for _, n := range cfg.idle {
		most = max(most, n)
	}
	most += 50
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

// tierArgs are the flags of hutch serve that make tier its default.
func tierArgs(cfg config, tier string) ([]string, error) {
	if !servesFlag(cfg.hutch, "default-tier") {
		if tier != "namespace" {
			return nil, fmt.Errorf("this hutch serve has no --default-tier: tier %s cannot be measured", tier)
		}
		return nil, nil
	}
	args := []string{"--default-tier", tier}
	if tier == "gvisor" && cfg.runsc != "" {
		args = append(args, "--runsc", cfg.runsc)
	}
	if tier == "microvm" {
		args = append(args, "--allow-emulation")
	}
	return args, nil
}

// progress tells how far the run is, on stderr.
func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "serve: "+format+"\n", args...)
}

// served is one tier's daemon and its figures.
type served struct {
	d    *daemon
	c    *client.Client
	f    *tierFigures
	live string // the sandbox of the exec round trips
}

// startServed starts a daemon per tier, with extra flags, named after the
// tier and suffix; it stops those it started when one fails.
func startServed(ctx context.Context, cfg config, figs []*tierFigures, suffix string, extra ...string) ([]served, error) {
	var all []served
	for _, f := range figs {
		args, err := tierArgs(cfg, f.tier)
		var d *daemon
		if err == nil {
			d, err = startDaemon(ctx, cfg, f.tier+suffix, append(args, extra...)...)
		}
		var c *client.Client
		if err == nil {
			all = append(all, served{d: d, f: f})
			c, err = client.New(d.host, "")
		}
		if err != nil {
			stopServed(all)
			return nil, fmt.Errorf("a daemon of tier %s: %w", f.tier, err)
		}
		all[len(all)-1].c = c
	}
	return all, nil
}

func stopServed(all []served) {
	for _, s := range all {
		s.d.stop()
	}
}

// interleave calls fn for every tier in turn, in warmup untimed rounds
// (i < 0) and then n, so that the tiers' samples are spread over the same
// stretch of time, and see the same load on the machine.
func interleave(ctx context.Context, all []served, warmup, n int, fn func(s served, i int) error) error {
	for i := -warmup; i < n; i++ {
		for _, s := range all {
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := fn(s, i); err != nil {
				return fmt.Errorf("tier %s: %w", s.f.tier, err)
			}
		}
	}
	return nil
}

// timed calls fn and, when record is set, appends its time to ds.
func timed(ds *[]time.Duration, record bool, fn func() error) error {
	t0 := time.Now()
	if err := fn(); err != nil {
		return err
	}
	if record {
		*ds = append(*ds, time.Since(t0))
	}
	return nil
}

func run(ctx context.Context, cfg config) error {
	if err := os.Chmod(cfg.work, 0o711); err != nil {
		return err
	}
	r := &figures{markdown: cfg.markdown, c: cfg.c, versions: hutchVersion(cfg.hutch)}
	if slices.Contains(cfg.tiers, "gvisor") {
		runsc := cfg.runsc
		if runsc == "" {
			runsc = "runsc"
		}
		r.runscVersion = firstLine(runsc, "--version")
	}
	for _, tier := range cfg.tiers {
		r.tiers = append(r.tiers, &tierFigures{tier: tier, cold: &cycleTimes{}})
	}

	// One daemon per tier, all started first. The samples of the
	// latencies are interleaved between the tiers; the phases that load
	// the machine (throughput, many sandboxes) run for one tier after the
	// other.
	all, err := startServed(ctx, cfg, r.tiers, "")
	if err != nil {
		return err
	}
	defer stopServed(all)
	phase := func(name string, fn func(s served) error) error {
		for _, s := range all {
			progress("%s, tier %s", name, s.f.tier)
			if err := fn(s); err != nil {
				return fmt.Errorf("%s, tier %s: %w", name, s.f.tier, err)
			}
		}
		return nil
	}

	// a. create → first output → destroy, cold.
	progress("cold cycles")
	if err := interleave(ctx, all, 5, cfg.n, func(s served, i int) error {
		return s.f.cold.cycle(ctx, s.c, s.f.tier, i >= 0)
	}); err != nil {
		return fmt.Errorf("cold cycles: %w", err)
	}

	// b. exec round trips on a live sandbox, interleaved.
	for i := range all {
		sb, err := create(ctx, all[i].c, all[i].f.tier, time.Hour)
		if err != nil {
			return err
		}
		all[i].live = sb.ID
	}
	progress("exec round trips")
	if err := interleave(ctx, all, 20, cfg.e, func(s served, i int) error {
		return timed(&s.f.execRun, i >= 0, func() error { return runTrue(ctx, s.c, s.live) })
	}); err != nil {
		return fmt.Errorf("exec (run): %w", err)
	}
	if err := interleave(ctx, all, 20, cfg.e, func(s served, i int) error {
		return timed(&s.f.execStream, i >= 0, func() error { return streamTrue(ctx, s.c, s.live) })
	}); err != nil {
		return fmt.Errorf("exec (stream): %w", err)
	}

	// c. throughput with concurrent clients, one sandbox and one each.
	err = phase("throughput", func(s served) error { return throughputs(ctx, cfg, s) })
	// d. idle memory.
	if err == nil {
		err = phase("idle memory", func(s served) error {
			var err error
			if n := cfg.idle[s.f.tier]; n > 0 {
				s.f.mem, err = idleMemory(ctx, s.c, s.d.pid(), s.f.tier, n)
			}
			return err
		})
	}
	if err != nil {
		return err
	}

	// Warm pool, when the daemon has one: a second daemon per tier.
	if servesWarm(cfg.hutch) {
		progress("warm cycles")
		r.warmN = cfg.warm
		if r.warmErr = warmCycles(ctx, cfg, r.tiers); r.warmErr != nil {
			for _, f := range r.tiers {
				f.warm = nil
			}
		}
	}

	// e. runc.
	if cfg.runc != "" && cfg.bundle != "" {
		progress("runc")
		r.runcVersion = firstLine(cfg.runc, "--version")
		if r.runcExec, r.runcCold, err = runcPeer(ctx, cfg); err != nil {
			return fmt.Errorf("runc: %w", err)
		}
	}
	r.print()
	return nil
}

// throughputs measures the throughput on the tier's live sandbox and on
// cfg.c sandboxes, then destroys them all.
func throughputs(ctx context.Context, cfg config, s served) error {
	one := make([]string, cfg.c)
	for i := range one {
		one[i] = s.live
	}
	var err error
	if s.f.tputOne, err = throughput(ctx, s.d.host, one, cfg.dur); err != nil {
		return fmt.Errorf("on one sandbox: %w", err)
	}
	many, err := createN(ctx, s.c, s.f.tier, cfg.c, 4)
	if err != nil {
		return err
	}
	if s.f.tputMany, err = throughput(ctx, s.d.host, many, cfg.dur); err != nil {
		return fmt.Errorf("on %d sandboxes: %w", cfg.c, err)
	}
	return destroyAll(ctx, s.c, append(many, s.live), 4)
}

// warmCycles measures create → output → destroy against a daemon per tier
// started with --warm, the tiers' cycles interleaved, each cycle once
// every pool is full again (so that no refill runs when a cycle starts).
func warmCycles(ctx context.Context, cfg config, figs []*tierFigures) error {
	all, err := startServed(ctx, cfg, figs, "-warm", "--warm", strconv.Itoa(cfg.warm))
	if err != nil {
		return err
	}
	defer stopServed(all)
	for _, s := range all {
		s.f.warm = &cycleTimes{}
	}
	return interleave(ctx, all, 5, cfg.n, func(s served, i int) error {
		// The pools are full when hutch_warm_sandboxes{template=""} of
		// GET /metrics says so.
		for _, w := range all {
			if err := waitWarm(ctx, w.d.dir, cfg.warm); err != nil {
				return err
			}
		}
		return s.f.warm.cycle(ctx, s.c, s.f.tier, i >= 0)
	})
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
	first                          []time.Duration // the first command: from the create's answer to the output
}

// create creates a sandbox of the daemon's default policy, which must run
// in tier (a daemon that names no tier runs the namespace tier).
func create(ctx context.Context, c *client.Client, tier string, timeout time.Duration) (*client.Sandbox, error) {
	sb, err := c.Create(ctx, client.CreateOptions{Timeout: timeout})
	if err != nil {
		return nil, err
	}
	if got := cmp.Or(sb.Tier, "namespace"); got != tier {
		_ = c.Destroy(ctx, sb.ID)
		return nil, fmt.Errorf("sandbox %s runs in tier %s, not %s", sb.ID, got, tier)
	}
	return sb, nil
}

// cycle creates a sandbox of tier, runs `echo ok` in it and destroys it;
// when record is set, it adds the times to ct.
func (ct *cycleTimes) cycle(ctx context.Context, c *client.Client, tier string, record bool) error {
	t0 := time.Now()
	sb, err := create(ctx, c, tier, time.Minute)
	if err != nil {
		return err
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
	if err == nil && record {
		ct.add(t0, tc, t1, time.Now())
	}
	return err
}

// add adds a cycle's times: its start, the create's answer, the output,
// the destroy's end.
func (ct *cycleTimes) add(t0, tc, t1, t2 time.Time) {
	ct.create = append(ct.create, tc.Sub(t0))
	ct.output = append(ct.output, t1.Sub(t0))
	ct.first = append(ct.first, t1.Sub(tc))
	ct.destroy = append(ct.destroy, t2.Sub(t1))
	ct.total = append(ct.total, t2.Sub(t0))
}

// waitWarm waits until the daemon in dir reports n warm sandboxes ready
// (the gauge hutch_warm_sandboxes of GET /metrics), for up to 30 s.
func waitWarm(ctx context.Context, dir string, n int) error {
	hc := pools.UnixClient(filepath.Join(dir, "hutch.sock"))
	defer hc.CloseIdleConnections()
	return pools.WaitWarm(ctx, hc, n, 30*time.Second, 2*time.Millisecond, "")
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
		if err := timed(&ds, i >= 0, fn); err != nil {
			return nil, err
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

// createN creates n sandboxes of tier with w workers.
func createN(ctx context.Context, c *client.Client, tier string, n, w int) ([]string, error) {
	ids := make([]string, n)
	err := parallel(n, w, func(i int) error {
		sb, err := create(ctx, c, tier, time.Hour)
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
			cold.add(t0, tc, t1, t2)
		}
	}
	return execs, cold, nil
}

// tierFigures are the figures of one tier.
type tierFigures struct {
	tier                string
	cold, warm          *cycleTimes
	execRun, execStream []time.Duration
	tputOne, tputMany   float64
	mem                 *memStats
}

// figures holds every figure of a run and prints them.
type figures struct {
	markdown                            bool
	versions, runcVersion, runscVersion string
	tiers                               []*tierFigures
	warmN                               int // 0: the daemon has no warm pool
	warmErr                             error
	c                                   int
	runcExec                            []time.Duration
	runcCold                            cycleTimes
}

func mib(b float64) string { return fmt.Sprintf("%.2f", b/(1<<20)) }

// percentiles are the ones the latency tables show.
var percentiles = []float64{50, 90, 99}

// pcts are f of each of the percentiles.
func pcts(f func(p float64) string) []string {
	var out []string
	for _, p := range percentiles {
		out = append(out, f(p))
	}
	return out
}

// withTargets reports whether the targets are shown for tier: they
// are the daemon's, set before it had tiers; the other tiers are compared
// with the namespace tier instead.
func withTargets(tier string) bool { return tier == "namespace" }

func (r *figures) print() {
	versions := []string{r.versions}
	for _, v := range []string{r.runscVersion, r.runcVersion} {
		if v != "" {
			versions = append(versions, v)
		}
	}
	if r.markdown {
		fmt.Printf("Versions: %s.\n\n", strings.Join(versions, ", "))
	} else {
		fmt.Print(strings.Join(versions, "; ") + "\n\n")
	}
	hasRunc := len(r.runcExec) > 0

	t := report.NewTable(r.markdown, "latency", "n", "p50 ms", "p90 ms", "p99 ms", "target (p50)", "status")
	lat := func(name string, ds []time.Duration, target time.Duration) {
		tg, st := "-", "-"
		if target > 0 {
			tg, st = "≤ "+report.Ms(target), report.Met(report.Percentile(ds, 50) <= target)
		}
		row := append([]string{name, strconv.Itoa(len(ds))}, pcts(func(p float64) string { return report.Ms(report.Percentile(ds, p)) })...)
		t.Row(append(row, tg, st)...)
	}
	for _, f := range r.tiers {
		target := func(d time.Duration) time.Duration {
			if withTargets(f.tier) {
				return d
			}
			return 0
		}
		lat(f.tier+" cold: create (until its answer)", f.cold.create, 0)
		lat(f.tier+" cold: create → first output", f.cold.output, target(targetCold))
		lat(f.tier+" cold: first command (answer → output)", f.cold.first, 0)
		lat(f.tier+" cold: destroy", f.cold.destroy, 0)
		lat(f.tier+" cold: create → output → destroy", f.cold.total, 0)
		if f.warm != nil {
			lat(f.tier+" warm: create (until its answer)", f.warm.create, 0)
			lat(f.tier+" warm: create → first output", f.warm.output, target(targetWarm))
			lat(f.tier+" warm: first command (answer → output)", f.warm.first, 0)
			lat(f.tier+" warm: create → output → destroy", f.warm.total, 0)
		}
		lat(f.tier+" exec `true` (run to completion)", f.execRun, target(targetExec))
		lat(f.tier+" exec `true` (streaming)", f.execStream, target(targetExec))
	}
	if hasRunc {
		lat("runc: create → start", r.runcCold.create, 0)
		lat("runc: create → start → exec → first output", r.runcCold.output, 0)
		lat("runc: create → start → exec → delete", r.runcCold.total, 0)
		lat("runc exec `true` (container started once)", r.runcExec, 0)
	}
	t.Print(os.Stdout)
	if r.warmN == 0 {
		fmt.Print("warm: not available (`hutch serve -h` lists no -warm flag)\n\n")
	} else {
		fmt.Printf("warm: a daemon per tier started with --warm %d; each cycle starts once every pool is full again\n", r.warmN)
		if r.warmErr != nil {
			fmt.Printf("warm: failed: %v\n", r.warmErr)
		}
		fmt.Println()
	}

	if hasRunc {
		rt := report.NewTable(r.markdown, "ratio to runc", "p50", "p90", "p99")
		rr := func(name string, a, b []time.Duration) {
			rt.Row(append([]string{name}, pcts(func(p float64) string {
				return report.Ratio(report.Percentile(a, p), report.Percentile(b, p))
			})...)...)
		}
		for _, f := range r.tiers {
			rr(f.tier+": create → first output (cold)", f.cold.output, r.runcCold.output)
			rr(f.tier+": create → output → destroy (cold)", f.cold.total, r.runcCold.total)
			rr(f.tier+": exec round trip (run to completion)", f.execRun, r.runcExec)
			rr(f.tier+": exec round trip (streaming)", f.execStream, r.runcExec)
		}
		rt.Print(os.Stdout)
	}

	tt := report.NewTable(r.markdown, "throughput: `true` run to completion", "execs/s", "target", "status")
	for _, f := range r.tiers {
		tput := func(name string, v float64) {
			tg, st := "-", "-"
			if withTargets(f.tier) {
				tg, st = fmt.Sprintf("≥ %.0f", targetThroughput), report.Met(v >= targetThroughput)
			}
			tt.Row(name, fmt.Sprintf("%.0f", v), tg, st)
		}
		tput(fmt.Sprintf("%s: %d clients, one sandbox", f.tier, r.c), f.tputOne)
		tput(fmt.Sprintf("%s: %d clients, %d sandboxes", f.tier, r.c, r.c), f.tputMany)
	}
	if hasRunc {
		tt.Row("runc exec, one client (1 / p50)", fmt.Sprintf("%.0f", 1/report.Percentile(r.runcExec, 50).Seconds()), "-", "-")
	}
	tt.Print(os.Stdout)

	for _, f := range r.tiers {
		if f.mem != nil {
			printMem(r.markdown, f.tier, f.mem)
		}
	}
	if len(r.tiers) > 1 {
		r.printComparison()
	}
}

// printMem prints a tier's idle-memory figures.
func printMem(markdown bool, tier string, m *memStats) {
	tg, st := "-", "-"
	if withTargets(tier) {
		tg, st = fmt.Sprintf("≤ %.0f", targetIdleMiB), report.Met(m.avail/(1<<20) <= targetIdleMiB)
	}
	mt := report.NewTable(markdown, fmt.Sprintf("idle memory, %s, %d sandboxes alive", tier, m.n), "MiB per sandbox", "target", "status")
	row := func(name string, b float64) { mt.Row(name, mib(b), "-", "-") }
	mt.Row("MemAvailable drop / n", mib(m.avail), tg, st)
	row("daemon RSS growth / n", m.rss)
	row("PSS of the sandboxes' processes / n", m.pss.total)
	row("  of which anonymous", m.pss.anon)
	row("  of which file-backed (shared binaries)", m.pss.file)
	row("  of which shared memory (tmpfs, memfd)", m.pss.shmem)
	for _, r := range m.roles {
		row(fmt.Sprintf("  PSS of %s (%.3g per sandbox; anonymous %s, file %s, shmem %s)", r.name, r.procs, mib(r.anon), mib(r.file), mib(r.shmem)), r.total)
	}
	cg := "cgroup memory of the sandboxes / n"
	if m.cgroups > 0 && m.cgroups != 1 {
		cg += fmt.Sprintf(" (%.3g cgroups per sandbox)", m.cgroups)
	}
	if m.cgroups > 0 {
		row(cg, m.cgroup)
	}
	row("Shmem growth (tmpfs, memfd) / n", m.shmem)
	row("kernel: slab (unreclaimable) + page tables + stacks / n", m.kernel)
	mt.Print(os.Stdout)
	fmt.Printf("%s: created %d sandboxes at %.1f/s (4 clients); MemAvailable %.0f → %.0f MiB\n\n",
		tier, m.n, m.createPerS, float64(m.availBefore)/(1<<20), float64(m.after)/(1<<20))
}

// printComparison prints each tier's main figures side by side, and their
// ratios to the first tier's.
func (r *figures) printComparison() {
	first := r.tiers[0]
	head := []string{"tier comparison"}
	for _, f := range r.tiers {
		head = append(head, f.tier)
	}
	for _, f := range r.tiers[1:] {
		head = append(head, f.tier+"/"+first.tier)
	}
	t := report.NewTable(r.markdown, head...)
	// row adds a figure every tier has (get's ok), formatted by format.
	row := func(name string, format func(float64) string, get func(f *tierFigures) (float64, bool)) {
		var vs []float64
		for _, f := range r.tiers {
			v, ok := get(f)
			if !ok {
				return
			}
			vs = append(vs, v)
		}
		cells := []string{name}
		for _, v := range vs {
			cells = append(cells, format(v))
		}
		for _, v := range vs[1:] {
			cells = append(cells, report.Ratio(v, vs[0]))
		}
		t.Row(cells...)
	}
	msf := func(v float64) string { return report.Ms(time.Duration(v)) }
	lat := func(name string, ds func(f *tierFigures) []time.Duration) {
		for _, p := range []float64{50, 90} {
			row(fmt.Sprintf("%s, p%.0f ms", name, p), msf, func(f *tierFigures) (float64, bool) {
				d := ds(f)
				return float64(report.Percentile(d, p)), len(d) > 0
			})
		}
	}
	// cyc adds the figure of the warm or cold cycles.
	cyc := func(name string, warm bool, ds func(c *cycleTimes) []time.Duration) {
		lat(name, func(f *tierFigures) []time.Duration {
			c := f.cold
			if warm {
				c = f.warm
			}
			if c == nil {
				return nil
			}
			return ds(c)
		})
	}
	output := func(c *cycleTimes) []time.Duration { return c.output }
	firstCmd := func(c *cycleTimes) []time.Duration { return c.first }
	cyc("warm create → first output", true, output)
	cyc("warm: first command (create's answer → output)", true, firstCmd)
	cyc("cold create → first output", false, output)
	cyc("cold: first command (create's answer → output)", false, firstCmd)
	cyc("cold create → output → destroy", false, func(c *cycleTimes) []time.Duration { return c.total })
	lat("exec round trip (run to completion)", func(f *tierFigures) []time.Duration { return f.execRun })
	lat("exec round trip (streaming)", func(f *tierFigures) []time.Duration { return f.execStream })
	perS := func(v float64) string { return fmt.Sprintf("%.0f", v) }
	row(fmt.Sprintf("execs/s, %d clients, one sandbox", r.c), perS, func(f *tierFigures) (float64, bool) { return f.tputOne, true })
	row(fmt.Sprintf("execs/s, %d clients, %d sandboxes", r.c, r.c), perS, func(f *tierFigures) (float64, bool) { return f.tputMany, true })
	mem := func(name string, get func(m *memStats) float64) {
		row("idle: "+name+", MiB per sandbox", mib, func(f *tierFigures) (float64, bool) {
			if f.mem == nil {
				return 0, false
			}
			return get(f.mem), true
		})
	}
	mem("MemAvailable drop", func(m *memStats) float64 { return m.avail })
	mem("PSS of the sandboxes' processes", func(m *memStats) float64 { return m.pss.total })
	mem("anonymous PSS", func(m *memStats) float64 { return m.pss.anon })
	mem("cgroup memory", func(m *memStats) float64 { return m.cgroup })
	t.Print(os.Stdout)
	var ns []string
	for _, f := range r.tiers {
		if f.mem != nil {
			ns = append(ns, fmt.Sprintf("%s %d", f.tier, f.mem.n))
		}
	}
	if len(ns) > 0 {
		fmt.Printf("idle sandboxes: %s\n\n", strings.Join(ns, ", "))
	}
}
