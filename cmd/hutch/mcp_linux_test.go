package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// mcpDir holds the JavaScript tests of hutch's MCP servers and their
// pinned dependencies (package.json, package-lock.json; node_modules and
// node 22 under .node are made by scripts/test.sh).
var mcpDir = filepath.Join("..", "..", "test", "mcp")

// nodeForMCP returns test/mcp's node binary, or why there is none.
func nodeForMCP(t *testing.T) string {
	t.Helper()
	node, err := filepath.Abs(filepath.Join(mcpDir, ".node", "node_modules", ".bin", "node"))
	if err == nil {
		_, err = os.Stat(node)
	}
	testutil.Need(t, err == nil, "no node in test/mcp/.node (scripts/test.sh installs it)")
	_, err = os.Stat(filepath.Join(mcpDir, "node_modules", "@modelcontextprotocol", "sdk", "package.json"))
	testutil.Need(t, err == nil, "MCP's TypeScript SDK is not installed in test/mcp/node_modules (npm ci there; scripts/test.sh does)")
	return node
}

// TestMCPStdio runs test/mcp/stdio.test.mjs: MCP's TypeScript SDK spawns
// `hutch mcp` in a workspace over stdio and calls every tool — the
// session sandbox over the workspace (which alone it may write; a denied
// file it cannot read), a 10-minute command answered within its yield,
// polled and killed, a cancelled call's command killed, a 10 MiB binary
// file through file_write and file_read's link, port_url to a server in
// the sandbox, sandbox_create refused beyond the flags and allowed within
// them — and then closes: hutch exits 0 and leaves no process behind.
func TestMCPStdio(t *testing.T) {
	testutil.RequireRoot(t)
	node := nodeForMCP(t)
	bin := testutil.Hutch(t)

	ws := t.TempDir()
	if err := os.WriteFile(filepath.Join(ws, "hello.txt"), []byte("hello from the workspace\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Outside the workspace, and not under /tmp, which the sandbox has a
	// private one of: places of the host's root.
	outside := hostDir(t)
	if err := os.Chmod(outside, 0o777); err != nil {
		t.Fatal(err)
	}
	const secret = "the-denied-file-says-ZQ7"
	denied := filepath.Join(hostDir(t), "denied.txt")
	if err := os.WriteFile(denied, []byte(secret+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	report := filepath.Join(t.TempDir(), "report.jsonl")
	const timeoutS = 3600
	args, _ := json.Marshal([]string{
		"--allow-domain", "example.com", "--deny-read", denied,
		"--timeout", strconv.Itoa(timeoutS) + "s", "--report", report,
	})
	runNodeTest(t, node, "stdio.test.mjs",
		"HUTCH_BIN="+bin, "HUTCH_MCP_ARGS="+string(args), "HUTCH_WS="+ws,
		"HUTCH_OUTSIDE="+outside, "HUTCH_DENIED="+denied, "HUTCH_SECRET="+secret,
		"HUTCH_REPORT="+report, "HUTCH_TIMEOUT_S="+strconv.Itoa(timeoutS))
}

// runNodeTest runs the JavaScript test script of test/mcp with node's
// test runner, with env added to the test's environment (no proxy:
// everything it reaches is on loopback); its output is logged, and a
// failure fails t.
func runNodeTest(t *testing.T, node, script string, env ...string) {
	t.Helper()
	abs, err := filepath.Abs(filepath.Join(mcpDir, script))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "--test", "--test-reporter=spec", abs)
	cmd.Dir = mcpDir
	cmd.Env = append(append(os.Environ(), env...),
		"NO_COLOR=1", "HTTP_PROXY=", "HTTPS_PROXY=", "http_proxy=", "https_proxy=", "NO_PROXY=127.0.0.1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node --test %s: %v\n%s", script, err, out)
	}
	t.Logf("%s", out)
}

// mcpClient is a Go SDK client session of a `hutch mcp` process.
type mcpClient struct {
	*sdk.ClientSession
	cmd    *exec.Cmd
	stderr *testutil.Buffer
	exited chan struct{} // closed once cmd was waited for
}

// startMCP starts `bin mcp ARGS…` in dir and connects to it over its
// stdin and stdout with the official Go SDK's client.
func startMCP(t *testing.T, bin, dir string, args ...string) *mcpClient {
	t.Helper()
	return startMCPAs(t, 0, bin, dir, args...)
}

// startMCPAs is startMCP with hutch run as uid (and gid) when it is not 0.
func startMCPAs(t *testing.T, uid int, bin, dir string, args ...string) *mcpClient {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"mcp"}, args...)...)
	cmd.Dir = dir
	cmd.Env = baseEnv(dir)
	if uid != 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid), Groups: []uint32{}}}
	}
	c := &mcpClient{cmd: cmd, stderr: &testutil.Buffer{}, exited: make(chan struct{})}
	cmd.Stderr = c.stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = cmd.Wait() // its state is in cmd.ProcessState
		close(c.exited)
	}()
	t.Cleanup(func() {
		// The client's close ends hutch mcp, which then releases its
		// sandboxes (their workspaces removed); SIGKILL only if it hangs.
		if c.ClientSession != nil {
			_ = c.ClientSession.Close()
		}
		select {
		case <-c.exited:
		case <-time.After(guard):
			_ = cmd.Process.Kill()
			<-c.exited
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "hutch-test", Version: "1"}, nil).
		Connect(ctx, &sdk.IOTransport{Reader: stdout, Writer: stdin}, nil)
	if err != nil {
		t.Fatalf("connect to hutch mcp: %v\n%s", err, c.stderr)
	}
	c.ClientSession = cs
	return c
}

