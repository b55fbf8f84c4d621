package mcp_test

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/hutch-sandbox/hutch/internal/mcp"
	"github.com/hutch-sandbox/hutch/internal/mcphttp"
	"image"
	"image/color"
	"image/png"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/agent"
	"github.com/hutch-sandbox/hutch/internal/daemon"
	"github.com/hutch-sandbox/hutch/internal/interp"
	"github.com/hutch-sandbox/hutch/internal/portconnect"
	"github.com/hutch-sandbox/hutch/internal/testutil"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestMain lets this test binary be the agent of the sandboxes the tests
// start: sandbox.Start execs hutch's own binary, here the test binary, as
// "hutch agent" — and, in a sandbox with Jupyter kernels, as its code
// interpreter and as the port-connect through which it is reached.
func TestMain(m *testing.M) {
	agent.MainIfAgent()
	interp.MainIfCommand()
	if len(os.Args) >= 2 && os.Args[1] == portconnect.Command {
		os.Exit(portconnect.Main(os.Args[2:], os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// testWriter sends the manager's records to the test's log.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// harness is a daemon's manager behind DaemonBackend, served by NewServer
// to a real client over in-memory transports, with its links on a
// loopback HTTP server.
type harness struct {
	t       *testing.T
	m       *daemon.Manager
	backend *mcphttp.DaemonBackend
	execs   *mcp.ExecTable
	links   *httptest.Server
	opts    mcp.Options
	cs      *sdk.ClientSession

	mu       sync.Mutex
	calls    []mcp.Call
	progress []*sdk.ProgressNotificationParams
}

const maxOut = 4096 // the harness's MaxOutput: small, to cut output

func newHarness(t *testing.T) *harness {
	t.Helper()
	testutil.RequireRoot(t)
	dir, err := os.MkdirTemp("/var/tmp", "hutch-mcp-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	m, err := daemon.New(daemon.Config{StateDir: dir}, slog.New(slog.NewTextHandler(testWriter{t}, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil && !errors.Is(err, daemon.ErrUnavailable) {
			t.Errorf("close manager: %v", err)
		}
	})
	h := &harness{t: t, m: m, execs: mcp.NewExecTable(nil)}
	t.Cleanup(func() {
		if err := h.execs.Close(); err != nil {
			t.Errorf("close exec table: %v", err)
		}
	})
	links := mcp.NewLinks()
	h.links = httptest.NewServer(links)
	t.Cleanup(h.links.Close)
	h.backend = &mcphttp.DaemonBackend{
		Sandboxes: m,
		Tenant:    "alice",
		Ports: func(_ context.Context, id string, port int) (string, error) {
			return fmt.Sprintf("http://127.0.0.1:1/%s/%d/", id, port), nil
		},
	}
	h.opts = mcp.Options{
		Backend:   h.backend,
		Owner:     "alice",
		Execs:     h.execs,
		Links:     links,
		LinkBase:  h.links.URL + "/",
		MaxOutput: maxOut,
		// Commands end within their yield even on a busy machine; tests
		// of sessions give yield_ms.
		Yield: 2 * time.Minute,
		Audit: func(c mcp.Call) {
			h.mu.Lock()
			h.calls = append(h.calls, c)
			h.mu.Unlock()
		},
	}
	h.cs = h.connect(h.opts)
	return h
}

// connect serves o to a new client session.
func (h *harness) connect(o mcp.Options) *sdk.ClientSession {
	h.t.Helper()
	ct, st := sdk.NewInMemoryTransports()
	ss, err := mcp.NewServer(o).Connect(context.Background(), st, nil)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { ss.Close() })
	client := sdk.NewClient(&sdk.Implementation{Name: "hutch-test", Version: "1"}, &sdk.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *sdk.ProgressNotificationClientRequest) {
			h.mu.Lock()
			h.progress = append(h.progress, r.Params)
			h.mu.Unlock()
		},
	})
	cs, err := client.Connect(context.Background(), ct, nil)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { cs.Close() })
	return cs
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// call calls a tool on cs and fails the test unless it succeeds; its
// structured content is decoded into out (if not nil).
func call(t *testing.T, cs *sdk.ClientSession, name string, args map[string]any, out any) *sdk.CallToolResult {
	t.Helper()
	res, err := cs.CallTool(testCtx(t), &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if res.IsError {
		t.Fatalf("%s: tool error: %s", name, mcp.ResultText(res))
	}
	if len(res.Content) == 0 {
		t.Fatalf("%s: no content", name)
	}
	if _, ok := res.Content[0].(*sdk.TextContent); !ok {
		t.Fatalf("%s: first content is %T, not text", name, res.Content[0])
	}
	if res.StructuredContent == nil {
		t.Fatalf("%s: no structured content", name)
	}
	if out != nil {
		b, err := json.Marshal(res.StructuredContent)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s: structured content %s: %v", name, b, err)
		}
	}
	return res
}

