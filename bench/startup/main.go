//go:build linux

// Command startup measures how fast sandboxes start and end, and how much
// memory they take. It takes a list of named commands, each a whole sandbox
// run such as
//
//	hutch=/tmp/hutch run -- /bin/true
//	bwrap=bwrap --unshare-all --ro-bind / / /bin/true
//
// and runs each of them many times, in the same run and on the same machine:
//
//   - Latency: after a warm-up, N rounds in which every command runs once,
//     one after the other (round-robin, so drift of the machine hits every
//     command alike). Each run is timed from fork to the parent's wait4
//     returning; median, p90 and mean are reported, and sequential
//     sandboxes/s = N / (sum of the N wall times). CPU is the user+system
//     time that wait4 reports: the command's and that of every descendant
//     reaped inside its tree.
//   - Throughput under load: P workers run the command concurrently until
//     a fixed count has run; parallel sandboxes/s = count / elapsed. Each
//     worker runs in its own subdirectory of the command's directory
//     (worker0, worker1, ...): hutch prepares files in its workspace, and
//     sandboxes sharing one workspace would measure contention on it rather
//     than start-up.
//   - Memory: peak RSS, measured in a separate pass (-rss-runs per command)
//     through a small launcher, this same binary re-executed: it resets its
//     own peak RSS (/proc/self/clear_refs), starts the command and reports
//     max(ru_maxrss of wait4 for the command, ru_maxrss of
//     getrusage(RUSAGE_CHILDREN)). Linux keeps ru_maxrss per process as the
//     largest resident set it ever had, and a parent collects its reaped
//     children's, so the figure is the peak RSS of the largest single
//     process of the sandbox's tree (not a sum over the tree). A process
//     started with vfork and execve also inherits the peak of the memory it
//     shared with its parent before execve; that is why a small launcher
//     starts the command, and why the launcher's own resident set is the
//     floor of what can be measured. A figure at the floor is printed as
//     "≤floor".
//
// A command line is split on white space (no quoting). NAME@DIR=... runs
// that command in DIR instead of -dir. "{id}" in a command line is
// replaced by a string unique to each run (for container ids). Every run
// gets /dev/null as stdin and stdout; its stderr is kept and printed when
// the run fails, which stops the measurement. Runs start in their own
// process group, which is killed if a run outlasts -timeout.
package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hutch-sandbox/hutch/bench/report"
)

// launcherEnv marks the re-executed launcher of the memory pass.
const launcherEnv = "STARTUP_BENCH_LAUNCHER"

// reportFD is the launcher's pipe back to the tool.
const reportFD = 3

func main() {
	if os.Getenv(launcherEnv) == "1" {
		os.Exit(launch(os.Args[1:]))
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// command is one named sandbox invocation.
type command struct {
	name string
	dir  string // working directory; -dir unless NAME@DIR
	argv []string
}

// sample is what one timed run measured.
type sample struct {
	wall time.Duration
	cpu  time.Duration // user + system of the whole reaped tree
}

// result is the summary of one command.
type result struct {
	name                 string
	median, p90, mean    time.Duration
	cpu                  time.Duration // median
	rss, rssMax, floor   int64         // KiB: median and largest peak RSS, launcher floor
	seqPerSec, parPerSec float64
}

// atFloor reports whether the peak RSS is no more than the launcher's own.
func (r result) atFloor() bool { return r.rss <= r.floor+rssSlack }

// rssSlack is how far above the launcher's resident set a figure still
// counts as the floor: the launcher touches a few pages between reading
// its resident set and starting the command.
const rssSlack = 128 // KiB

// options are the tool's flags.
type options struct {
	n, warmup, workers, parCount, rssRuns int
	dir                                   string
	timeout                               time.Duration
	ratios                                string
	markdown                              bool
}

func run(args []string, stdout, stderr io.Writer) int {
	var o options
	fs := flag.NewFlagSet("startup", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&o.n, "n", 200, "timed sequential runs of each command")
	fs.IntVar(&o.warmup, "warmup", 10, "untimed runs of each command before timing")
	fs.IntVar(&o.workers, "p", 2*runtime.NumCPU(), "concurrent workers in the parallel phase; 0 skips the phase")
	fs.IntVar(&o.parCount, "pn", 0, "runs of each command in the parallel phase (default: -n)")
	fs.IntVar(&o.rssRuns, "rss-runs", 10, "runs of each command in the memory pass; 0 skips it")
	fs.StringVar(&o.dir, "dir", "", "working directory of every run (default: the current directory)")
	fs.DurationVar(&o.timeout, "timeout", 30*time.Second, "kill a run that takes longer than this")
	fs.StringVar(&o.ratios, "ratio", "", "comma-separated `a/b` pairs of command names to compare (pairs naming a missing command are left out)")
	fs.BoolVar(&o.markdown, "markdown", false, "print markdown tables")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: startup [flags] NAME[@DIR]=COMMAND LINE ...")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if o.n < 1 || o.warmup < 0 || o.workers < 0 || o.parCount < 0 || o.rssRuns < 0 {
		fmt.Fprintln(stderr, "startup: -n must be at least 1; -warmup, -p, -pn and -rss-runs at least 0")
		return 2
	}
	if o.parCount == 0 {
		o.parCount = o.n
	}
	if o.dir == "" {
		var err error
		if o.dir, err = os.Getwd(); err != nil {
			fmt.Fprintf(stderr, "startup: %v\n", err)
			return 1
		}
	}
	cmds, err := parseCommands(fs.Args(), o.dir)
	if err != nil {
		fmt.Fprintf(stderr, "startup: %v\n", err)
		return 2
	}
	ratios, err := parseRatios(o.ratios, cmds)
	if err != nil {
		fmt.Fprintf(stderr, "startup: %v\n", err)
		return 2
	}
	r, err := newRunner(o)
	if err != nil {
		fmt.Fprintf(stderr, "startup: %v\n", err)
		return 1
	}
	defer r.close()
	results, err := r.measure(cmds, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "startup: %v\n", err)
		return 1
	}
	printResults(stdout, o, results, ratios)
	return 0
}

