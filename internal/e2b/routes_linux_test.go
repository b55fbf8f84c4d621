package e2b

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/agent"
	"github.com/hutch-sandbox/hutch/internal/api"
	"github.com/hutch-sandbox/hutch/internal/audit"
	"github.com/hutch-sandbox/hutch/internal/daemon"
	"github.com/hutch-sandbox/hutch/internal/envd"
	"github.com/hutch-sandbox/hutch/internal/policy"
)

// TestEveryRouteAudited walks every route of every front end of hutch
// serve — hutch's API, E2B's REST API, envd — from the tables they
// register (api.Routes, Routes, envd.Routes), over a real daemon: each
// route that changes something must leave an audit record of its action;
// each route its table calls read-only must leave the audit log, the
// tenant's sandboxes and the sandbox's files and processes as they were.
// A route without a call here fails the test: a route added later is
// walked too, or the test says what is missing.
func TestEveryRouteAudited(t *testing.T) {
	f := newRealFixture(t)
	srv := httptest.NewServer(f.srv)
	defer srv.Close()
	w := &walker{t: t, f: f, url: srv.URL, key: f.keys["alice"], client: srv.Client()}
	w.main, w.tok = f.create(t, "alice")
	// Before the server closes, which waits for the streams of the
	// commands still running there.
	defer func() { _ = f.dm.Destroy(context.Background(), "alice", w.main) }()
	w.writeFile(t, "/home/user/seen.txt", "seen")

	// Every route of every table, named by front end.
	var routes []audit.Route
	fronts := map[string]string{}
	for front, rs := range map[string][]audit.Route{"hutch": api.Routes(), "e2b": Routes(), "envd": envd.Routes()} {
		for _, r := range rs {
			r.Check()
			key := front + " " + r.Pattern
			fronts[key] = front
			routes = append(routes, audit.Route{Pattern: key, Action: r.Action})
		}
	}
	sort.Slice(routes, func(i, j int) bool { return routes[i].Pattern < routes[j].Pattern })
	calls := w.calls()
	for _, r := range routes {
		if calls[r.Pattern] == nil {
			t.Errorf("route %s (%s) has no call in this test: add one, and audit the route if it changes anything", r.Pattern, r.Action)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(calls)) {
		if _, ok := fronts[k]; !ok {
			t.Errorf("the call %s is for no route of the tables", k)
		}
	}
	// Read-only routes first: commands and watches that audited calls
	// end leave records of their own, which must not fall into a
	// read-only call's window.
	for _, readOnly := range []bool{true, false} {
		for _, r := range routes {
			c := calls[r.Pattern]
			if c == nil || (r.Action == audit.ReadOnly) != readOnly {
				continue
			}
			t.Run(r.Pattern, func(t *testing.T) { w.walk(t, r, c) })
		}
	}
}

// walker calls routes over a real daemon, as the tenant alice.
type walker struct {
	t      *testing.T
	f      *realFixture
	url    string
	key    string // alice's API key, also her hutch token
	client *http.Client
	// main is a sandbox made through E2B (with the user "user" and an
	// envd token, tok) for the calls that change nothing or only its
	// files.
	main, tok string
	// tmpl and build are the template and build of built.
	tmpl, build string
	// vol and volToken are alice's volume "walked" and its token.
	vol, volToken string
}

// call is one route's call: prep makes what it needs (sandboxes,
// commands, files) and returns the request itself, which checks its
// answer.
type call func(t *testing.T) (run func(t *testing.T))

// walk runs one call and checks the audit log and, for a read-only
// route, the state.
func (w *walker) walk(t *testing.T, r audit.Route, c call) {
	run := c(t)
	before := readAudit(t, w.f.auditPath)
	var state string
	if r.Action == audit.ReadOnly {
		state = w.state(t)
	}
	run(t)
	if r.Action == audit.ReadOnly {
		if after := w.state(t); after != state {
			t.Errorf("a read-only route changed the state:\n--- before\n%s\n--- after\n%s", state, after)
		}
		if after := readAudit(t, w.f.auditPath); len(after) != len(before) {
			t.Errorf("a read-only route left audit records: %+v", after[len(before):])
		}
		return
	}
	// An answer goes out before its record; a command is recorded once
	// it ended.
	deadline := time.Now().Add(20 * time.Second)
	for {
		after := readAudit(t, w.f.auditPath)
		if slices.ContainsFunc(after[len(before):], func(e audit.Entry) bool { return e.Action == r.Action && e.Tenant == "alice" }) {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("no audit record %q after the call; new records: %+v", r.Action, after[len(before):])
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// volume returns the id and token of alice's volume "walked" (with a
// file /seen.txt), made by the first call.
func (w *walker) volume(t *testing.T) (string, string) {
	t.Helper()
	if w.vol == "" {
		var v volumeJSON
		if err := json.Unmarshal(w.e2b(t, "POST", "/volumes", `{"name":"walked"}`, 201), &v); err != nil {
			t.Fatal(err)
		}
		w.vol, w.volToken = v.VolumeID, v.Token
		w.content(t, "PUT", "file?path=/seen.txt", "seen", 201)
	}
	return w.vol, w.volToken
}

// content sends a request of the content API for alice's volume "walked"
// (rest: what follows /volumecontent/ID/), with its token.
func (w *walker) content(t *testing.T, method, rest, body string, want int) []byte {
	t.Helper()
	status, b := w.do(t, nil, method, "/volumecontent/"+w.vol+"/"+rest, strings.NewReader(body), "Authorization", "Bearer "+w.volToken)
	expect(t, method+" "+rest, status, b, want)
	return b
}

// state describes what a tenant can change: alice's sandboxes (state,
// expiry, labels), and the main sandbox's files under its home and /tmp
// and its processes.
func (w *walker) state(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	var b strings.Builder
	infos, err := w.f.dm.List(ctx, "alice", nil, "")
	if err != nil {
		t.Fatal(err)
	}
	sort.Slice(infos, func(i, j int) bool { return infos[i].ID < infos[j].ID })
	for _, i := range infos {
		fmt.Fprintf(&b, "sandbox %s %s expires %s labels %v\n", i.ID, i.State, i.ExpiresAt.Format(time.RFC3339Nano), i.Labels)
	}
	c, err := w.f.dm.Agent(ctx, "alice", w.main)
	if err != nil {
		t.Fatal(err)
	}
	var walk func(dir string, depth int)
	walk = func(dir string, depth int) {
		fis, err := c.List(ctx, dir)
		if err != nil {
			fmt.Fprintf(&b, "%s: %v\n", dir, err)
			return
		}
		sort.Slice(fis, func(i, j int) bool { return fis[i].Name < fis[j].Name })
		for _, fi := range fis {
			p := dir + "/" + fi.Name
			fmt.Fprintf(&b, "file %s %v %d %s %d:%d\n", p, fi.Mode, fi.Size, fi.ModTime.Format(time.RFC3339Nano), fi.UID, fi.GID)
			if fi.IsDir && depth < 4 {
				walk(p, depth+1)
			}
		}
	}
	walk("/home/user", 0)
	walk("/tmp", 0)
	// alice's volumes and what they hold.
	for _, v := range w.f.vols.List("alice") {
		fmt.Fprintf(&b, "volume %s %s\n", v.ID, v.Name)
		dir, err := w.f.vols.Dir(v.ID)
		if err != nil {
			t.Fatal(err)
		}
		_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				fmt.Fprintf(&b, "%s: %v\n", p, err)
				return nil
			}
			fi, err := d.Info()
			if err == nil {
				st := fi.Sys().(*syscall.Stat_t)
				fmt.Fprintf(&b, "volume file %s %v %d %s %d:%d\n", p, fi.Mode(), fi.Size(), fi.ModTime().Format(time.RFC3339Nano), st.Uid, st.Gid)
			}
			return nil
		})
	}
	ps, err := c.ListProcesses(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i].PID < ps[j].PID })
	for _, p := range ps {
		fmt.Fprintf(&b, "process %d %q\n", p.PID, p.Args)
	}
	return b.String()
}

