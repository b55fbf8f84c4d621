package interp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// testServer serves a Server with a default Python context on loopback.
func testServer(t *testing.T, cfg Config) (*Server, string) {
	t.Helper()
	startKernel(t).Close() // skips without ipykernel, matplotlib, pandas
	if cfg.Defaults == nil {
		cfg.Defaults = []string{Python}
	}
	if cfg.Home == "" {
		cfg.Home = t.TempDir()
	}
	s, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(func() {
		ts.Close()
		s.Close()
	})
	return s, ts.URL
}

// postExecute posts body to /execute and returns the events of the answer.
func postExecute(t *testing.T, ctx context.Context, url string, body any) ([]Event, error) {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/execute", bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(resp.Body)
		return nil, &statusError{resp.StatusCode, string(msg)}
	}
	var evs []Event
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		var ev Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		evs = append(evs, ev)
	}
	return evs, sc.Err()
}

type statusError struct {
	status int
	body   string
}

func (e *statusError) Error() string { return e.body }

// runCode executes and fails the test on a transport error; the events but
// keepalives, checked to end with EventEnd, which is dropped.
func runCode(t *testing.T, url string, body any) []Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	evs, err := postExecute(t, ctx, url, body)
	if err != nil {
		t.Fatalf("execute %v: %v", body, err)
	}
	if len(evs) == 0 || evs[len(evs)-1].Type != EventEnd {
		t.Fatalf("execute %v: the answer does not end with %s: %+v", body, EventEnd, evs)
	}
	var out []Event
	for _, ev := range evs[:len(evs)-1] {
		if ev.Type != EventKeepalive {
			out = append(out, ev)
		}
	}
	return out
}

// mainText is the text of the execution's main result.
func mainText(evs []Event) (string, bool) {
	for _, ev := range evs {
		if ev.Type == EventResult && ev.Result.IsMainResult {
			return ev.Result.Text, true
		}
	}
	return "", false
}

func typesOf(evs []Event) []string {
	var ts []string
	for _, ev := range evs {
		ts = append(ts, ev.Type)
	}
	return ts
}

func TestServerExecute(t *testing.T) {
	_, url := testServer(t, Config{})

	resp, err := http.Get(url + "/health")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || strings.TrimSpace(string(b)) != `"OK"` || resp.Header.Get("Access-Control-Allow-Origin") != "*" {
		t.Fatalf("/health: %d %q %v", resp.StatusCode, b, resp.Header)
	}

	runCode(t, url, map[string]any{"code": "x = 1"})
	evs := runCode(t, url, map[string]any{"code": "x += 1\nprint('hi')\nimport sys; print('oops', file=sys.stderr)\nx"})
	if got := typesOf(evs); strings.Join(got, ",") != "number_of_executions,stdout,stderr,result" {
		t.Fatalf("events %v: %+v", got, evs)
	}
	if evs[0].ExecutionCount != 2 || evs[1].Text != "hi\n" || evs[2].Text != "oops\n" {
		t.Fatalf("events: %+v", evs)
	}
	if _, err := time.Parse(time.RFC3339Nano, evs[1].Timestamp); err != nil {
		t.Fatalf("stdout timestamp %q: %v", evs[1].Timestamp, err)
	}
	if txt, ok := mainText(evs); !ok || txt != "2" {
		t.Fatalf("main result %q %v: %+v", txt, ok, evs)
	}
	// A string's quotes go; a list comes as JSON too.
	if txt, _ := mainText(runCode(t, url, map[string]any{"code": "'bar'"})); txt != "bar" {
		t.Fatalf("'bar' gave %q", txt)
	}
	evs = runCode(t, url, map[string]any{"code": "[1, 'a']", "language": "python"})
	if r := evs[len(evs)-1].Result; r == nil || string(r.JSON) != `[1,"a"]` {
		t.Fatalf("a list's result: %+v", evs)
	}

	// An exception: one error, with its traceback; the context goes on.
	evs = runCode(t, url, map[string]any{"code": "undefined_name"})
	var errs []*ExecutionError
	for _, ev := range evs {
		if ev.Type == EventError {
			errs = append(errs, ev.Error)
		}
	}
	if len(errs) != 1 || errs[0].Name != "NameError" || errs[0].Value != "name 'undefined_name' is not defined" ||
		!strings.Contains(errs[0].Traceback, "undefined_name") || strings.Contains(errs[0].Traceback, "\x1b[") {
		t.Fatalf("errors: %+v", errs)
	}
	if txt, _ := mainText(runCode(t, url, map[string]any{"code": "x"})); txt != "2" {
		t.Fatalf("after the error x is %q", txt)
	}

	// A figure comes as PNG and as chart data; a DataFrame as data.
	evs = runCode(t, url, map[string]any{"code": "import matplotlib.pyplot as plt\nplt.plot([1, 2], [3, 4])\nplt.title('t')\nplt.show()"})
	var chart map[string]any
	for _, ev := range evs {
		if ev.Type == EventResult && ev.Result.PNG != "" {
			if err := json.Unmarshal(ev.Result.Chart, &chart); err != nil {
				t.Fatalf("chart %s: %v", ev.Result.Chart, err)
			}
		}
	}
	if chart["type"] != "line" || chart["title"] != "t" {
		t.Fatalf("the figure's chart: %v (events %v)", chart, typesOf(evs))
	}
	evs = runCode(t, url, map[string]any{"code": "import pandas as pd\npd.DataFrame({'a': [1, 2]})"})
	if r := evs[len(evs)-1].Result; r == nil || string(r.Data) != `{"a":[1,2]}` || r.HTML == "" {
		t.Fatalf("a DataFrame's result: %+v", evs)
	}
}

