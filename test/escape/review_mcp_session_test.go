//go:build linux

package escape

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// Attacks on hutch mcp's session sandbox (stdio, one agent session on a
// laptop): the agent's commands reach the sandbox through the exec tool,
// and hutch's agent is its PID 1 under both tiers.

// mcpStdio is a hutch mcp of the harness's mode, driven by the MCP SDK's
// client over its stdin and stdout.
type mcpStdio struct {
	cs     *sdk.ClientSession
	cmd    *exec.Cmd
	stderr *testutil.Buffer
}

// startMCPStdio starts `hutch mcp flags...` in the workspace as the mode's
// user, under the mode's tier, and connects to it.
func (sb *harness) startMCPStdio(flags ...string) *mcpStdio {
	t := sb.t
	t.Helper()
	m := &mcpStdio{cmd: sb.command(opts{}, append([]string{"mcp"}, flags...)...), stderr: &testutil.Buffer{}}
	m.cmd.Stderr = m.stderr
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// Closing stdin ends the session; a slow release on a busy machine
	// must not be hurried along by the SDK's signals.
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "escape", Version: "1"}, nil).
		Connect(ctx, &sdk.CommandTransport{Command: m.cmd, TerminateDuration: 2 * time.Minute}, nil)
	if err != nil {
		t.Fatalf("connect to hutch mcp: %v\n%s", err, m.stderr)
	}
	m.cs = cs
	t.Cleanup(func() {
		if m.cs != nil {
			_ = m.cs.Close()
		}
	})
	return m
}

// exec runs script with the exec tool in the session sandbox, waiting
// for it to end, and returns it as a result.
func (m *mcpStdio) exec(t *testing.T, script string) result {
	t.Helper()
	text, out, isErr := mcpCall(t, m.cs, "exec", map[string]any{"command": script, "yield_ms": 110000, "timeout_s": 100})
	if isErr || out == nil {
		t.Fatalf("exec: %s\n%s", text, m.stderr)
	}
	r := result{code: -1}
	r.stdout, _ = out["output"].(string)
	if c, ok := out["exit_code"].(float64); ok {
		r.code = int(c)
	}
	return r
}

// close ends the session as a client does, by closing hutch's stdin, and
// returns hutch's exit code.
func (m *mcpStdio) close(t *testing.T) int {
	t.Helper()
	err := m.cs.Close()
	m.cs = nil
	if m.cmd.ProcessState == nil {
		t.Fatalf("hutch mcp did not exit: %v\n%s", err, m.stderr)
	}
	return exitCode(m.cmd.ProcessState)
}

// hostURL matches a URL of hutch mcp's on the host's loopback.
var hostURL = regexp.MustCompile(`http://127\.0\.0\.1:[0-9]+/[^\s"]*`)

// fetchHost is the body of a GET of u from the host, or what went wrong.
func fetchHost(u string) string {
	c := &http.Client{Timeout: 30 * time.Second}
	resp, err := c.Get(u)
	if err != nil {
		return "error: " + err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return fmt.Sprintf("%s: %q", resp.Status, b)
	}
	return string(b)
}

// belowPID returns every process whose chain of parents leads to pid.
func belowPID(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	parent := map[int]int{}
	for _, e := range entries {
		if n, err := strconv.Atoi(e.Name()); err == nil {
			if pp, err := strconv.Atoi(procStatus(n)["PPid"]); err == nil {
				parent[n] = pp
			}
		}
	}
	var out []int
	for n := range parent {
		for p, hops := parent[n], 0; p > 1 && hops < 64; p, hops = parent[p], hops+1 {
			if p == pid {
				out = append(out, n)
				break
			}
		}
	}
	return out
}

