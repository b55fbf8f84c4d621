//go:build linux

// Command mcp measures what MCP adds to a command: an exec of `true`
// through `hutch mcp` over stdio, in the same run against its peer and
// its floors, each a round trip from this process (no process start in
// any of them):
//
//   - mcp: the exec tool of a `hutch mcp` this program started, called
//     with the official Go SDK's client over the process's stdin and
//     stdout, in its session sandbox;
//   - mcp-inproc: the same tools (internal/mcp's server) in this process,
//     over the SDK's in-memory transport, on the floor's sandbox: MCP
//     without the pipes and the second process;
//   - serve: the same command through `hutch serve`'s API (its Go SDK,
//     Client.Run, one HTTP request on the daemon's unix socket), in a
//     sandbox of the daemon;
//   - agent (the floor): the exec the tool makes, made directly through
//     agent.Client on a sandbox this program started with sandbox.Start
//     and hutch-agent, as hutch mcp starts its own;
//   - stdio-noop (the floor of the hop): a tool that does nothing, of a
//     server of the same SDK in a second process (this program, run as
//     "noop-server"), called as mcp is: what any MCP call over stdio costs
//     on this machine with this SDK. "mcp / agent + stdio-noop" is what
//     hutch adds beyond both floors.
//
// Each command is /bin/sh -c true, the exec tool's form of `true`, with
// the stdin pipe the tool opens. The ways take turns call by call, in a
// rotating order, so that the load of the machine weighs on each alike;
// -w rounds first are not counted. It prints p50, p90, p99 and the mean of
// each, the ratios, and what each adds over the floor per call: the
// median of the paired differences (the same round's calls, next to each
// other in time) against the goal of 1 ms. Every process it started is
// ended by its pid before it exits.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/hutch-sandbox/hutch/bench/report"
	"github.com/hutch-sandbox/hutch/client"
	"github.com/hutch-sandbox/hutch/internal/agent"
	"github.com/hutch-sandbox/hutch/internal/mcp"
	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/sandbox"
)

// goal is what MCP may add per call over the underlying exec.
const goal = time.Millisecond

type config struct {
	bin, work string
	n, warmup int
	markdown  bool
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "noop-server" {
		// The floor of the stdio hop: one tool that does nothing.
		s := sdk.NewServer(&sdk.Implementation{Name: "noop", Version: "1"}, nil)
		sdk.AddTool(s, &sdk.Tool{Name: "noop", Description: "does nothing"}, func(context.Context, *sdk.CallToolRequest, struct{}) (*sdk.CallToolResult, struct{}, error) {
			return nil, struct{}{}, nil
		})
		if err := s.Run(context.Background(), &sdk.StdioTransport{}); err != nil && !errors.Is(err, io.EOF) {
			fmt.Fprintln(os.Stderr, "noop-server:", err)
			os.Exit(1)
		}
		return
	}
	var cfg config
	flag.StringVar(&cfg.bin, "bin", "", "the directory of hutch, hutch-serve and hutch-agent")
	flag.StringVar(&cfg.work, "work", "", "a fresh directory (mode 0711 or wider) for the workspaces and the daemon")
	flag.IntVar(&cfg.n, "n", 200, "timed calls per way")
	flag.IntVar(&cfg.warmup, "w", 20, "calls per way before the timed ones")
	flag.BoolVar(&cfg.markdown, "markdown", false, "print markdown tables")
	flag.Parse()
	if cfg.bin == "" || cfg.work == "" || cfg.n < 1 || cfg.warmup < 0 {
		fmt.Fprintln(os.Stderr, "mcp: -bin and -work are required, -n at least 1")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := run(ctx, cfg)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "mcp:", err)
		os.Exit(1)
	}
}

// way is one way of running the command; call runs it once.
type way struct {
	name    string
	call    func(ctx context.Context) error
	samples []time.Duration
}

