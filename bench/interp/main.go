//go:build linux

// Command interp measures hutch's code interpreter through `hutch serve`'s
// API and its Go SDK (package client), in one run on this machine: it
// starts a daemon of its own on a unix socket in -work, whose image store
// holds the code-interpreter image (-image, imported first), with that
// image as the template ci and a warm pool of one sandbox of it
// (--template ci=REF --warm ci=1), and reports
//
//   - the round trip of a warm execution: Client.RunCode("1+1") in a
//     context whose kernel runs, against Client.Run of `python3 -c
//     'print(1+1)'` on the same sandbox (a new interpreter each time, as
//     a tool without a code interpreter runs code), -n times each,
//     interleaved; p50, p90, p99 and the ratio RunCode/exec, against the
//     goal of 0.5;
//   - create → first RunCode result from the warm pool: a sandbox of the
//     template's policy taken from the pool (its created event says
//     warm), RunCode("1+1") until its value, destroy; -c times back to
//     back (each once the pool holds a sandbox again, whose kernel may
//     still be starting), then -c times once the pool settled (-settle
//     after it is full); p50 and p90 of the create alone and of the
//     create to the value.
//
// The daemon is stopped at the end (SIGTERM to its pid, which destroys its
// sandboxes; SIGKILL if it outlasts the grace period), and gets SIGTERM if
// this process dies (Pdeathsig).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hutch-sandbox/hutch/bench/report"
	"github.com/hutch-sandbox/hutch/bench/served"
	"github.com/hutch-sandbox/hutch/client"
)

// goalRatio is the goal: a warm RunCode at most half an exec of
// python3 -c.
const goalRatio = 0.5

// ref is the code-interpreter image's reference in the store.
const ref = "hutch.local/code-interpreter:latest"

// templatePolicy is the policy of the template ci's sandboxes on a daemon
// without internet (E2B's template defaults): a create of the same policy
// takes one from its warm pool.
const templatePolicy = `{"filesystem":{"workspace":"/home/user"},"network":{"mode":"none"}}`

type config struct {
	hutch, work, image string
	n, creates, w      int
	settle             time.Duration
	markdown           bool
}

func main() {
	var cfg config
	flag.StringVar(&cfg.hutch, "hutch", "", "the hutch binary")
	flag.StringVar(&cfg.work, "work", "", "a fresh directory for the daemon's socket, state and log (mode 0711 or wider)")
	flag.StringVar(&cfg.image, "image", "", "the code-interpreter image's tarball (docker save)")
	flag.IntVar(&cfg.n, "n", 200, "timed round trips per way")
	flag.IntVar(&cfg.w, "w", 10, "round trips per way before the timed ones")
	flag.IntVar(&cfg.creates, "c", 10, "create → first result cycles from the warm pool")
	flag.DurationVar(&cfg.settle, "settle", 5*time.Second, "how long the settled series waits once the pool is full, for the warm sandbox's kernel to start")
	flag.BoolVar(&cfg.markdown, "markdown", false, "print markdown tables")
	flag.Parse()
	if cfg.hutch == "" || cfg.work == "" || cfg.image == "" {
		fmt.Fprintln(os.Stderr, "interp: -hutch, -work and -image are required")
		os.Exit(2)
	}
	if err := run(cfg); err != nil {
		fmt.Fprintln(os.Stderr, "interp:", err)
		os.Exit(1)
	}
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "interp: "+format+"\n", args...)
}