func TestServerRefusals(t *testing.T) {
	_, url := testServer(t, Config{})
	ctx := context.Background()
	for _, c := range []struct {
		body   any
		status int
		msg    string
	}{
		{map[string]any{"code": map[string]any{"a": 1}}, 422, "code: want a string"},
		{map[string]any{}, 422, "code: want a string"},
		{map[string]any{"code": "1", "context_id": "x", "language": "python"}, 400, "Only one of context_id or language can be provided"},
		{map[string]any{"code": "1", "context_id": "nope"}, 404, "Context nope not found"},
		{map[string]any{"code": "1", "language": "no such language"}, 500, "Failed to create context"},
		{map[string]any{"code": "1", "language": "cobol"}, 500, "no kernel for language \"cobol\""},
		{map[string]any{"code": "1", "env_vars": map[string]string{"A=B": "x"}}, 422, "env_vars"},
	} {
		_, err := postExecute(t, ctx, url, c.body)
		se, ok := err.(*statusError)
		if !ok || se.status != c.status || !strings.Contains(se.body, c.msg) {
			t.Errorf("%v: %v, want %d %q", c.body, err, c.status, c.msg)
		}
	}
	resp, err := http.Post(url+"/contexts/nope/restart", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Errorf("restart of an unknown context: %d", resp.StatusCode)
	}
}

func contextsOf(t *testing.T, url string) []Context {
	t.Helper()
	resp, err := http.Get(url + "/contexts")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var cs []Context
	if err := json.NewDecoder(resp.Body).Decode(&cs); err != nil {
		t.Fatal(err)
	}
	return cs
}

