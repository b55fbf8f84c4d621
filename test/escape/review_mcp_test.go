//go:build linux

package escape

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/hutch-sandbox/hutch/internal/audit"
	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// Attacks on hutch serve's MCP tools (/mcp, /mcp/stateless) from its
// tenants (ESCAPES 26, 30; S5 for the file tools): the same daemon as the
// other served tests, driven by the MCP SDK's client.

// bearerTransport adds a tenant's token to every request.
type bearerTransport struct{ token string }

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// mcpSession connects to the daemon's path (/mcp or /mcp/stateless) over
// TCP with token.
func (s *served) mcpSession(t *testing.T, token, path string) *sdk.ClientSession {
	t.Helper()
	c := sdk.NewClient(&sdk.Implementation{Name: "escape", Version: "1"}, nil)
	cs, err := c.Connect(context.Background(), &sdk.StreamableClientTransport{
		Endpoint: s.url + path, HTTPClient: &http.Client{Transport: bearerTransport{token}}, MaxRetries: -1,
	}, nil)
	if err != nil {
		t.Fatalf("connect to %s: %v", path, err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// mcpCall calls a tool and returns its result's text, its structured
// content and whether it is a tool error.
func mcpCall(t *testing.T, cs *sdk.ClientSession, name string, args map[string]any) (string, map[string]any, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	var out map[string]any
	if res.StructuredContent != nil {
		j, _ := json.Marshal(res.StructuredContent)
		_ = json.Unmarshal(j, &out)
	}
	return b.String(), out, res.IsError
}

// TestItem30_MCPTenants: through the MCP tools, on both paths, a tenant
// reaches none of another's sandboxes, exec sessions or MCP sessions, and
// learns nothing from the errors (another's id answers as an id that never
// was); its sandbox_list shows only its own. Every state change, and
// every refused call, leaves an audit record naming the tenant and the
// sandbox.
func TestItem30_MCPTenants(t *testing.T) {
	forEachServedTier(t, func(t *testing.T, tier []string) {
		d := startServed(t, "", true, tier...)
		alice, bob := d.token(t, "alice"), d.token(t, "bob")
		a := d.mcpSession(t, alice, "/mcp")
		_, sb, isErr := mcpCall(t, a, "sandbox_create", nil)
		id, _ := sb["sandbox_id"].(string)
		if isErr || id == "" {
			t.Fatalf("alice's sandbox_create: %v", sb)
		}
		_, ex, _ := mcpCall(t, a, "exec", map[string]any{"sandbox_id": id, "command": "cat", "yield_ms": 1})
		session, _ := ex["session_id"].(string)
		if session == "" {
			t.Fatalf("exec of cat: no session: %v", ex)
		}
		mcpCall(t, a, "file_write", map[string]any{"sandbox_id": id, "path": "secret.txt", "content": "alice's secret\n"})

		// A made-up id of the same shape, which names nothing.
		ghost := id[:len(id)-4] + "zzzz"
		if ghost == id {
			ghost = id[:len(id)-4] + "yyyy"
		}
		ghostSession := strings.Repeat("0", len(session))
		for _, path := range []string{"/mcp", "/mcp/stateless"} {
			b := d.mcpSession(t, bob, path)
			for _, c := range []struct {
				tool string
				args func(sandbox, session string) map[string]any
			}{
				{"sandbox_info", func(s, _ string) map[string]any { return map[string]any{"sandbox_id": s} }},
				{"file_read", func(s, _ string) map[string]any { return map[string]any{"sandbox_id": s, "path": "secret.txt"} }},
				{"file_list", func(s, _ string) map[string]any { return map[string]any{"sandbox_id": s} }},
				{"file_write", func(s, _ string) map[string]any {
					return map[string]any{"sandbox_id": s, "path": "secret.txt", "content": "bob was here\n"}
				}},
				{"file_edit", func(s, _ string) map[string]any {
					return map[string]any{"sandbox_id": s, "path": "secret.txt", "old_string": "alice", "new_string": "bob"}
				}},
				{"exec", func(s, _ string) map[string]any { return map[string]any{"sandbox_id": s, "command": "id"} }},
				{"port_url", func(s, _ string) map[string]any { return map[string]any{"sandbox_id": s, "port": 80} }},
				{"exec_poll", func(_, ss string) map[string]any { return map[string]any{"session_id": ss, "stdin": "bob\n"} }},
				{"exec_kill", func(_, ss string) map[string]any { return map[string]any{"session_id": ss} }},
				{"sandbox_kill", func(s, _ string) map[string]any { return map[string]any{"sandbox_id": s} }},
			} {
				theirs, _, err1 := mcpCall(t, b, c.tool, c.args(id, session))
				none, _, err2 := mcpCall(t, b, c.tool, c.args(ghost, ghostSession))
				if !err1 || !err2 {
					t.Errorf("%s: bob's call on alice's (error %v: %q) or on nothing (error %v: %q) succeeded", path, err1, theirs, err2, none)
				}
				theirs = strings.NewReplacer(id, "ID", session, "SESSION").Replace(theirs)
				none = strings.NewReplacer(ghost, "ID", ghostSession, "SESSION").Replace(none)
				if theirs != none {
					t.Errorf("%s %s: alice's answers %q, nothing answers %q", path, c.tool, theirs, none)
				}
			}
			text, list, _ := mcpCall(t, b, "sandbox_list", nil)
			if strings.Contains(text, id) || len(list["sandboxes"].([]any)) != 0 {
				t.Errorf("%s: bob's sandbox_list: %s", path, text)
			}
		}
		// Alice's sandbox, file and command are as they were.
		text, out, _ := mcpCall(t, a, "file_read", map[string]any{"sandbox_id": id, "path": "secret.txt"})
		if out["content"] != "alice's secret\n" {
			t.Errorf("alice's file after bob's attempts: %s", text)
		}
		text, out, _ = mcpCall(t, a, "exec_poll", map[string]any{"session_id": session, "stdin": "alice\n", "close_stdin": true, "yield_ms": 60000})
		if out["output"] != "alice\n" || out["exit_code"] != float64(0) {
			t.Errorf("alice's exec session after bob's attempts: %s", text)
		}

		// Every call left a record: alice's state changes and bob's
		// refusals, with the tenant and the sandbox.
		mcpCall(t, a, "file_edit", map[string]any{"sandbox_id": id, "path": "secret.txt", "old_string": "secret", "new_string": "note"})
		_, ex, _ = mcpCall(t, a, "exec", map[string]any{"sandbox_id": id, "command": "sleep 600", "yield_ms": 1})
		mcpCall(t, a, "exec_kill", map[string]any{"session_id": ex["session_id"]})
		mcpCall(t, a, "sandbox_kill", map[string]any{"sandbox_id": id})
		want := map[string]int{}
		for _, tool := range []string{"exec", "file_write", "exec_poll", "file_edit", "exec_kill", "sandbox_kill"} {
			want["alice "+tool]++
		}
		got := map[string]int{}
		if !testutil.Eventually(time.Minute, func() bool {
			got = mcpAudit(t, d, id)
			for k := range want {
				if got[k] == 0 {
					return false
				}
			}
			return got["bob exec error"] == 2
		}) {
			t.Errorf("audit records of sandbox %s: %v; want every one of %v, and bob's 2 refused execs", id, got, want)
		}
	})
}

// mcpAudit counts the audit log's mcp_call records on sandbox id by
// "TENANT TOOL" (and "TENANT TOOL error" for a refused call).
func mcpAudit(t *testing.T, d *served, id string) map[string]int {
	b, err := os.ReadFile(filepath.Join(d.stateDir, audit.FileName))
	if err != nil {
		return nil
	}
	out := map[string]int{}
	for _, line := range strings.Split(string(b), "\n") {
		var e audit.Entry
		if json.Unmarshal([]byte(line), &e) != nil || e.Action != "mcp_call" || e.Sandbox != id {
			continue
		}
		k := e.Tenant + " " + e.Tool
		if e.Error != "" {
			k += " error"
		}
		// What ran and what was written is named, as hutch's API and
		// envd name them.
		switch {
		case e.Tool == "exec" && len(e.Command) != 3,
			(e.Tool == "file_write" || e.Tool == "file_edit") && e.Error == "" && (len(e.Paths) != 1 || !strings.HasSuffix(e.Paths[0], "/secret.txt")):
			k += " unnamed"
		}
		out[k]++
	}
	return out
}

// TestItem30_MCPFileToolsHostReach (S5, S1): the file tools act in the
// sandbox's own view, as its agent: no path, /proc/1/root and symlinks a
// command planted included, reads a host file the sandbox may not read
// (a root-only directory, the daemon's state) or changes a host file it
// sees read-only; the agent's environment holds nothing of the daemon's.
func TestItem30_MCPFileToolsHostReach(t *testing.T) {
	forEachServedTier(t, func(t *testing.T, tier []string) {
		d := startServed(t, "", true, tier...)
		cs := d.mcpSession(t, d.token(t, "alice"), "/mcp")
		closed, err := os.MkdirTemp("/var/lib", "hutch-escape-closed-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(closed) })
		const secret = "host secret of the MCP test"
		writeFile(t, filepath.Join(closed, "file"), secret+"\n", 0o600, 0)
		if err := os.Chmod(closed, 0o700); err != nil {
			t.Fatal(err)
		}
		// A host directory the sandbox sees (read-only); /var/tmp, where
		// hostDir makes them, it does not.
		visible, err := os.MkdirTemp("/var/lib", "hutch-escape-visible-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(visible) })
		if err := os.Chmod(visible, 0o777); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(visible, "file"), "host file\n", 0o666, 0)
		beforeClosed, beforeVisible, beforeState := snapshot(t, closed), snapshot(t, visible), snapshot(t, d.stateDir)

		_, sb, _ := mcpCall(t, cs, "sandbox_create", nil)
		id, _ := sb["sandbox_id"].(string)
		if id == "" {
			t.Fatalf("sandbox_create: %v", sb)
		}
		links := map[string]string{
			"to-closed":       filepath.Join(closed, "file"),
			"to-proc-closed":  "/proc/1/root" + filepath.Join(closed, "file"),
			"to-visible":      filepath.Join(visible, "file"),
			"to-proc-visible": "/proc/1/root" + filepath.Join(visible, "file"),
			"to-state":        d.stateDir,
			"to-new":          filepath.Join(visible, "new"),
		}
		var script strings.Builder
		for name, target := range links {
			script.WriteString("ln -s '" + target + "' " + name + "; ")
		}
		if text, _, isErr := mcpCall(t, cs, "exec", map[string]any{"sandbox_id": id, "command": script.String()}); isErr {
			t.Fatalf("planting links: %s", text)
		}
		for _, c := range []struct {
			tool string
			args map[string]any
		}{
			{"file_read", map[string]any{"path": filepath.Join(closed, "file")}},
			{"file_read", map[string]any{"path": "/proc/1/root" + filepath.Join(closed, "file")}},
			{"file_read", map[string]any{"path": "/proc/self/root" + filepath.Join(closed, "file")}},
			{"file_read", map[string]any{"path": "to-closed"}},
			{"file_read", map[string]any{"path": "to-proc-closed"}},
			{"file_read", map[string]any{"path": filepath.Join(d.stateDir, audit.FileName)}},
			{"file_read", map[string]any{"path": "to-state/" + audit.FileName}},
			{"file_list", map[string]any{"path": closed}},
			{"file_list", map[string]any{"path": "/proc/1/root" + closed}},
			{"file_list", map[string]any{"path": d.stateDir, "depth": 5}},
			{"file_list", map[string]any{"path": "to-state", "depth": 5}},
			{"file_read", map[string]any{"path": "/proc/1/fd/3"}},
			{"file_read", map[string]any{"path": "/proc/1/mem"}},
			{"exec", map[string]any{"command": "cat file 2>&1; ls -a . 2>&1", "cwd": "/proc/1/root" + closed}},
			{"exec", map[string]any{"command": "cat " + audit.FileName + " 2>&1; ls -a 2>&1", "cwd": d.stateDir}},
		} {
			c.args["sandbox_id"] = id
			text, out, _ := mcpCall(t, cs, c.tool, c.args)
			j, _ := json.Marshal(out)
			for _, leak := range []string{secret, `"mcp_call"`, "sandbox_create", "state.db"} {
				if strings.Contains(text, leak) || strings.Contains(string(j), leak) {
					t.Errorf("%s %v shows %q of the host: %s", c.tool, c.args, leak, clip(text))
				}
			}
		}
		// The control: the view shows what the sandbox may see, through
		// the same links.
		for _, p := range []string{filepath.Join(visible, "file"), "to-visible", "to-proc-visible"} {
			if text, out, _ := mcpCall(t, cs, "file_read", map[string]any{"sandbox_id": id, "path": p}); out["content"] != "host file\n" {
				t.Errorf("file_read of a host file the sandbox sees (%s): %s", p, text)
			}
		}
		text, out, _ := mcpCall(t, cs, "file_read", map[string]any{"sandbox_id": id, "path": "/proc/1/environ"})
		if content, _ := out["content"].(string); strings.Contains(content, d.dir) || strings.Contains(text, d.dir) {
			t.Errorf("the agent's environment has the daemon's: %q", clip(text))
		}
		for _, c := range []struct {
			tool string
			args map[string]any
		}{
			{"file_write", map[string]any{"path": filepath.Join(visible, "file"), "content": "changed\n"}},
			{"file_write", map[string]any{"path": "/proc/1/root" + filepath.Join(visible, "file"), "content": "changed\n"}},
			{"file_write", map[string]any{"path": "to-visible", "content": "changed\n"}},
			{"file_write", map[string]any{"path": "to-proc-visible", "content": "changed\n"}},
			{"file_write", map[string]any{"path": "to-new", "content": "new\n"}},
			{"file_write", map[string]any{"path": filepath.Join(visible, "sub", "new"), "content": "new\n"}},
			{"file_write", map[string]any{"path": "to-state/planted", "content": "new\n"}},
			{"file_write", map[string]any{"path": filepath.Join(d.stateDir, "planted"), "content": "new\n"}},
			{"file_edit", map[string]any{"path": filepath.Join(visible, "file"), "old_string": "host", "new_string": "edited"}},
			{"file_edit", map[string]any{"path": "to-proc-visible", "old_string": "host", "new_string": "edited"}},
			{"file_edit", map[string]any{"path": "to-closed", "old_string": "host", "new_string": "edited"}},
		} {
			c.args["sandbox_id"] = id
			mcpCall(t, cs, c.tool, c.args)
		}
		sameTree(t, closed, beforeClosed)
		sameTree(t, visible, beforeVisible)
		after := snapshot(t, d.stateDir)
		for k := range after {
			// sandboxes/ID/layer is the sandbox's own root layer (a tmpfs
			// of its writes, nosuid and nodev, attached there for
			// snapshots): what it wrote at those paths of its view is
			// there, and nowhere else of the daemon's.
			if p := strings.SplitN(k, "/", 4); len(p) >= 3 && p[0] == "sandboxes" && p[2] == "layer" {
				continue
			}
			if _, ok := beforeState[k]; !ok && strings.Contains(k, "planted") {
				t.Errorf("the daemon's state directory has a file the sandbox wrote: %s", k)
			}
		}
	})
}

// TestItem26_MCPSandboxCreate: sandbox_create asks the daemon for no more
// than hutch's API lets a tenant: allow_domains naming loopback, private,
// link-local, metadata or this host's addresses, or every host on a
// daemon without the internet, is refused naming the entry, and no
// sandbox is made; the operator's socket may (its sessions are its own).
func TestItem26_MCPSandboxCreate(t *testing.T) {
	forEachServedTier(t, func(t *testing.T, tier []string) {
		d := startServed(t, "", true, append(slices.Clone(tier), "--no-internet")...)
		for _, path := range []string{"/mcp", "/mcp/stateless"} {
			cs := d.mcpSession(t, d.token(t, "alice"), path)
			entries := []string{"127.0.0.1", "localhost", "169.254.169.254", "10.1.2.3", "[::1]", "::ffff:127.0.0.1", "0.0.0.0", "*", "192.168.0.0/16", "2130706433"}
			if a := hostAddress(); a != "" {
				entries = append(entries, a)
			}
			for _, e := range entries {
				text, out, isErr := mcpCall(t, cs, "sandbox_create", map[string]any{"allow_domains": []string{"example.com", e}})
				if !isErr {
					t.Errorf("%s: sandbox_create allowing %q: %v", path, e, out)
					mcpCall(t, cs, "sandbox_kill", map[string]any{"sandbox_id": out["sandbox_id"]})
					continue
				}
				if !strings.Contains(text, e) {
					t.Errorf("%s: sandbox_create allowing %q: %q does not name it", path, e, text)
				}
			}
			for _, args := range []map[string]any{
				{"timeout_s": 30 * 24 * 3600},
				{"timeout_s": -1},
			} {
				if text, out, isErr := mcpCall(t, cs, "sandbox_create", args); !isErr {
					t.Errorf("%s: sandbox_create %v: %v %s", path, args, out, text)
				}
			}
			if text, list, _ := mcpCall(t, cs, "sandbox_list", nil); len(list["sandboxes"].([]any)) != 0 {
				t.Errorf("%s: refused creates left sandboxes: %s", path, text)
			}
		}
	})
}