// callErr calls a tool and returns the text of the tool error it must
// fail with.
func callErr(t *testing.T, cs *sdk.ClientSession, name string, args map[string]any) string {
	t.Helper()
	res, err := cs.CallTool(testCtx(t), &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: protocol error %v, want a tool error", name, err)
	}
	if !res.IsError {
		t.Fatalf("%s: succeeded, want a tool error: %s", name, mcp.ResultText(res))
	}
	return mcp.ResultText(res)
}

// fetch GETs a link.
func fetch(t *testing.T, u string) []byte {
	t.Helper()
	if !strings.HasPrefix(u, "http://127.0.0.1:") {
		t.Fatalf("link %q: not the test's link server", u)
	}
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s %s", u, resp.Status, b)
	}
	return b
}

// running reports whether a command whose cmdline starts with prefix runs
// in sandbox id (any process of it, not only those exec started).
func (h *harness) running(id, prefix string) bool {
	h.t.Helper()
	var out mcp.ExecOut
	// The pattern does not match the shell and grep that look.
	call(h.t, h.cs, "exec", map[string]any{"sandbox_id": id, "command": `for p in /proc/[0-9]*; do tr '\0' ' ' 2>/dev/null <$p/cmdline; echo; done 2>/dev/null | grep -c "^` + prefix + `" || true`}, &out)
	// The count is the last line: a process that ended between the glob
	// and its read may have made the shell say so before it.
	lines := strings.Split(strings.TrimSpace(out.Output), "\n")
	n, err := strconv.Atoi(lines[len(lines)-1])
	if err != nil {
		h.t.Errorf("count processes: %q", out.Output)
	}
	return n > 0
}

// listed reports whether the agent lists a command started by exec whose
// arguments contain s.
func (h *harness) listed(id, s string) (int, bool) {
	h.t.Helper()
	ac, err := h.backend.Agent(testCtx(h.t), id)
	if err != nil {
		h.t.Fatal(err)
	}
	ps, err := ac.ListProcesses(testCtx(h.t))
	if err != nil {
		h.t.Fatal(err)
	}
	for _, p := range ps {
		if strings.Contains(strings.Join(p.Args, " "), s) {
			return p.PID, true
		}
	}
	return 0, false
}

