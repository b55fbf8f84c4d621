// Command e2bsdk measures a warm sandbox's first output through E2B's
// JavaScript SDK against the same through hutch's Go SDK, on one hutch
// serve, in the same run: from the start of the create to the first byte
// of `echo ok`'s output, with the sandbox taken from the daemon's warm
// pool (--warm N for hutch's own creates, --warm base=N for E2B's
// Sandbox.create()). The floor of a node client is measured too: the same
// two requests (E2B's create, envd's Start stream) with node's fetch and
// no SDK. The three alternate cycle by cycle, each after the pools have
// filled again, so that they see the same machine. It prints p50 and p90
// of each, the create alone, and the ratios; every sandbox is killed after
// its cycle, outside the timing. bench/e2bsdk.sh builds it and runs it.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hutch-sandbox/hutch/bench/report"
	"github.com/hutch-sandbox/hutch/bench/served"
	"github.com/hutch-sandbox/hutch/client"
)

type config struct {
	hutch, work, node, e2bDir, script string
	n, warm                           int
	markdown                          bool
}

func main() {
	var cfg config
	flag.StringVar(&cfg.hutch, "hutch", "", "the hutch binary")
	flag.StringVar(&cfg.work, "work", "", "a fresh directory for the daemon's socket, state and log")
	flag.StringVar(&cfg.node, "node", "node", "node 20.18 or later")
	flag.StringVar(&cfg.e2bDir, "e2b-dir", "test/e2b", "the directory whose node_modules holds e2b")
	flag.StringVar(&cfg.script, "script", "bench/e2bsdk/cycle.mjs", "the E2B side's script")
	flag.IntVar(&cfg.n, "n", 100, "cycles per SDK")
	flag.IntVar(&cfg.warm, "warm", 2, "warm sandboxes per pool")
	flag.BoolVar(&cfg.markdown, "markdown", false, "print markdown tables")
	flag.Parse()
	if cfg.hutch == "" || cfg.work == "" {
		fmt.Fprintln(os.Stderr, "e2bsdk: -hutch and -work are required")
		os.Exit(2)
	}
	if err := run(context.Background(), cfg); err != nil {
		fmt.Fprintln(os.Stderr, "e2bsdk:", err)
		os.Exit(1)
	}
}

// times are the figures of one SDK: to the first output, and the create
// alone.
type times struct{ first, create []time.Duration }

func run(ctx context.Context, cfg config) error {
	d, err := startDaemon(cfg)
	if err != nil {
		return err
	}
	defer d.stop()
	e2bKey, err := d.token(cfg, "--e2b")
	if err != nil {
		return err
	}
	hutchKey, err := d.token(cfg)
	if err != nil {
		return err
	}
	c, err := client.New(d.url, hutchKey)
	if err != nil {
		return err
	}
	js, err := startNode(cfg, d.url, e2bKey)
	if err != nil {
		return err
	}
	defer js.stop()

	var h, e, f times
	for i := -5; i < cfg.n; i++ {
		// Rotate which goes first; each starts with full pools.
		sides := []func() error{
			func() error { return hutchCycle(ctx, c, &h, i >= 0) },
			func() error { return js.cycle("sdk", &e, i >= 0) },
			func() error { return js.cycle("fetch", &f, i >= 0) },
		}
		k := (i + 6) % len(sides)
		sides = append(sides[k:], sides[:k]...)
		for _, side := range sides {
			if err := d.waitWarm(ctx, cfg.warm); err != nil {
				return err
			}
			if err := side(); err != nil {
				return err
			}
		}
		if i >= 0 && (i+1)%20 == 0 {
			fmt.Fprintf(os.Stderr, "e2bsdk: %d of %d cycles\n", i+1, cfg.n)
		}
	}
	cold := d.coldCreates()
	print(cfg, h, e, f, cold)
	return nil
}

