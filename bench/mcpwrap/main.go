//go:build linux

// Command mcpwrap measures what `hutch mcp wrap` adds to a tools/call: one
// MCP session per way to run @modelcontextprotocol/server-filesystem (the
// server started directly on the host, the floor; behind a process that
// only copies its stdio with io.Copy, the least any relay costs; inside
// `hutch run` with its stdio passed straight through, the sandbox without
// the relay; under `hutch mcp wrap`; and under hutch mcp wrap with a
// secret and a --redact pattern, whose filter then looks at every message),
// each driven by the Go SDK's client over CommandTransport. The calls go
// round robin across the sessions, so that a busy machine weighs on
// every way alike; each way's p50 and p99 are printed with their ratio to
// the floor. bench/mcpwrap.sh builds hutch and runs it.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/hutch-sandbox/hutch/bench/report"
)

// way is one way to run the server.
type way struct {
	name    string
	argv    []string // before the server's own command line
	env     []string // added to the environment
	session *mcp.ClientSession
	samples map[string][]time.Duration // per call
}

// call is one kind of tools/call measured.
type call struct {
	name string
	tool string
	args map[string]any
}

func main() {
	if len(os.Args) > 2 && os.Args[1] == "-passthrough" {
		passthrough(os.Args[2:])
		return
	}
	hutch := flag.String("hutch", "", "path of the hutch binary (required)")
	node := flag.String("node", "", "path of node (required)")
	server := flag.String("server", "", "path of server-filesystem's dist/index.js (required)")
	dir := flag.String("dir", "", "the server's allowed directory and the sandboxes' workspace (required)")
	n := flag.Int("n", 200, "calls of each kind per way")
	warm := flag.Int("warmup", 20, "calls of each kind per way before the measured ones")
	big := flag.Int("big", 1<<20, "size of the large file read, in bytes")
	markdown := flag.Bool("markdown", false, "print markdown tables")
	flag.Parse()
	if *hutch == "" || *node == "" || *server == "" || *dir == "" {
		fail(fmt.Errorf("-hutch, -node, -server and -dir are required"))
	}
	small := filepath.Join(*dir, "small.txt")
	large := filepath.Join(*dir, "large.txt")
	if err := os.WriteFile(small, []byte(strings.Repeat("a line of text\n", 64)), 0o644); err != nil {
		fail(err)
	}
	if err := os.WriteFile(large, []byte(strings.Repeat(strings.Repeat("x", 63)+"\n", *big/64)), 0o644); err != nil {
		fail(err)
	}
	calls := []call{
		{"list_allowed_directories", "list_allowed_directories", map[string]any{}},
		{"read_text_file 1 KiB", "read_text_file", map[string]any{"path": small}},
		{fmt.Sprintf("read_text_file %d KiB", *big>>10), "read_text_file", map[string]any{"path": large}},
	}
	self, err := os.Executable()
	if err != nil {
		fail(err)
	}
	ws := []string{"--workspace", *dir}
	ways := []*way{
		{name: "direct (no sandbox)", argv: nil},
		{name: "io.Copy relay (no sandbox)", argv: []string{self, "-passthrough"}},
		{name: "hutch run (sandbox, no relay)", argv: append([]string{*hutch, "run"}, append(ws, "--")...)},
		{name: "hutch mcp wrap", argv: append([]string{*hutch, "mcp", "wrap"}, append(ws, "--")...)},
		{
			name: "hutch mcp wrap, secret and --redact",
			argv: append([]string{*hutch, "mcp", "wrap"}, append(ws, "--net", "proxy", "--secret", "BENCH_TOKEN@api.example.com",
				"--redact", `AKIA[0-9A-Z]{16}`, "--")...),
			env: []string{"BENCH_TOKEN=bench-token-0123456789abcdef"},
		},
	}
	ctx := context.Background()
	client := mcp.NewClient(&mcp.Implementation{Name: "hutch-bench", Version: "1"}, nil)
	for _, w := range ways {
		argv := append(append([]string{}, w.argv...), *node, *server, *dir)
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Dir = *dir
		cmd.Env = append(os.Environ(), w.env...)
		cmd.Stderr = nil
		s, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd, TerminateDuration: 2 * time.Second}, nil)
		if err != nil {
			fail(fmt.Errorf("%s: %w", w.name, err))
		}
		w.session = s
		w.samples = map[string][]time.Duration{}
	}
	for _, c := range calls {
		for i := range *warm + *n {
			for _, w := range ways {
				t0 := time.Now()
				res, err := w.session.CallTool(ctx, &mcp.CallToolParams{Name: c.tool, Arguments: c.args})
				d := time.Since(t0)
				if err != nil {
					fail(fmt.Errorf("%s: %s: %w", w.name, c.name, err))
				}
				if res.IsError {
					fail(fmt.Errorf("%s: %s: the tool failed: %+v", w.name, c.name, res.Content))
				}
				if i >= *warm {
					w.samples[c.name] = append(w.samples[c.name], d)
				}
			}
		}
	}
	for _, w := range ways {
		_ = w.session.Close()
	}

	t := report.NewTable(*markdown, "tools/call", "way", "p50 µs", "p99 µs", "p50 ratio to direct", "added p50 µs", "added p99 µs")
	for _, c := range calls {
		base := ways[0].samples[c.name]
		b50, b99 := report.Percentile(base, 50), report.Percentile(base, 99)
		for _, w := range ways {
			s := w.samples[c.name]
			p50, p99 := report.Percentile(s, 50), report.Percentile(s, 99)
			added50, added99 := "-", "-"
			if w != ways[0] {
				added50, added99 = us(p50-b50), us(p99-b99)
			}
			t.Row(c.name, w.name, us(p50), us(p99), fmt.Sprintf("%.2f", float64(p50)/float64(b50)), added50, added99)
		}
	}
	fmt.Printf("%d calls of each kind per way (after %d to warm up), round robin across the ways\n\n", *n, *warm)
	t.Print(os.Stdout)
}

// passthrough runs argv with its stdin and stdout piped through this
// process by io.Copy, its stderr discarded: the least any relay process
// costs, without parsing anything. It exits with argv's exit code.
func passthrough(argv []string) {
	cmd := exec.Command(argv[0], argv[1:]...)
	in, err := cmd.StdinPipe()
	if err != nil {
		fail(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		fail(err)
	}
	if err := cmd.Start(); err != nil {
		fail(err)
	}
	go func() {
		_, _ = io.Copy(in, os.Stdin)
		in.Close()
	}()
	_, _ = io.Copy(os.Stdout, out)
	_ = cmd.Wait()
	os.Exit(cmd.ProcessState.ExitCode())
}

// us formats d in microseconds.
func us(d time.Duration) string { return fmt.Sprintf("%d", d.Microseconds()) }

func fail(err error) {
	fmt.Fprintln(os.Stderr, "mcpwrap:", err)
	os.Exit(1)
}