func run(ctx context.Context, cfg config) error {
	dir := func(name string) (string, error) {
		d := filepath.Join(cfg.work, name)
		return d, os.Mkdir(d, 0o755)
	}

	// The floor: hutch's agent in a sandbox of this process's own.
	floorWS, err := dir("ws-floor")
	if err != nil {
		return err
	}
	floor, err := startFloor(floorWS, filepath.Join(cfg.bin, "hutch-agent"))
	if err != nil {
		return fmt.Errorf("the floor's sandbox: %w", err)
	}
	defer floor.close()

	// MCP in this process, over the floor's sandbox.
	inproc, err := startInProc(ctx, floor)
	if err != nil {
		return err
	}
	defer inproc.Close()

	// hutch mcp, over stdio.
	mcpWS, err := dir("ws-mcp")
	if err != nil {
		return err
	}
	hm, err := startHutchMCP(ctx, filepath.Join(cfg.bin, "hutch"), mcpWS)
	if err != nil {
		return err
	}
	defer hm.close()

	// The floor of the stdio hop: this program as a server of one tool
	// that does nothing.
	self, err := os.Executable()
	if err != nil {
		return err
	}
	noop, err := startStdio(ctx, cfg.work, self, "noop-server")
	if err != nil {
		return err
	}
	defer noop.close()

	// hutch serve, through its API.
	serveDir, err := dir("daemon")
	if err != nil {
		return err
	}
	d, err := startServe(ctx, filepath.Join(cfg.bin, "hutch"), serveDir)
	if err != nil {
		return err
	}
	defer d.stop()
	sb, err := d.c.Create(ctx, client.CreateOptions{})
	if err != nil {
		return fmt.Errorf("hutch serve: create: %w", err)
	}

	cmd := []string{"/bin/sh", "-c", "true"}
	mcpExec := func(cs *sdk.ClientSession) func(context.Context) error {
		return func(ctx context.Context) error {
			r, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "exec", Arguments: map[string]any{"command": "true"}})
			switch {
			case err != nil:
				return err
			case r.IsError:
				return fmt.Errorf("exec: tool error %v", r.Content)
			}
			if m, _ := r.StructuredContent.(map[string]any); m["exit_code"] != float64(0) {
				return fmt.Errorf("exec: %v", r.StructuredContent)
			}
			return nil
		}
	}
	ways := []*way{
		{name: "mcp", call: mcpExec(hm.cs)},
		{name: "mcp-inproc", call: mcpExec(inproc)},
		{name: "serve", call: func(ctx context.Context) error {
			res, err := d.c.Run(ctx, sb.ID, client.Command{Args: cmd})
			if err == nil && res.Code != 0 {
				err = fmt.Errorf("serve: exit code %d", res.Code)
			}
			return err
		}},
		{name: "agent", call: func(ctx context.Context) error { return agentExec(ctx, floor.client, cmd, floorWS) }},
		{name: "stdio-noop", call: func(ctx context.Context) error {
			r, err := noop.cs.CallTool(ctx, &sdk.CallToolParams{Name: "noop", Arguments: map[string]any{}})
			if err == nil && r.IsError {
				err = fmt.Errorf("noop: tool error %v", r.Content)
			}
			return err
		}},
	}
	progress("load average: %s", loadavg())
	for i := range cfg.warmup + cfg.n {
		for j := range ways {
			w := ways[(i+j)%len(ways)]
			cctx, cancel := context.WithTimeout(ctx, time.Minute)
			t0 := time.Now()
			err := w.call(cctx)
			el := time.Since(t0)
			cancel()
			if err != nil {
				return fmt.Errorf("%s, call %d: %w", w.name, i, err)
			}
			if i >= cfg.warmup {
				w.samples = append(w.samples, el)
			}
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	progress("load average: %s", loadavg())
	printReport(cfg, ways)
	return nil
}

// agentExec is the exec tool's exec, made directly: /bin/sh -c true with
// a stdin pipe, its output read to its end, its exit waited for.
func agentExec(ctx context.Context, c *agent.Client, args []string, dir string) error {
	p, err := c.Exec(ctx, agent.ExecRequest{Args: args, Dir: dir, Stdin: true})
	if err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, p.Stderr); close(done) }()
	_, _ = io.Copy(io.Discard, p.Stdout)
	<-done
	st, err := p.Wait()
	if err == nil && st.Code != 0 {
		err = fmt.Errorf("agent: exit code %d", st.Code)
	}
	_ = p.Stdin.Close()
	return err
}