func parseCommands(args []string, dir string) ([]command, error) {
	if len(args) == 0 {
		return nil, errors.New("no commands given; usage: startup [flags] NAME[@DIR]=COMMAND LINE")
	}
	var cmds []command
	seen := map[string]bool{}
	for _, a := range args {
		name, line, ok := strings.Cut(a, "=")
		argv := strings.Fields(line)
		name, cdir, hasDir := strings.Cut(name, "@")
		if !ok || name == "" || len(argv) == 0 || (hasDir && cdir == "") {
			return nil, fmt.Errorf("command %q: want NAME=COMMAND LINE or NAME@DIR=COMMAND LINE", a)
		}
		if !hasDir {
			cdir = dir
		}
		if seen[name] {
			return nil, fmt.Errorf("command name %q given twice", name)
		}
		seen[name] = true
		path, err := exec.LookPath(argv[0])
		if err != nil {
			return nil, fmt.Errorf("command %q: %w", name, err)
		}
		argv[0] = path
		cmds = append(cmds, command{name: name, dir: cdir, argv: argv})
	}
	return cmds, nil
}

func parseRatios(s string, cmds []command) ([][2]string, error) {
	has := func(name string) bool {
		return slices.ContainsFunc(cmds, func(c command) bool { return c.name == name })
	}
	var out [][2]string
	for _, p := range strings.Split(s, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		a, b, ok := strings.Cut(p, "/")
		if !ok || a == "" || b == "" {
			return nil, fmt.Errorf("ratio %q: want a/b", p)
		}
		if has(a) && has(b) { // else a peer that was skipped
			out = append(out, [2]string{a, b})
		}
	}
	return out, nil
}

// runner runs commands and measures them.
type runner struct {
	o       options
	devnull *os.File
	env     []string
	self    string // this binary, for the launcher
	seq     atomic.Int64
}

func newRunner(o options) (*runner, error) {
	devnull, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	self, err := os.Executable()
	if err != nil {
		devnull.Close()
		return nil, fmt.Errorf("find this binary: %w", err)
	}
	return &runner{o: o, devnull: devnull, env: os.Environ(), self: self}, nil
}

func (r *runner) close() { r.devnull.Close() }

// worker runs one command at a time; a file collects the stderr of its runs.
type worker struct {
	r      *runner
	dir    string // working directory; "" for each command's own
	errOut *os.File
}

func (r *runner) newWorker(dir string) (*worker, error) {
	if dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
	}
	f, err := os.CreateTemp("", "startup-stderr-*")
	if err != nil {
		return nil, err
	}
	os.Remove(f.Name())
	return &worker{r: r, dir: dir, errOut: f}, nil
}

func (w *worker) close() { w.errOut.Close() }

// expand replaces {id} in c's command line with a string unique to this run.
func (w *worker) expand(c command) []string {
	if !slices.ContainsFunc(c.argv, func(a string) bool { return strings.Contains(a, "{id}") }) {
		return c.argv
	}
	id := fmt.Sprintf("%d-%d", os.Getpid(), w.r.seq.Add(1))
	argv := slices.Clone(c.argv)
	for i := range argv {
		argv[i] = strings.ReplaceAll(argv[i], "{id}", id)
	}
	return argv
}