// wait waits for hutch mcp to exit and returns its exit code.
func (c *mcpClient) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-c.exited:
	case <-time.After(guard):
		t.Fatalf("hutch mcp did not end\n%s", c.stderr)
	}
	return c.cmd.ProcessState.ExitCode()
}

// call calls tool and returns its structured result; a tool error fails
// the test.
func (c *mcpClient) call(t *testing.T, tool string, args map[string]any) map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	r, err := c.CallTool(ctx, &sdk.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v\nstderr:\n%s", tool, err, c.stderr)
	}
	if r.IsError {
		b, _ := json.Marshal(r.Content)
		t.Fatalf("%s %v: tool error %s\nstderr:\n%s", tool, args, b, c.stderr)
	}
	m, ok := r.StructuredContent.(map[string]any)
	if !ok {
		t.Fatalf("%s: structured content %T", tool, r.StructuredContent)
	}
	return m
}

// TestMCPAgentIsHutchServe: hutch mcp is hutch-serve's, which hutch
// execs from next to itself, and says so when it is not there; with hutch
// and hutch-serve installed but no hutch-agent, hutch mcp's sandboxes run
// hutch-serve as their agent, and port_url's helper too; SIGTERM ends
// hutch mcp with every sandbox and process, and it exits 0.
func TestMCPAgentIsHutchServe(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"hutch", "hutch-serve"} {
		b, err := os.ReadFile(filepath.Join(filepath.Dir(testutil.Hutch(t)), name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o755); err != nil {
			t.Fatal(err)
		}
		if name != "hutch" {
			continue
		}
		// hutch alone: hutch mcp cannot run.
		cmd := exec.Command(filepath.Join(dir, "hutch"), "mcp")
		cmd.Env = baseEnv(dir)
		out, err := cmd.CombinedOutput()
		if code := cmd.ProcessState.ExitCode(); code != 2 || !strings.Contains(string(out), "hutch: mcp: hutch-serve, the daemon's binary, is not installed next to hutch") {
			t.Errorf("hutch mcp without hutch-serve: exit %d (%v), want 2 and where to install it:\n%s", code, err, out)
		}
	}
	bin := filepath.Join(dir, "hutch")
	ws := t.TempDir()
	c := startMCP(t, bin, ws)
	r := c.call(t, "exec", map[string]any{"command": "tr '\\0' ' ' </proc/1/cmdline; echo; /dev/hutch version"})
	if out, _ := r["output"].(string); !regexp.MustCompile(`^hutch agent \nhutch-serve \S+\n$`).MatchString(out) {
		t.Errorf("the sandbox's PID 1 and /dev/hutch: %q, want hutch's agent, and hutch-serve", out)
	}
	// port_url's helper is hutch-serve's port-connect.
	if err := os.WriteFile(filepath.Join(ws, "index.html"), []byte("through hutch\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bg := c.call(t, "exec", map[string]any{"command": "exec python3 -m http.server --bind 127.0.0.1 9999", "yield_ms": 100})
	if bg["running"] != true {
		t.Fatalf("the server did not start: %v", bg["output"])
	}
	u := c.call(t, "port_url", map[string]any{"port": 9999})["url"].(string)
	got := indexThrough(u)
	if got != "through hutch\n" {
		t.Errorf("through port_url's forward: %q", got)
	}

	procs := descendants(t, c.cmd.Process.Pid)
	if len(procs) == 0 {
		t.Fatal("no sandbox process below hutch mcp")
	}
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := c.wait(t); code != 0 {
		t.Errorf("hutch mcp after SIGTERM: exit code %d\n%s", code, c.stderr)
	}
	for _, p := range procs {
		if alive(p) {
			t.Errorf("process %d outlived hutch mcp", p)
		}
	}
}

// TestMCPBadFlags: hutch mcp refuses what hutch run would refuse, and a
// command, before it serves anything (exit code 125).
func TestMCPBadFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--net", "bogus"}, "network"},
		{[]string{"--", "sh"}, "mcp takes no command"},
		{[]string{"--tier", "vm"}, "--tier"},
		{[]string{"--runsc", "/x"}, "--runsc is for --tier gvisor only"},
		{[]string{"--report", "/nonexistent/dir/report"}, "--report"},
	} {
		r := hutch(t, invocation{args: append([]string{"mcp"}, c.args...), stdin: strings.NewReader("")})
		if r.code != 125 || !strings.Contains(r.stderr, c.want) || r.stdout != "" {
			t.Errorf("hutch mcp %q: %s\nwant exit 125 and %q", c.args, r, c.want)
		}
	}
	r := hutch(t, invocation{args: []string{"mcp", "-h"}})
	if r.code != 0 || !strings.Contains(r.stderr, "claude mcp add hutch -- hutch mcp") {
		t.Errorf("hutch mcp -h: %s", r)
	}
}