// do sends a request to the daemon's handler and returns the status and
// body; ctx may bound it (a stream that does not end by itself).
func (w *walker) do(t *testing.T, ctx context.Context, method, path string, body io.Reader, headers ...string) (int, []byte) {
	t.Helper()
	if ctx == nil {
		ctx = context.Background()
	}
	req, err := http.NewRequestWithContext(ctx, method, w.url+path, body)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := w.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body) // a bounded stream ends with its context
	return resp.StatusCode, b
}

// expect fails the test unless status is want.
func expect(t *testing.T, what string, status int, body []byte, want int) {
	t.Helper()
	if status != want {
		t.Fatalf("%s: %d %s, want %d", what, status, body, want)
	}
}

// hutch sends a request of hutch's API as alice.
func (w *walker) hutch(t *testing.T, method, path, body string, want int) []byte {
	t.Helper()
	status, b := w.do(t, nil, method, path, strings.NewReader(body), "Authorization", "Bearer "+w.key)
	expect(t, method+" "+path, status, b, want)
	return b
}

// e2b sends a request of E2B's REST API as alice.
func (w *walker) e2b(t *testing.T, method, path, body string, want int) []byte {
	t.Helper()
	status, b := w.do(t, nil, method, path, strings.NewReader(body), "X-API-Key", w.key, "Content-Type", "application/json")
	expect(t, method+" "+path, status, b, want)
	return b
}

// envdHeaders are the headers of an envd request for the main sandbox.
func (w *walker) envdHeaders(extra ...string) []string {
	return append([]string{"E2b-Sandbox-Id", w.main, "X-Access-Token", w.tok}, extra...)
}

// unary calls a unary procedure of envd on the main sandbox.
func (w *walker) unary(t *testing.T, proc, body string, want int) []byte {
	t.Helper()
	status, b := w.do(t, nil, "POST", "/"+proc, strings.NewReader(body), w.envdHeaders("Content-Type", "application/json")...)
	expect(t, proc, status, b, want)
	return b
}

// envelope is a Connect streaming request of one message.
func envelope(msg string) io.Reader {
	var b bytes.Buffer
	b.WriteByte(0)
	_ = binary.Write(&b, binary.BigEndian, uint32(len(msg)))
	b.WriteString(msg)
	return &b
}

// stream calls a server-streaming procedure of envd on the main sandbox
// and returns its whole answer; ctx may end it.
func (w *walker) stream(t *testing.T, ctx context.Context, proc, msg string) []byte {
	t.Helper()
	status, b := w.do(t, ctx, "POST", "/"+proc, envelope(msg), w.envdHeaders("Content-Type", "application/connect+json")...)
	expect(t, proc, status, b, http.StatusOK)
	return b
}

// background starts a command in the main sandbox through envd, which
// runs until the sandbox ends (or is signalled), and returns its pid.
func (w *walker) background(t *testing.T, pty bool) uint32 {
	t.Helper()
	msg := `{"process":{"cmd":"/bin/sleep","args":["600"]},"stdin":true}`
	if pty {
		msg = `{"process":{"cmd":"/bin/sleep","args":["600"]},"stdin":true,"pty":{"size":{"cols":80,"rows":24}}}`
	}
	req, err := http.NewRequest("POST", w.url+"/process.Process/Start", envelope(msg))
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range [][2]string{{"E2b-Sandbox-Id", w.main}, {"X-Access-Token", w.tok}, {"Content-Type", "application/connect+json"}} {
		req.Header.Set(h[0], h[1])
	}
	resp, err := w.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	// The stream stays open while the command runs; its first message
	// says the command started, with its pid.
	var head [5]byte
	if _, err := io.ReadFull(resp.Body, head[:]); err != nil {
		t.Fatalf("start a background command: %v", err)
	}
	msgb := make([]byte, binary.BigEndian.Uint32(head[1:]))
	if _, err := io.ReadFull(resp.Body, msgb); err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = io.Copy(io.Discard, resp.Body); resp.Body.Close() }()
	var ev struct {
		Event struct {
			Start struct {
				PID uint32 `json:"pid"`
			} `json:"start"`
		} `json:"event"`
	}
	if err := json.Unmarshal(msgb, &ev); err != nil || ev.Event.Start.PID == 0 {
		t.Fatalf("the start of a background command: %s, %v", msgb, err)
	}
	return ev.Event.Start.PID
}

