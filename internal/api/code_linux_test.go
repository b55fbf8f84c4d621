package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/client"
	"github.com/hutch-sandbox/hutch/internal/daemon"
	"github.com/hutch-sandbox/hutch/internal/interp"
	"github.com/hutch-sandbox/hutch/internal/portconnect"
	"github.com/hutch-sandbox/hutch/internal/testutil"
	"github.com/hutch-sandbox/hutch/internal/testutil/storetest"
)

// The sandboxes of the code-interpreter image run this test binary as
// their PID 1, which serves their code interpreter too, and as
// port-connect, through which the daemon reaches it.
func init() {
	interp.MainIfCommand()
	if len(os.Args) >= 2 && os.Args[1] == portconnect.Command {
		os.Exit(portconnect.Main(os.Args[2:], os.Stdin, os.Stdout, os.Stderr))
	}
}

// pngMagic starts every PNG file.
var pngMagic = []byte("\x89PNG\r\n\x1a\n")

// TestRunCode runs code through the API in a real sandbox of hutch's
// code-interpreter image: output, the value, a plot, an exception,
// variables for one execution, contexts, and the refusals.
func TestRunCode(t *testing.T) {
	testutil.RequireRoot(t)
	tarball := testutil.CodeInterpreterImage(t)
	al, auditPath := openAudit(t)
	m, c, sock := realDaemon(t, daemon.Config{}, Config{Audit: al})
	storetest.Import(t, tarball, m.Images())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	sb, err := c.Create(ctx, client.CreateOptions{Image: testutil.CodeInterpreterRef})
	if err != nil {
		t.Fatal(err)
	}

	var live []string
	ex, err := c.RunCode(ctx, sb.ID, client.RunCodeRequest{Code: "print('hi')\n1+1", OnStdout: func(s string) { live = append(live, s) }})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(ex.Stdout, "") != "hi\n" || ex.Text() != "2" || ex.Error != nil || ex.ExecutionCount < 1 || strings.Join(live, "") != "hi\n" {
		t.Errorf("print('hi'); 1+1: %+v (live stdout %q)", ex, live)
	}

	ex, err = c.RunCode(ctx, sb.ID, client.RunCodeRequest{Code: "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.show()"})
	if err != nil {
		t.Fatal(err)
	}
	var png []byte
	for _, r := range ex.Results {
		if r.PNG != "" {
			png, _ = base64.StdEncoding.DecodeString(r.PNG)
		}
	}
	if !bytes.HasPrefix(png, pngMagic) {
		t.Errorf("a plot: no PNG result: %+v", ex)
	}

	ex, err = c.RunCode(ctx, sb.ID, client.RunCodeRequest{Code: "1/0"})
	if err != nil {
		t.Fatal(err)
	}
	if ex.Error == nil || ex.Error.Name != "ZeroDivisionError" || !strings.Contains(ex.Error.Traceback, "ZeroDivisionError") {
		t.Errorf("1/0: error %+v", ex.Error)
	}

	ex, err = c.RunCode(ctx, sb.ID, client.RunCodeRequest{Code: "import os; os.environ.get('HUTCH_CODE_TEST')", Env: map[string]string{"HUTCH_CODE_TEST": "42"}})
	if err != nil || strings.Trim(ex.Text(), "'") != "42" {
		t.Errorf("env for one execution: %+v, %v", ex, err)
	}
	ex, err = c.RunCode(ctx, sb.ID, client.RunCodeRequest{Code: "import os; os.environ.get('HUTCH_CODE_TEST')"})
	if err != nil || ex.Text() != "" && ex.Text() != "None" {
		t.Errorf("env after its execution: %+v, %v", ex, err)
	}

	// The client going away interrupts the execution: the statement
	// after the sleep never runs.
	cctx, stop := context.WithCancel(ctx)
	_, err = c.RunCode(cctx, sb.ID, client.RunCodeRequest{
		Code:     "import time\nfinished = False\nprint('go', flush=True)\ntime.sleep(600)\nfinished = True",
		OnStdout: func(string) { stop() },
	})
	stop()
	if !errors.Is(err, context.Canceled) {
		t.Errorf("a cancelled execution: %v, want context.Canceled", err)
	}
	if ex, err := c.RunCode(ctx, sb.ID, client.RunCodeRequest{Code: "finished"}); err != nil || ex.Text() != "False" {
		t.Errorf("after the cancelled execution: %+v, %v; want it interrupted (finished False)", ex, err)
	}

	// Contexts.
	cc, err := c.CreateCodeContext(ctx, sb.ID, client.CodeContextOptions{Language: "python", Cwd: "/tmp"})
	if err != nil || cc.ID == "" || cc.Language != "python" || cc.Cwd != "/tmp" {
		t.Fatalf("create context: %+v, %v", cc, err)
	}
	if cs, err := c.CodeContexts(ctx, sb.ID); err != nil || !hasContext(cs, cc.ID) {
		t.Errorf("contexts: %+v, %v; want %s among them", cs, err, cc.ID)
	}
	if _, err := c.RunCode(ctx, sb.ID, client.RunCodeRequest{Code: "x = 5", Context: cc.ID}); err != nil {
		t.Fatal(err)
	}
	if ex, err := c.RunCode(ctx, sb.ID, client.RunCodeRequest{Code: "import os; x, os.getcwd()", Context: cc.ID}); err != nil || ex.Text() != "(5, '/tmp')" {
		t.Errorf("x in its context: %+v, %v", ex, err)
	}
	if err := c.RestartCodeContext(ctx, sb.ID, cc.ID); err != nil {
		t.Fatal(err)
	}
	if ex, err := c.RunCode(ctx, sb.ID, client.RunCodeRequest{Code: "x", Context: cc.ID}); err != nil || ex.Error == nil || ex.Error.Name != "NameError" {
		t.Errorf("x after a restart: %+v, %v; want NameError", ex, err)
	}
	if err := c.RemoveCodeContext(ctx, sb.ID, cc.ID); err != nil {
		t.Fatal(err)
	}
	if cs, err := c.CodeContexts(ctx, sb.ID); err != nil || hasContext(cs, cc.ID) {
		t.Errorf("contexts after the removal: %+v, %v", cs, err)
	}
	if _, err := c.RunCode(ctx, sb.ID, client.RunCodeRequest{Code: "1", Context: cc.ID}); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("run in a removed context: %v, want not_found", err)
	}
	for name, err := range map[string]error{
		"remove":  c.RemoveCodeContext(ctx, sb.ID, cc.ID),
		"restart": c.RestartCodeContext(ctx, sb.ID, cc.ID),
	} {
		if !errors.Is(err, client.ErrNotFound) {
			t.Errorf("%s a removed context: %v, want not_found", name, err)
		}
	}

	// Refusals.
	if _, err := c.RunCode(ctx, sb.ID, client.RunCodeRequest{Code: "1", Context: "x", Language: "python"}); !errors.Is(err, client.ErrInvalid) {
		t.Errorf("context and language: %v, want invalid", err)
	}
	if _, err := c.RunCode(ctx, sb.ID, client.RunCodeRequest{}); !errors.Is(err, client.ErrInvalid) {
		t.Errorf("no code: %v, want invalid", err)
	}
	if _, err := c.RunCode(ctx, "sb-nope", client.RunCodeRequest{Code: "1"}); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("no such sandbox: %v, want not_found", err)
	}
	if _, err := c.CodeContexts(ctx, "sb-nope"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("contexts of no such sandbox: %v, want not_found", err)
	}
	plain, err := c.Create(ctx, client.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.RunCode(ctx, plain.ID, client.RunCodeRequest{Code: "1"})
	var e *client.Error
	if !errors.As(err, &e) || e.Status != http.StatusConflict || !errors.Is(err, client.ErrNoInterpreter) || !strings.Contains(e.Message, "Jupyter kernels") {
		t.Errorf("a sandbox without kernels: %v, want 409 no_interpreter", err)
	}
	if _, err := c.CodeContexts(ctx, plain.ID); !errors.Is(err, client.ErrNoInterpreter) {
		t.Errorf("contexts of a sandbox without kernels: %v, want no_interpreter", err)
	}

	// The answer on the wire: newline-delimited events, the end last.
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	resp, err := hc.Post("http://hutch/v1/sandboxes/"+sb.ID+"/code", "application/json", strings.NewReader(`{"code":"print(1)"}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/x-ndjson" {
		t.Errorf("status %d, Content-Type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var types []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var l struct {
			Type string `json:"type"`
		}
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("line %q: %v", sc.Bytes(), err)
		}
		types = append(types, l.Type)
	}
	if len(types) == 0 || types[len(types)-1] != interp.EventEnd || !strings.Contains(strings.Join(types, " "), "stdout") {
		t.Errorf("event types %v: want stdout, and end_of_execution last", types)
	}

	// The sandbox's events tell of the executions; the audit log records
	// them without their code.
	for ev, err := range c.Events(ctx, sb.ID, 0) {
		if err != nil {
			t.Fatalf("no %s event: %v", client.EventCodeExecuted, err)
		}
		if ev.Type == client.EventCodeExecuted {
			if ev.Data["language"] != "python" || ev.Data["code"] != "print('hi')\n1+1" {
				t.Errorf("event %+v", ev)
			}
			break
		}
	}
	entries := readAudit(t, auditPath)
	n := 0
	for _, e := range entries {
		if e.Action == "run_code" {
			n++
		}
	}
	if n < 10 {
		t.Errorf("%d run_code entries in the audit log, want one per execution", n)
	}
}

func hasContext(cs []client.CodeContext, id string) bool {
	for _, c := range cs {
		if c.ID == id {
			return true
		}
	}
	return false
}