// spawn runs argv in its own process group and waits for it. extra files
// become fds 3, 4, ... of the process.
func (w *worker) spawn(c command, argv, env []string, extra ...uintptr) (time.Duration, syscall.Rusage, error) {
	var ru syscall.Rusage
	dir := w.dir
	if dir == "" {
		dir = c.dir
	}
	null := w.r.devnull.Fd()
	attr := &syscall.ProcAttr{
		Dir:   dir,
		Env:   env,
		Files: append([]uintptr{null, null, w.errOut.Fd()}, extra...),
		Sys:   &syscall.SysProcAttr{Setpgid: true},
	}
	start := time.Now()
	pid, err := syscall.ForkExec(argv[0], argv, attr)
	if err != nil {
		return 0, ru, fmt.Errorf("%s: start: %w", c.name, err)
	}
	var timedOut atomic.Bool
	timer := time.AfterFunc(w.r.o.timeout, func() {
		timedOut.Store(true)
		_ = syscall.Kill(-pid, syscall.SIGKILL)
	})
	var ws syscall.WaitStatus
	for {
		_, err = syscall.Wait4(pid, &ws, 0, &ru)
		if err != syscall.EINTR {
			break
		}
	}
	wall := time.Since(start)
	timer.Stop()
	if err != nil {
		return 0, ru, fmt.Errorf("%s: wait: %w", c.name, err)
	}
	if timedOut.Load() {
		return 0, ru, w.failure(c, argv, "timed out after "+w.r.o.timeout.String())
	}
	if err := statusError(ws); err != nil {
		return 0, ru, w.failure(c, argv, err.Error())
	}
	if st, err := w.errOut.Stat(); err == nil && st.Size() > 0 {
		_ = w.errOut.Truncate(0)
		_, _ = w.errOut.Seek(0, io.SeekStart)
	}
	return wall, ru, nil
}

func statusError(ws syscall.WaitStatus) error {
	switch {
	case ws.Signaled():
		return fmt.Errorf("killed by %s", ws.Signal())
	case !ws.Exited() || ws.ExitStatus() != 0:
		return fmt.Errorf("exit status %d", ws.ExitStatus())
	}
	return nil
}

func (w *worker) failure(c command, argv []string, why string) error {
	msg := fmt.Sprintf("%s: %s failed: %s", c.name, strings.Join(argv, " "), why)
	b := make([]byte, 4096)
	if n, _ := w.errOut.ReadAt(b, 0); n > 0 {
		msg += "\n" + strings.TrimSpace(string(b[:n]))
	}
	return errors.New(msg)
}

// once runs c and returns its wall and CPU time.
func (w *worker) once(c command) (sample, error) {
	wall, ru, err := w.spawn(c, w.expand(c), w.r.env)
	if err != nil {
		return sample{}, err
	}
	return sample{wall: wall, cpu: time.Duration(ru.Utime.Nano() + ru.Stime.Nano())}, nil
}

// peakRSS runs c through the launcher and returns the peak RSS of the
// largest process of its tree and the launcher's floor, in KiB.
func (w *worker) peakRSS(c command) (rss, floor int64, err error) {
	pr, pw, err := os.Pipe()
	if err != nil {
		return 0, 0, err
	}
	defer pr.Close()
	argv := append([]string{w.r.self}, w.expand(c)...)
	env := append(slices.Clone(w.r.env), launcherEnv+"=1")
	done := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(io.LimitReader(pr, 4096))
		done <- b
	}()
	_, _, err = w.spawn(c, argv, env, pw.Fd())
	pw.Close()
	report := <-done
	if err != nil {
		return 0, 0, err
	}
	f := strings.Fields(string(report))
	if len(f) != 2 {
		return 0, 0, fmt.Errorf("%s: launcher report %q", c.name, report)
	}
	floor, err1 := strconv.ParseInt(f[0], 10, 64)
	rss, err2 := strconv.ParseInt(f[1], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, 0, fmt.Errorf("%s: launcher report %q: %w", c.name, report, err)
	}
	return rss, floor, nil
}