// floorSandbox is a sandbox this process started, with hutch's agent as
// its PID 1, as hutch mcp starts its session sandbox.
type floorSandbox struct {
	sb     *sandbox.Sandbox
	client *agent.Client
	ws     string
}

func startFloor(ws, agentBin string) (*floorSandbox, error) {
	var s policy.Spec
	home, _ := os.UserHomeDir()
	if err := s.Normalize(ws, home); err != nil {
		return nil, err
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	sb, err := sandbox.Start(sandbox.Config{
		Spec:        s,
		Environ:     []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + home},
		AgentBinary: agentBin,
	})
	if err != nil {
		return nil, err
	}
	f := &floorSandbox{sb: sb, client: agent.NewClient(sb.Conn()), ws: ws}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := f.client.ListProcesses(ctx); err != nil {
		f.close()
		return nil, fmt.Errorf("its agent: %w", err)
	}
	return f, nil
}

func (f *floorSandbox) close() {
	f.client.Close()
	_ = f.sb.Close()
}

// floorBackend is the floor's sandbox as the tools' one sandbox.
type floorBackend struct{ f *floorSandbox }

var errOne = errors.New("this backend has one sandbox")

func (b floorBackend) describe() mcp.Sandbox {
	return mcp.Sandbox{ID: "floor", State: "running", Tier: "namespace", Workspace: b.f.ws}
}
func (floorBackend) Create(context.Context, mcp.CreateRequest) (mcp.Sandbox, error) {
	return mcp.Sandbox{}, errOne
}
func (b floorBackend) List(context.Context) ([]mcp.Sandbox, error) {
	return []mcp.Sandbox{b.describe()}, nil
}
func (b floorBackend) Get(_ context.Context, id string) (mcp.Sandbox, error) {
	if id != "floor" {
		return mcp.Sandbox{}, errOne
	}
	return b.describe(), nil
}
func (floorBackend) Kill(context.Context, string) error { return errOne }
func (b floorBackend) Agent(_ context.Context, id string) (*agent.Client, error) {
	if id != "floor" {
		return nil, errOne
	}
	return b.f.client, nil
}
func (floorBackend) PortURL(context.Context, string, int) (string, error) { return "", errOne }
func (floorBackend) DefaultSandbox(context.Context) (string, error)       { return "floor", nil }

// startInProc serves the tools over the floor's sandbox in this process
// and connects a client to them in memory.
func startInProc(ctx context.Context, f *floorSandbox) (*sdk.ClientSession, error) {
	server := mcp.NewServer(mcp.Options{Backend: floorBackend{f}})
	st, ct := sdk.NewInMemoryTransports()
	if _, err := server.Connect(ctx, st, nil); err != nil {
		return nil, err
	}
	return sdk.NewClient(&sdk.Implementation{Name: "bench", Version: "1"}, nil).Connect(ctx, ct, nil)
}

// hutchMCP is a `hutch mcp` this program started, and its client.
type hutchMCP struct {
	cmd  *exec.Cmd
	cs   *sdk.ClientSession
	done chan struct{}
}

func startHutchMCP(ctx context.Context, hutch, ws string) (*hutchMCP, error) {
	return startStdio(ctx, ws, hutch, "mcp")
}

// startStdio starts an MCP server over stdio, args[0] with args[1:] in
// dir, and connects this program's client to it.
func startStdio(ctx context.Context, dir string, args ...string) (*hutchMCP, error) {
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir = dir
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	h := &hutchMCP{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(h.done) }()
	h.cs, err = sdk.NewClient(&sdk.Implementation{Name: "bench", Version: "1"}, nil).
		Connect(ctx, &sdk.IOTransport{Reader: stdout, Writer: stdin}, nil)
	if err != nil {
		h.close()
		return nil, fmt.Errorf("%s: %w", strings.Join(args, " "), err)
	}
	return h, nil
}

// close ends hutch mcp: its stdin closed, SIGKILL after 30 s.
func (h *hutchMCP) close() {
	if h.cs != nil {
		_ = h.cs.Close()
	}
	select {
	case <-h.done:
	case <-time.After(30 * time.Second):
		_ = h.cmd.Process.Kill()
		<-h.done
	}
}

