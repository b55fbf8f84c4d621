package main

import (
	"context"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/audit"
	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// mcpServeDir (test/mcp) holds MCP's JavaScript test clients and their pinned
// dependencies (package.json, package-lock.json; node_modules and .node,
// node 22, are installed by scripts/test.sh).
var mcpServeDir = filepath.Join("..", "..", "test", "mcp")

// mcpServeNode returns test/mcp's node 22 (absolute), once it checked that the
// MCP packages are installed next to it.
func mcpServeNode(t *testing.T) string {
	t.Helper()
	node, err := filepath.Abs(filepath.Join(mcpServeDir, ".node", "node_modules", ".bin", "node"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(node, "-p", "process.versions.node").Output()
	major, _ := strconv.Atoi(strings.Split(strings.TrimSpace(string(out)), ".")[0])
	testutil.Need(t, err == nil && major >= 22, "no node 22 in test/mcp/.node (scripts/test.sh installs it)")
	for _, p := range []string{"@modelcontextprotocol/sdk", "@modelcontextprotocol/conformance"} {
		_, err := os.Stat(filepath.Join(mcpServeDir, "node_modules", p, "package.json"))
		testutil.Need(t, err == nil, p+" is not installed in test/mcp/node_modules (npm ci there; scripts/test.sh does)")
	}
	return node
}

// mcpServeEnv is the environment of a node process of the MCP tests: node 22
// first in PATH, no proxy (everything they reach is on loopback).
func mcpServeEnv(node string, more ...string) []string {
	return append([]string{
		"PATH=" + filepath.Dir(node) + ":" + stdPath, "HOME=" + os.TempDir(), "NO_COLOR=1",
		"HTTP_PROXY=", "HTTPS_PROXY=", "http_proxy=", "https_proxy=",
	}, more...)
}

// token makes a token of tenant with hutch token create, E2B-shaped if
// e2b.
func (d *daemonProc) token(t *testing.T, tenant string, e2b bool) string {
	t.Helper()
	args := []string{"token", "create", "--tenant", tenant, "--state-dir", d.stateDir}
	if e2b {
		args = append(args, "--e2b")
	}
	r := d.admin(t, args...)
	tok := lastLine(r.stdout)
	if r.code != 0 || tok == "" {
		t.Fatalf("hutch token create --tenant %s: %s", tenant, r)
	}
	return tok
}

// conformanceSummary matches a scenario's line in the suite's summary.
var conformanceSummary = regexp.MustCompile(`(?m)^([✓✗]) ([a-z0-9-]+): (\d+) passed, (\d+) failed`)

// TestMCPConformance runs MCP's conformance suite
// (@modelcontextprotocol/conformance, every scenario, pending ones too)
// against /mcp on hutch serve: every scenario that does not need the
// suite's own fixtures (its test_* tools, prompts and resources) passes;
// those that do are listed, with the reason, in
// test/mcp/conformance-expected-failures.yml, and the suite fails if one
// of them passes, or another fails.
//
// The suite sends no token, so it talks to a reverse proxy on loopback
// that adds a tenant's Authorization header and passes everything else
// unchanged, Host and Origin included: the DNS rebinding scenario's
// requests reach the daemon as the suite made them.
func TestMCPConformance(t *testing.T) {
	testutil.RequireRoot(t)
	node := mcpServeNode(t)
	d := startDaemonWith(t, nil)
	tok := d.token(t, "conformance", false)
	target, err := url.Parse(d.tcp)
	if err != nil {
		t.Fatal(err)
	}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Host = r.In.Host
			r.Out.Header.Set("Authorization", "Bearer "+tok)
		},
		FlushInterval: -1, // server-sent events as they come
		// The suite drops streams it is done with.
		ErrorLog: log.New(io.Discard, "", 0),
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: proxy, ReadHeaderTimeout: guard}
	go srv.Serve(l)
	defer srv.Close()

	baseline, err := filepath.Abs(filepath.Join(mcpServeDir, "conformance-expected-failures.yml"))
	if err != nil {
		t.Fatal(err)
	}
	suite, err := filepath.Abs(filepath.Join(mcpServeDir, "node_modules", ".bin", "conformance"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	runSuite := func() (string, error) {
		out := t.TempDir()
		cmd := exec.CommandContext(ctx, node, suite, "server", "--url", "http://"+l.Addr().String()+"/mcp",
			"--suite", "all", "--expected-failures", baseline, "-o", out)
		cmd.Dir = out
		cmd.Env = mcpServeEnv(node)
		b, err := cmd.CombinedOutput()
		summary := string(b)
		if i := strings.Index(summary, "=== SUMMARY ==="); i >= 0 {
			summary = summary[i:]
		}
		return summary, err
	}
	summary, err := runSuite()
	// server-sse-multiple-streams gives each of three concurrent streams
	// 2 s for its first event, a deadline of the suite's own that a busy
	// machine can miss: once more when it alone failed so.
	if err != nil && strings.Count(summary, "\n  ✗ ") == 1 && strings.Contains(summary, "  ✗ server-sse-multiple-streams") {
		t.Logf("the conformance suite missed its own deadline of server-sse-multiple-streams; once more:\n%s", summary)
		summary, err = runSuite()
	}
	if err != nil {
		t.Fatalf("the conformance suite: %v\n%s", err, summary)
	}
	var passed, failed []string
	for _, m := range conformanceSummary.FindAllStringSubmatch(summary, -1) {
		// A scenario that ended with warnings only has a ✓ and nothing
		// passed; the baseline counts it as failing.
		if m[1] == "✓" && m[3] != "0" {
			passed = append(passed, m[2])
		} else {
			failed = append(failed, m[2])
		}
	}
	t.Logf("passed: %s\nexpected failures (the suite's fixtures): %s", strings.Join(passed, " "), strings.Join(failed, " "))
	// The scenarios that need nothing of the suite's own pass, by name:
	// one that vanished from the suite would not fail it.
	for _, want := range []string{"server-initialize", "ping", "logging-set-level", "tools-list", "dns-rebinding-protection", "server-sse-multiple-streams", "resources-list", "prompts-list"} {
		if !strings.Contains(summary, "✓ "+want+":") {
			t.Errorf("scenario %s did not pass:\n%s", want, summary)
		}
	}
}

// TestMCPServeSDK runs MCP's TypeScript SDK, unchanged, against /mcp on
// hutch serve: test/mcp/serve.test.mjs with node's test runner, as
// tenants A and B over TCP. Then the daemon's audit log has A's tool
// calls (tool, sandbox, argument size, duration, outcome) and B's refused
// ones, and its metrics count them.
func TestMCPServeSDK(t *testing.T) {
	testutil.RequireRoot(t)
	node := mcpServeNode(t)
	d := startDaemonWith(t, nil)
	tokA, tokB, tokE2B := d.token(t, "mcp-a", false), d.token(t, "mcp-b", false), d.token(t, "mcp-a", true)

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "--test", "--test-reporter=spec", "serve.test.mjs")
	cmd.Dir = mcpServeDir
	cmd.Env = mcpServeEnv(node, "HUTCH_MCP_URL="+d.tcp+"/mcp", "HUTCH_MCP_TOKEN="+tokA, "HUTCH_MCP_TOKEN_B="+tokB, "HUTCH_MCP_TOKEN_E2B="+tokE2B)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node --test serve.test.mjs: %v\n%s", err, out)
	}
	t.Logf("%s", out)

	calls := map[string][]audit.Entry{}
	for _, e := range auditEntries(t, d.stateDir) {
		if e.Action == "mcp_call" {
			calls[e.Tenant] = append(calls[e.Tenant], e)
		}
	}
	var write, refusedB bool
	for _, e := range calls["mcp-a"] {
		if e.Tool == "file_write" && e.Sandbox != "" && e.BytesIn > 10<<20 && e.Error == "" {
			write = true
		}
	}
	for _, e := range calls["mcp-b"] {
		if e.Tool == "exec" && e.Error != "" {
			refusedB = true
		}
	}
	if !write || !refusedB {
		t.Errorf("the audit log lacks A's 10 MiB file_write (%v) or B's refused exec (%v): %+v", write, refusedB, calls)
	}
	// Refusals before any tool or route ran are no audit records (they
	// have no tenant, or change nothing) but are counted, on MCP as on
	// E2B's API.
	for _, path := range []string{"/mcp", "/sandboxes"} {
		resp, err := http.Post(d.tcp+path, "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("POST %s without a token: %s, want 401", path, resp.Status)
		}
	}
	m := d.metrics(t)
	for _, want := range []string{
		`hutch_mcp_tool_calls_total{tool="exec",outcome="ok"} `, `hutch_mcp_tool_calls_total{tool="exec",outcome="error"} `,
		`hutch_front_requests_total{front="mcp",code="200"} `, `hutch_front_requests_total{front="mcp",code="401"} `,
		`hutch_front_requests_total{front="e2b",code="401"} `,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("no %s in the metrics:\n%s", want, m)
		}
	}
}

// TestMCPServeOff: with --no-mcp, /mcp is no route of the daemon's, and
// its metrics have no MCP family.
func TestMCPServeOff(t *testing.T) {
	d := startDaemonWith(t, nil, "--no-mcp")
	tok := d.token(t, "off", false)
	req, err := http.NewRequest(http.MethodPost, d.tcp+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(b), "no such route") {
		t.Errorf("POST /mcp with --no-mcp: %d %s, want the API's 404", resp.StatusCode, b)
	}
	if m := d.metrics(t); strings.Contains(m, "hutch_mcp_") {
		t.Errorf("MCP metrics with --no-mcp:\n%s", m)
	}
}