// launch is the launcher of the memory pass: it runs argv, exits with its
// status, and writes "FLOOR PEAK" (KiB) to fd 3.
func launch(argv []string) int {
	syscall.CloseOnExec(reportFD)
	report := os.NewFile(reportFD, "report")
	if len(argv) == 0 {
		fmt.Fprintln(os.Stderr, "startup launcher: no command")
		return 2
	}
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, launcherEnv+"=") })
	// Reset this process's peak RSS to its current RSS: the command shares
	// this memory until its execve, and inherits its peak.
	if f, err := os.OpenFile("/proc/self/clear_refs", os.O_WRONLY, 0); err == nil {
		_, _ = f.WriteString("5")
		f.Close()
	}
	floor := statusKiB("VmHWM")
	pid, err := syscall.ForkExec(argv[0], argv, &syscall.ProcAttr{Env: env, Files: []uintptr{0, 1, 2}})
	if err != nil {
		fmt.Fprintf(os.Stderr, "startup launcher: %v\n", err)
		return 1
	}
	var ws syscall.WaitStatus
	var ru, children syscall.Rusage
	for {
		_, err = syscall.Wait4(pid, &ws, 0, &ru)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "startup launcher: wait: %v\n", err)
		return 1
	}
	_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &children)
	fmt.Fprintf(report, "%d %d\n", floor, max(ru.Maxrss, children.Maxrss))
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}

// statusKiB reads a "Name: N kB" line of /proc/self/status.
func statusKiB(name string) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+":"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	return 0
}

// measure runs the warm-up, the sequential rounds, the parallel phase and
// the memory pass.
func (r *runner) measure(cmds []command, progress io.Writer) ([]result, error) {
	w, err := r.newWorker("")
	if err != nil {
		return nil, err
	}
	defer w.close()
	samples := make([][]sample, len(cmds))
	fmt.Fprintf(progress, "startup: warm-up (%d runs each), then %d sequential rounds of %d commands\n", r.o.warmup, r.o.n, len(cmds))
	for i := 0; i < r.o.warmup+r.o.n; i++ {
		for j, c := range cmds {
			s, err := w.once(c)
			if err != nil {
				return nil, err
			}
			if i >= r.o.warmup {
				samples[j] = append(samples[j], s)
			}
		}
	}
	results := make([]result, len(cmds))
	for j, c := range cmds {
		results[j] = summarize(c.name, samples[j])
	}
	if r.o.workers > 0 {
		for j, c := range cmds {
			fmt.Fprintf(progress, "startup: parallel: %s, %d runs on %d workers\n", c.name, r.o.parCount, r.o.workers)
			if results[j].parPerSec, err = r.parallel(c); err != nil {
				return nil, err
			}
		}
	}
	if r.o.rssRuns > 0 {
		fmt.Fprintf(progress, "startup: memory: %d runs of each command through the launcher\n", r.o.rssRuns)
		for j, c := range cmds {
			var rss []int64
			for range r.o.rssRuns {
				v, floor, err := w.peakRSS(c)
				if err != nil {
					return nil, err
				}
				rss = append(rss, v)
				results[j].floor = max(results[j].floor, floor)
			}
			slices.Sort(rss)
			results[j].rss, results[j].rssMax = report.Percentile(rss, 50), rss[len(rss)-1]
		}
	}
	return results, nil
}

