package e2b

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/agent"
	"github.com/hutch-sandbox/hutch/internal/api"
	"github.com/hutch-sandbox/hutch/internal/audit"
	"github.com/hutch-sandbox/hutch/internal/daemon"
	"github.com/hutch-sandbox/hutch/internal/envd"
	"github.com/hutch-sandbox/hutch/internal/interp"
	"github.com/hutch-sandbox/hutch/internal/testutil"
	"github.com/hutch-sandbox/hutch/internal/volume"
)

// The real daemon starts hutch's own binary (os.Executable), here this
// test binary, as "hutch agent", the PID 1 of every sandbox.
func init() {
	agent.MainIfAgent()
	interp.MainIfCommand() // the code interpreter of a sandbox with kernels
}

// Bounds of the real daemon of TestRealDaemon.
const (
	realMaxTimeout = time.Hour
	realQuota      = 6
)

// realFixture is hutch serve's handler stack over a real daemon: hutch's
// API with its audit log, E2B's REST API and envd, one debug log.
type realFixture struct {
	fixture
	// envd is the handler of envd the fixture's stack mounts.
	envd      http.Handler
	dm        *daemon.Manager
	auditPath string
	stateDir  string
	vols      *volume.Store
}

func newRealFixture(t *testing.T) *realFixture {
	t.Helper()
	return newRealFixtureWith(t, daemon.Config{})
}

// newRealFixtureWith is newRealFixture with cfg's AgentBinary and tiers
// (DefaultTier, MinTier, Runtimes) and E2B's options opts.
func newRealFixtureWith(t *testing.T, cfg daemon.Config, opts ...Option) *realFixture {
	t.Helper()
	testutil.RequireRoot(t)
	// Not under /tmp, which each sandbox replaces with a tmpfs of its own.
	stateDir, err := os.MkdirTemp("/var/tmp", "hutch-e2b-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// With what is left mounted there (the volumes' mount points).
		if err := testutil.RemoveMounted(stateDir); err != nil {
			t.Errorf("the state directory: %v", err)
		}
	})
	logs := &testutil.Buffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	// A review workspace of alice's, for the change sets' routes.
	review := t.TempDir()
	m, err := daemon.New(daemon.Config{
		StateDir: stateDir, MaxTimeout: realMaxTimeout, DefaultTimeout: 5 * time.Minute, MaxSandboxes: realQuota,
		AgentBinary: cfg.AgentBinary, DefaultTier: cfg.DefaultTier, MinTier: cfg.MinTier, Runtimes: cfg.Runtimes,
		ReviewWorkspaces: map[string]daemon.ReviewWorkspace{"walk": {Dir: review, Tenants: []string{"alice"}}},
	}, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	auditPath := filepath.Join(stateDir, audit.FileName)
	al, err := audit.Open(auditPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = al.Close() })
	hutchAPI, err := api.NewWithConfig(m, api.Config{Log: log, Audit: al})
	if err != nil {
		t.Fatal(err)
	}
	// Volumes of 16 MiB, unmounted at the end (after the daemon's
	// sandboxes are gone).
	vols, err := volume.Open(volume.Config{Dir: filepath.Join(stateDir, "volumes"), Size: 16 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := vols.UnmountAll(); err != nil {
			t.Error(err)
		}
	})
	h := New(m, log, append([]Option{WithAudit(al), WithTemplateDir(filepath.Join(stateDir, "e2b-templates")), WithStateDir(stateDir), WithVolumes(vols)}, opts...)...)
	t.Cleanup(h.Close) // before the daemon closes
	envdHandler := envd.New(func(r *http.Request) (envd.Sandbox, error) {
		s, ok := Resolved(r)
		if !ok {
			return envd.Sandbox{}, &envd.Error{Code: "unauthenticated", Message: "no sandbox resolved for this request"}
		}
		return s.Envd(), nil
	}, log)
	f := &realFixture{
		fixture:   fixture{h: h, srv: h.Mount(hutchAPI, envd.Paths, envdHandler), logs: logs, keys: map[string]string{}},
		envd:      envdHandler,
		dm:        m,
		auditPath: auditPath,
		stateDir:  stateDir,
		vols:      vols,
	}
	f.addKeys(t, m.Store())
	return f
}

