package mcphttp

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/api"
	"github.com/hutch-sandbox/hutch/internal/audit"
	"github.com/hutch-sandbox/hutch/internal/mcp"
	"github.com/hutch-sandbox/hutch/internal/metrics"
	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// TestCallerChosenNamesBounded: what a caller names in a tool call (the
// tool, the sandbox) reaches the audit log and the operator's metrics
// bounded: a tool that does not exist is counted as one label whatever
// its name, and neither a long tool name nor a long sandbox_id makes a
// long audit record.
func TestCallerChosenNamesBounded(t *testing.T) {
	logPath := filepath.Join(t.TempDir(), audit.FileName)
	al, err := audit.Open(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer al.Close()
	e := newEnv(t, Config{Audit: al})
	tok := e.token(t, "alice")
	c := e.httpClient(t, tok)
	long := strings.Repeat("x", 1<<20)
	for i, name := range []string{"nope-1", "nope-2", "nope-3", long} {
		body := `{"jsonrpc":"2.0","id":` + string(rune('1'+i)) + `,"method":"tools/call","params":{"name":"` + name + `","arguments":{}}}`
		e.post(t, c, e.tcp+StatelessPath, body, nil)
	}
	e.post(t, c, e.tcp+StatelessPath, `{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"sandbox_info","arguments":{"sandbox_id":"`+long+`"}}}`, nil)
	if m := exposition(t); strings.Contains(m, "nope") || strings.Contains(m, "xxxx") || !strings.Contains(m, `tool="unknown"`) {
		t.Errorf("calls of tools that do not exist are counted under their names, not as unknown:\n%.2000s", m)
	}
	f, err := os.Open(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r := bufio.NewReader(f)
	n := 0
	for {
		line, err := r.ReadString('\n')
		if line == "" && err != nil {
			break
		}
		n++
		if len(line) > 4096 {
			t.Errorf("audit record %d: %d bytes", n, len(line))
		}
	}
	if n != 5 {
		t.Errorf("%d audit records of 5 calls", n)
	}
}

// exposition is ToolCalls as /metrics shows it.
func exposition(t *testing.T) string {
	t.Helper()
	var r metrics.Registry
	r.Register(ToolCalls)
	var b strings.Builder
	if _, err := r.WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestLinksOfOneTenantStay: a tenant that publishes links without end
// (a file_read of a binary file, an exec with long output, each makes
// one) forgets its own oldest links, never another tenant's.
func TestLinksOfOneTenantStay(t *testing.T) {
	e := newEnv(t, Config{})
	cs := e.connect(t, e.token(t, "alice"), Path, "")
	id, _ := structured(t, callTool(t, cs, "sandbox_create", nil))["sandbox_id"].(string)
	callTool(t, cs, "file_write", map[string]any{"sandbox_id": id, "path": "b.bin", "content": "AAEC", "encoding": "base64"})
	u, _ := structured(t, callTool(t, cs, "file_read", map[string]any{"sandbox_id": id, "path": "b.bin"}))["url"].(string)
	if u == "" {
		t.Fatal("file_read of a binary file gave no link")
	}
	for range mcp.MaxLinks + 1 {
		if _, err := e.h.links.Publish("bob", e.tcp+LinksPath, "x", "", 1, func(_ context.Context, w io.Writer) error {
			_, err := io.WriteString(w, "x")
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(b) != "\x00\x01\x02" {
		t.Errorf("alice's link after bob published %d: %d %q", mcp.MaxLinks+1, resp.StatusCode, b)
	}
}

// TestSessionIDsElsewhere: another tenant's session id opens no stream
// of it (GET), and on the stateless path, where ids mean nothing, it is
// served as the caller's own request, which reaches none of the session
// owner's exec sessions.
func TestSessionIDsElsewhere(t *testing.T) {
	e := newEnv(t, Config{})
	alice, bob := e.token(t, "alice"), e.token(t, "bob")
	a := e.connect(t, alice, Path, "")
	id, _ := structured(t, callTool(t, a, "sandbox_create", nil))["sandbox_id"].(string)
	session, _ := structured(t, callTool(t, a, "exec", map[string]any{"sandbox_id": id, "command": "cat", "yield_ms": 1}))["session_id"].(string)
	if session == "" {
		t.Fatal("no exec session")
	}
	req, err := http.NewRequest(http.MethodGet, e.tcp+Path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Mcp-Session-Id", a.ID())
	req.Header.Set("MCP-Protocol-Version", "2025-11-25")
	resp, err := e.httpClient(t, bob).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("bob's GET of alice's session's stream: %d, want 403", resp.StatusCode)
	}
	poll := `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"exec_poll","arguments":{"session_id":"` + session + `","stdin":"bob\n"}}}`
	hdr := map[string]string{"Mcp-Session-Id": a.ID(), "MCP-Protocol-Version": "2025-11-25"}
	if status, _, body := e.post(t, e.httpClient(t, bob), e.tcp+StatelessPath, poll, hdr); status == http.StatusOK && !strings.Contains(body, "no such exec session") {
		t.Errorf("bob's exec_poll of alice's exec session on the stateless path with her session id: %d %s", status, body)
	}
	out := structured(t, callTool(t, a, "exec_poll", map[string]any{"session_id": session, "close_stdin": true, "yield_ms": 60000}))
	if out["output"] != "" || out["exit_code"] != float64(0) {
		t.Errorf("alice's exec session: %v", out)
	}
}

// TestBodiesAtOnce: a tenant's requests being served hold at most two
// bodies of MaxBody at once (the SDK reads each whole into memory): a
// third is refused (429, quota) while they are read, another tenant's is
// not, and once they ended the tenant is served again.
func TestBodiesAtOnce(t *testing.T) {
	const maxBody = 4096
	e := newEnv(t, Config{MaxBody: maxBody})
	alice, bob := e.token(t, "alice"), e.token(t, "bob")
	ping := func(n int) string {
		b := `{"jsonrpc":"2.0","id":1,"method":"ping","params":{"_meta":{"pad":"`
		return b + strings.Repeat("x", n-len(b)-len(`"}}}`)) + `"}}}`
	}
	type held struct {
		w    *io.PipeWriter
		done chan int
	}
	var slow []held
	for range 2 {
		pr, pw := io.Pipe()
		req, err := http.NewRequest(http.MethodPost, e.tcp+StatelessPath, pr)
		if err != nil {
			t.Fatal(err)
		}
		req.ContentLength = maxBody
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		h := held{pw, make(chan int, 1)}
		go func() {
			resp, err := e.httpClient(t, alice).Do(req)
			if err != nil {
				h.done <- 0
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			h.done <- resp.StatusCode
		}()
		if _, err := io.WriteString(pw, ping(maxBody)[:10]); err != nil {
			t.Fatal(err)
		}
		slow = append(slow, h)
	}
	held2 := func() bool {
		e.h.mu.Lock()
		defer e.h.mu.Unlock()
		return e.h.tenants["alice"] != nil && e.h.tenants["alice"].bodies == 2*maxBody
	}
	if !testutil.Eventually(time.Minute, held2) {
		t.Fatal("the two slow requests are not being served")
	}
	status, _, body := e.post(t, e.httpClient(t, alice), e.tcp+StatelessPath, ping(100), nil)
	if status != http.StatusTooManyRequests || apiError(t, body).Code != api.CodeQuota {
		t.Errorf("alice's third request while two of %d bytes are read: %d %s, want 429 quota", maxBody, status, body)
	}
	if status, _, body := e.post(t, e.httpClient(t, bob), e.tcp+StatelessPath, ping(maxBody), nil); status == http.StatusTooManyRequests {
		t.Errorf("bob's request while alice's are read: %d %s", status, body)
	}
	for _, h := range slow {
		if _, err := io.WriteString(h.w, ping(maxBody)[10:]); err != nil {
			t.Fatal(err)
		}
		h.w.Close()
		if status := <-h.done; status == http.StatusTooManyRequests || status == 0 {
			t.Errorf("a slow request: %d", status)
		}
	}
	if status, _, body := e.post(t, e.httpClient(t, alice), e.tcp+StatelessPath, ping(maxBody), nil); status == http.StatusTooManyRequests {
		t.Errorf("alice's request after hers ended: %d %s", status, body)
	}
}

// TestSessionsCountedWhereverTheirServer: a session counts against its
// tenant's bound however its server is kept: an initialize whose body
// comes slowly, while the tenant's requests under other Hosts (other
// ports) make new servers and drop those without an initialized session,
// is counted once it is initialized.
func TestSessionsCountedWhereverTheirServer(t *testing.T) {
	e := newEnv(t, Config{MaxSessions: 1})
	tok := e.token(t, "alice")
	c := e.httpClient(t, tok)
	pw, done := slowInitialize(t, c, e.tcp+Path, "127.0.0.1:1")
	connected := func() bool {
		e.h.mu.Lock()
		defer e.h.mu.Unlock()
		t := e.h.tenants["alice"]
		if t == nil {
			return false
		}
		for k, s := range t.servers {
			for range s.Sessions() {
				return strings.Contains(k.linkBase, ":1/")
			}
		}
		return false
	}
	if !testutil.Eventually(time.Minute, connected) {
		t.Fatal("the slow initialize has no session")
	}
	for port := 2; port < 2+maxServers; port++ {
		ping := `{"jsonrpc":"2.0","id":1,"method":"ping"}`
		e.post(t, c, e.tcp+StatelessPath, ping, map[string]string{"Host": "127.0.0.1:" + strconv.Itoa(port), "MCP-Protocol-Version": "2025-11-25"})
	}
	io.WriteString(pw, initialize[10:])
	pw.Close()
	resp := <-done
	if resp == nil {
		t.FailNow()
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Mcp-Session-Id") == "" {
		t.Fatalf("the slow initialize: %d", resp.StatusCode)
	}
	if status, _, body := e.post(t, c, e.tcp+Path, initialize, nil); status != http.StatusTooManyRequests {
		t.Errorf("a second session with one open and a bound of 1: %d %s, want 429", status, body)
	}
}

// TestSessionsStartingCounted: with a bound of one session, a second
// initialize while the first is still being served (its body not all
// sent) is refused — concurrent starts cannot pass the bound together —
// and the first goes on to open its session.
func TestSessionsStartingCounted(t *testing.T) {
	e := newEnv(t, Config{MaxSessions: 1})
	tok := e.token(t, "alice")
	c := e.httpClient(t, tok)
	pw, done := slowInitialize(t, c, e.tcp+Path, "")
	serving := func() bool { // the SDK has a session for it, not yet initialized
		e.h.mu.Lock()
		defer e.h.mu.Unlock()
		t := e.h.tenants["alice"]
		if t == nil {
			return false
		}
		for _, s := range t.servers {
			for range s.Sessions() {
				return true
			}
		}
		return false
	}
	if !testutil.Eventually(time.Minute, serving) {
		t.Fatal("the slow initialize is not being served")
	}
	if status, _, body := e.post(t, c, e.tcp+Path, initialize, nil); status != http.StatusTooManyRequests {
		t.Errorf("a second initialize while the first is served, with a bound of 1: %d %s, want 429", status, body)
	}
	io.WriteString(pw, initialize[10:])
	pw.Close()
	resp := <-done
	if resp == nil {
		t.FailNow()
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Mcp-Session-Id") == "" {
		t.Errorf("the first initialize: %d, session %q", resp.StatusCode, resp.Header.Get("Mcp-Session-Id"))
	}
}

// slowInitialize starts an initialize POST to url (with Host host, when
// set) whose body comes slowly: its first bytes are sent, the rest when
// the caller writes them to pw and closes it; done gets the answer.
func slowInitialize(t *testing.T, c *http.Client, url, host string) (pw *io.PipeWriter, done <-chan *http.Response) {
	t.Helper()
	pr, pw := io.Pipe()
	req, err := http.NewRequest(http.MethodPost, url, pr)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	req.ContentLength = int64(len(initialize))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	ch := make(chan *http.Response, 1)
	go func() {
		resp, err := c.Do(req)
		if err != nil {
			t.Error(err)
		}
		ch <- resp
	}()
	io.WriteString(pw, initialize[:10])
	return pw, ch
}