// parallel runs c parCount times on the workers and returns runs per second.
func (r *runner) parallel(c command) (float64, error) {
	workers := make([]*worker, r.o.workers)
	for i := range workers {
		w, err := r.newWorker(filepath.Join(c.dir, fmt.Sprintf("worker%d", i)))
		if err != nil {
			return 0, err
		}
		defer w.close()
		workers[i] = w
	}
	var next atomic.Int64
	var failed atomic.Bool
	errs := make([]error, len(workers))
	var wg sync.WaitGroup
	start := time.Now()
	for i, w := range workers {
		wg.Go(func() {
			for !failed.Load() && next.Add(1) <= int64(r.o.parCount) {
				if _, err := w.once(c); err != nil {
					errs[i] = err
					failed.Store(true)
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := errors.Join(errs...); err != nil {
		return 0, err
	}
	return float64(r.o.parCount) / elapsed.Seconds(), nil
}

func summarize(name string, s []sample) result {
	walls := make([]time.Duration, len(s))
	cpus := make([]time.Duration, len(s))
	var total time.Duration
	for i, x := range s {
		walls[i], cpus[i] = x.wall, x.cpu
		total += x.wall
	}
	return result{
		name:      name,
		median:    report.Percentile(walls, 50),
		p90:       report.Percentile(walls, 90),
		mean:      total / time.Duration(len(s)),
		cpu:       report.Percentile(cpus, 50),
		seqPerSec: float64(len(s)) / total.Seconds(),
	}
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d)/float64(time.Millisecond)) }
func mib(kib int64) string      { return fmt.Sprintf("%.1f", float64(kib)/1024) }
func rate(v float64) string     { return fmt.Sprintf("%.0f", v) }
func ratio(a, b float64) string { return fmt.Sprintf("%.2f", a/b) }

func rssCell(o options, r result) string {
	switch {
	case o.rssRuns == 0:
		return "-"
	case r.atFloor():
		return "≤" + mib(r.floor)
	}
	return mib(r.rss) + " / " + mib(r.rssMax)
}

func header(o options) []string {
	return []string{"sandbox", "median ms", "p90 ms", "mean ms", "CPU ms", "peak RSS MiB (median / max)", "seq /s",
		fmt.Sprintf("parallel /s (P=%d)", o.workers)}
}

func row(o options, r result) []string {
	par := "-"
	if o.workers > 0 {
		par = rate(r.parPerSec)
	}
	return []string{r.name, ms(r.median), ms(r.p90), ms(r.mean), ms(r.cpu), rssCell(o, r), rate(r.seqPerSec), par}
}

func ratioHeader() []string {
	return []string{"ratio", "median", "p90", "CPU", "peak RSS", "seq /s", "parallel /s"}
}

func ratioRow(o options, a, b result) []string {
	par := "-"
	if o.workers > 0 {
		par = ratio(a.parPerSec, b.parPerSec)
	}
	// A figure at the launcher's floor is an upper bound.
	rss := "-"
	switch {
	case o.rssRuns == 0 || (a.atFloor() && b.atFloor()):
	case b.atFloor():
		rss = "≥" + ratio(float64(a.rss), float64(b.floor))
	case a.atFloor():
		rss = "≤" + ratio(float64(a.floor), float64(b.rss))
	default:
		rss = ratio(float64(a.rss), float64(b.rss))
	}
	return []string{a.name + "/" + b.name,
		ratio(float64(a.median), float64(b.median)), ratio(float64(a.p90), float64(b.p90)),
		ratio(float64(a.cpu), float64(b.cpu)), rss, ratio(a.seqPerSec, b.seqPerSec), par}
}

func find(results []result, name string) result {
	for _, r := range results {
		if r.name == name {
			return r
		}
	}
	return result{}
}

func machine(o options) string {
	var u syscall.Utsname
	kernel := "?"
	if syscall.Uname(&u) == nil {
		var b []byte
		for _, c := range u.Release {
			if c == 0 {
				break
			}
			b = append(b, byte(c))
		}
		kernel = string(b)
	}
	s := fmt.Sprintf("kernel %s, %d CPUs; %d timed runs per sandbox after %d warm-up runs", kernel, runtime.NumCPU(), o.n, o.warmup)
	if o.workers > 0 {
		s += fmt.Sprintf("; parallel: %d runs on %d workers", o.parCount, o.workers)
	}
	if o.rssRuns > 0 {
		s += fmt.Sprintf("; memory: %d runs", o.rssRuns)
	}
	return s
}

func notes(o options, results []result) string {
	var floor int64
	for _, r := range results {
		floor = max(floor, r.floor)
	}
	return fmt.Sprintf(`Wall time: fork to wait4 of the sandbox's command line, /bin/true inside. CPU: user+system time of
the whole process tree. Peak RSS: largest ru_maxrss of any single process of the tree (wait4 and
RUSAGE_CHILDREN of a launcher whose own resident set, %s MiB, is the floor: "≤" marks a figure at the
floor), not a sum over the tree. seq /s = runs / summed wall time, one at a time; parallel /s = runs /
elapsed with P concurrent workers. Ratios are a/b: below 1 means a is faster (time) or smaller (memory);
for /s above 1 means a does more.`, mib(floor))
}

// printResults prints the machine, the table of results, the table of
// ratios and the notes, as aligned text or markdown.
func printResults(w io.Writer, o options, results []result, ratios [][2]string) {
	if o.markdown {
		fmt.Fprintf(w, "%s.\n\n", machine(o))
	} else {
		fmt.Fprintf(w, "%s\n\n", machine(o))
	}
	t := report.NewTable(o.markdown, header(o)...)
	for _, r := range results {
		t.Row(row(o, r)...)
	}
	t.Print(w)
	if len(ratios) > 0 {
		t = report.NewTable(o.markdown, ratioHeader()...)
		for _, p := range ratios {
			t.Row(ratioRow(o, find(results, p[0]), find(results, p[1]))...)
		}
		t.Print(w)
	}
	fmt.Fprintln(w, notes(o, results))
}