// TestMCPCloseWithoutCalls: a session that never calls a tool starts no
// sandbox, and ends at once when its client closes.
func TestMCPCloseWithoutCalls(t *testing.T) {
	bin := testutil.Hutch(t)
	c := startMCP(t, bin, t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	tools, err := c.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(tools.Tools) == 0 {
		t.Error("no tools")
	}
	if procs := descendants(t, c.cmd.Process.Pid); len(procs) != 0 {
		t.Errorf("processes below hutch mcp before any call: %v", procs)
	}
	if err := c.Close(); err != nil {
		t.Errorf("close: %v\n%s", err, c.stderr)
	}
	if code := c.wait(t); code != 0 {
		t.Errorf("exit code %d\n%s", code, c.stderr)
	}
}

// refused calls tool and returns its tool error's text; a success fails
// the test.
func (c *mcpClient) refused(t *testing.T, tool string, args map[string]any) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	r, err := c.CallTool(ctx, &sdk.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v\nstderr:\n%s", tool, err, c.stderr)
	}
	b, _ := json.Marshal(r.Content)
	if !r.IsError {
		t.Fatalf("%s %v was not refused: %s", tool, args, b)
	}
	return string(b)
}

// TestMCPImage: with --image, the session sandbox starts from the image
// with the workspace at /workspace, and sandbox_create may ask for that
// image only.
func TestMCPImage(t *testing.T) {
	testutil.RequireRoot(t)
	state, ws := hostDir(t), hostDir(t)
	r := hutch(t, invocation{args: []string{"image", "import", busyboxImageTar(t, "hutch.test/bb:1"), "--state-dir", state}})
	wantOK(t, r)
	c := startMCP(t, testutil.Hutch(t), ws, "--image", "hutch.test/bb:1", "--state-dir", state)
	out := c.call(t, "exec", map[string]any{"command": "pwd; cat /etc/motd; test -e /usr/bin/env || echo no-host-usr; echo written > out"})
	if out["output"] != "/workspace\nfrom the image\nno-host-usr\n" {
		t.Errorf("the session sandbox: %q", out["output"])
	}
	if b, err := os.ReadFile(filepath.Join(ws, "out")); err != nil || string(b) != "written\n" {
		t.Errorf("the workspace write did not reach the host: %q, %v", b, err)
	}
	info := c.call(t, "sandbox_info", nil)
	if info["image"] != "hutch.test/bb:1" || info["workspace"] != "/workspace" {
		t.Errorf("sandbox_info: %v", info)
	}
	sb := c.call(t, "sandbox_create", map[string]any{"image": "hutch.test/bb:1"})
	out = c.call(t, "exec", map[string]any{"command": "pwd; cat /etc/motd; ls", "sandbox_id": sb["sandbox_id"]})
	if out["output"] != "/workspace\nfrom the image\n" {
		t.Errorf("the created sandbox: %q", out["output"])
	}
	if msg := c.refused(t, "sandbox_create", map[string]any{"image": "hutch.test/other:1"}); !strings.Contains(msg, "from image hutch.test/bb:1 only") {
		t.Errorf("another image: %s", msg)
	}
	c.call(t, "sandbox_create", nil) // the flags' image
}