// hutchCycle creates a sandbox with hutch's Go SDK, runs `echo ok` through
// the streaming exec as E2B's SDK does (bash -l -c), times the first byte of its output, and destroys it.
func hutchCycle(ctx context.Context, c *client.Client, t *times, record bool) error {
	t0 := time.Now()
	sb, err := c.Create(ctx, client.CreateOptions{Timeout: time.Minute})
	if err != nil {
		return err
	}
	tc := time.Now()
	defer func() { _ = c.Destroy(ctx, sb.ID) }()
	// The command E2B's commands.run('echo ok') starts.
	p, err := c.Exec(ctx, sb.ID, client.Command{Args: []string{"/bin/bash", "-l", "-c", "echo ok"}})
	if err != nil {
		return err
	}
	go func() { _, _ = io.Copy(io.Discard, p.Stderr) }()
	var b [1]byte
	if _, err := io.ReadFull(p.Stdout, b[:]); err != nil {
		return fmt.Errorf("echo ok: %w", err)
	}
	t1 := time.Now()
	rest, _ := io.ReadAll(p.Stdout)
	st, err := p.Wait()
	if err != nil {
		return err
	}
	if out := string(b[:]) + string(rest); st.Code != 0 || out != "ok\n" {
		return fmt.Errorf("echo ok: exit code %d, output %q", st.Code, out)
	}
	if record {
		t.first = append(t.first, t1.Sub(t0))
		t.create = append(t.create, tc.Sub(t0))
	}
	return nil
}

// nodeSide is the E2B side: cycle.mjs, one line per cycle.
type nodeSide struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Scanner
}

func startNode(cfg config, url, key string) (*nodeSide, error) {
	dir, err := filepath.Abs(cfg.e2bDir)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(cfg.node, cfg.script, dir)
	cmd.Env = append(os.Environ(), "E2B_API_KEY="+key, "E2B_API_URL="+url, "E2B_SANDBOX_URL="+url)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return &nodeSide{cmd: cmd, in: in, out: bufio.NewScanner(out)}, nil
}

// cycle runs one cycle of mode ("sdk" or "fetch") on the E2B side.
func (n *nodeSide) cycle(mode string, t *times, record bool) error {
	if _, err := io.WriteString(n.in, mode+"\n"); err != nil {
		return err
	}
	if !n.out.Scan() {
		return fmt.Errorf("the E2B side ended: %v", n.out.Err())
	}
	l := n.out.Text()
	if msg, ok := strings.CutPrefix(l, "error "); ok {
		return fmt.Errorf("E2B's SDK: %s", msg)
	}
	f := strings.Fields(l)
	if len(f) != 2 {
		return fmt.Errorf("the E2B side answered %q", l)
	}
	first, err1 := strconv.ParseFloat(f[0], 64)
	create, err2 := strconv.ParseFloat(f[1], 64)
	if err := errors.Join(err1, err2); err != nil {
		return fmt.Errorf("the E2B side answered %q: %w", l, err)
	}
	if record {
		t.first = append(t.first, time.Duration(first*float64(time.Millisecond)))
		t.create = append(t.create, time.Duration(create*float64(time.Millisecond)))
	}
	return nil
}

func (n *nodeSide) stop() {
	_ = n.in.Close()
	done := make(chan struct{})
	go func() { _ = n.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = n.cmd.Process.Kill()
		<-done
	}
}

// daemon is the hutch serve of the run.
type daemon struct {
	cmd      *exec.Cmd
	dir, url string
	log      string
	done     chan struct{}
	hc       *http.Client // on the unix socket, for GET /metrics
}