// TestTools drives every tool through a real client against sandboxes of
// a real daemon.
func TestTools(t *testing.T) {
	h := newHarness(t)
	cs := h.cs

	t.Run("list", func(t *testing.T) {
		res, err := cs.ListTools(testCtx(t), nil)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string][]string{
			"sandbox_create": {"image", "timeout_s", "allow_domains"},
			"sandbox_list":   {},
			"sandbox_info":   {"sandbox_id"},
			"sandbox_kill":   {"sandbox_id"},
			"exec":           {"command", "cwd", "env", "timeout_s", "yield_ms", "pty", "sandbox_id"},
			"exec_poll":      {"session_id", "stdin", "yield_ms"},
			"exec_kill":      {"session_id"},
			"file_read":      {"path", "offset", "limit", "sandbox_id"},
			"file_write":     {"path", "content", "encoding", "sandbox_id"},
			"file_edit":      {"path", "old_string", "new_string", "replace_all", "sandbox_id"},
			"file_list":      {"path", "depth", "sandbox_id"},
			"port_url":       {"port", "sandbox_id"},
		}
		readOnly := []string{"sandbox_list", "sandbox_info", "file_read", "file_list", "port_url"}
		destructive := []string{"sandbox_kill", "exec_kill", "exec", "file_write", "file_edit"}
		openWorld := []string{"exec", "sandbox_create"}
		seen := map[string]bool{}
		for _, tl := range res.Tools {
			props, ok := want[tl.Name]
			if !ok {
				continue
			}
			seen[tl.Name] = true
			if tl.Description == "" || tl.Annotations == nil {
				t.Errorf("%s: no description or annotations", tl.Name)
				continue
			}
			a := tl.Annotations
			if a.ReadOnlyHint != slices.Contains(readOnly, tl.Name) {
				t.Errorf("%s: readOnlyHint %v", tl.Name, a.ReadOnlyHint)
			}
			if !a.ReadOnlyHint && (a.DestructiveHint == nil || *a.DestructiveHint != slices.Contains(destructive, tl.Name)) {
				t.Errorf("%s: destructiveHint %v", tl.Name, a.DestructiveHint)
			}
			if a.OpenWorldHint == nil || *a.OpenWorldHint != slices.Contains(openWorld, tl.Name) {
				t.Errorf("%s: openWorldHint %v", tl.Name, a.OpenWorldHint)
			}
			b, _ := json.Marshal(tl.InputSchema)
			var schema struct {
				Type       string                     `json:"type"`
				Properties map[string]json.RawMessage `json:"properties"`
			}
			if err := json.Unmarshal(b, &schema); err != nil || schema.Type != "object" {
				t.Errorf("%s: input schema %s", tl.Name, b)
				continue
			}
			for _, p := range props {
				var prop struct {
					Description string `json:"description"`
				}
				if err := json.Unmarshal(schema.Properties[p], &prop); err != nil || prop.Description == "" {
					t.Errorf("%s: property %s missing or undescribed in %s", tl.Name, p, b)
				}
			}
			if tl.OutputSchema == nil {
				t.Errorf("%s: no output schema", tl.Name)
			}
		}
		for name := range want {
			if !seen[name] {
				t.Errorf("tool %s not listed", name)
			}
		}
	})

	var sb mcp.Sandbox
	call(t, cs, "sandbox_create", map[string]any{"timeout_s": 900}, &sb)
	if sb.ID == "" || sb.Workspace == "" || sb.State != "running" {
		t.Fatalf("sandbox_create: %+v", sb)
	}
	id := sb.ID

	t.Run("sandboxes", func(t *testing.T) {
		var info mcp.Sandbox
		call(t, cs, "sandbox_info", map[string]any{"sandbox_id": id}, &info)
		if info.ID != id || info.Workspace != sb.Workspace || info.ExpiresAt.IsZero() {
			t.Errorf("sandbox_info: %+v, want %+v", info, sb)
		}
		var list mcp.SandboxListOut
		call(t, cs, "sandbox_list", nil, &list)
		if !slices.ContainsFunc(list.Sandboxes, func(s mcp.Sandbox) bool { return s.ID == id }) {
			t.Errorf("sandbox_list: %+v lacks %s", list, id)
		}
		var pu mcp.PortURLOut
		call(t, cs, "port_url", map[string]any{"sandbox_id": id, "port": 8080}, &pu)
		if pu.URL != "http://127.0.0.1:1/"+id+"/8080/" {
			t.Errorf("port_url: %q", pu.URL)
		}
		if msg := callErr(t, cs, "port_url", map[string]any{"sandbox_id": id, "port": 70000}); !strings.Contains(msg, "70000") {
			t.Errorf("port_url 70000: %s", msg)
		}
	})

	t.Run("exec", func(t *testing.T) {
		var out mcp.ExecOut
		res := call(t, cs, "exec", map[string]any{"sandbox_id": id, "command": "echo out; echo err >&2; pwd; echo $FOO; exit 3", "env": map[string]any{"FOO": "bar"}}, &out)
		if out.ExitCode == nil || *out.ExitCode != 3 || out.Running || out.SessionID != "" {
			t.Errorf("exec: %+v", out)
		}
		// Two pipes: stdout's and stderr's lines come in either order.
		lines := strings.SplitAfter(out.Output, "\n")
		slices.Sort(lines)
		want := []string{"", "/workspace\n", "bar\n", "err\n", "out\n"}
		want[1] = sb.Workspace + "\n"
		slices.Sort(want)
		if !slices.Equal(lines, want) {
			t.Errorf("exec output %q, want the lines %q", out.Output, want)
		}
		if txt := mcp.ResultText(res); !strings.Contains(txt, "exit code 3") {
			t.Errorf("exec text %q", txt)
		}
		call(t, cs, "exec", map[string]any{"sandbox_id": id, "command": "mkdir -p sub && pwd", "cwd": "."}, &out)
		call(t, cs, "exec", map[string]any{"sandbox_id": id, "command": "pwd", "cwd": "sub"}, &out)
		if out.Output != sb.Workspace+"/sub\n" {
			t.Errorf("exec in cwd sub: %q", out.Output)
		}
		// A process left in the background holds the output streams: the
		// command's end is still the answer.
		call(t, cs, "exec", map[string]any{"sandbox_id": id, "command": "sleep 300 & echo done", "yield_ms": 120000}, &out)
		if out.Running || out.ExitCode == nil || *out.ExitCode != 0 || out.Output != "done\n" {
			t.Errorf("exec leaving a process in the background: %+v", out)
		}
		call(t, cs, "exec", map[string]any{"sandbox_id": id, "command": "tty", "pty": true}, &out)
		if !strings.HasPrefix(out.Output, "/dev/pts/") {
			t.Errorf("exec with pty: %q", out.Output)
		}
		call(t, cs, "exec", map[string]any{"sandbox_id": id, "command": "sleep 30", "timeout_s": 1}, &out)
		if !out.TimedOut || out.ExitCode == nil || *out.ExitCode != 137 {
			t.Errorf("exec with timeout: %+v", out)
		}
		call(t, cs, "exec", map[string]any{"sandbox_id": id, "command": "no-such-command-here"}, &out)
		if *out.ExitCode != 127 || !strings.Contains(out.Output, "not found") {
			t.Errorf("exec of a missing command: %+v", out)
		}
		if msg := callErr(t, cs, "exec", map[string]any{"sandbox_id": id, "command": "true", "cwd": "/no/such/dir"}); !strings.Contains(msg, "/no/such/dir") {
			t.Errorf("exec in a missing cwd: %s", msg)
		}
		if msg := callErr(t, cs, "exec", map[string]any{"sandbox_id": id, "command": " "}); !strings.Contains(msg, "command") {
			t.Errorf("exec of nothing: %s", msg)
		}
		if msg := callErr(t, cs, "exec", map[string]any{"sandbox_id": id, "command": "true", "yield_ms": -1}); !strings.Contains(msg, "yield_ms") {
			t.Errorf("exec with a negative yield: %s", msg)
		}
	})

	t.Run("long", func(t *testing.T) {
		// A 10-minute command answers within its yield with a session.
		var out mcp.ExecOut
		call(t, cs, "exec", map[string]any{"sandbox_id": id, "command": "echo started; sleep 600", "yield_ms": 500}, &out)
		if !out.Running || out.SessionID == "" || out.ExitCode != nil {
			t.Fatalf("exec sleep 600: %+v", out)
		}
		sid := out.SessionID
		got := out.Output
		for got != "started\n" {
			call(t, cs, "exec_poll", map[string]any{"session_id": sid}, &out)
			if !out.Running || len(got) > 100 {
				t.Fatalf("exec_poll of sleep 600: %+v after %q", out, got)
			}
			got += out.Output
		}
		pid, ok := h.listed(id, "sleep 600")
		if !ok || pid != out.PID {
			t.Fatalf("the agent lists no sleep 600 with pid %d (%d)", out.PID, pid)
		}
		if !testutil.Eventually(time.Minute, func() bool { return h.running(id, "sleep 600") }) {
			t.Fatal("no sleep 600 runs")
		}
		// Another owner sharing the table does not see the session.
		other := h.opts
		other.Owner = "mallory"
		mcs := h.connect(other)
		for _, tool := range []string{"exec_poll", "exec_kill"} {
			if msg := callErr(t, mcs, tool, map[string]any{"session_id": sid}); !strings.Contains(msg, "no such exec session") {
				t.Errorf("%s by another owner: %s", tool, msg)
			}
		}
		// A poll gives the output since the last one: none.
		call(t, cs, "exec_poll", map[string]any{"session_id": sid, "yield_ms": 1}, &out)
		if !out.Running || out.Output != "" || out.SessionID != sid {
			t.Errorf("exec_poll: %+v", out)
		}
		call(t, cs, "exec_kill", map[string]any{"session_id": sid}, &out)
		if out.Running || !out.Killed || out.ExitCode == nil || *out.ExitCode != 137 {
			t.Errorf("exec_kill: %+v", out)
		}
		if _, ok := h.listed(id, "sleep 600"); ok {
			t.Error("the agent still lists sleep 600 after exec_kill")
		}
		if h.running(id, "sleep 600") {
			t.Error("sleep 600 still runs after exec_kill")
		}
		if msg := callErr(t, cs, "exec_poll", map[string]any{"session_id": sid}); !strings.Contains(msg, "no such exec session") {
			t.Errorf("exec_poll after exec_kill: %s", msg)
		}
	})

	t.Run("stdin", func(t *testing.T) {
		var out mcp.ExecOut
		call(t, cs, "exec", map[string]any{"sandbox_id": id, "command": "cat", "yield_ms": 1}, &out)
		if !out.Running {
			t.Fatalf("exec cat: %+v", out)
		}
		sid := out.SessionID
		call(t, cs, "exec_poll", map[string]any{"session_id": sid, "stdin": "hello\n"}, &out)
		got := out.Output
		for !strings.Contains(got, "hello\n") && out.Running {
			call(t, cs, "exec_poll", map[string]any{"session_id": sid}, &out)
			got += out.Output
		}
		if got != "hello\n" {
			t.Errorf("cat's output %q, want hello", got)
		}
		call(t, cs, "exec_poll", map[string]any{"session_id": sid, "stdin": "bye", "close_stdin": true, "yield_ms": 60000}, &out)
		if out.Running || out.ExitCode == nil || *out.ExitCode != 0 || out.Output != "bye" {
			t.Errorf("cat after its stdin closed: %+v", out)
		}
		// The final output was delivered: the session is gone.
		if msg := callErr(t, cs, "exec_poll", map[string]any{"session_id": sid}); !strings.Contains(msg, "no such exec session") {
			t.Errorf("exec_poll after the end: %s", msg)
		}
		// stdin with exec itself.
		call(t, cs, "exec", map[string]any{"sandbox_id": id, "command": "tr a-z A-Z", "stdin": "shout", "close_stdin": true, "yield_ms": 60000}, &out)
		if out.Output != "SHOUT" {
			t.Errorf("tr with stdin: %+v", out)
		}
	})

	t.Run("cancel", func(t *testing.T) {
		ctx, cancel := context.WithCancel(testCtx(t))
		done := make(chan error, 1)
		go func() {
			_, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "exec", Arguments: map[string]any{"sandbox_id": id, "command": "sleep 601", "yield_ms": 120000}})
			done <- err
		}()
		if !testutil.Eventually(time.Minute, func() bool { _, ok := h.listed(id, "sleep 601"); return ok }) {
			t.Fatal("sleep 601 never ran")
		}
		cancel()
		if err := <-done; err == nil {
			t.Fatal("cancelled exec: no error")
		}
		if !testutil.Eventually(time.Minute, func() bool { _, ok := h.listed(id, "sleep 601"); return !ok }) {
			t.Fatal("sleep 601 still listed after its exec was cancelled")
		}
		if h.running(id, "sleep 601") {
			t.Error("sleep 601 still runs after its exec was cancelled")
		}
	})

	t.Run("progress", func(t *testing.T) {
		var out mcp.ExecOut
		res, err := cs.CallTool(testCtx(t), &sdk.CallToolParams{
			Name:      "exec",
			Arguments: map[string]any{"sandbox_id": id, "command": "echo x; sleep 600", "yield_ms": 2500},
			Meta:      sdk.Meta{"progressToken": "tok-1"},
		})
		if err != nil || res.IsError {
			t.Fatalf("exec: %v %v", err, res)
		}
		b, _ := json.Marshal(res.StructuredContent)
		json.Unmarshal(b, &out)
		call(t, cs, "exec_kill", map[string]any{"session_id": out.SessionID}, nil)
		// Notifications are handled apart from the call's answer.
		if !testutil.Eventually(time.Minute, func() bool { h.mu.Lock(); defer h.mu.Unlock(); return len(h.progress) > 0 }) {
			t.Fatal("no progress notifications")
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		p := h.progress[len(h.progress)-1]
		if p.ProgressToken != "tok-1" || p.Total != 2.5 || !strings.Contains(p.Message, "bytes of output") {
			t.Errorf("progress: %+v", p)
		}
	})

	t.Run("truncation", func(t *testing.T) {
		var out mcp.ExecOut
		res := call(t, cs, "exec", map[string]any{"sandbox_id": id, "command": "seq 1 100000", "yield_ms": 60000}, &out)
		var full bytes.Buffer
		for i := 1; i <= 100000; i++ {
			fmt.Fprintf(&full, "%d\n", i)
		}
		if out.OutputBytes != int64(full.Len()) || out.TruncatedBytes != int64(full.Len()-maxOut) {
			t.Errorf("output_bytes %d, truncated_bytes %d; want %d, %d", out.OutputBytes, out.TruncatedBytes, full.Len(), full.Len()-maxOut)
		}
		if !strings.HasPrefix(out.Output, "1\n2\n3\n") || !strings.HasSuffix(out.Output, "99999\n100000\n") || !strings.Contains(out.Output, fmt.Sprintf("%d bytes cut", out.TruncatedBytes)) {
			t.Errorf("output: %q", out.Output)
		}
		var link *sdk.ResourceLink
		for _, c := range res.Content {
			if l, ok := c.(*sdk.ResourceLink); ok {
				link = l
			}
		}
		if link == nil || link.URI != out.OutputURL {
			t.Fatalf("no resource link to %q in %v", out.OutputURL, res.Content)
		}
		if got := fetch(t, out.OutputURL); !bytes.Equal(got, full.Bytes()) {
			t.Errorf("the link has %d bytes, not the %d of the whole output", len(got), full.Len())
		}
	})

	t.Run("options", func(t *testing.T) {
		// No links: output is cut all the same, and says there is no
		// link. Options.Yield is exec's default yield.
		o := h.opts
		o.Links, o.LinkBase, o.Yield, o.MaxOutput = nil, "", 200*time.Millisecond, 100
		ocs := h.connect(o)
		var out mcp.ExecOut
		res := call(t, ocs, "exec", map[string]any{"sandbox_id": id, "command": "seq 1 1000", "yield_ms": 60000}, &out)
		if out.OutputURL != "" || out.TruncatedBytes != out.OutputBytes-100 || !strings.Contains(mcp.ResultText(res), "no link") {
			t.Errorf("cut output without links: %+v", out)
		}
		call(t, ocs, "exec", map[string]any{"sandbox_id": id, "command": "sleep 600"}, &out)
		if !out.Running {
			t.Fatalf("sleep 600 with a yield of 200ms: %+v", out)
		}
		call(t, ocs, "exec_kill", map[string]any{"session_id": out.SessionID}, nil)
	})

	t.Run("files", func(t *testing.T) {
		var w mcp.FileWriteOut
		call(t, cs, "file_write", map[string]any{"sandbox_id": id, "path": "dir/sub/a.txt", "content": "one\ntwo\nthree\n"}, &w)
		if w.Path != sb.Workspace+"/dir/sub/a.txt" || w.Bytes != 14 || !w.Created {
			t.Errorf("file_write: %+v", w)
		}
		var r mcp.FileReadOut
		call(t, cs, "file_read", map[string]any{"sandbox_id": id, "path": w.Path}, &r)
		if r.Kind != "text" || r.Content != "one\ntwo\nthree\n" || r.StartLine != 1 || r.EndLine != 3 || r.TotalLines != 3 || r.Truncated {
			t.Errorf("file_read: %+v", r)
		}
		call(t, cs, "file_read", map[string]any{"sandbox_id": id, "path": "dir/sub/a.txt", "offset": 2, "limit": 1}, &r)
		if r.Content != "two\n" || r.StartLine != 2 || r.EndLine != 2 {
			t.Errorf("file_read lines 2-2: %+v", r)
		}
		if msg := callErr(t, cs, "file_read", map[string]any{"sandbox_id": id, "path": "dir/sub/a.txt", "offset": 9}); !strings.Contains(msg, "3 lines") {
			t.Errorf("file_read beyond the end: %s", msg)
		}

		// A text file larger than the cap: cut at a line, with a link.
		var big strings.Builder
		for i := range 2000 {
			fmt.Fprintf(&big, "line %d\n", i+1)
		}
		call(t, cs, "file_write", map[string]any{"sandbox_id": id, "path": "big.txt", "content": big.String()}, nil)
		call(t, cs, "file_read", map[string]any{"sandbox_id": id, "path": "big.txt"}, &r)
		if !r.Truncated || r.StartLine != 1 || r.EndLine < 2 || len(r.Content) > maxOut || !strings.HasSuffix(r.Content, fmt.Sprintf("line %d\n", r.EndLine)) || r.URL == "" {
			t.Errorf("file_read of a large file: %+v", r)
		}
		if got := fetch(t, r.URL); string(got) != big.String() {
			t.Errorf("the large file's link: %d bytes, want %d", len(got), big.Len())
		}
		next := r.EndLine + 1
		call(t, cs, "file_read", map[string]any{"sandbox_id": id, "path": "big.txt", "offset": next, "limit": 2}, &r)
		if r.Content != fmt.Sprintf("line %d\nline %d\n", next, next+1) {
			t.Errorf("file_read on from line %d: %q", next, r.Content)
		}

		// 10 MiB of random bytes, written as base64, read back through the
		// link byte for byte.
		data := make([]byte, 10<<20)
		crand.Read(data)
		call(t, cs, "file_write", map[string]any{"sandbox_id": id, "path": "random.bin", "content": base64.StdEncoding.EncodeToString(data), "encoding": "base64"}, &w)
		if w.Bytes != int64(len(data)) {
			t.Errorf("file_write of 10 MiB: %+v", w)
		}
		res := call(t, cs, "file_read", map[string]any{"sandbox_id": id, "path": "random.bin"}, &r)
		if r.Kind != "binary" || r.Size != int64(len(data)) || r.URL == "" || !strings.Contains(mcp.ResultText(res), "binary") {
			t.Fatalf("file_read of random bytes: %+v", r)
		}
		if got := fetch(t, r.URL); !bytes.Equal(got, data) {
			t.Errorf("random.bin through its link: %d bytes, not the ones written", len(got))
		}
		if msg := callErr(t, cs, "file_write", map[string]any{"sandbox_id": id, "path": "x", "content": "!!", "encoding": "base64"}); !strings.Contains(msg, "base64") {
			t.Errorf("file_write of bad base64: %s", msg)
		}

		// A small binary file: said to be binary, with a link.
		call(t, cs, "file_write", map[string]any{"sandbox_id": id, "path": "small.bin", "content": base64.StdEncoding.EncodeToString([]byte("\x00\x01\x02ELF")), "encoding": "base64"}, nil)
		call(t, cs, "file_read", map[string]any{"sandbox_id": id, "path": "small.bin"}, &r)
		if r.Kind != "binary" || r.Size != 6 || string(fetch(t, r.URL)) != "\x00\x01\x02ELF" {
			t.Errorf("file_read of a small binary file: %+v", r)
		}

		// An image comes back as an image.
		img := image.NewRGBA(image.Rect(0, 0, 4, 4))
		img.Set(1, 1, color.RGBA{255, 0, 0, 255})
		var pngData bytes.Buffer
		png.Encode(&pngData, img)
		call(t, cs, "file_write", map[string]any{"sandbox_id": id, "path": "dot.png", "content": base64.StdEncoding.EncodeToString(pngData.Bytes()), "encoding": "base64"}, nil)
		res = call(t, cs, "file_read", map[string]any{"sandbox_id": id, "path": "dot.png"}, &r)
		var im *sdk.ImageContent
		for _, c := range res.Content {
			if ic, ok := c.(*sdk.ImageContent); ok {
				im = ic
			}
		}
		if r.Kind != "image" || im == nil || im.MIMEType != "image/png" || !bytes.Equal(im.Data, pngData.Bytes()) {
			t.Errorf("file_read of a PNG: %+v, image %v", r, im)
		}

		// file_edit: one match, none, several, all; the mode stays.
		call(t, cs, "file_write", map[string]any{"sandbox_id": id, "path": "e.sh", "content": "echo a\necho b\necho a\n"}, nil)
		call(t, cs, "exec", map[string]any{"sandbox_id": id, "command": "chmod 0751 e.sh"}, nil)
		var e mcp.FileEditOut
		call(t, cs, "file_edit", map[string]any{"sandbox_id": id, "path": "e.sh", "old_string": "echo b", "new_string": "echo B"}, &e)
		if e.Replacements != 1 {
			t.Errorf("file_edit: %+v", e)
		}
		if msg := callErr(t, cs, "file_edit", map[string]any{"sandbox_id": id, "path": "e.sh", "old_string": "echo z", "new_string": "x"}); !strings.Contains(msg, "not found") {
			t.Errorf("file_edit of no match: %s", msg)
		}
		if msg := callErr(t, cs, "file_edit", map[string]any{"sandbox_id": id, "path": "e.sh", "old_string": "echo a", "new_string": "x"}); !strings.Contains(msg, "2 times") {
			t.Errorf("file_edit of two matches: %s", msg)
		}
		call(t, cs, "file_edit", map[string]any{"sandbox_id": id, "path": "e.sh", "old_string": "echo a", "new_string": "echo A", "replace_all": true}, &e)
		if e.Replacements != 2 {
			t.Errorf("file_edit replace_all: %+v", e)
		}
		var out mcp.ExecOut
		call(t, cs, "exec", map[string]any{"sandbox_id": id, "command": "stat -c %a e.sh; ./e.sh"}, &out)
		if out.Output != "751\nA\nB\nA\n" {
			t.Errorf("e.sh after the edits: %q", out.Output)
		}

		// file_list: depth, types, symlinks.
		call(t, cs, "exec", map[string]any{"sandbox_id": id, "command": "ln -s dir/sub/a.txt link"}, nil)
		var l mcp.FileListOut
		call(t, cs, "file_list", map[string]any{"sandbox_id": id, "depth": 3}, &l)
		byPath := map[string]mcp.FileEntry{}
		for _, e := range l.Entries {
			byPath[e.Path] = e
		}
		if l.Path != sb.Workspace || byPath["dir"].Type != "dir" || byPath["dir/sub/a.txt"].Size != 14 || byPath["dir/sub/a.txt"].Type != "file" ||
			byPath["link"].Type != "symlink" || byPath["link"].Target != "dir/sub/a.txt" || byPath["e.sh"].Mode != "0751" {
			t.Errorf("file_list: %+v", l)
		}
		call(t, cs, "file_list", map[string]any{"sandbox_id": id, "path": "dir"}, &l)
		if len(l.Entries) != 1 || l.Entries[0].Path != "sub" {
			t.Errorf("file_list of dir at depth 1: %+v", l.Entries)
		}
		// Reads and edits follow the symlink.
		call(t, cs, "file_read", map[string]any{"sandbox_id": id, "path": "link"}, &r)
		if r.Path != sb.Workspace+"/dir/sub/a.txt" || r.Content != "one\ntwo\nthree\n" {
			t.Errorf("file_read through a symlink: %+v", r)
		}
	})

	t.Run("errors", func(t *testing.T) {
		for _, c := range []struct {
			tool string
			args map[string]any
			want string
		}{
			{"file_read", map[string]any{"sandbox_id": "nope", "path": "a"}, "nope"},
			{"file_read", map[string]any{"sandbox_id": id, "path": "no-such-file"}, "no such file"},
			{"file_read", map[string]any{"sandbox_id": id, "path": "dir"}, "directory"},
			{"file_read", map[string]any{"path": "a"}, "sandbox_id is required"},
			{"exec", map[string]any{"sandbox_id": "nope", "command": "true"}, "nope"},
			{"exec_poll", map[string]any{"session_id": "0123"}, "no such exec session"},
			{"file_write", map[string]any{"sandbox_id": id, "path": "a", "content": "x", "encoding": "utf-16"}, "encoding"},
			{"file_list", map[string]any{"sandbox_id": id, "depth": 9}, "depth"},
			{"sandbox_info", map[string]any{"sandbox_id": "nope"}, "nope"},
			{"exec", map[string]any{"sandbox_id": id}, "command"},
		} {
			if msg := callErr(t, cs, c.tool, c.args); !strings.Contains(msg, c.want) {
				t.Errorf("%s %v: %q, want it to say %q", c.tool, c.args, msg, c.want)
			}
		}
		// The connection is still good.
		call(t, cs, "sandbox_list", nil, nil)
		// Every call was audited, failed ones with their error.
		h.mu.Lock()
		defer h.mu.Unlock()
		var found bool
		for _, c := range h.calls {
			if c.Tool == "file_read" && c.Sandbox == id && c.Err != nil && strings.Contains(c.Err.Error(), "no-such-file") && c.ArgBytes > 0 {
				found = true
			}
		}
		if !found {
			t.Errorf("no audit record of the failed file_read: %+v", h.calls)
		}
	})

	t.Run("close", func(t *testing.T) {
		// hutch mcp closes its table as it ends: the commands go.
		o := h.opts
		o.Execs = mcp.NewExecTable(nil)
		ocs := h.connect(o)
		var out mcp.ExecOut
		call(t, ocs, "exec", map[string]any{"sandbox_id": id, "command": "sleep 602", "yield_ms": 1}, &out)
		if !out.Running || !testutil.Eventually(time.Minute, func() bool { return h.running(id, "sleep 602") }) {
			t.Fatalf("exec sleep 602: %+v", out)
		}
		if err := o.Execs.Close(); err != nil {
			t.Fatal(err)
		}
		if _, ok := h.listed(id, "sleep 602"); ok || h.running(id, "sleep 602") {
			t.Error("sleep 602 runs on after the table was closed")
		}
		if msg := callErr(t, ocs, "exec", map[string]any{"sandbox_id": id, "command": "true"}); !strings.Contains(msg, "shutting down") {
			t.Errorf("exec after Close: %s", msg)
		}
	})

	t.Run("kill", func(t *testing.T) {
		var out mcp.ExecOut
		call(t, cs, "exec", map[string]any{"sandbox_id": id, "command": "sleep 600", "yield_ms": 1}, &out)
		var k mcp.SandboxKillOut
		call(t, cs, "sandbox_kill", map[string]any{"sandbox_id": id}, &k)
		if !k.Killed {
			t.Errorf("sandbox_kill: %+v", k)
		}
		if msg := callErr(t, cs, "exec_poll", map[string]any{"session_id": out.SessionID}); !strings.Contains(msg, "no such exec session") {
			t.Errorf("exec_poll after sandbox_kill: %s", msg)
		}
		callErr(t, cs, "file_read", map[string]any{"sandbox_id": id, "path": "a"})
	})
}