// TestMCPTimeout: --timeout ends the session sandbox, which then leaves
// sandbox_list; the next call that needs it starts a fresh one. A created
// sandbox may not outlive --timeout.
func TestMCPTimeout(t *testing.T) {
	testutil.RequireRoot(t)
	c := startMCP(t, testutil.Hutch(t), t.TempDir(), "--timeout", "3s")
	first := c.call(t, "sandbox_info", nil)
	if first["expires_at"] == nil {
		t.Errorf("no expiry: %v", first)
	}
	if !testutil.Eventually(guard, func() bool {
		list, _ := c.call(t, "sandbox_list", nil)["sandboxes"].([]any)
		return len(list) == 0
	}) {
		t.Fatal("the session sandbox outlived its timeout")
	}
	second := c.call(t, "sandbox_info", nil)
	if second["sandbox_id"] == first["sandbox_id"] {
		t.Errorf("the same sandbox after its timeout: %v", second)
	}
	if msg := c.refused(t, "sandbox_create", map[string]any{"timeout_s": 4}); !strings.Contains(msg, "--timeout 3s") {
		t.Errorf("a created sandbox longer than --timeout: %s", msg)
	}
}

// TestMCPLargeWrite: a file_write larger than the SDK's default frame (16
// MiB) is a call like any other, not the end of the session.
func TestMCPLargeWrite(t *testing.T) {
	testutil.RequireRoot(t)
	ws := t.TempDir()
	c := startMCP(t, testutil.Hutch(t), ws)
	data := make([]byte, 20<<20)
	for i := range data {
		data[i] = byte(i * 7)
	}
	w := c.call(t, "file_write", map[string]any{"path": "big.bin", "content": base64.StdEncoding.EncodeToString(data), "encoding": "base64"})
	if w["bytes"] != float64(len(data)) {
		t.Errorf("file_write: %v", w)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "big.bin")); err != nil || !bytes.Equal(b, data) {
		t.Errorf("the file on the host: %d bytes, %v", len(b), err)
	}
	c.call(t, "exec", map[string]any{"command": "true"})
}