func startDaemon(cfg config) (*daemon, error) {
	d := &daemon{dir: cfg.work, log: filepath.Join(cfg.work, "serve.log"), done: make(chan struct{})}
	logf, err := os.Create(d.log)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	sock := filepath.Join(cfg.work, "hutch.sock")
	w := strconv.Itoa(cfg.warm)
	d.cmd = exec.Command(cfg.hutch, "serve", "--socket", sock, "--state-dir", filepath.Join(cfg.work, "state"),
		"--listen", "127.0.0.1:0", "--warm", w, "--warm", "base="+w)
	d.cmd.Stdout, d.cmd.Stderr = logf, logf
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := d.cmd.Start(); err != nil {
		return nil, err
	}
	_ = os.WriteFile(filepath.Join(cfg.work, "serve.pid"), []byte(strconv.Itoa(d.cmd.Process.Pid)+"\n"), 0o644)
	go func() { _ = d.cmd.Wait(); close(d.done) }()
	d.hc = &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var nd net.Dialer
		return nd.DialContext(ctx, "unix", sock)
	}}}
	re := regexp.MustCompile(`hutch: listening on (http://\S+)`)
	for end := time.Now().Add(60 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		b, _ := os.ReadFile(d.log)
		if m := re.FindSubmatch(b); m != nil {
			d.url = string(m[1])
			return d, nil
		}
		select {
		case <-d.done:
			return nil, fmt.Errorf("hutch serve exited: %s", tail(b))
		default:
		}
	}
	d.stop()
	return nil, errors.New("hutch serve did not listen in 60 s")
}

func (d *daemon) token(cfg config, extra ...string) (string, error) {
	args := append([]string{"token", "create", "--tenant", "bench", "--state-dir", filepath.Join(cfg.work, "state")}, extra...)
	out, err := exec.Command(cfg.hutch, args...).Output()
	if err != nil {
		return "", fmt.Errorf("hutch token create: %w", err)
	}
	lines := strings.Fields(string(out))
	if len(lines) == 0 {
		return "", errors.New("hutch token create printed nothing")
	}
	return lines[len(lines)-1], nil
}

// waitWarm waits until both warm pools (hutch's default, template "", and
// E2B's base) hold n ready sandboxes, as GET /metrics says.
func (d *daemon) waitWarm(ctx context.Context, n int) error {
	return served.WaitWarm(ctx, d.hc, n, 60*time.Second, 5*time.Millisecond, "", "base")
}

// coldCreates counts the sandboxes the daemon started without its warm
// pools: "sandbox started" lines of its log without warm=true.
func (d *daemon) coldCreates() int {
	b, _ := os.ReadFile(d.log)
	n := 0
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, "sandbox started") && !strings.Contains(l, "warm=true") {
			n++
		}
	}
	return n
}

func (d *daemon) stop() {
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(60 * time.Second):
		_ = d.cmd.Process.Kill()
		<-d.done
	}
}

func tail(b []byte) string {
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return strings.TrimSpace(string(b))
}

func print(cfg config, h, e, f times, cold int) {
	p := func(ds []time.Duration, q float64) time.Duration { return report.Percentile(ds, q) }
	fmt.Printf("warm create → first output of `echo ok`, %d cycles each, one hutch serve (namespace tier), pools of %d\n\n", len(h.first), cfg.warm)
	t := report.NewTable(cfg.markdown, "client", "first output p50 ms", "p90 ms", "create alone p50 ms", "p90 ms")
	row := func(name string, x times) {
		t.Row(name, report.Ms(p(x.first, 50)), report.Ms(p(x.first, 90)), report.Ms(p(x.create, 50)), report.Ms(p(x.create, 90)))
	}
	ratios := func(name string, a, b times) {
		t.Row(name, report.Ratio(p(a.first, 50), p(b.first, 50)), report.Ratio(p(a.first, 90), p(b.first, 90)),
			report.Ratio(p(a.create, 50), p(b.create, 50)), report.Ratio(p(a.create, 90), p(b.create, 90)))
	}
	row("hutch Go SDK", h)
	row("E2B JS SDK (e2b)", e)
	row("node fetch, no SDK (floor)", f)
	ratios("ratio E2B SDK / hutch SDK", e, h)
	ratios("ratio E2B SDK / node floor", e, f)
	ratios("ratio node floor / hutch SDK", f, h)
	t.Print(os.Stdout)
	fmt.Printf("target: E2B's first output p50 ≤ 1.5× hutch's: %s\n", report.Met(p(e.first, 50) <= p(h.first, 50)*3/2))
	fmt.Printf("sandboxes started cold (outside the warm pools) during the run: %d\n", cold)
}