// daemon is a `hutch serve` this program started.
type daemon struct {
	cmd  *exec.Cmd
	c    *client.Client
	done chan struct{}
}

func startServe(ctx context.Context, hutch, dir string) (*daemon, error) {
	sock := filepath.Join(dir, "hutch.sock")
	logf, err := os.Create(filepath.Join(dir, "serve.log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	d := &daemon{done: make(chan struct{})}
	d.cmd = exec.Command(hutch, "serve", "--socket", sock, "--state-dir", filepath.Join(dir, "state"))
	d.cmd.Stdout, d.cmd.Stderr = logf, logf
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := d.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { _ = d.cmd.Wait(); close(d.done) }()
	if d.c, err = client.New("unix://"+sock, ""); err != nil {
		d.stop()
		return nil, err
	}
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		hctx, cancel := context.WithTimeout(ctx, time.Second)
		err = d.c.Health(hctx)
		cancel()
		if err == nil {
			return d, nil
		}
		select {
		case <-d.done:
			b, _ := os.ReadFile(filepath.Join(dir, "serve.log"))
			return nil, fmt.Errorf("hutch serve exited: %s", b)
		default:
		}
		if time.Now().After(end) || ctx.Err() != nil {
			d.stop()
			return nil, fmt.Errorf("hutch serve does not answer: %w", err)
		}
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

func printReport(cfg config, ways []*way) {
	byName := map[string]*way{}
	for _, w := range ways {
		byName[w.name] = w
	}
	t := report.NewTable(cfg.markdown, "exec `true`", "n", "p50 ms", "p90 ms", "p99 ms", "mean ms")
	for _, w := range ways {
		t.Row(w.name, strconv.Itoa(len(w.samples)), ms(report.Percentile(w.samples, 50)), ms(report.Percentile(w.samples, 90)),
			ms(report.Percentile(w.samples, 99)), ms(mean(w.samples)))
	}
	t.Print(os.Stdout)

	rt := report.NewTable(cfg.markdown, "against", "p50 ×", "p99 ×", "added per call (paired median) ms", "goal", "status")
	pair := func(a, b string, withGoal bool) {
		x, y := byName[a].samples, byName[b].samples
		diffs := make([]time.Duration, len(x))
		for i := range x {
			diffs[i] = x[i] - y[i]
		}
		added := report.Percentile(diffs, 50)
		g, st := "-", "-"
		if withGoal {
			g = "≤ " + ms(goal)
			st = "met"
			if added > goal {
				st = "not met"
			}
		}
		rt.Row(a+" / "+b, ratio(report.Percentile(x, 50), report.Percentile(y, 50)), ratio(report.Percentile(x, 99), report.Percentile(y, 99)),
			ms(added), g, st)
	}
	pair("mcp", "agent", true)
	// Beyond both floors: the exec and any MCP call over stdio.
	x, a, n := byName["mcp"].samples, byName["agent"].samples, byName["stdio-noop"].samples
	beyond := make([]time.Duration, len(x))
	for i := range x {
		beyond[i] = x[i] - a[i] - n[i]
	}
	added := report.Percentile(beyond, 50)
	st := "met"
	if added > goal {
		st = "not met"
	}
	rt.Row("mcp / agent + stdio-noop", ratio(report.Percentile(x, 50), report.Percentile(a, 50)+report.Percentile(n, 50)),
		ratio(report.Percentile(x, 99), report.Percentile(a, 99)+report.Percentile(n, 99)), ms(added), "≤ "+ms(goal), st)
	pair("mcp-inproc", "agent", true)
	pair("mcp", "mcp-inproc", false)
	pair("mcp", "serve", false)
	pair("serve", "agent", false)
	rt.Print(os.Stdout)
}

func ms(d time.Duration) string { return strconv.FormatFloat(d.Seconds()*1000, 'f', 3, 64) }

func ratio(a, b time.Duration) string {
	if b == 0 {
		return "-"
	}
	return strconv.FormatFloat(float64(a)/float64(b), 'f', 2, 64)
}

func mean(ds []time.Duration) time.Duration {
	var s time.Duration
	for _, d := range ds {
		s += d
	}
	return s / time.Duration(max(1, len(ds)))
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "mcp: "+format+"\n", args...)
}