// writeFile writes a file in the main sandbox through its agent (no
// front end: nothing is audited).
func (w *walker) writeFile(t *testing.T, path, data string) {
	t.Helper()
	c, err := w.f.dm.Agent(context.Background(), "alice", w.main)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.WriteFile(context.Background(), path, strings.NewReader(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// spare makes a sandbox of alice's through the daemon (no front end:
// nothing is audited), paused if asked, destroyed when the test ends.
func (w *walker) spare(t *testing.T, paused bool) string {
	t.Helper()
	ctx := context.Background()
	info, err := w.f.dm.Create(ctx, "alice", daemon.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.f.dm.Destroy(context.Background(), "alice", info.ID) })
	if paused {
		if _, err := w.f.dm.Pause(ctx, "alice", info.ID); err != nil {
			t.Fatal(err)
		}
	}
	return info.ID
}

// question makes a spare sandbox of alice's whose approvals ask about
// git push, starts git push in it (held until answered, or until the
// sandbox ends when the test does) and returns the question's id.
func (w *walker) question(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	info, err := w.f.dm.Create(ctx, "alice", daemon.CreateRequest{Policy: policy.Spec{Approvals: policy.Approvals{
		Preset: "full", Commands: []policy.CommandRule{{Action: "ask", Args: []string{"git", "push"}}},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.f.dm.Destroy(context.Background(), "alice", info.ID) })
	c, err := w.f.dm.Agent(ctx, "alice", info.ID)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = c.Exec(ctx, agent.ExecRequest{Args: []string{"git", "push"}}) }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if list := w.f.dm.Approvals("alice", info.ID); len(list) > 0 {
			return list[0].ID
		}
		if time.Now().After(deadline) {
			t.Fatal("git push asked no question")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// snapshot takes a snapshot of a spare sandbox of alice's and returns
// its id; it is deleted when the test ends, if it is still there.
func (w *walker) snapshot(t *testing.T) string {
	t.Helper()
	sn, err := w.f.dm.Snapshot(context.Background(), "alice", w.spare(t, false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.f.dm.DeleteSnapshot(context.Background(), "alice", sn.ID) })
	return sn.ID
}

// built is alice's template "walked", built once (through the fixture:
// its audit records are written before the calls that use it).
func (w *walker) built(t *testing.T) (string, string) {
	t.Helper()
	if w.tmpl == "" {
		var st statusJSON
		w.tmpl, w.build, st = w.f.build(t, "alice", "walked", `{"fromTemplate":"base","steps":[{"type":"RUN","args":["echo walked"]}]}`)
		if st.Status != statusReady {
			t.Fatalf("build the walk's template: %+v", st)
		}
	}
	return w.tmpl, w.build
}

// changeSet makes a change set of alice's review workspace: a sandbox
// that wrote a file, ended.
func (w *walker) changeSet(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	info, err := w.f.dm.Create(ctx, "alice", daemon.CreateRequest{ReviewWorkspace: "walk"})
	if err != nil {
		t.Fatal(err)
	}
	c, err := w.f.dm.Agent(ctx, "alice", info.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.WriteFile(ctx, info.Workspace+"/walked.txt", strings.NewReader("walked\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := w.f.dm.Destroy(ctx, "alice", info.ID); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.f.dm.DiscardChangeSet(ctx, "alice", info.ChangeSet) })
	return info.ChangeSet
}

// created destroys, when the test ends, the sandbox whose id a create's
// answer (hutch's or E2B's) names.
func (w *walker) created(t *testing.T, answer []byte) {
	t.Helper()
	var ids struct {
		ID        string `json:"id"`
		SandboxID string `json:"sandboxID"`
	}
	if err := json.Unmarshal(answer, &ids); err != nil {
		t.Fatal(err)
	}
	id := ids.ID + ids.SandboxID
	t.Cleanup(func() { _ = w.f.dm.Destroy(context.Background(), "alice", id) })
}

// tarOf is a tar archive of one file.
func tarOf(t *testing.T, name, data string) string {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}
	_, _ = tw.Write([]byte(data))
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// calls are the calls of every route, by front end and pattern.
func (w *walker) calls() map[string]call {
	now := func(f func(t *testing.T)) call {
		return func(*testing.T) func(*testing.T) { return f }
	}
	sb := "/v1/sandboxes/"
	m := w.main
	bounded := func() context.Context {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		w.t.Cleanup(cancel)
		return ctx
	}
	return map[string]call{
		// hutch's API.
		"hutch GET /v1/health":       now(func(t *testing.T) { w.hutch(t, "GET", "/v1/health", "", 200) }),
		"hutch GET /v1/openapi.json": now(func(t *testing.T) { w.hutch(t, "GET", "/v1/openapi.json", "", 200) }),
		"hutch GET /metrics":         now(func(t *testing.T) { w.hutch(t, "GET", "/metrics", "", 200) }),
		// Only the operator on the unix socket makes tokens: a tenant's
		// attempt is refused, and recorded.
		"hutch POST /v1/tokens": now(func(t *testing.T) { w.hutch(t, "POST", "/v1/tokens", `{"tenant":"bob"}`, 403) }),
		// Images: a tenant lists them, and may neither pull nor remove
		// one (refused, and recorded).
		"hutch GET /v1/images":       now(func(t *testing.T) { w.hutch(t, "GET", "/v1/images", "", 200) }),
		"hutch POST /v1/images/pull": now(func(t *testing.T) { w.hutch(t, "POST", "/v1/images/pull", `{"ref":"busybox"}`, 403) }),
		"hutch DELETE /v1/images":    now(func(t *testing.T) { w.hutch(t, "DELETE", "/v1/images?ref=busybox", "", 403) }),
		"hutch POST /v1/sandboxes": now(func(t *testing.T) {
			w.created(t, w.hutch(t, "POST", "/v1/sandboxes", `{"labels":{"k":"v"}}`, 201))
		}),
		"hutch GET /v1/sandboxes": now(func(t *testing.T) { w.hutch(t, "GET", "/v1/sandboxes", "", 200) }),
		"hutch POST /v1/sandboxes/{id}/snapshots": func(t *testing.T) func(*testing.T) {
			id := w.spare(t, false)
			return func(t *testing.T) {
				var sn struct{ ID string }
				_ = json.Unmarshal(w.hutch(t, "POST", sb+id+"/snapshots", "", 201), &sn)
				t.Cleanup(func() { _ = w.f.dm.DeleteSnapshot(context.Background(), "alice", sn.ID) })
			}
		},
		"hutch GET /v1/snapshots": now(func(t *testing.T) { w.hutch(t, "GET", "/v1/snapshots", "", 200) }),
		"hutch GET /v1/snapshots/{sid}": func(t *testing.T) func(*testing.T) {
			sid := w.snapshot(t)
			return func(t *testing.T) { w.hutch(t, "GET", "/v1/snapshots/"+sid, "", 200) }
		},
		// The walk's sandboxes are over the host's root: their snapshots
		// are not whole images, and their export is refused.
		"hutch GET /v1/snapshots/{sid}/image": func(t *testing.T) func(*testing.T) {
			sid := w.snapshot(t)
			return func(t *testing.T) { w.hutch(t, "GET", "/v1/snapshots/"+sid+"/image", "", 400) }
		},
		"hutch DELETE /v1/snapshots/{sid}": func(t *testing.T) func(*testing.T) {
			sid := w.snapshot(t)
			return func(t *testing.T) { w.hutch(t, "DELETE", "/v1/snapshots/"+sid, "", 204) }
		},
		"hutch POST /v1/sandboxes/{id}/fork": func(t *testing.T) func(*testing.T) {
			id := w.spare(t, false)
			return func(t *testing.T) {
				var res struct {
					Forks []struct{ Sandbox json.RawMessage }
				}
				_ = json.Unmarshal(w.hutch(t, "POST", sb+id+"/fork", `{"count":1}`, 200), &res)
				if len(res.Forks) != 1 || res.Forks[0].Sandbox == nil {
					t.Fatalf("the fork: %+v", res)
				}
				w.created(t, res.Forks[0].Sandbox)
			}
		},
		"hutch GET /v1/sandboxes/{id}/diff": now(func(t *testing.T) { w.hutch(t, "GET", sb+m+"/diff?format=json", "", 200) }),
		"hutch GET /v1/changes":             now(func(t *testing.T) { w.hutch(t, "GET", "/v1/changes", "", 200) }),
		"hutch GET /v1/changes/{cid}": func(t *testing.T) func(*testing.T) {
			cid := w.changeSet(t)
			return func(t *testing.T) { w.hutch(t, "GET", "/v1/changes/"+cid, "", 200) }
		},
		"hutch GET /v1/changes/{cid}/diff": func(t *testing.T) func(*testing.T) {
			cid := w.changeSet(t)
			return func(t *testing.T) { w.hutch(t, "GET", "/v1/changes/"+cid+"/diff", "", 200) }
		},
		"hutch POST /v1/changes/{cid}/apply": func(t *testing.T) func(*testing.T) {
			cid := w.changeSet(t)
			return func(t *testing.T) { w.hutch(t, "POST", "/v1/changes/"+cid+"/apply", `{}`, 200) }
		},
		"hutch DELETE /v1/changes/{cid}": func(t *testing.T) func(*testing.T) {
			cid := w.changeSet(t)
			return func(t *testing.T) { w.hutch(t, "DELETE", "/v1/changes/"+cid, "", 204) }
		},
		"hutch GET /v1/approvals": now(func(t *testing.T) { w.hutch(t, "GET", "/v1/approvals", "", 200) }),
		"hutch GET /v1/approvals/{aid}": func(t *testing.T) func(*testing.T) {
			aid := w.question(t)
			return func(t *testing.T) { w.hutch(t, "GET", "/v1/approvals/"+aid, "", 200) }
		},
		"hutch POST /v1/approvals/{aid}": func(t *testing.T) func(*testing.T) {
			aid := w.question(t)
			return func(t *testing.T) { w.hutch(t, "POST", "/v1/approvals/"+aid, `{"answer":"deny"}`, 200) }
		},
		"hutch GET /v1/sandboxes/{id}": now(func(t *testing.T) { w.hutch(t, "GET", sb+m, "", 200) }),
		"hutch DELETE /v1/sandboxes/{id}": func(t *testing.T) func(*testing.T) {
			id := w.spare(t, false)
			return func(t *testing.T) { w.hutch(t, "DELETE", sb+id, "", 204) }
		},
		"hutch POST /v1/sandboxes/{id}/timeout": now(func(t *testing.T) { w.hutch(t, "POST", sb+m+"/timeout", `{"timeout":"20m"}`, 200) }),
		"hutch POST /v1/sandboxes/{id}/pause": func(t *testing.T) func(*testing.T) {
			id := w.spare(t, false)
			return func(t *testing.T) { w.hutch(t, "POST", sb+id+"/pause", "", 200) }
		},
		"hutch POST /v1/sandboxes/{id}/resume": func(t *testing.T) func(*testing.T) {
			id := w.spare(t, true)
			return func(t *testing.T) { w.hutch(t, "POST", sb+id+"/resume", "", 200) }
		},
		"hutch GET /v1/sandboxes/{id}/events": now(func(t *testing.T) {
			status, b := w.do(t, bounded(), "GET", sb+m+"/events", nil, "Authorization", "Bearer "+w.key)
			expect(t, "events", status, b, 200)
		}),
		"hutch GET /v1/sandboxes/{id}/metrics": now(func(t *testing.T) { w.hutch(t, "GET", sb+m+"/metrics", "", 200) }),
		"hutch PUT /v1/sandboxes/{id}/network": func(t *testing.T) func(*testing.T) {
			id := w.spare(t, false)
			return func(t *testing.T) { w.hutch(t, "PUT", sb+id+"/network", `{"allowed_domains":["example.com"]}`, 200) }
		},
		"hutch POST /v1/sandboxes/{id}/exec": now(func(t *testing.T) {
			w.hutch(t, "POST", sb+m+"/exec", `{"args":["touch","/home/user/by-exec"]}`, 200)
		}),
		"hutch GET /v1/sandboxes/{id}/processes": now(func(t *testing.T) { w.hutch(t, "GET", sb+m+"/processes", "", 200) }),
		// The code interpreter's routes, on a sandbox without one (its
		// refusal is recorded as any call's; cmd/hutch and internal/api
		// run code for real).
		"hutch POST /v1/sandboxes/{id}/code":         now(func(t *testing.T) { w.hutch(t, "POST", sb+m+"/code", `{"code":"1"}`, 409) }),
		"hutch GET /v1/sandboxes/{id}/code/contexts": now(func(t *testing.T) { w.hutch(t, "GET", sb+m+"/code/contexts", "", 409) }),
		"hutch POST /v1/sandboxes/{id}/code/contexts": now(func(t *testing.T) {
			w.hutch(t, "POST", sb+m+"/code/contexts", `{"language":"python"}`, 409)
		}),
		"hutch DELETE /v1/sandboxes/{id}/code/contexts/{ctx}": now(func(t *testing.T) { w.hutch(t, "DELETE", sb+m+"/code/contexts/c1", "", 409) }),
		"hutch POST /v1/sandboxes/{id}/code/contexts/{ctx}/restart": now(func(t *testing.T) {
			w.hutch(t, "POST", sb+m+"/code/contexts/c1/restart", "", 409)
		}),
		"hutch POST /v1/sandboxes/{id}/processes/{pid}/signal": func(t *testing.T) func(*testing.T) {
			done := make(chan struct{})
			go func() {
				defer close(done)
				_, _ = w.do(t, nil, "POST", sb+m+"/exec", strings.NewReader(`{"args":["sleep","600"]}`), "Authorization", "Bearer "+w.key)
			}()
			var pid int
			deadline := time.Now().Add(20 * time.Second)
			for pid == 0 {
				var ps []api.ProcessInfo
				_ = json.Unmarshal(w.hutch(t, "GET", sb+m+"/processes", "", 200), &ps)
				for _, p := range ps {
					if slices.Equal(p.Args, []string{"sleep", "600"}) {
						pid = p.PID
					}
				}
				if pid == 0 && time.Now().After(deadline) {
					t.Fatal("the command to signal did not start")
				}
				time.Sleep(20 * time.Millisecond)
			}
			return func(t *testing.T) {
				w.hutch(t, "POST", fmt.Sprintf("%s%s/processes/%d/signal", sb, m, pid), `{"signal":9}`, 204)
				<-done
			}
		},
		"hutch GET /v1/sandboxes/{id}/files": now(func(t *testing.T) { w.hutch(t, "GET", sb+m+"/files?path=/home/user/seen.txt", "", 200) }),
		"hutch PUT /v1/sandboxes/{id}/files": now(func(t *testing.T) { w.hutch(t, "PUT", sb+m+"/files?path=/home/user/put.txt", "data", 200) }),
		"hutch DELETE /v1/sandboxes/{id}/files": func(t *testing.T) func(*testing.T) {
			w.writeFile(t, "/home/user/doomed.txt", "x")
			return func(t *testing.T) { w.hutch(t, "DELETE", sb+m+"/files?path=/home/user/doomed.txt", "", 204) }
		},
		"hutch GET /v1/sandboxes/{id}/files/stat": now(func(t *testing.T) { w.hutch(t, "GET", sb+m+"/files/stat?path=/home/user", "", 200) }),
		"hutch GET /v1/sandboxes/{id}/files/list": now(func(t *testing.T) { w.hutch(t, "GET", sb+m+"/files/list?path=/home/user", "", 200) }),
		"hutch POST /v1/sandboxes/{id}/files/mkdir": now(func(t *testing.T) {
			w.hutch(t, "POST", sb+m+"/files/mkdir", `{"path":"/home/user/made"}`, 204)
		}),
		"hutch POST /v1/sandboxes/{id}/files/rename": func(t *testing.T) func(*testing.T) {
			w.writeFile(t, "/home/user/from.txt", "x")
			return func(t *testing.T) {
				w.hutch(t, "POST", sb+m+"/files/rename", `{"from":"/home/user/from.txt","to":"/home/user/to.txt"}`, 204)
			}
		},
		"hutch GET /v1/sandboxes/{id}/archive": now(func(t *testing.T) { w.hutch(t, "GET", sb+m+"/archive?path=/home/user", "", 200) }),
		"hutch PUT /v1/sandboxes/{id}/archive": now(func(t *testing.T) {
			w.hutch(t, "PUT", sb+m+"/archive?path=/home/user", tarOf(t, "untarred.txt", "x"), 200)
		}),

		// E2B's REST API.
		"e2b POST /sandboxes": now(func(t *testing.T) {
			w.created(t, w.e2b(t, "POST", "/sandboxes", `{"templateID":"base","allow_internet_access":false}`, 201))
		}),
		"e2b POST /v2/sandboxes": now(func(t *testing.T) {
			w.created(t, w.e2b(t, "POST", "/v2/sandboxes", `{"templateID":"base","allow_internet_access":false}`, 201))
		}),
		"e2b GET /sandboxes":              now(func(t *testing.T) { w.e2b(t, "GET", "/sandboxes", "", 200) }),
		"e2b GET /v2/sandboxes":           now(func(t *testing.T) { w.e2b(t, "GET", "/v2/sandboxes", "", 200) }),
		"e2b GET /sandboxes/{id}":         now(func(t *testing.T) { w.e2b(t, "GET", "/sandboxes/"+m, "", 200) }),
		"e2b GET /sandboxes/metrics":      now(func(t *testing.T) { w.e2b(t, "GET", "/sandboxes/metrics?sandbox_ids="+m, "", 200) }),
		"e2b GET /sandboxes/{id}/metrics": now(func(t *testing.T) { w.e2b(t, "GET", "/sandboxes/"+m+"/metrics", "", 200) }),
		"e2b PUT /sandboxes/{id}/network": func(t *testing.T) func(*testing.T) {
			id := w.spare(t, false)
			return func(t *testing.T) { w.e2b(t, "PUT", "/sandboxes/"+id+"/network", `{"allowOut":["example.com"]}`, 204) }
		},
		"e2b DELETE /sandboxes/{id}": func(t *testing.T) func(*testing.T) {
			id := w.spare(t, false)
			return func(t *testing.T) { w.e2b(t, "DELETE", "/sandboxes/"+id, "", 204) }
		},
		"e2b POST /sandboxes/{id}/timeout":   now(func(t *testing.T) { w.e2b(t, "POST", "/sandboxes/"+m+"/timeout", `{"timeout":1500}`, 204) }),
		"e2b POST /sandboxes/{id}/refreshes": now(func(t *testing.T) { w.e2b(t, "POST", "/sandboxes/"+m+"/refreshes", `{"duration":1800}`, 204) }),
		"e2b POST /sandboxes/{id}/pause": func(t *testing.T) func(*testing.T) {
			id := w.spare(t, false)
			return func(t *testing.T) { w.e2b(t, "POST", "/sandboxes/"+id+"/pause", "", 204) }
		},
		"e2b POST /sandboxes/{id}/resume": func(t *testing.T) func(*testing.T) {
			id := w.spare(t, true)
			return func(t *testing.T) { w.e2b(t, "POST", "/sandboxes/"+id+"/resume", "", 201) }
		},
		"e2b POST /sandboxes/{id}/connect":    now(func(t *testing.T) { w.e2b(t, "POST", "/sandboxes/"+m+"/connect", `{}`, 200) }),
		"e2b POST /v2/sandboxes/{id}/connect": now(func(t *testing.T) { w.e2b(t, "POST", "/v2/sandboxes/"+m+"/connect", `{}`, 200) }),
		"e2b POST /sandboxes/{id}/snapshots": func(t *testing.T) func(*testing.T) {
			id := w.spare(t, false)
			return func(t *testing.T) {
				var sn struct{ SnapshotID string }
				_ = json.Unmarshal(w.e2b(t, "POST", "/sandboxes/"+id+"/snapshots", `{"name":"walked"}`, 201), &sn)
				t.Cleanup(func() { _ = w.f.dm.DeleteSnapshot(context.Background(), "alice", sn.SnapshotID) })
			}
		},
		"e2b GET /snapshots": now(func(t *testing.T) { w.e2b(t, "GET", "/snapshots", "", 200) }),
		// Templates: a build requested, its upload link, its upload, its
		// start; and the routes of a built template.
		"e2b POST /v3/templates": now(func(t *testing.T) { w.e2b(t, "POST", "/v3/templates", `{"name":"walk-requested"}`, 202) }),
		"e2b GET /templates/{id}/files/{hash}": func(t *testing.T) func(*testing.T) {
			tid, _ := w.f.requestBuild(t, "alice", "walk-link")
			return func(t *testing.T) { w.e2b(t, "GET", "/templates/"+tid+"/files/"+strings.Repeat("a", 64), "", 201) }
		},
		"e2b PUT /templates/{id}/files/{hash}": func(t *testing.T) func(*testing.T) {
			tid, _ := w.f.requestBuild(t, "alice", "walk-upload")
			var link uploadLinkJSON
			_ = json.Unmarshal(w.e2b(t, "GET", "/templates/"+tid+"/files/"+strings.Repeat("b", 64), "", 201), &link)
			u, err := url.Parse(link.URL)
			if err != nil {
				t.Fatal(err)
			}
			return func(t *testing.T) {
				status, b := w.do(t, nil, "PUT", u.RequestURI(), strings.NewReader(tarOf(t, "f", "x")))
				expect(t, "upload", status, b, 200)
			}
		},
		"e2b POST /v2/templates/{id}/builds/{buildID}": func(t *testing.T) func(*testing.T) {
			tid, bid := w.f.requestBuild(t, "alice", "walk-start")
			return func(t *testing.T) {
				w.e2b(t, "POST", "/v2/templates/"+tid+"/builds/"+bid, `{"fromTemplate":"base","steps":[{"type":"RUN","args":["true"]}]}`, 202)
				t.Cleanup(func() { w.f.waitBuild(t, "alice", tid, bid) })
			}
		},
		"e2b GET /templates/{id}/builds/{buildID}/status": func(t *testing.T) func(*testing.T) {
			tid, bid := w.built(t)
			return func(t *testing.T) {
				w.e2b(t, "GET", "/templates/"+tid+"/builds/"+bid+"/status?logsOffset=1&limit=2", "", 200)
			}
		},
		"e2b GET /templates/{id}/builds/{buildID}/logs": func(t *testing.T) func(*testing.T) {
			tid, bid := w.built(t)
			return func(t *testing.T) {
				w.e2b(t, "GET", "/templates/"+tid+"/builds/"+bid+"/logs?direction=backward&level=info", "", 200)
			}
		},
		"e2b GET /templates": func(t *testing.T) func(*testing.T) {
			w.built(t)
			return func(t *testing.T) { w.e2b(t, "GET", "/templates", "", 200) }
		},
		"e2b GET /v2/templates": func(t *testing.T) func(*testing.T) {
			w.built(t)
			return func(t *testing.T) { w.e2b(t, "GET", "/v2/templates", "", 200) }
		},
		"e2b GET /templates/{id}": func(t *testing.T) func(*testing.T) {
			tid, _ := w.built(t)
			return func(t *testing.T) { w.e2b(t, "GET", "/templates/"+tid, "", 200) }
		},
		"e2b GET /templates/{id}/{list}": func(t *testing.T) func(*testing.T) {
			tid, _ := w.built(t)
			return func(t *testing.T) { w.e2b(t, "GET", "/templates/"+tid+"/tags", "", 200) }
		},
		"e2b GET /templates/aliases/{alias}": func(t *testing.T) func(*testing.T) {
			w.built(t)
			return func(t *testing.T) { w.e2b(t, "GET", "/templates/aliases/walked", "", 200) }
		},
		"e2b PATCH /templates/{id}": func(t *testing.T) func(*testing.T) {
			tid, _ := w.built(t)
			return func(t *testing.T) { w.e2b(t, "PATCH", "/templates/"+tid, `{"public":false}`, 200) }
		},
		"e2b PATCH /v2/templates/{id}": func(t *testing.T) func(*testing.T) {
			tid, _ := w.built(t)
			return func(t *testing.T) { w.e2b(t, "PATCH", "/v2/templates/"+tid, `{"public":false}`, 200) }
		},
		"e2b POST /templates/tags": func(t *testing.T) func(*testing.T) {
			w.built(t)
			return func(t *testing.T) { w.e2b(t, "POST", "/templates/tags", `{"target":"walked","tags":["walk-a"]}`, 201) }
		},
		"e2b DELETE /templates/tags": func(t *testing.T) func(*testing.T) {
			w.built(t)
			w.e2b(t, "POST", "/templates/tags", `{"target":"walked","tags":["walk-b"]}`, 201)
			return func(t *testing.T) { w.e2b(t, "DELETE", "/templates/tags", `{"name":"walked","tags":["walk-b"]}`, 204) }
		},
		"e2b DELETE /templates/{id}": func(t *testing.T) func(*testing.T) {
			sid := w.snapshot(t)
			return func(t *testing.T) { w.e2b(t, "DELETE", "/templates/"+sid, "", 204) }
		},
		"e2b POST /sandboxes/{id}/fork": func(t *testing.T) func(*testing.T) {
			// A sandbox of E2B's, whose user its forks get set up for.
			var sb struct{ SandboxID string }
			b := w.e2b(t, "POST", "/v2/sandboxes", `{"templateID":"base"}`, 201)
			_ = json.Unmarshal(b, &sb)
			w.created(t, b)
			return func(t *testing.T) {
				var forks []struct {
					Sandbox json.RawMessage
					Error   json.RawMessage
				}
				b := w.e2b(t, "POST", "/sandboxes/"+sb.SandboxID+"/fork", `{"count":1}`, 200)
				_ = json.Unmarshal(b, &forks)
				for _, f := range forks {
					if f.Sandbox == nil {
						t.Fatalf("a fork failed: %s", b)
					}
					w.created(t, f.Sandbox)
				}
			}
		},

		"e2b POST /secrets": now(func(t *testing.T) {
			w.e2b(t, "POST", "/secrets", `{"name":"walked","value":"v"}`, 201)
		}),
		"e2b GET /secrets": now(func(t *testing.T) { w.e2b(t, "GET", "/secrets", "", 200) }),
		"e2b GET /secrets/{id}": func(t *testing.T) func(*testing.T) {
			w.e2b(t, "POST", "/secrets", `{"name":"walked-get","value":"v"}`, 201)
			return func(t *testing.T) { w.e2b(t, "GET", "/secrets/walked-get", "", 200) }
		},
		"e2b POST /secrets/{id}": func(t *testing.T) func(*testing.T) {
			w.e2b(t, "POST", "/secrets", `{"name":"walked-update","value":"v"}`, 201)
			return func(t *testing.T) { w.e2b(t, "POST", "/secrets/walked-update", `{"value":"w"}`, 200) }
		},
		"e2b DELETE /secrets/{id}": func(t *testing.T) func(*testing.T) {
			w.e2b(t, "POST", "/secrets", `{"name":"walked-delete","value":"v"}`, 201)
			return func(t *testing.T) { w.e2b(t, "DELETE", "/secrets/walked-delete", "", 204) }
		},

		// Volumes and their content (alice's volume "walked", made once).
		"e2b POST /volumes": now(func(t *testing.T) {
			w.e2b(t, "POST", "/volumes", `{"name":"walked-create"}`, 201)
		}),
		"e2b GET /volumes": now(func(t *testing.T) { w.e2b(t, "GET", "/volumes", "", 200) }),
		"e2b GET /volumes/{volumeID}": func(t *testing.T) func(*testing.T) {
			id, _ := w.volume(t)
			return func(t *testing.T) { w.e2b(t, "GET", "/volumes/"+id, "", 200) }
		},
		"e2b DELETE /volumes/{volumeID}": func(t *testing.T) func(*testing.T) {
			w.e2b(t, "POST", "/volumes", `{"name":"walked-delete"}`, 201)
			return func(t *testing.T) { w.e2b(t, "DELETE", "/volumes/walked-delete", "", 204) }
		},
		"e2b GET /volumecontent/{volumeID}/path": func(t *testing.T) func(*testing.T) {
			w.volume(t)
			return func(t *testing.T) { w.content(t, "GET", "path?path=/seen.txt", "", 200) }
		},
		"e2b PATCH /volumecontent/{volumeID}/path": func(t *testing.T) func(*testing.T) {
			w.volume(t)
			return func(t *testing.T) { w.content(t, "PATCH", "path?path=/seen.txt", `{"mode":420}`, 200) }
		},
		"e2b DELETE /volumecontent/{volumeID}/path": func(t *testing.T) func(*testing.T) {
			w.volume(t)
			w.content(t, "PUT", "file?path=/gone.txt", "x", 201)
			return func(t *testing.T) { w.content(t, "DELETE", "path?path=/gone.txt", "", 204) }
		},
		"e2b GET /volumecontent/{volumeID}/dir": func(t *testing.T) func(*testing.T) {
			w.volume(t)
			return func(t *testing.T) { w.content(t, "GET", "dir?path=/&depth=2", "", 200) }
		},
		"e2b POST /volumecontent/{volumeID}/dir": func(t *testing.T) func(*testing.T) {
			w.volume(t)
			return func(t *testing.T) { w.content(t, "POST", "dir?path=/made/here&force=true", "", 201) }
		},
		"e2b GET /volumecontent/{volumeID}/file": func(t *testing.T) func(*testing.T) {
			w.volume(t)
			return func(t *testing.T) { w.content(t, "GET", "file?path=/seen.txt", "", 200) }
		},
		"e2b PUT /volumecontent/{volumeID}/file": func(t *testing.T) func(*testing.T) {
			w.volume(t)
			return func(t *testing.T) { w.content(t, "PUT", "file?path=/written.txt&force=true", "written", 201) }
		},

		// envd, on the main sandbox.
		"envd POST /process.Process/List": now(func(t *testing.T) { w.unary(t, "process.Process/List", `{}`, 200) }),
		"envd POST /process.Process/Start": now(func(t *testing.T) {
			if b := w.stream(t, nil, "process.Process/Start", `{"process":{"cmd":"/bin/true"},"stdin":false}`); !bytes.Contains(b, []byte(`"exitCode"`)) && !bytes.Contains(b, []byte(`"exited":true`)) {
				t.Fatalf("start: %s", b)
			}
		}),
		"envd POST /process.Process/Connect": func(t *testing.T) func(*testing.T) {
			pid := w.background(t, false)
			return func(t *testing.T) {
				w.stream(t, bounded(), "process.Process/Connect", fmt.Sprintf(`{"process":{"pid":%d}}`, pid))
			}
		},
		"envd POST /process.Process/Update": func(t *testing.T) func(*testing.T) {
			pid := w.background(t, true)
			return func(t *testing.T) {
				w.unary(t, "process.Process/Update", fmt.Sprintf(`{"process":{"pid":%d},"pty":{"size":{"cols":100,"rows":30}}}`, pid), 200)
			}
		},
		"envd POST /process.Process/SendInput": func(t *testing.T) func(*testing.T) {
			pid := w.background(t, false)
			in := base64.StdEncoding.EncodeToString([]byte("input\n"))
			return func(t *testing.T) {
				w.unary(t, "process.Process/SendInput", fmt.Sprintf(`{"process":{"pid":%d},"input":{"stdin":%q}}`, pid, in), 200)
			}
		},
		"envd POST /process.Process/SendSignal": func(t *testing.T) func(*testing.T) {
			pid := w.background(t, false)
			return func(t *testing.T) {
				w.unary(t, "process.Process/SendSignal", fmt.Sprintf(`{"process":{"pid":%d},"signal":"SIGNAL_SIGKILL"}`, pid), 200)
			}
		},
		"envd POST /process.Process/CloseStdin": func(t *testing.T) func(*testing.T) {
			pid := w.background(t, false)
			return func(t *testing.T) {
				w.unary(t, "process.Process/CloseStdin", fmt.Sprintf(`{"process":{"pid":%d}}`, pid), 200)
			}
		},
		"envd POST /process.Process/StreamInput": func(t *testing.T) func(*testing.T) {
			pid := w.background(t, false)
			in := base64.StdEncoding.EncodeToString([]byte("input\n"))
			return func(t *testing.T) {
				// A client stream: the start naming the command, then its input.
				body := io.MultiReader(envelope(fmt.Sprintf(`{"start":{"process":{"pid":%d}}}`, pid)), envelope(fmt.Sprintf(`{"data":{"input":{"stdin":%q}}}`, in)))
				status, b := w.do(t, nil, "POST", "/process.Process/StreamInput", body, w.envdHeaders("Content-Type", "application/connect+json")...)
				expect(t, "process.Process/StreamInput", status, b, http.StatusOK)
				if bytes.Contains(b, []byte(`"error"`)) {
					t.Errorf("stream input: %q", b)
				}
			}
		},
		"envd POST /filesystem.Filesystem/Stat": now(func(t *testing.T) {
			w.unary(t, "filesystem.Filesystem/Stat", `{"path":"/home/user/seen.txt"}`, 200)
		}),
		"envd POST /filesystem.Filesystem/MakeDir": now(func(t *testing.T) {
			w.unary(t, "filesystem.Filesystem/MakeDir", `{"path":"/home/user/envd-dir"}`, 200)
		}),
		"envd POST /filesystem.Filesystem/Move": func(t *testing.T) func(*testing.T) {
			w.writeFile(t, "/home/user/move-from", "x")
			return func(t *testing.T) {
				w.unary(t, "filesystem.Filesystem/Move", `{"source":"/home/user/move-from","destination":"/home/user/move-to"}`, 200)
			}
		},
		"envd POST /filesystem.Filesystem/ListDir": now(func(t *testing.T) {
			w.unary(t, "filesystem.Filesystem/ListDir", `{"path":"/home/user","depth":2}`, 200)
		}),
		"envd POST /filesystem.Filesystem/Remove": func(t *testing.T) func(*testing.T) {
			w.writeFile(t, "/home/user/envd-doomed", "x")
			return func(t *testing.T) {
				w.unary(t, "filesystem.Filesystem/Remove", `{"path":"/home/user/envd-doomed"}`, 200)
			}
		},
		"envd POST /filesystem.Filesystem/WatchDir": now(func(t *testing.T) {
			w.stream(t, bounded(), "filesystem.Filesystem/WatchDir", `{"path":"/home/user"}`)
		}),
		"envd POST /filesystem.Filesystem/CreateWatcher": now(func(t *testing.T) {
			w.unary(t, "filesystem.Filesystem/CreateWatcher", `{"path":"/home/user"}`, 200)
		}),
		"envd POST /filesystem.Filesystem/GetWatcherEvents": func(t *testing.T) func(*testing.T) {
			id := w.watcher(t)
			return func(t *testing.T) {
				w.unary(t, "filesystem.Filesystem/GetWatcherEvents", fmt.Sprintf(`{"watcherId":%q}`, id), 200)
			}
		},
		"envd POST /filesystem.Filesystem/RemoveWatcher": func(t *testing.T) func(*testing.T) {
			id := w.watcher(t)
			return func(t *testing.T) {
				w.unary(t, "filesystem.Filesystem/RemoveWatcher", fmt.Sprintf(`{"watcherId":%q}`, id), 200)
			}
		},
		"envd GET /files": now(func(t *testing.T) {
			status, b := w.do(t, nil, "GET", "/files?path=/home/user/seen.txt&username=user", nil, w.envdHeaders()...)
			expect(t, "GET /files", status, b, 200)
		}),
		"envd HEAD /files": now(func(t *testing.T) {
			status, b := w.do(t, nil, "HEAD", "/files?path=/home/user/seen.txt&username=user", nil, w.envdHeaders()...)
			expect(t, "HEAD /files", status, b, 200)
		}),
		"envd POST /files": now(func(t *testing.T) {
			status, b := w.do(t, nil, "POST", "/files?path=/home/user/uploaded.txt&username=user", strings.NewReader("up"),
				w.envdHeaders("Content-Type", "application/octet-stream")...)
			expect(t, "POST /files", status, b, 200)
		}),
		"envd GET /health": now(func(t *testing.T) {
			status, b := w.do(t, nil, "GET", "/health", nil, w.envdHeaders()...)
			expect(t, "GET /health", status, b, 204)
		}),
	}
}

// watcher makes a watcher of the main sandbox's home through envd and
// returns its id.
func (w *walker) watcher(t *testing.T) string {
	t.Helper()
	var out struct {
		WatcherID string `json:"watcherId"`
	}
	if err := json.Unmarshal(w.unary(t, "filesystem.Filesystem/CreateWatcher", `{"path":"/home/user"}`, 200), &out); err != nil || out.WatcherID == "" {
		t.Fatalf("create a watcher: %v", err)
	}
	return out.WatcherID
}
