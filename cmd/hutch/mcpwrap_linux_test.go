package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/runner"
	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// mcpWrapNode returns the absolute paths of test/mcp's node 22 and of
// the filesystem server's entry point; the test skips (fails under
// HUTCH_TEST_ROOT=1) when they are not installed.
func mcpWrapNode(t *testing.T) (node, server string) {
	t.Helper()
	node = nodeForMCP(t)
	server, err := filepath.Abs(filepath.Join(mcpDir, "node_modules", "@modelcontextprotocol", "server-filesystem", "dist", "index.js"))
	if err == nil {
		_, err = os.Stat(server)
	}
	testutil.Need(t, err == nil, "@modelcontextprotocol/server-filesystem is not installed in test/mcp/node_modules (scripts/test.sh installs it)")
	// The sandbox has private /tmp and /dev/shm: from a repository there (a
	// CI's clone), node and the server are copied where it sees them.
	real := func(p string) string {
		r, err := filepath.EvalSymlinks(p)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	node, modules := real(node), real(filepath.Join(mcpDir, "node_modules"))
	hidden := false
	for _, p := range []string{node, modules} {
		for _, d := range runner.PrivateDirs {
			hidden = hidden || p == d || strings.HasPrefix(p, d+"/")
		}
	}
	if !hidden {
		return node, server
	}
	dir, err := os.MkdirTemp("/var/tmp", "hutch-mcp-node-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cp", "-a", node, filepath.Join(dir, "node")).CombinedOutput(); err != nil {
		t.Fatalf("copy node: %v\n%s", err, out)
	}
	if out, err := exec.Command("cp", "-a", modules, filepath.Join(dir, "node_modules")).CombinedOutput(); err != nil {
		t.Fatalf("copy test/mcp/node_modules: %v\n%s", err, out)
	}
	return filepath.Join(dir, "node"), filepath.Join(dir, "node_modules", "@modelcontextprotocol", "server-filesystem", "dist", "index.js")
}

// wrapCall is a tools/call for wrap.mjs to make, and what the client got.
type wrapCall struct {
	Name      string         `json:"name"`
	Arguments map[string]any `json:"arguments"`
	IsError   bool           `json:"isError"`
	Text      string         `json:"text"`
	Error     string         `json:"error"`
}

// wrapOut is what wrap.mjs reports.
type wrapOut struct {
	Tools    []string   `json:"tools"`
	Calls    []wrapCall `json:"calls"`
	Received []string   `json:"received"`
	Stderr   string     `json:"stderr"`
	Failed   string     `json:"failed"`
	PID      int        `json:"pid"`
}

// runWrapClient runs wrap.mjs: MCP's TypeScript SDK client spawns hutch
// with args (in dir, with env) and makes calls.
func runWrapClient(t *testing.T, node, dir string, args []string, env map[string]string, calls []wrapCall) wrapOut {
	t.Helper()
	spec, err := json.Marshal(map[string]any{"command": testutil.Hutch(t), "args": args, "cwd": dir, "env": env, "calls": calls})
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	specFile, outFile := filepath.Join(tmp, "spec.json"), filepath.Join(tmp, "out.json")
	if err := os.WriteFile(specFile, spec, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	script, err := filepath.Abs(filepath.Join(mcpDir, "wrap.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, node, script, specFile, outFile)
	cmd.Dir = mcpDir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("node wrap.mjs: %v\n%s", err, out)
	}
	b, err := os.ReadFile(outFile)
	if err != nil {
		t.Fatal(err)
	}
	var out wrapOut
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("wrap.mjs's output: %v\n%s", err, b)
	}
	if out.Failed != "" {
		t.Fatalf("the client failed: %s\nhutch's stderr:\n%s", out.Failed, out.Stderr)
	}
	return out
}

// TestMCPWrapFilesystem runs @modelcontextprotocol/server-filesystem from
// npm under hutch mcp wrap, with MCP's TypeScript SDK as the client. The
// server is told it may read "/", but its sandbox shows it the workspace
// and what the policy lets it read: a file under --deny-read and a key in
// the home hutch hides by default come back as tool errors, their
// contents never reaching the client. A real secret value planted in the
// workspace, as it is and in base64, and a match of --redact come back
// redacted. The report and the audit log record every tools/call (tool,
// argument size, duration, outcome); closing the client ends the server
// and leaves no process behind.
func TestMCPWrapFilesystem(t *testing.T) {
	testutil.RequireRoot(t)
	node, server := mcpWrapNode(t)
	base := hostDir(t)
	ws, home, private := filepath.Join(base, "ws"), filepath.Join(base, "home"), filepath.Join(base, "private")
	const (
		secret     = "hutch-wrap-7Qx2pL9vK4mN8rT1"
		privateTxt = "private-notes-5b1e"
		keyTxt     = "ssh-private-key-c93d"
		awsKey     = "AKIAQWERTYUIOPASDFGH"
	)
	writeFile(t, filepath.Join(ws, "hello.txt"), "hello from the workspace\n", 0o644)
	writeFile(t, filepath.Join(ws, "config.env"), "API_TOKEN="+secret+"\n", 0o644)
	writeFile(t, filepath.Join(ws, "auth.txt"), "Authorization: Basic "+base64.StdEncoding.EncodeToString([]byte("me:"+secret))+"\n", 0o644)
	writeFile(t, filepath.Join(ws, "aws.txt"), "aws_access_key_id = "+awsKey+"\nregion = eu-west-1\n", 0o644)
	writeFile(t, filepath.Join(private, "notes.txt"), privateTxt+"\n", 0o644)
	writeFile(t, filepath.Join(home, ".ssh", "id_ed25519"), keyTxt+"\n", 0o600)
	report, auditLog := filepath.Join(base, "report.jsonl"), filepath.Join(base, "audit.jsonl")

	args := []string{"mcp", "wrap", "--workspace", ws, "--deny-read", private,
		"--net", "proxy", "--secret", "DEMO_TOKEN@api.example.com", "--redact", `AKIA[0-9A-Z]{16}`,
		"--report", report, "--audit", auditLog,
		"--", node, server, "/", base}
	env := map[string]string{"PATH": stdPath, "HOME": home, "LANG": "C.UTF-8", "DEMO_TOKEN": secret}
	read := func(p string) wrapCall {
		return wrapCall{Name: "read_text_file", Arguments: map[string]any{"path": p}}
	}
	calls := []wrapCall{
		read(filepath.Join(ws, "hello.txt")),
		read(filepath.Join(private, "notes.txt")),
		read(filepath.Join(home, ".ssh", "id_ed25519")),
		read(filepath.Join(ws, "config.env")),
		read(filepath.Join(ws, "auth.txt")),
		read(filepath.Join(ws, "aws.txt")),
		{Name: "list_allowed_directories", Arguments: map[string]any{}},
	}
	out := runWrapClient(t, node, ws, args, env, calls)

	if !slices.Contains(out.Tools, "read_text_file") || !slices.Contains(out.Tools, "list_allowed_directories") {
		t.Errorf("tools/list through the relay: %v", out.Tools)
	}
	if len(out.Calls) != len(calls) {
		t.Fatalf("%d results, want %d: %+v", len(out.Calls), len(calls), out.Calls)
	}
	got := func(i int) wrapCall { return out.Calls[i] }
	if c := got(0); c.IsError || c.Text != "hello from the workspace\n" {
		t.Errorf("read_text_file of the workspace's file: %+v", c)
	}
	for _, i := range []int{1, 2} {
		if c := got(i); !c.IsError {
			t.Errorf("read_text_file of %s outside the policy is not an error: %+v", calls[i].Arguments["path"], c)
		}
	}
	if c := got(3); c.IsError || c.Text != "[redacted: secret DEMO_TOKEN]" {
		t.Errorf("the workspace's file with the secret: %+v", c)
	}
	if c := got(4); c.IsError || c.Text != "[redacted: secret DEMO_TOKEN]" {
		t.Errorf("the workspace's file with the secret in base64: %+v", c)
	}
	if c := got(5); c.IsError || c.Text != "aws_access_key_id = [redacted: pattern 1]\nregion = eu-west-1\n" {
		t.Errorf("the workspace's file with a match of --redact: %+v", c)
	}
	if c := got(6); c.IsError || !strings.Contains(c.Text, "/") {
		t.Errorf("list_allowed_directories: %+v", c)
	}
	all := strings.Join(out.Received, "\n") + out.Stderr
	for _, leak := range []string{secret, base64.StdEncoding.EncodeToString([]byte("me:" + secret)), privateTxt, keyTxt, awsKey} {
		if strings.Contains(all, leak) {
			t.Errorf("the client got %q", leak)
		}
	}

	// The report: a line for each tools/call, in the order they ended
	// (here the order of the calls), the redactions, the refused read.
	type rec struct {
		Action        string         `json:"action"`
		Tool          string         `json:"tool"`
		ArgumentBytes *int           `json:"argument_bytes"`
		DurationMS    *float64       `json:"duration_ms"`
		Outcome       string         `json:"outcome"`
		Redactions    int            `json:"redactions"`
		Secrets       map[string]int `json:"secrets"`
		Patterns      map[string]int `json:"patterns"`
		Protocol      string         `json:"protocol"`
		Path          string         `json:"path"`
		Args          map[string]any `json:"arguments"`
	}
	var toolRecs []rec
	var redacted *rec
	refused := false
	for _, l := range readLines(t, report) {
		var r rec
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("report line %s: %v", l, err)
		}
		switch {
		case r.Action == "tool_call":
			if strings.Contains(l, "/ws/") || r.Args != nil {
				t.Errorf("a tool_call record holds the arguments: %s", l)
			}
			toolRecs = append(toolRecs, r)
		case r.Action == "redacted":
			redacted = &r
		case r.Protocol == "file" && r.Path == filepath.Join(home, ".ssh", "id_ed25519"):
			refused = true
		}
	}
	wantOutcome := []string{"ok", "tool_error", "tool_error", "ok", "ok", "ok", "ok"}
	if len(toolRecs) != len(calls) {
		t.Fatalf("%d tool_call records, want %d:\n%s", len(toolRecs), len(calls), strings.Join(readLines(t, report), "\n"))
	}
	for i, r := range toolRecs {
		argBytes, _ := json.Marshal(calls[i].Arguments)
		if r.Tool != calls[i].Name || r.ArgumentBytes == nil || *r.ArgumentBytes != len(argBytes) || r.DurationMS == nil || *r.DurationMS < 0 || r.Outcome != wantOutcome[i] {
			t.Errorf("tool_call record %d: %+v, want %s, %d argument bytes, a duration, %s", i+1, r, calls[i].Name, len(argBytes), wantOutcome[i])
		}
		if (i >= 3 && i <= 5) != (r.Redactions > 0) {
			t.Errorf("tool_call record %d counts %d redactions", i+1, r.Redactions)
		}
	}
	if redacted == nil || redacted.Secrets["DEMO_TOKEN"] == 0 || redacted.Patterns[`AKIA[0-9A-Z]{16}`] == 0 {
		t.Errorf("no count of the redactions in the report: %+v", redacted)
	}
	if !refused {
		t.Errorf("the report does not record the refused read of the key")
	}

	// The audit log: the same calls, chained.
	r := hutch(t, invocation{args: []string{"audit", "verify", auditLog}})
	wantOK(t, r)
	if !strings.Contains(r.stdout, "7 entries") {
		t.Errorf("hutch audit verify: %s", r)
	}
	for i, l := range readLines(t, auditLog) {
		var e struct {
			Action, Tool, Error string
			BytesIn             int64 `json:"bytes_in"`
		}
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatal(err)
		}
		wantErr := ""
		if wantOutcome[i] != "ok" {
			wantErr = wantOutcome[i]
		}
		if e.Action != "mcp_call" || e.Tool != calls[i].Name || e.BytesIn != int64(*toolRecs[i].ArgumentBytes) || e.Error != wantErr {
			t.Errorf("audit line %d: %s", i+1, l)
		}
	}

	// Closing the client ended hutch and the server: no process names
	// the test's directory.
	if out.PID == 0 {
		t.Error("the client did not report hutch's pid")
	} else if _, err := os.Stat(filepath.Join("/proc", strconv.Itoa(out.PID))); err == nil {
		t.Errorf("hutch (pid %d) outlived its client", out.PID)
	}
	if left := processesNaming(base); len(left) > 0 {
		t.Errorf("processes left behind: %q", left)
	}
}