// TestMCPGVisor: --tier gvisor runs the session sandbox under gVisor
// with the host's workspace, writable, and the host's root read-only; its
// PID 1, hutch's agent, stays closed to the commands (escape item 27);
// sandbox_create makes gVisor sandboxes too, port_url reaches a server in
// one, and the client's close ends hutch mcp with every process of its
// sandboxes.
func TestMCPGVisor(t *testing.T) {
	testutil.RequireRoot(t)
	runsc := testutil.Runsc(t)
	ws := t.TempDir()
	if err := os.WriteFile(filepath.Join(ws, "somefile"), []byte("from the host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c := startMCP(t, testutil.Hutch(t), ws, "--tier", "gvisor", "--runsc", runsc)
	if info := c.call(t, "sandbox_info", nil); info["tier"] != "gvisor" {
		t.Errorf("sandbox_info: %v", info)
	}
	r := c.call(t, "exec", map[string]any{"command": "cat somefile; touch /etc/hutch-mcp-gvisor 2>/dev/null; echo $?; echo made > out.txt"})
	out, _ := r["output"].(string)
	if !strings.Contains(out, "from the host\n") || !strings.HasSuffix(out, "\n1\n") || r["exit_code"] != float64(0) {
		t.Errorf("exec: %v", r)
	}
	if _, err := os.Stat("/etc/hutch-mcp-gvisor"); err == nil {
		t.Error("the sandbox wrote to the host's /etc")
	}
	if b, err := os.ReadFile(filepath.Join(ws, "out.txt")); string(b) != "made\n" {
		t.Errorf("the workspace on the host: %q, %v", b, err)
	}
	// PID 1, hutch's agent, stays closed to the commands (escape item 27).
	pid1 := c.call(t, "exec", map[string]any{"command": "cat /proc/self/environ >/dev/null && echo control; for f in environ mem cmdline; do cat /proc/1/$f >/dev/null 2>&1 && echo open-$f; done; readlink /proc/1/exe >/dev/null 2>&1 && echo open-exe; ls /proc/1/fd/ 2>/dev/null | while read f; do readlink /proc/1/fd/$f >/dev/null 2>&1 && echo open-fd-$f; done; echo done"})
	if out, _ := pid1["output"].(string); strings.Contains(out, "open-environ") || strings.Contains(out, "open-mem") || strings.Contains(out, "open-exe") || strings.Contains(out, "open-fd") || !strings.HasPrefix(out, "control\n") || !strings.HasSuffix(out, "done\n") {
		t.Errorf("the agent's /proc/1 from a command: %q", out)
	}
	// A created sandbox is gVisor's too, with a workspace of its own.
	sb := c.call(t, "sandbox_create", nil)
	if sb["tier"] != "gvisor" {
		t.Errorf("sandbox_create: %v", sb)
	}
	if out := c.call(t, "exec", map[string]any{"command": "echo ok > f && cat f", "sandbox_id": sb["sandbox_id"]}); out["output"] != "ok\n" {
		t.Errorf("exec in a created sandbox: %v", out)
	}
	// port_url reaches a server inside the session sandbox.
	if err := os.WriteFile(filepath.Join(ws, "index.html"), []byte("under gvisor\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	server := "exec python3 -m http.server --bind 127.0.0.1 9998"
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		server = "exec busybox httpd -f -p 127.0.0.1:9998"
	}
	c.call(t, "exec", map[string]any{"command": server, "yield_ms": 100})
	u := c.call(t, "port_url", map[string]any{"port": 9998})["url"].(string)
	got := indexThrough(u)
	if got != "under gvisor\n" {
		t.Errorf("through port_url: %q", got)
	}
	procs := descendants(t, c.cmd.Process.Pid)
	_ = c.ClientSession.Close()
	c.ClientSession = nil
	if code := c.wait(t); code != 0 {
		t.Errorf("hutch mcp exited %d\n%s", code, c.stderr)
	}
	for _, p := range procs {
		if alive(p) {
			t.Errorf("process %d (runsc, the gofer, the sandbox) outlived hutch mcp", p)
		}
	}
}

// TestMCPGVisorImage: --tier gvisor with --image runs the session
// sandbox on the image's root under gVisor, the host's workspace at
// /workspace.
func TestMCPGVisorImage(t *testing.T) {
	testutil.RequireRoot(t)
	runsc := testutil.Runsc(t)
	state, ws := hostDir(t), hostDir(t)
	wantOK(t, hutch(t, invocation{args: []string{"image", "import", busyboxImageTar(t, "hutch.test/bb:1"), "--state-dir", state}}))
	c := startMCP(t, testutil.Hutch(t), ws, "--tier", "gvisor", "--runsc", runsc, "--image", "hutch.test/bb:1", "--state-dir", state)
	out := c.call(t, "exec", map[string]any{"command": "pwd; cat /etc/motd; test -e /usr/bin/env || echo no-host-usr; echo written > out"})
	if out["output"] != "/workspace\nfrom the image\nno-host-usr\n" {
		t.Errorf("the session sandbox: %v", out)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "out")); err != nil || string(b) != "written\n" {
		t.Errorf("the workspace write did not reach the host: %q, %v", b, err)
	}
	if info := c.call(t, "sandbox_info", nil); info["tier"] != "gvisor" || info["image"] != "hutch.test/bb:1" {
		t.Errorf("sandbox_info: %v", info)
	}
}

// TestMCPAsUser: an ordinary user's hutch mcp (a laptop's) runs its
// sandboxes as that user, writes the workspace as that user, forwards
// ports, and ends them all when its client closes.
func TestMCPAsUser(t *testing.T) {
	testutil.RequireRoot(t)
	uid := testutil.UnprivilegedUID
	ws := testutil.OwnedDir(t, uid)
	c := startMCPAs(t, uid, testutil.Hutch(t), ws)
	out := c.call(t, "exec", map[string]any{"command": "id -u; echo mine > mine.txt; (echo x > /etc/x) 2>/dev/null || echo ro"})
	if out["output"] != strconv.Itoa(uid)+"\nro\n" {
		t.Errorf("exec: %q", out["output"])
	}
	fi, err := os.Stat(filepath.Join(ws, "mine.txt"))
	if err != nil || fi.Sys().(*syscall.Stat_t).Uid != uint32(uid) {
		t.Errorf("the workspace's file: %v, %v", fi, err)
	}
	sb := c.call(t, "sandbox_create", nil)
	if out := c.call(t, "exec", map[string]any{"command": "id -u; echo ok > f && cat f", "sandbox_id": sb["sandbox_id"]}); out["output"] != strconv.Itoa(uid)+"\nok\n" {
		t.Errorf("exec in a created sandbox: %q", out["output"])
	}
	if err := os.WriteFile(filepath.Join(ws, "index.html"), []byte("as a user\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c.call(t, "exec", map[string]any{"command": "exec python3 -m http.server --bind 127.0.0.1 9999", "yield_ms": 100})
	u := c.call(t, "port_url", map[string]any{"port": 9999})["url"].(string)
	got := indexThrough(u)
	if got != "as a user\n" {
		t.Errorf("through port_url: %q", got)
	}
	procs := descendants(t, c.cmd.Process.Pid)
	if err := c.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	if code := c.wait(t); code != 0 {
		t.Errorf("exit code %d\n%s", code, c.stderr)
	}
	for _, p := range procs {
		if alive(p) {
			t.Errorf("process %d outlived hutch mcp", p)
		}
	}
	if tmp, _ := sb["workspace"].(string); tmp == "" {
		t.Error("no workspace")
	} else if _, err := os.Stat(tmp); !os.IsNotExist(err) {
		t.Errorf("the created sandbox's workspace %s is left: %v", tmp, err)
	}
}

// TestMCPClientGone: a client that went away while a call ran (its end of
// hutch's stdout closed) does not kill hutch with SIGPIPE: the session
// still ends cleanly, its sandbox with it.
func TestMCPClientGone(t *testing.T) {
	testutil.RequireRoot(t)
	cmd := exec.Command(testutil.Hutch(t), "mcp")
	cmd.Dir = t.TempDir()
	cmd.Env = baseEnv(cmd.Dir)
	stderr := &testutil.Buffer{}
	cmd.Stderr = stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	defer func() {
		_ = cmd.Process.Kill()
		<-exited
	}()
	for _, m := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"exec","arguments":{"command":"sleep 2; echo done"}}}`,
	} {
		if _, err := io.WriteString(stdin, m+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	line := make([]byte, 1)
	if _, err := stdout.Read(line); err != nil { // the answer to initialize has come
		t.Fatal(err)
	}
	var procs []int
	testutil.Eventually(guard, func() bool {
		procs = descendants(t, cmd.Process.Pid)
		return len(procs) >= 2 // the sandbox's agent and the command
	})
	stdout.Close() // the client is gone before the exec's answer
	select {
	case <-exited:
	case <-time.After(guard):
		t.Fatalf("hutch mcp did not end\n%s", stderr)
	}
	st := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if st.Signaled() || st.ExitStatus() != 0 {
		t.Errorf("hutch mcp: %v (want exit 0)\n%s", cmd.ProcessState, stderr)
	}
	for _, p := range procs {
		if alive(p) {
			t.Errorf("process %d outlived hutch mcp", p)
		}
	}
}

// indexThrough fetches index.html under u, a port_url of a server that
// is starting, until it answers 200 (or guard passed); its body, or what
// came last.
func indexThrough(u string) string {
	var got string
	testutil.Eventually(guard, func() bool {
		resp, err := (&http.Client{Transport: &http.Transport{Proxy: nil}}).Get(u + "index.html")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		got = string(b)
		return resp.StatusCode == http.StatusOK
	})
	return got
}

// TestMCPSetAside: what a command of the session sandbox creates that
// another tool would run (here pre-commit's configuration) is set aside
// when the session ends, and hutch mcp says so on its stderr, under both
// tiers.
func TestMCPSetAside(t *testing.T) {
	testutil.RequireRoot(t)
	for _, tier := range []string{"namespace", "gvisor"} {
		t.Run(tier, func(t *testing.T) {
			ws := t.TempDir()
			var flags []string
			if tier == "gvisor" {
				flags = []string{"--tier", "gvisor", "--runsc", testutil.Runsc(t)}
			}
			c := startMCP(t, testutil.Hutch(t), ws, flags...)
			c.call(t, "exec", map[string]any{"command": "echo 'repos: []' > .pre-commit-config.yaml"})
			_ = c.ClientSession.Close()
			c.ClientSession = nil
			if code := c.wait(t); code != 0 {
				t.Errorf("hutch mcp exited %d\n%s", code, c.stderr)
			}
			name := ".pre-commit-config.yaml"
			if _, err := os.Stat(filepath.Join(ws, name+policy.SetAsideSuffix)); err != nil {
				t.Errorf("not set aside: %v", err)
			}
			if _, err := os.Stat(filepath.Join(ws, name)); !os.IsNotExist(err) {
				t.Errorf("%s is still there: %v", name, err)
			}
			if !strings.Contains(c.stderr.String(), "hutch: set aside "+filepath.Join(ws, name)) {
				t.Errorf("hutch mcp did not say what it set aside:\n%s", c.stderr)
			}
		})
	}
}

// TestMCPReview: hutch mcp --review works on a copy of the workspace: the
// agent's commands and file tools see their own writes, the user's files
// do not change, and when the session ends hutch mcp names the change set
// on its stderr, for hutch changes; a sandbox_create sandbox (a workspace
// of its own) still starts.
func TestMCPReview(t *testing.T) {
	testutil.RequireRoot(t)
	ws := t.TempDir()
	if err := os.WriteFile(filepath.Join(ws, "f.txt"), []byte("one\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c := startMCP(t, testutil.Hutch(t), ws, "--review")
	out := c.call(t, "exec", map[string]any{"command": "echo two >> f.txt; echo new > n.txt; cat f.txt"})
	if out["output"] != "one\ntwo\n" {
		t.Errorf("exec: %v", out)
	}
	c.call(t, "file_write", map[string]any{"path": "w.txt", "content": "written\n"})
	if r := c.call(t, "file_read", map[string]any{"path": "n.txt"}); r["content"] != "new\n" {
		t.Errorf("file_read of the sandbox's own write: %v", r)
	}
	sb := c.call(t, "sandbox_create", nil)
	if r := c.call(t, "exec", map[string]any{"command": "echo ok", "sandbox_id": sb["sandbox_id"]}); r["output"] != "ok\n" {
		t.Errorf("a created sandbox in a review session: %v", r)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "f.txt")); string(b) != "one\n" {
		t.Errorf("the workspace changed: %q", b)
	}
	for _, p := range []string{"n.txt", "w.txt"} {
		if _, err := os.Stat(filepath.Join(ws, p)); !os.IsNotExist(err) {
			t.Errorf("%s reached the workspace: %v", p, err)
		}
	}
	_ = c.ClientSession.Close()
	c.ClientSession = nil
	if code := c.wait(t); code != 0 {
		t.Errorf("hutch mcp exited %d\n%s", code, c.stderr)
	}
	m := regexp.MustCompile(`hutch: change set ([0-9a-f]{12}): 2 added, 1 modified`).FindStringSubmatch(c.stderr.String())
	if m == nil {
		t.Fatalf("no change set named on hutch mcp's stderr:\n%s", c.stderr)
	}
	r := hutch(t, invocation{dir: ws, args: []string{"changes", "show", m[1], "--name-only"}})
	if got := strings.Join(strings.Fields(r.stdout), " "); got != "f.txt n.txt w.txt" {
		t.Errorf("hutch changes show --name-only: %q\n%s", got, r)
	}
}
