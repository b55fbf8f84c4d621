package e2b

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/agent"
	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// buildWait bounds a build in these tests (a busy machine's sandbox
// starts included).
const buildWait = 4 * time.Minute

// contextTar is a gzipped tar of files (name → content; a content
// starting "->" is a symlink to the rest).
func contextTar(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var b bytes.Buffer
	gz := gzip.NewWriter(&b)
	tw := tar.NewWriter(gz)
	for name, content := range files {
		h := &tar.Header{Name: name, Mode: 0o644, Size: int64(len(content)), Typeflag: tar.TypeReg, ModTime: time.Now()}
		if target, ok := strings.CutPrefix(content, "->"); ok {
			h = &tar.Header{Name: name, Mode: 0o777, Linkname: target, Typeflag: tar.TypeSymlink, ModTime: time.Now()}
			content = ""
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(content)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// requestBuild asks for a build of tenant's template name and returns
// the template's and build's ids.
func (f *realFixture) requestBuild(t *testing.T, tenant, name string) (string, string) {
	t.Helper()
	w := f.as(tenant, "POST", "/v3/templates", `{"name":"`+name+`","cpuCount":1,"memoryMB":1024}`)
	if w.Code != http.StatusAccepted {
		t.Fatalf("request a build of %s: %d %s", name, w.Code, w.Body)
	}
	var r struct{ TemplateID, BuildID string }
	if err := json.Unmarshal(w.Body.Bytes(), &r); err != nil || r.TemplateID == "" || r.BuildID == "" {
		t.Fatalf("request a build of %s: %s (%v)", name, w.Body, err)
	}
	return r.TemplateID, r.BuildID
}

// upload uploads data as tenant's template tid's archive hash, through
// the link the API gives, and returns the link.
func (f *realFixture) upload(t *testing.T, tenant, tid, hash string, data []byte) string {
	t.Helper()
	w := f.as(tenant, "GET", "/templates/"+tid+"/files/"+hash, "")
	var link uploadLinkJSON
	if w.Code != http.StatusCreated || json.Unmarshal(w.Body.Bytes(), &link) != nil || link.URL == "" {
		t.Fatalf("upload link: %d %s", w.Code, w.Body)
	}
	u, err := url.Parse(link.URL)
	if err != nil {
		t.Fatal(err)
	}
	// As the SDK sends it: no API key.
	if w := f.do("PUT", u.RequestURI(), string(data)); w.Code != http.StatusOK {
		t.Fatalf("upload: %d %s", w.Code, w.Body)
	}
	return u.RequestURI()
}

// startBuild starts tenant's build with body (E2B's TemplateBuildStartV2).
func (f *realFixture) startBuild(t *testing.T, tenant, tid, bid, body string) {
	t.Helper()
	if w := f.as(tenant, "POST", "/v2/templates/"+tid+"/builds/"+bid, body); w.Code != http.StatusAccepted {
		t.Fatalf("start build: %d %s", w.Code, w.Body)
	}
}

// waitBuild waits for tenant's build to end and returns its status, with
// every log entry.
func (f *realFixture) waitBuild(t *testing.T, tenant, tid, bid string) statusJSON {
	t.Helper()
	var all statusJSON
	deadline := time.Now().Add(buildWait)
	for {
		w := f.as(tenant, "GET", "/templates/"+tid+"/builds/"+bid+"/status?logsOffset="+itoa(len(all.LogEntries)), "")
		var st statusJSON
		if w.Code != http.StatusOK || json.Unmarshal(w.Body.Bytes(), &st) != nil {
			t.Fatalf("build status: %d %s", w.Code, w.Body)
		}
		all.TemplateID, all.BuildID, all.Status, all.Reason = st.TemplateID, st.BuildID, st.Status, st.Reason
		all.LogEntries = append(all.LogEntries, st.LogEntries...)
		if (st.Status == statusReady || st.Status == statusError) && len(st.LogEntries) == 0 {
			return all
		}
		if time.Now().After(deadline) {
			t.Fatalf("the build did not end in %v: %+v", buildWait, all)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// build builds tenant's template name with body and returns its ids and
// how it ended.
func (f *realFixture) build(t *testing.T, tenant, name, body string) (string, string, statusJSON) {
	t.Helper()
	tid, bid := f.requestBuild(t, tenant, name)
	f.startBuild(t, tenant, tid, bid, body)
	return tid, bid, f.waitBuild(t, tenant, tid, bid)
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// logText is the build's log messages, one a line.
func logText(st statusJSON) string {
	var b strings.Builder
	for _, e := range st.LogEntries {
		b.WriteString(e.Message + "\n")
	}
	return b.String()
}

// createFrom creates tenant's sandbox from template ref and returns its
// id and E2B's answer.
func (f *realFixture) createFrom(t *testing.T, tenant, ref string) (string, sandboxJSON) {
	t.Helper()
	w := f.as(tenant, "POST", "/sandboxes", `{"templateID":"`+ref+`","envVars":{"REQ":"r"}}`)
	if w.Code != http.StatusCreated {
		t.Fatalf("create from %s: %d %s", ref, w.Code, w.Body)
	}
	var sb sandboxJSON
	if err := json.Unmarshal(w.Body.Bytes(), &sb); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.as(tenant, "DELETE", "/sandboxes/"+sb.SandboxID, "") })
	return sb.SandboxID, sb
}

// TestTemplateBuild: a build over the base template copies the uploaded
// files (a symlink as a symlink), runs its commands as the template's
// user or the step's, in its working directory and with its env, and its
// start and ready commands; the template is usable at once: a sandbox
// started from it has its files, its env, and its start command ran
// there again. A build from it stacks on it; tags name builds; a failing
// step fails the build with E2B's message and its step; a base image not
// in the daemon's store fails it with a clear one; deleting the template
// makes it unknown.
func TestTemplateBuild(t *testing.T) {
	testutil.RequireRoot(t)
	f := newRealFixture(t)
	hash := strings.Repeat("ab", 32)
	tid, bid := f.requestBuild(t, "alice", "app")
	f.upload(t, "alice", tid, hash, contextTar(t, map[string]string{"folder/test.txt": "This is a test file.\n", "folder/link.txt": "->test.txt"}))
	f.startBuild(t, "alice", tid, bid, `{"fromImage":"e2bdev/base","force":true,"steps":[
		{"type":"COPY","args":["folder/*","folder","",""],"filesHash":"`+hash+`","force":true},
		{"type":"RUN","args":["cat folder/link.txt; readlink folder/link.txt"]},
		{"type":"ENV","args":["FOO","bar"]},
		{"type":"RUN","args":["echo root-only > /etc/built","root"]},
		{"type":"WORKDIR","args":["/app"]},
		{"type":"RUN","args":["echo \"$FOO $(whoami) $(pwd)\" > made.txt"]}],
		"startCmd":"echo started > /tmp/started","readyCmd":"test -f /tmp/started"}`)
	st := f.waitBuild(t, "alice", tid, bid)
	if st.Status != statusReady {
		t.Fatalf("build: %s %+v\n%s", st.Status, st.Reason, logText(st))
	}
	if logs := logText(st); !strings.Contains(logs, "This is a test file.\ntest.txt\n") {
		t.Errorf("the build's log lacks the RUN's output:\n%s", logs)
	}
	// The log outlives the daemon: a handler opened again over the same
	// directory, as after a restart, has it whole.
	again := New(f.dm, nil, WithTemplateDir(filepath.Join(f.stateDir, "e2b-templates")))
	again.reg.mu.Lock()
	var kept []logJSON
	if tp := again.reg.byID[tid]; tp != nil {
		if bd := tp.buildOf(bid); bd != nil {
			kept = bd.logs
		}
	}
	again.reg.mu.Unlock()
	again.Close()
	if len(kept) != len(st.LogEntries) || len(kept) == 0 || kept[len(kept)-1].Message != st.LogEntries[len(st.LogEntries)-1].Message {
		t.Errorf("after a restart the build's log has %d entries, want the %d it had", len(kept), len(st.LogEntries))
	}
	for _, ref := range []string{"app", "app:default", tid} {
		id, sb := f.createFrom(t, "alice", ref)
		if sb.TemplateID != tid {
			t.Errorf("create from %s: templateID %q, want %q", ref, sb.TemplateID, tid)
		}
		for path, want := range map[string]string{
			"/app/made.txt": "bar user /app\n", "/etc/built": "root-only\n",
			"/home/user/folder/test.txt": "This is a test file.\n",
			// /tmp is each sandbox's own: the start command ran again.
			"/tmp/started": "started\n",
		} {
			if got := f.readFile(t, "alice", id, path); got != want {
				t.Errorf("create from %s: %s holds %q, want %q", ref, path, got, want)
			}
		}
		c, err := f.dm.Agent(t.Context(), "alice", id)
		if err != nil {
			t.Fatal(err)
		}
		fi, err := c.Stat(t.Context(), "/home/user/folder/link.txt")
		if err != nil || fi.Link != "test.txt" || fi.UID != userID {
			t.Errorf("the copied symlink: %+v %v", fi, err)
		}
		if ref == "app" {
			out := runIn(t, c, "echo $FOO $REQ")
			if out != "bar r\n" {
				t.Errorf("the template's and the request's env: %q", out)
			}
		}
	}

	// A build from the template stacks on it.
	_, _, st2 := f.build(t, "alice", "app2", `{"fromTemplate":"app","steps":[{"type":"RUN","args":["cat made.txt; echo more >> made.txt"]}]}`)
	if st2.Status != statusReady || !strings.Contains(logText(st2), "bar user /app\n") {
		t.Fatalf("build from the template: %s %+v\n%s", st2.Status, st2.Reason, logText(st2))
	}
	id2, _ := f.createFrom(t, "alice", "app2")
	if got := f.readFile(t, "alice", id2, "/app/made.txt"); got != "bar user /app\nmore\n" {
		t.Errorf("app2's /app/made.txt: %q", got)
	}

	// Tags.
	w := f.as("alice", "POST", "/templates/tags", `{"target":"app:default","tags":["prod","v1"]}`)
	if w.Code != http.StatusCreated || !strings.Contains(w.Body.String(), bid) {
		t.Fatalf("assign tags: %d %s", w.Code, w.Body)
	}
	for _, bad := range []string{`":bad"`, `"app:"`, `""`} {
		if w := f.as("alice", "POST", "/templates/tags", `{"target":"app","tags":[`+bad+`]}`); w.Code != http.StatusBadRequest {
			t.Errorf("assign tag %s: %d %s", bad, w.Code, w.Body)
		}
	}
	w = f.as("alice", "GET", "/templates/"+tid+"/tags", "")
	var tags []tagJSON
	if err := json.Unmarshal(w.Body.Bytes(), &tags); err != nil || len(tags) != 3 || tags[1].Tag != "prod" || tags[1].BuildID != bid {
		t.Errorf("list tags: %d %s", w.Code, w.Body)
	}
	f.createFrom(t, "alice", "app:prod")
	if w := f.as("alice", "DELETE", "/templates/tags", `{"name":"app","tags":["prod"]}`); w.Code != http.StatusNoContent {
		t.Errorf("remove tag: %d %s", w.Code, w.Body)
	}
	if w := f.as("alice", "POST", "/sandboxes", `{"templateID":"app:prod"}`); w.Code != http.StatusNotFound {
		t.Errorf("create from a removed tag: %d %s", w.Code, w.Body)
	}
	for path, want := range map[string]int{"/templates/aliases/app": 200, "/templates/aliases/base": 200, "/templates/aliases/nope": 404,
		"/templates": 200, "/v2/templates": 200, "/templates/" + tid: 200, "/templates/" + tid + "/builds/" + bid + "/logs?limit=5": 200} {
		if w := f.as("alice", "GET", path, ""); w.Code != want {
			t.Errorf("GET %s: %d %s, want %d", path, w.Code, w.Body, want)
		}
	}
	if w := f.as("alice", "PATCH", "/v2/templates/"+tid, `{"public":true}`); w.Code != http.StatusBadRequest {
		t.Errorf("make a template public: %d %s", w.Code, w.Body)
	}

	// Failures.
	_, _, bad := f.build(t, "alice", "bad", `{"fromTemplate":"base","steps":[{"type":"RUN","args":["true"]},{"type":"RUN","args":["whoami","root123"]}]}`)
	if bad.Status != statusError || bad.Reason == nil ||
		bad.Reason.Message != "failed to run command 'whoami': command failed: unauthenticated: invalid username: 'root123'" || bad.Reason.Step != "2" {
		t.Errorf("a step as an unknown user: %s %+v", bad.Status, bad.Reason)
	}
	_, _, bad = f.build(t, "alice", "bad2", `{"steps":[{"type":"RUN","args":["exit 3"]}]}`)
	if bad.Status != statusError || bad.Reason == nil || !strings.Contains(bad.Reason.Message, "exit status 3") {
		t.Errorf("a failing step: %s %+v", bad.Status, bad.Reason)
	}
	_, _, bad = f.build(t, "alice", "bad3", `{"fromImage":"hutch.test/not-here:1"}`)
	if bad.Status != statusError || bad.Reason == nil || !strings.Contains(bad.Reason.Message, "not in the daemon's image store") || bad.Reason.Step != "base" {
		t.Errorf("a base image not in the store: %s %+v", bad.Status, bad.Reason)
	}
	if w := f.as("alice", "POST", "/sandboxes", `{"templateID":"bad"}`); w.Code != http.StatusNotFound {
		t.Errorf("create from a template without a ready build: %d %s", w.Code, w.Body)
	}
	for _, body := range []string{`{"steps":[{"type":"FROB","args":[]}]}`, `{"steps":[{"type":"COPY","args":["a","b"],"filesHash":"` + strings.Repeat("cd", 32) + `"}]}`,
		`{"fromImageRegistry":{"type":"registry","username":"u","password":"p"}}`} {
		tid, bid := f.requestBuild(t, "alice", "refused")
		if w := f.as("alice", "POST", "/v2/templates/"+tid+"/builds/"+bid, body); w.Code != http.StatusBadRequest {
			t.Errorf("start build %s: %d %s", body, w.Code, w.Body)
		}
	}
	if w := f.as("alice", "POST", "/v3/templates", `{"name":"base"}`); w.Code != http.StatusBadRequest {
		t.Errorf("a template named as the server's: %d %s", w.Code, w.Body)
	}

	// Delete.
	if w := f.as("alice", "DELETE", "/templates/app", ""); w.Code != http.StatusNoContent {
		t.Fatalf("delete: %d %s", w.Code, w.Body)
	}
	if w := f.as("alice", "POST", "/sandboxes", `{"templateID":"app"}`); w.Code != http.StatusNotFound {
		t.Errorf("create from a deleted template: %d %s", w.Code, w.Body)
	}
	if w := f.as("alice", "GET", "/templates/aliases/app", ""); w.Code != http.StatusNotFound {
		t.Errorf("alias of a deleted template: %d %s", w.Code, w.Body)
	}
}

// runIn runs a shell command as E2B's user in a sandbox and returns its
// output.
func runIn(t *testing.T, c *agent.Client, cmd string) string {
	t.Helper()
	p, err := c.Exec(t.Context(), agent.ExecRequest{Args: []string{"/bin/sh", "-c", cmd}, User: &agent.Credential{UID: userID, GID: userID}})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = io.Copy(io.Discard, p.Stderr) }()
	out, _ := io.ReadAll(p.Stdout)
	if _, err := p.Wait(); err != nil {
		t.Fatal(err)
	}
	return string(out)
}