func TestServerContexts(t *testing.T) {
	home := t.TempDir()
	_, url := testServer(t, Config{Home: home})
	cs := contextsOf(t, url)
	if len(cs) != 1 || cs[0].Language != "python" || cs[0].Cwd != home {
		t.Fatalf("the contexts at start: %+v", cs)
	}
	dir := t.TempDir()
	b, _ := json.Marshal(CreateContextRequest{Language: "Python", Cwd: dir})
	resp, err := http.Post(url+"/contexts", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	var c Context
	json.NewDecoder(resp.Body).Decode(&c)
	resp.Body.Close()
	if resp.StatusCode != 200 || c.Language != "python" || c.Cwd != dir || c.ID == "" {
		t.Fatalf("create: %d %+v", resp.StatusCode, c)
	}
	if cs := contextsOf(t, url); len(cs) != 2 || cs[1] != c {
		t.Fatalf("the contexts after a create: %+v", cs)
	}
	if txt, _ := mainText(runCode(t, url, map[string]any{"code": "import os; os.getcwd()", "context_id": c.ID})); txt != dir {
		t.Fatalf("the new context's cwd: %q", txt)
	}
	// Contexts are apart; a restart loses the state.
	runCode(t, url, map[string]any{"code": "y = 5", "context_id": c.ID})
	if txt, _ := mainText(runCode(t, url, map[string]any{"code": "'y' in globals()"})); txt != "False" {
		t.Fatalf("the default context sees y: %q", txt)
	}
	resp, err = http.Post(url+"/contexts/"+c.ID+"/restart", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("restart: %d", resp.StatusCode)
	}
	evs := runCode(t, url, map[string]any{"code": "y", "context_id": c.ID})
	if len(evs) == 0 || evs[len(evs)-1].Type != EventError || evs[len(evs)-1].Error.Name != "NameError" {
		t.Fatalf("after a restart: %+v", evs)
	}
	// A create in a directory that is not there fails.
	b, _ = json.Marshal(CreateContextRequest{Cwd: filepath.Join(dir, "missing")})
	resp, err = http.Post(url+"/contexts", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	msg, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 500 || !strings.Contains(string(msg), "missing") {
		t.Fatalf("create in a missing directory: %d %s", resp.StatusCode, msg)
	}
	// So does one in a directory the server's user cannot enter (root
	// enters any).
	if os.Geteuid() != 0 {
		closed := filepath.Join(dir, "closed")
		if err := os.Mkdir(closed, 0); err != nil {
			t.Fatal(err)
		}
		b, _ = json.Marshal(CreateContextRequest{Cwd: closed})
		resp, err = http.Post(url+"/contexts", "application/json", bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		msg, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 500 || !strings.Contains(string(msg), "cwd "+closed+": permission denied") {
			t.Fatalf("create in a directory closed to the server's user: %d %s", resp.StatusCode, msg)
		}
	}
	// Remove.
	req, _ := http.NewRequest(http.MethodDelete, url+"/contexts/"+c.ID, nil)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("delete: %d", resp.StatusCode)
	}
	if cs := contextsOf(t, url); len(cs) != 1 {
		t.Fatalf("after delete: %+v", cs)
	}
	if _, err := postExecute(t, context.Background(), url, map[string]any{"code": "1", "context_id": c.ID}); err == nil || err.(*statusError).status != 404 {
		t.Fatalf("execute in a removed context: %v", err)
	}
}

func TestServerEnvVars(t *testing.T) {
	t.Setenv("HUTCH_TEST_GLOBAL", "global")
	_, url := testServer(t, Config{})
	get := "import os; print(os.getenv('FOO', 'default') + '/' + os.getenv('HUTCH_TEST_GLOBAL', 'unset'))"
	stdout := func(evs []Event) string {
		var b strings.Builder
		for _, ev := range evs {
			if ev.Type == EventStdout {
				b.WriteString(ev.Text)
			}
		}
		return b.String()
	}
	if out := stdout(runCode(t, url, map[string]any{"code": get, "env_vars": map[string]string{"FOO": `b"a'r\`, "HUTCH_TEST_GLOBAL": "over"}})); out != `b"a'r\/over`+"\n" {
		t.Fatalf("with env_vars: %q", out)
	}
	if out := stdout(runCode(t, url, map[string]any{"code": get})); out != "default/global\n" {
		t.Fatalf("after env_vars: %q", out)
	}
	// The setting and its undoing do not count as executions.
	evs := runCode(t, url, map[string]any{"code": "1", "env_vars": map[string]string{"A": "1"}})
	if evs[0].Type != EventExecutionCount || evs[0].ExecutionCount != 3 {
		t.Fatalf("count: %+v", evs)
	}
}

func TestServerInterruptOnDisconnect(t *testing.T) {
	_, url := testServer(t, Config{})
	runCode(t, url, map[string]any{"code": "z = 7"})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	evs, err := postExecute(t, ctx, url, map[string]any{"code": "import time\nprint('started', flush=True)\ntime.sleep(3600)"})
	if err == nil {
		t.Fatalf("a 1-hour sleep ended: %+v", evs)
	}
	// The next execution is not stuck behind the abandoned one, and the
	// state is kept (an interrupt, not a restart).
	if txt, _ := mainText(runCode(t, url, map[string]any{"code": "z"})); txt != "7" {
		t.Fatalf("after the interrupt z is %q", txt)
	}
}

func TestServerKeepalive(t *testing.T) {
	_, url := testServer(t, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	evs, err := postExecute(t, ctx, url, map[string]any{"code": fmt.Sprintf("import time; time.sleep(%g)", (KeepaliveInterval + 1500*time.Millisecond).Seconds())})
	if err != nil {
		t.Fatal(err)
	}
	if got := typesOf(evs); !strings.Contains(strings.Join(got, ","), EventKeepalive) || got[len(got)-1] != EventEnd {
		t.Fatalf("events of a %v sleep: %v", KeepaliveInterval, got)
	}
}

func TestServerKernelDies(t *testing.T) {
	_, url := testServer(t, Config{})
	runCode(t, url, map[string]any{"code": "w = 1"})
	evs := runCode(t, url, map[string]any{"code": "import os; os._exit(3)"})
	if len(evs) == 0 || evs[len(evs)-1].Type != EventError || evs[len(evs)-1].Error.Name != "ContextRestarting" {
		t.Fatalf("a kernel that exits: %+v", evs)
	}
	// The next execution gets a new kernel.
	evs = runCode(t, url, map[string]any{"code": "'w' in globals(), os.getpid() > 0 if 'os' in globals() else 1"})
	if txt, _ := mainText(evs); txt != "(False, 1)" {
		t.Fatalf("after the kernel died: %q (%+v)", txt, evs)
	}
}

func TestClient(t *testing.T) {
	_, url := testServer(t, Config{})
	addr := strings.TrimPrefix(url, "http://")
	c := NewClient(func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	})
	defer c.CloseIdle()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var got []string
	err := c.Execute(ctx, ExecuteRequest{Code: "print('a')\n6 * 7"}, func(ev Event) {
		switch ev.Type {
		case EventStdout:
			got = append(got, "stdout "+ev.Text)
		case EventResult:
			got = append(got, "result "+ev.Result.Text)
		default:
			got = append(got, ev.Type)
		}
	})
	if err != nil || strings.Join(got, "|") != "number_of_executions|stdout a\n|result 42" {
		t.Fatalf("Execute: %v %q", err, got)
	}
	cs, err := c.Contexts(ctx)
	if err != nil || len(cs) != 1 {
		t.Fatalf("Contexts: %v %+v", err, cs)
	}
	if err := c.Execute(ctx, ExecuteRequest{Code: "1", ContextID: "gone"}, nil); !errors.Is(err, ErrNoContext) {
		t.Fatalf("Execute in a missing context: %v", err)
	}
	if err := c.RestartContext(ctx, "gone"); !errors.Is(err, ErrNoContext) {
		t.Fatalf("RestartContext of a missing context: %v", err)
	}
	nc, err := c.CreateContext(ctx, CreateContextRequest{})
	if err != nil || nc.Language != Python {
		t.Fatalf("CreateContext: %v %+v", err, nc)
	}
	if err := c.RemoveContext(ctx, nc.ID); err != nil {
		t.Fatal(err)
	}
}

func TestServerSetEnv(t *testing.T) {
	_, url := testServer(t, Config{})
	get := "import os; os.getenv('LATE', 'unset')"
	if txt, _ := mainText(runCode(t, url, map[string]any{"code": get})); txt != "unset" {
		t.Fatalf("before: %q", txt)
	}
	b, _ := json.Marshal(EnvRequest{Env: map[string]string{"LATE": "set"}})
	resp, err := http.Post(url+"/hutch/env", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("POST /hutch/env: %d", resp.StatusCode)
	}
	if txt, _ := mainText(runCode(t, url, map[string]any{"code": get})); txt != "set" {
		t.Fatalf("in the running context: %q", txt)
	}
	// An execution's own value is put back to the new one.
	if txt, _ := mainText(runCode(t, url, map[string]any{"code": get, "env_vars": map[string]string{"LATE": "mine"}})); txt != "mine" {
		t.Fatalf("env_vars: %q", txt)
	}
	if txt, _ := mainText(runCode(t, url, map[string]any{"code": get})); txt != "set" {
		t.Fatalf("after env_vars: %q", txt)
	}
	// A context made afterwards starts with it.
	b, _ = json.Marshal(CreateContextRequest{})
	resp, err = http.Post(url+"/contexts", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	var c Context
	json.NewDecoder(resp.Body).Decode(&c)
	resp.Body.Close()
	if txt, _ := mainText(runCode(t, url, map[string]any{"code": get, "context_id": c.ID})); txt != "set" {
		t.Fatalf("in a new context: %q", txt)
	}
}

func TestServerJavaScript(t *testing.T) {
	if _, err := os.Stat(DefaultTypeScriptModule); err != nil {
		testutil.Need(t, false, "no TypeScript at "+DefaultTypeScriptModule+" (Debian: node-typescript)")
	}
	_, url := testServer(t, Config{Defaults: []string{Python, JavaScript}})
	if cs := contextsOf(t, url); len(cs) != 2 || cs[1].Language != JavaScript {
		t.Fatalf("the default contexts: %+v", cs)
	}
	evs := runCode(t, url, map[string]any{"code": "const a = 40; console.log('hi'); a + 2", "language": "js"})
	if txt, _ := mainText(evs); txt != "42" || evs[0].Type != EventExecutionCount || evs[1].Text != "hi\n" {
		t.Fatalf("javascript: %+v", evs)
	}
	if txt, _ := mainText(runCode(t, url, map[string]any{"code": "'Hello World!'", "language": "javascript"})); txt != "Hello World!" {
		t.Fatalf("a string's quotes: %q", txt)
	}
	if txt, _ := mainText(runCode(t, url, map[string]any{"code": "process.env.FOO", "language": "js", "env_vars": map[string]string{"FOO": "bar"}})); txt != "bar" {
		t.Fatalf("env_vars: %q", txt)
	}
	if txt, _ := mainText(runCode(t, url, map[string]any{"code": "process.env.FOO ?? 'unset'", "language": "js"})); txt != "unset" {
		t.Fatalf("after env_vars: %q", txt)
	}
	if txt, _ := mainText(runCode(t, url, map[string]any{"code": "const n: number = 3; n * 2", "language": "ts"})); txt != "6" {
		t.Fatalf("typescript: %q", txt)
	}
	if cs := contextsOf(t, url); len(cs) != 3 || cs[2].Language != TypeScript {
		t.Fatalf("a typescript default context: %+v", cs)
	}
}