// TestMCPWrapEnds: when the server ends, so does hutch, with the server's
// exit code, though the client still holds stdin open; what the server
// wrote that is not a JSON-RPC message is dropped (and said on stderr),
// the rest reaches the client. When the client ends first, a server that
// ignores the end of its stdin is killed, and nothing of it remains.
func TestMCPWrapEnds(t *testing.T) {
	testutil.RequireRoot(t)
	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdinW.Close()
	if _, err := stdinW.WriteString(`{"jsonrpc":"2.0","id":1,"method":"ping"}` + "\n"); err != nil {
		t.Fatal(err)
	}
	script := `read req; echo "starting up"; echo '{"jsonrpc":"2.0","id":1,"result":{}}'; exit 7`
	r := hutch(t, invocation{args: []string{"mcp", "wrap", "--", "sh", "-c", script}, stdin: stdinR})
	stdinR.Close()
	wantCode(t, r, 7)
	if r.stdout != `{"jsonrpc":"2.0","id":1,"result":{}}`+"\n" {
		t.Errorf("the client got %q", r.stdout)
	}
	if !strings.Contains(r.stderr, "dropped a line of 11 bytes from the server: not JSON") {
		t.Errorf("stderr does not say the line was dropped:\n%s", r.stderr)
	}

	// A server that does not end when its stdin does is ended with its
	// sandbox once the client closed its side; hutch exits 0.
	marker := "hutch-wrap-stubborn-" + strconv.Itoa(os.Getpid())
	r = hutch(t, invocation{
		args:  []string{"mcp", "wrap", "--", "sh", "-c", `trap "" TERM HUP; while :; do sleep 1; done`, marker},
		stdin: strings.NewReader(`{"jsonrpc":"2.0","method":"notifications/initialized"}` + "\n"),
	})
	wantOK(t, r)
	if left := processesNaming(marker); len(left) > 0 {
		t.Errorf("processes left behind: %q", left)
	}
}