func run(cfg config) error {
	ctx := context.Background()
	state := filepath.Join(cfg.work, "state")
	progress("importing %s", cfg.image)
	if out, err := exec.Command(cfg.hutch, "image", "import", "--state-dir", state, cfg.image).CombinedOutput(); err != nil {
		return fmt.Errorf("hutch image import: %v\n%s", err, out)
	}
	sock := filepath.Join(cfg.work, "hutch.sock")
	logPath := filepath.Join(cfg.work, "serve.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(cfg.hutch, "serve", "--socket", sock, "--state-dir", state, "--no-internet", "--no-mcp", "--no-ui",
		"--template", "ci="+ref, "--warm", "ci=1", "--warm", "0")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		return err
	}
	_ = os.WriteFile(filepath.Join(cfg.work, "serve.pid"), []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o644)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}()
	c, err := client.New("unix://"+sock, "")
	if err != nil {
		return err
	}
	if err := waitHealth(ctx, c, done, logPath); err != nil {
		return err
	}
	progress("waiting for the warm pool")
	if err := waitWarm(ctx, sock); err != nil {
		return err
	}

	// (b) create → first result, from the warm pool: back to back (the
	// sandbox taken was put in the pool a moment ago, its kernel maybe
	// still starting), and once the pool settled.
	type series struct {
		name            string
		settle          time.Duration
		creates, firsts []time.Duration
		warm            int
	}
	all := []*series{{name: "back to back"}, {name: fmt.Sprintf("pool settled %v", cfg.settle), settle: cfg.settle}}
	for _, se := range all {
		for i := range cfg.creates {
			if err := waitWarm(ctx, sock); err != nil {
				return err
			}
			time.Sleep(se.settle)
			t0 := time.Now()
			sb, err := c.Create(ctx, client.CreateOptions{Image: ref, Policy: []byte(templatePolicy), Timeout: 10 * time.Minute})
			if err != nil {
				return fmt.Errorf("create: %w", err)
			}
			tc := time.Now()
			ex, err := c.RunCode(ctx, sb.ID, client.RunCodeRequest{Code: "1+1"})
			t1 := time.Now()
			if err == nil && ex.Text() != "2" {
				err = fmt.Errorf("1+1: %+v", ex)
			}
			if err != nil {
				return fmt.Errorf("first RunCode: %w", err)
			}
			if wasWarm(ctx, c, sb.ID) {
				se.warm++
			}
			se.creates, se.firsts = append(se.creates, tc.Sub(t0)), append(se.firsts, t1.Sub(t0))
			if err := c.Destroy(ctx, sb.ID); err != nil {
				return err
			}
			progress("create → first result, %s, %d/%d: %s ms", se.name, i+1, cfg.creates, report.Ms(t1.Sub(t0)))
		}
	}

	// (a) warm round trips on one sandbox.
	sb, err := c.Create(ctx, client.CreateOptions{Image: ref, Policy: []byte(templatePolicy), Timeout: 30 * time.Minute})
	if err != nil {
		return fmt.Errorf("create: %w", err)
	}
	defer func() { _ = c.Destroy(context.Background(), sb.ID) }()
	runCode := func() error {
		ex, err := c.RunCode(ctx, sb.ID, client.RunCodeRequest{Code: "1+1"})
		if err == nil && ex.Text() != "2" {
			err = fmt.Errorf("1+1: %+v", ex)
		}
		return err
	}
	execPy := func() error {
		res, err := c.Run(ctx, sb.ID, client.Command{Args: []string{"python3", "-c", "print(1+1)"}})
		if err == nil && (res.Code != 0 || string(res.Stdout) != "2\n") {
			err = fmt.Errorf("python3 -c: exit %d, %q %q", res.Code, res.Stdout, res.Stderr)
		}
		return err
	}
	var codes, execs []time.Duration
	progress("round trips: %d warm-up and %d timed per way", cfg.w, cfg.n)
	for i := -cfg.w; i < cfg.n; i++ {
		for _, w := range []struct {
			ds *[]time.Duration
			fn func() error
		}{{&codes, runCode}, {&execs, execPy}} {
			t0 := time.Now()
			if err := w.fn(); err != nil {
				return err
			}
			if i >= 0 {
				*w.ds = append(*w.ds, time.Since(t0))
			}
		}
	}

	p := func(ds []time.Duration, q float64) time.Duration { return report.Percentile(ds, q) }
	fmt.Printf("%s; %s; load average %s\n", firstLine(cfg.hutch, "version"), cpuModel(), loadavg())
	t := report.NewTable(cfg.markdown, "way (ms)", "p50", "p90", "p99")
	t.Row("RunCode(\"1+1\"), warm context", report.Ms(p(codes, 50)), report.Ms(p(codes, 90)), report.Ms(p(codes, 99)))
	t.Row("Run(python3 -c 'print(1+1)')", report.Ms(p(execs, 50)), report.Ms(p(execs, 90)), report.Ms(p(execs, 99)))
	t.Row("ratio RunCode/exec", report.Ratio(p(codes, 50), p(execs, 50)), report.Ratio(p(codes, 90), p(execs, 90)), report.Ratio(p(codes, 99), p(execs, 99)))
	t.Print(os.Stdout)
	ratio := float64(p(codes, 50)) / float64(p(execs, 50))
	fmt.Printf("goal: RunCode p50 ≤ %.1f× exec p50: %.2f×, %s (n=%d per way)\n\n", goalRatio, ratio, report.Met(ratio <= goalRatio), cfg.n)
	t = report.NewTable(cfg.markdown, "from the warm pool (ms)", "create p50", "p90", "create → first RunCode result p50", "p90", "taken warm")
	for _, se := range all {
		t.Row(se.name, report.Ms(p(se.creates, 50)), report.Ms(p(se.creates, 90)), report.Ms(p(se.firsts, 50)), report.Ms(p(se.firsts, 90)),
			fmt.Sprintf("%d/%d", se.warm, cfg.creates))
	}
	t.Print(os.Stdout)
	return nil
}

// waitHealth waits for the daemon to answer.
func waitHealth(ctx context.Context, c *client.Client, done <-chan struct{}, logPath string) error {
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		hctx, cancel := context.WithTimeout(ctx, time.Second)
		err := c.Health(hctx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-done:
			b, _ := os.ReadFile(logPath)
			return fmt.Errorf("hutch serve exited: %s", b)
		default:
		}
		if time.Now().After(end) {
			return fmt.Errorf("hutch serve does not answer: %v", err)
		}
	}
}

// waitWarm waits until the pool of the template ci holds a sandbox.
func waitWarm(ctx context.Context, sock string) error {
	hc := served.UnixClient(sock)
	defer hc.CloseIdleConnections()
	return served.WaitWarm(ctx, hc, 1, 3*time.Minute, 10*time.Millisecond, "ci")
}

// wasWarm reports whether sandbox id's created event says it was taken
// from a warm pool.
func wasWarm(ctx context.Context, c *client.Client, id string) bool {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for ev, err := range c.Events(ctx, id, 0) {
		if err != nil {
			return false
		}
		if ev.Type == client.EventCreated {
			w, _ := ev.Data["warm"].(bool)
			return w
		}
	}
	return false
}

func firstLine(name string, args ...string) string {
	out, _ := exec.Command(name, args...).Output()
	l, _, _ := strings.Cut(string(out), "\n")
	return l
}

func cpuModel() string {
	b, _ := os.ReadFile("/proc/cpuinfo")
	for l := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "model name"); ok {
			return strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
		}
	}
	return "unknown CPU"
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