// count is the number of tenant's sandboxes that are not stopped.
func (f *realFixture) count(t *testing.T, tenant string) int {
	t.Helper()
	infos, err := f.dm.List(context.Background(), tenant, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	return len(infos)
}

// readFile reads a file of tenant's sandbox id through its agent.
func (f *realFixture) readFile(t *testing.T, tenant, id, path string) string {
	t.Helper()
	c, err := f.dm.Agent(context.Background(), tenant, id)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if _, err := c.ReadFile(context.Background(), path, &b); err != nil {
		t.Fatalf("read %s in %s: %v", path, id, err)
	}
	return b.String()
}

// hostFile is a host file's content and modification time.
type hostFile struct {
	data  []byte
	mtime time.Time
}

func readHost(t *testing.T, path string) hostFile {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return hostFile{data, st.ModTime()}
}

// TestRealDaemon checks the E2B front end over a real daemon: the user
// setup touches only the sandbox's own layer and takes nothing from the
// request, tenants are isolated in REST and envd, the daemon's bounds are
// E2B's, and no token reaches the daemon's log or its audit log.
func TestRealDaemon(t *testing.T) {
	f := newRealFixture(t)
	var toks []string

	t.Run("record", func(t *testing.T) {
		// The record keeps E2B's note of the sandbox (its template,
		// network, lifecycle) from its first write: another daemon of
		// the store, or this one started again, has it.
		w := f.as("alice", "POST", "/v2/sandboxes", `{"templateID":"base","timeout":300,"autoPause":true,"allow_internet_access":false}`)
		if w.Code != http.StatusCreated {
			t.Fatalf("create: %d %s", w.Code, w.Body)
		}
		var sb sandboxJSON
		if err := json.Unmarshal(w.Body.Bytes(), &sb); err != nil {
			t.Fatal(err)
		}
		rec, err := f.dm.Store().GetSandbox(context.Background(), "alice", sb.SandboxID)
		if err != nil {
			t.Fatal(err)
		}
		var n note
		if err := json.Unmarshal([]byte(rec.Notes[noteKey]), &n); err != nil || n.Template != "base" || !n.PauseOnTimeout || n.Internet == nil || *n.Internet {
			t.Errorf("the record's note: %q (%v)", rec.Notes[noteKey], err)
		}
	})
	t.Run("user", func(t *testing.T) {
		hostPasswd, hostGroup := readHost(t, "/etc/passwd"), readHost(t, "/etc/group")
		// envVars and metadata shaped as account lines, and a PATH and
		// LD_PRELOAD that would break (or hijack) a setup by command.
		body := `{"templateID":"base","timeout":300,` +
			`"envVars":{"INJECT":"x\nevil:x:0:0::/:/bin/sh","PATH":"/nonexistent","LD_PRELOAD":"/nonexistent.so","USER":"evil"},` +
			`"metadata":{"evil2:x:0:0::/:/bin/sh":"evil3:x:0:0::/:/bin/sh\nevil4:x:0:"}}`
		w := f.as("alice", "POST", "/v2/sandboxes", body)
		if w.Code != http.StatusCreated {
			t.Fatalf("create: %d %s", w.Code, w.Body)
		}
		var sb sandboxJSON
		if err := json.Unmarshal(w.Body.Bytes(), &sb); err != nil {
			t.Fatal(err)
		}
		toks = append(toks, sb.EnvdAccessToken)
		if len(sb.SandboxID) > 8 && strings.Contains(sb.EnvdAccessToken, strings.TrimPrefix(sb.SandboxID, "sb-")) {
			t.Errorf("access token %q contains the sandbox id %s", sb.EnvdAccessToken, sb.SandboxID)
		}
		for path, line := range map[string]string{"/etc/passwd": passwdLine, "/etc/group": groupLine} {
			got := f.readFile(t, "alice", sb.SandboxID, path)
			if strings.Contains(got, "evil") {
				t.Errorf("%s in the sandbox holds request data:\n%s", path, got)
			}
			n := 0
			for l := range strings.SplitSeq(got, "\n") {
				if strings.HasPrefix(l, userName+":") || strings.Split(l+"::", ":")[2] == "1000" {
					n++
					if l != line {
						t.Errorf("%s in the sandbox: %q, want %q", path, l, line)
					}
				}
			}
			if n != 1 {
				t.Errorf("%s in the sandbox has %d entries of the user or id 1000:\n%s", path, n, got)
			}
		}
		c, err := f.dm.Agent(context.Background(), "alice", sb.SandboxID)
		if err != nil {
			t.Fatal(err)
		}
		st, err := c.Stat(context.Background(), Workspace)
		if err != nil || st.UID != userID || st.GID != userID || !st.IsDir {
			t.Errorf("%s in the sandbox: %+v, %v; want a directory of %d:%d", Workspace, st, err, userID, userID)
		}
		if got := readHost(t, "/etc/passwd"); !bytes.Equal(got.data, hostPasswd.data) || !got.mtime.Equal(hostPasswd.mtime) {
			t.Error("the host's /etc/passwd changed")
		}
		if got := readHost(t, "/etc/group"); !bytes.Equal(got.data, hostGroup.data) || !got.mtime.Equal(hostGroup.mtime) {
			t.Error("the host's /etc/group changed")
		}
		if strings.Contains(string(hostPasswd.data), "evil") {
			t.Error("the host's /etc/passwd holds request data")
		}
	})

	t.Run("pause without memory", func(t *testing.T) {
		id, tok := f.create(t, "alice")
		toks = append(toks, tok)
		pause := "/sandboxes/" + id + "/pause"
		checkError(t, "memory not a boolean", f.as("alice", "POST", pause, `{"memory":"no"}`), http.StatusBadRequest)
		checkError(t, "pause with a timeout", f.as("alice", "POST", pause, `{"timeout":60}`), http.StatusBadRequest)
		if w := f.as("alice", "POST", pause, `{"memory":false}`); w.Code != http.StatusNoContent {
			t.Fatalf("pause without memory: %d %s", w.Code, w.Body)
		}
		checkError(t, "pause twice", f.as("alice", "POST", pause, `{"memory":false}`), http.StatusConflict)
		if w := f.as("alice", "POST", "/v2/sandboxes/"+id+"/connect", `{"timeout":60,"memory":false}`); w.Code != http.StatusCreated {
			t.Fatalf("connect without memory to a sandbox paused without: %d %s", w.Code, w.Body)
		}
		c, err := f.dm.Agent(context.Background(), "alice", id)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Exec(context.Background(), agent.ExecRequest{Args: []string{"sleep", "1000"}}); err != nil {
			t.Fatal(err)
		}
		if w := f.as("alice", "POST", pause, ""); w.Code != http.StatusNoContent {
			t.Fatalf("pause: %d %s", w.Code, w.Body)
		}
		// Connect without memory to a sandbox paused with it boots it
		// again (the SDK's onResume 'reboot'): its processes are gone.
		if w := f.as("alice", "POST", "/v2/sandboxes/"+id+"/connect", `{"timeout":60,"memory":false}`); w.Code != http.StatusCreated {
			t.Fatalf("connect without memory to a sandbox paused with it: %d %s", w.Code, w.Body)
		}
		if c, err = f.dm.Agent(context.Background(), "alice", id); err != nil {
			t.Fatal(err)
		}
		if procs, err := c.ListProcesses(context.Background()); err != nil || len(procs) != 0 {
			t.Errorf("processes after the reboot: %v, %v", procs, err)
		}
		if w := f.as("alice", "POST", "/v2/sandboxes/"+id+"/connect", `{"timeout":60}`); w.Code != http.StatusOK {
			t.Fatalf("connect: %d %s", w.Code, w.Body)
		}
	})

	t.Run("isolation", func(t *testing.T) {
		bobID, bobTok := f.create(t, "bob")
		_, aliceTok := f.create(t, "alice")
		toks = append(toks, bobTok, aliceTok)
		const unknown = "sb-aaaaaaaaaaaa"
		for _, rt := range []struct{ method, path, body string }{
			{"GET", "/sandboxes/%s", ""},
			{"DELETE", "/sandboxes/%s", ""},
			{"POST", "/sandboxes/%s/timeout", `{"timeout":60}`},
			{"POST", "/sandboxes/%s/pause", ""},
			{"POST", "/sandboxes/%s/connect", `{"timeout":60}`},
			{"POST", "/v2/sandboxes/%s/connect", `{"timeout":60}`},
		} {
			what := rt.method + " " + rt.path
			got := checkError(t, what+" (bob's)", f.as("alice", rt.method, fmt.Sprintf(rt.path, bobID), rt.body), http.StatusNotFound)
			want := checkError(t, what+" (unknown)", f.as("alice", rt.method, fmt.Sprintf(rt.path, unknown), rt.body), http.StatusNotFound)
			if strings.ReplaceAll(got, bobID, "ID") != strings.ReplaceAll(want, unknown, "ID") {
				t.Errorf("%s: message %q for bob's sandbox, %q for an unknown one", what, got, want)
			}
		}
		if w := f.as("alice", "GET", "/v2/sandboxes", ""); strings.Contains(w.Body.String(), bobID) {
			t.Errorf("alice's list shows bob's sandbox: %s", w.Body)
		}
		for name, headers := range map[string][]string{
			"no token":                {"E2b-Sandbox-Id", bobID},
			"alice's sandbox's token": {"E2b-Sandbox-Id", bobID, "X-Access-Token", aliceTok},
			"alice's API key":         {"E2b-Sandbox-Id", bobID, "X-Access-Token", f.keys["alice"], "X-API-Key", f.keys["alice"]},
		} {
			checkError(t, "envd, "+name, f.do("GET", "/files?path=/etc/passwd&username=user", "", headers...), http.StatusUnauthorized)
		}
		w := f.do("GET", "/health", "", "E2b-Sandbox-Id", bobID, "X-Access-Token", bobTok)
		if w.Code/100 != 2 {
			t.Errorf("envd with bob's token: %d %s", w.Code, w.Body)
		}
		if f.count(t, "bob") != 1 {
			t.Error("bob's sandbox is gone")
		}
		// Through hutch's own API too (audited), bob destroys it.
		w = f.do("DELETE", "/v1/sandboxes/"+bobID, "", "Authorization", "Bearer "+f.keys["alice"])
		if w.Code != http.StatusNotFound {
			t.Errorf("alice: DELETE /v1/sandboxes/bob's: %d %s", w.Code, w.Body)
		}
		w = f.do("DELETE", "/v1/sandboxes/"+bobID, "", "Authorization", "Bearer "+f.keys["bob"])
		if w.Code/100 != 2 {
			t.Errorf("bob: DELETE /v1/sandboxes/his: %d %s", w.Code, w.Body)
		}
	})

	t.Run("audit", func(t *testing.T) {
		id, tok := f.create(t, "bob")
		toks = append(toks, tok)
		envdHeaders := []string{"E2b-Sandbox-Id", id, "X-Access-Token", tok}
		// A command through process.Process/Start: one Connect envelope.
		start := `{"process":{"cmd":"/bin/sh","args":["-c","echo out; echo err >&2; exit 3"]},"stdin":false}`
		var env bytes.Buffer
		env.Write([]byte{0, 0, 0, 0, byte(len(start))})
		env.WriteString(start)
		w := f.do("POST", "/process.Process/Start", env.String(), append(envdHeaders, "Content-Type", "application/connect+json")...)
		if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `"exitCode":3`) {
			t.Fatalf("start a command: %d %q", w.Code, w.Body)
		}
		// The command is recorded once it ended, as its stream ends.
		deadline := time.Now().Add(10 * time.Second)
		for !slices.ContainsFunc(readAudit(t, f.auditPath), func(e audit.Entry) bool { return e.Sandbox == id && e.Action == "exec" }) {
			if time.Now().After(deadline) {
				t.Fatal("the command was not recorded in the audit log")
			}
			time.Sleep(20 * time.Millisecond)
		}
		w = f.do("POST", "/files?path=notes/a.txt&username=user", "secret contents",
			append(envdHeaders, "Content-Type", "application/octet-stream")...)
		if w.Code != http.StatusOK {
			t.Fatalf("upload: %d %s", w.Code, w.Body)
		}
		if w := f.as("bob", "DELETE", "/sandboxes/"+id, ""); w.Code != http.StatusNoContent {
			t.Fatalf("kill: %d %s", w.Code, w.Body)
		}
		checkError(t, "kill again", f.as("bob", "DELETE", "/sandboxes/"+id, ""), http.StatusNotFound)

		raw, err := os.ReadFile(f.auditPath)
		if err != nil {
			t.Fatal(err)
		}
		if n, err := audit.Verify(bytes.NewReader(raw)); err != nil || n != bytes.Count(raw, []byte("\n")) {
			t.Errorf("audit.Verify: %d lines, %v; the log has %d", n, err, bytes.Count(raw, []byte("\n")))
		}
		var got []audit.Entry
		for _, e := range readAudit(t, f.auditPath) {
			if e.Sandbox == id {
				got = append(got, e)
			}
		}
		var actions []string
		for _, e := range got {
			actions = append(actions, e.Action)
			if e.Tenant != "bob" {
				t.Errorf("%s: tenant %q, want bob", e.Action, e.Tenant)
			}
		}
		if want := []string{"create", "exec", "write_file", "destroy", "destroy"}; !slices.Equal(actions, want) {
			t.Fatalf("audited actions of %s: %q, want %q", id, actions, want)
		}
		ex := got[1]
		if !slices.Equal(ex.Command, []string{"/bin/sh", "-c", "echo out; echo err >&2; exit 3"}) || ex.ExitCode == nil || *ex.ExitCode != 3 ||
			ex.BytesOut != int64(len("out\nerr\n")) || ex.Error != "" {
			t.Errorf("exec entry: %+v (exit code %v)", ex, ex.ExitCode)
		}
		if wf := got[2]; !slices.Equal(wf.Paths, []string{Workspace + "/notes/a.txt"}) || wf.Error != "" {
			t.Errorf("write_file entry: %+v", wf)
		}
		if got[3].Error != "" || got[4].Error != "not_found" {
			t.Errorf("destroy entries: %+v, %+v; want a success, then not_found", got[3], got[4])
		}
		for _, s := range []string{tok, f.keys["bob"], "secret contents"} {
			if bytes.Contains(raw, []byte(s)) {
				t.Errorf("the audit log holds %.8s…", s)
			}
		}
	})

	t.Run("bounds", func(t *testing.T) {
		before := f.count(t, "alice")
		over := int64((realMaxTimeout + time.Second) / time.Second)
		msg := checkError(t, "create beyond the maximum timeout",
			f.as("alice", "POST", "/sandboxes", fmt.Sprintf(`{"timeout":%d}`, over)), http.StatusBadRequest)
		if !strings.Contains(msg, "timeout") {
			t.Errorf("create beyond the maximum timeout: message %q does not name timeout", msg)
		}
		many := func(n int, key func(int) string, value string) string {
			m := map[string]string{}
			for i := range n {
				m[key(i)] = value
			}
			b, _ := json.Marshal(m)
			return string(b)
		}
		for _, body := range []string{
			`{"metadata":` + many(daemon.MaxLabels+1, func(i int) string { return fmt.Sprint(i) }, "v") + `}`,
			`{"envVars":` + many(daemon.MaxEnvVars+1, func(i int) string { return fmt.Sprintf("V%d", i) }, "v") + `}`,
			`{"network":{"denyOut":["10.0.0.0/8"]}}`,
		} {
			checkError(t, fmt.Sprintf("create %.40s", body), f.as("alice", "POST", "/sandboxes", body), http.StatusBadRequest)
		}
		if n := f.count(t, "alice"); n != before {
			t.Fatalf("refused creates made sandboxes: %d, then %d", before, n)
		}
		// At the bounds, the daemon accepts what E2B's front end does.
		atBounds := `{"metadata":` + many(daemon.MaxLabels, func(i int) string { return fmt.Sprintf("%0*d", daemon.MaxLabelKey, i) }, strings.Repeat("v", daemon.MaxLabelValue)) +
			`,"envVars":` + many(daemon.MaxEnvVars, func(i int) string { return fmt.Sprintf("V%d", i) }, strings.Repeat("v", 400)) + `}`
		w := f.as("alice", "POST", "/sandboxes", atBounds)
		if w.Code != http.StatusCreated {
			t.Fatalf("create at the bounds: %d %s", w.Code, w.Body)
		}
		var sb sandboxJSON
		if err := json.Unmarshal(w.Body.Bytes(), &sb); err != nil {
			t.Fatal(err)
		}
		toks = append(toks, sb.EnvdAccessToken)
		msg = checkError(t, "timeout beyond the maximum",
			f.as("alice", "POST", "/sandboxes/"+sb.SandboxID+"/timeout", fmt.Sprintf(`{"timeout":%d}`, over)), http.StatusBadRequest)
		if !strings.Contains(msg, "timeout") {
			t.Errorf("timeout beyond the maximum: message %q does not name timeout", msg)
		}
		// The quota: 429 in E2B's shape.
		var last *httptest.ResponseRecorder
		for range realQuota {
			last = f.as("alice", "POST", "/sandboxes", `{}`)
			if last.Code != http.StatusCreated {
				break
			}
			var sb sandboxJSON
			_ = json.Unmarshal(last.Body.Bytes(), &sb)
			toks = append(toks, sb.EnvdAccessToken)
		}
		checkError(t, "create beyond the quota", last, http.StatusTooManyRequests)
	})

	t.Run("logs", func(t *testing.T) {
		logs := f.logs.String()
		auditLog, err := os.ReadFile(f.auditPath)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(auditLog), `"destroy"`) {
			t.Errorf("the audit log has no entry of the destroy:\n%s", auditLog)
		}
		if len(toks) < 4 {
			t.Fatalf("only %d tokens were seen", len(toks))
		}
		secrets := append(toks, f.keys["alice"], f.keys["bob"])
		for _, s := range secrets {
			if s == "" {
				t.Fatal("an empty token")
			}
			if strings.Contains(logs, s) {
				t.Errorf("the daemon's log holds a token (%.8s…)", s)
			}
			if strings.Contains(string(auditLog), s) {
				t.Errorf("the audit log holds a token (%.8s…)", s)
			}
		}
	})
}

// readAudit reads the entries of the audit log at path: its whole lines
// (one the daemon is writing meanwhile is read by a later call).
func readAudit(t *testing.T, path string) []audit.Entry {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if i := bytes.LastIndexByte(raw, '\n'); i >= 0 {
		raw = raw[:i+1]
	} else {
		raw = nil
	}
	var out []audit.Entry
	for l := range bytes.Lines(raw) {
		var e audit.Entry
		if err := json.Unmarshal(l, &e); err != nil {
			t.Fatalf("audit line %q: %v", l, err)
		}
		out = append(out, e)
	}
	return out
}