// TestMCPWrapUsage: a bad --redact pattern, or no server command, is
// refused before anything runs, with exit code 125; the flags are hutch
// run's, and --audit and --redact.
func TestMCPWrapUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"mcp", "wrap", "--redact", "(", "--", "true"}, "--redact: error parsing regexp"},
		{[]string{"mcp", "wrap", "--redact", "x*", "--", "true"}, `--redact: "x*" matches the empty string`},
		{[]string{"mcp", "wrap"}, "no server command given"},
	} {
		r := hutch(t, invocation{args: tc.args})
		wantCode(t, r, 125)
		if !strings.Contains(r.stderr, tc.want) {
			t.Errorf("hutch %q: stderr does not say %q:\n%s", tc.args, tc.want, r.stderr)
		}
	}
	// hutch run's flags, from their one definition, and two of its own.
	wantRunFlagsAnd(t, flagNames(t, "run"), []string{"mcp", "wrap"}, "audit", "redact")
}

// TestMCPExamplePolicies: the example policies in examples/mcp load.
func TestMCPExamplePolicies(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "examples", "mcp", "*.yaml"))
	if err != nil || len(files) < 2 {
		t.Fatalf("example policies: %v %v", files, err)
	}
	for _, f := range files {
		abs, err := filepath.Abs(f)
		if err != nil {
			t.Fatal(err)
		}
		r := hutch(t, invocation{args: []string{"policy", "show", "--policy", abs}})
		wantOK(t, r)
		if !strings.Contains(r.stdout, "network:") {
			t.Errorf("%s: %s", f, r)
		}
	}
}

// readLines returns the lines of a file.
func readLines(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	return out
}

// processesNaming lists the command lines of the processes whose command
// line holds s.
func processesNaming(s string) []string {
	var out []string
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "cmdline"))
		if err == nil && strings.Contains(string(b), s) {
			out = append(out, strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	return out
}