// TestItem27_MCPSession: in hutch mcp's session sandbox, under both tiers,
// started by root and by a user, in proxy mode: the commands the agent
// runs through the exec tool cannot take over the sandbox's PID 1,
// hutch's agent, which holds hutch mcp's connection (its memory,
// environment, descriptors, mapped files, root; process_vm_writev;
// ptrace). From the host, that agent (a host process under the namespace
// tier) holds no descriptor to a host file or directory. Its network is
// hutch's proxy only (ESCAPES 15, 17): an allowed host answers through it,
// any other host gets hutch's 403, and the host's loopback is out of
// reach past it. The client's close ends hutch mcp with status 0 and with
// every process it started. Its own listeners on the host's loopback, the
// links (a file's bytes) and a port URL into another sandbox of the
// session, which the host reaches, are out of the session sandbox's
// reach, directly and through the proxy (ESCAPES 25). hutch mcp refuses
// --gvisor-directfs, which its sandboxes do not have, instead of ignoring
// it.
func TestItem27_MCPSession(t *testing.T) {
	forEachMode(t, func(t *testing.T, sb *harness) {
		e := newEgressEnv(t, sb)
		if sb.mode.directFS {
			r := sb.hutch(opts{noCheck: true}, "mcp")
			if r.code == 0 || !strings.Contains(r.stderr, "--gvisor-directfs") {
				t.Errorf("hutch mcp --gvisor-directfs: want a refusal that names the flag\n%s", r)
			}
			return
		}
		a := sb.attacker()
		m := sb.startMCPStdio(e.flags()...)
		web := "allowed.test:" + e.web.port
		r := m.exec(t, curlFn+`
try control http://`+web+`/mcp-control
try other http://other.test:`+e.web.port+`/mcp-other
try noproxy --noproxy '*' http://127.0.0.1:`+e.web.port+`/mcp-noproxy
`+argv(a, append([]string{"whoami"}, sortedKeys(pid1Attacks)...)...))
		t.Log(r)
		if who := whoami(t, r, "whoami"); who["uid"] != strconv.Itoa(sb.mode.uid) && who["uid"] != "0" {
			t.Errorf("the command runs as uid %s", who["uid"])
		}
		expectPID1(t, r, sb.mode.name, sb.gvisor())
		c := curls(r.stdout)
		expectCurl(t, r, c, "control", map[string]string{"rc": "0", "code": "200/000", "body": "upstream_/mcp-control_"})
		expectCurl(t, r, c, "other", map[string]string{"rc": "0", "code": "403/000", "blocked": "not_in_allowedDomains"})
		expectCurl(t, r, c, "noproxy", map[string]string{"rc": "7"})
		sameSet(t, "HTTP", e.web, "GET /mcp-control")

		// hutch mcp's own listeners on the host's loopback: its links (a
		// file's bytes) and a port URL into a created sandbox's server.
		// The host reaches both (the controls); the session sandbox
		// reaches neither, directly or through the proxy (ESCAPES 25).
		if err := os.WriteFile(filepath.Join(sb.ws, "blob.bin"), []byte{0, 1, 2, 0xff, 0}, 0o644); err != nil {
			t.Fatal(err)
		}
		text, _, _ := mcpCall(t, m.cs, "file_read", map[string]any{"path": "blob.bin"})
		link := hostURL.FindString(text)
		_, other, isErr := mcpCall(t, m.cs, "sandbox_create", nil)
		if isErr {
			t.Fatalf("sandbox_create: %v\n%s", other, m.stderr)
		}
		server := "echo served > index.html && exec python3 -m http.server --bind 127.0.0.1 8000"
		if _, err := os.Stat("/usr/bin/python3"); err != nil {
			server = "echo served > index.html && exec busybox httpd -f -p 127.0.0.1:8000"
		}
		mcpCall(t, m.cs, "exec", map[string]any{"command": server, "yield_ms": 100, "sandbox_id": other["sandbox_id"]})
		_, pu, _ := mcpCall(t, m.cs, "port_url", map[string]any{"port": 8000, "sandbox_id": other["sandbox_id"]})
		port, _ := pu["url"].(string)
		if link == "" || !hostURL.MatchString(port) {
			t.Fatalf("no link (%q) or port URL (%v) on the host's loopback", text, pu)
		}
		if got := fetchHost(link); got != "\x00\x01\x02\xff\x00" {
			t.Errorf("the link from the host: %q", got)
		}
		var got string // the server may take a moment to listen
		testutil.Eventually(60*time.Second, func() bool { got = fetchHost(port); return got == "served\n" })
		if got != "served\n" {
			t.Errorf("the port URL from the host: %q", got)
		}
		var direct []string
		for _, u := range []string{link, port} {
			pu, _ := url.Parse(u)
			direct = append(direct, "tcp:"+pu.Host)
		}
		r = m.exec(t, curlFn+`
try link --noproxy '' -x http://`+httpProxy+` `+shq(link)+`
try port --noproxy '' -x http://`+httpProxy+` `+shq(port)+`
`+argv(a, direct...))
		t.Log(r)
		c = curls(r.stdout)
		expectCurl(t, r, c, "link", map[string]string{"rc": "0", "code": "403/000"})
		expectCurl(t, r, c, "port", map[string]string{"rc": "0", "code": "403/000"})
		want := map[string][]string{}
		for _, d := range direct {
			want[d] = []string{"ECONNREFUSED"}
		}
		expect(t, r, want)

		procs := belowPID(m.cmd.Process.Pid)
		if !sb.gvisor() {
			// The PID 1 of each sandbox of the session: hutch's agent.
			n := 0
			for _, p := range procs {
				if ns := procStatus(p)["NSpid"]; strings.Count(ns, " ") > 0 && strings.HasSuffix(ns, " 1") {
					checkHostFDs(t, p, fmt.Sprintf("hutch mcp's agent %d", p), false)
					n++
				}
			}
			if n != 2 {
				t.Errorf("%d sandboxes' PID 1 below hutch mcp, want 2 (%v)", n, procs)
			}
		}
		if len(procs) == 0 {
			t.Error("no process below hutch mcp: its sandbox ran elsewhere")
		}
		if code := m.close(t); code != 0 {
			t.Errorf("hutch mcp exited %d\n%s", code, m.stderr)
		}
		for _, p := range procs {
			if st := procStatus(p); st["State"] != "" && !strings.HasPrefix(st["State"], "Z") {
				t.Errorf("process %d (%s) outlived hutch mcp", p, st["Name"])
			}
		}
	})
}