// TestLogBudget: the logs of a table's commands, kept on the host for
// their links, are bounded together, not only each: a command whose log
// would pass the table's bound has the rest of its output left out of
// the log (log_dropped_bytes, and the link serves what was kept), while
// its result still carries the output's head and tail.
func TestLogBudget(t *testing.T) {
	h := newHarness(t)
	space := mcp.NewLogSpace(t.TempDir(), 300000)
	h.execs = mcp.NewExecTable(space)
	o := h.opts
	o.Execs = h.execs
	h.cs = h.connect(o)
	var sb mcp.Sandbox
	call(t, h.cs, "sandbox_create", nil, &sb)
	for i, want := range []int64{0, 100000, 200000} {
		var out mcp.ExecOut
		call(t, h.cs, "exec", map[string]any{"sandbox_id": sb.ID, "command": "head -c 200000 /dev/zero | tr '\\0' a"}, &out)
		if out.OutputBytes != 200000 || out.LogDroppedBytes != want || !strings.HasPrefix(out.Output, "aaaa") {
			t.Errorf("exec %d: output_bytes %d, log_dropped_bytes %d; want 200000, %d", i+1, out.OutputBytes, out.LogDroppedBytes, want)
		}
		if out.OutputURL != "" {
			if got := fetch(t, out.OutputURL); int64(len(got)) != 200000-want {
				t.Errorf("exec %d: the link has %d bytes, want %d", i+1, len(got), 200000-want)
			}
		}
	}
	if used := space.Used(); used != 300000 {
		t.Errorf("the table's logs hold %d bytes, want 300000", used)
	}
}
