package client_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/hutch-sandbox/hutch/client"
)

// codeServer answers POST /v1/sandboxes/sb-1/code with lines, as the
// daemon streams an execution, and checks the request's body.
func codeServer(t *testing.T, lines ...string) *client.Client {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.Method != http.MethodPost || r.URL.Path != "/v1/sandboxes/sb-1/code" ||
			string(b) != `{"code":"x","context":"c-1","env":{"A":"1"}}` {
			t.Errorf("%s %s %s", r.Method, r.URL.Path, b)
		}
		w.Header().Set("Content-Type", "application/x-ndjson")
		for _, l := range lines {
			_, _ = io.WriteString(w, l+"\n")
		}
	}))
	t.Cleanup(srv.Close)
	c, err := client.New(srv.URL, "")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

var codeReq = client.RunCodeRequest{Code: "x", Context: "c-1", Env: map[string]string{"A": "1"}}

func TestRunCodeEvents(t *testing.T) {
	t.Parallel()
	c := codeServer(t,
		`{"type":"stdout","text":"hi\n","timestamp":"2026-12-03T00:00:00Z"}`,
		`{"type":"keepalive"}`,
		`{"type":"stderr","text":"careful\n"}`,
		`{"type":"result","png":"iVBORw0KGgo=","text":"<Figure>","extra":{},"is_main_result":false}`,
		`{"type":"result","text":"2","extra":{"application/x-thing":1},"is_main_result":true}`,
		`{"type":"error","name":"ValueError","value":"no","traceback":"Traceback …"}`,
		`{"type":"number_of_executions","execution_count":7}`,
		`{"type":"end_of_execution"}`)
	var out, errs []string
	var results int
	r := codeReq
	r.OnStdout = func(s string) { out = append(out, s) }
	r.OnStderr = func(s string) { errs = append(errs, s) }
	r.OnResult = func(client.CodeResult) { results++ }
	ex, err := c.RunCode(context.Background(), "sb-1", r)
	if err != nil {
		t.Fatal(err)
	}
	if ex.Text() != "2" || ex.ExecutionCount != 7 || len(ex.Results) != 2 || ex.Results[0].PNG == "" || ex.Results[0].Extra != nil ||
		strings.Join(ex.Results[1].Formats(), ",") != "text,application/x-thing" {
		t.Errorf("execution %+v", ex)
	}
	if ex.Error == nil || ex.Error.Error() != "ValueError: no" || ex.Error.Traceback != "Traceback …" {
		t.Errorf("error %+v", ex.Error)
	}
	if strings.Join(out, "") != "hi\n" || strings.Join(errs, "") != "careful\n" || results != 2 ||
		strings.Join(ex.Stdout, "") != "hi\n" || strings.Join(ex.Stderr, "") != "careful\n" {
		t.Errorf("stdout %q %q, stderr %q %q, %d results", out, ex.Stdout, errs, ex.Stderr, results)
	}
}

// TestRunCodeBrokenOff checks that an answer without its end is an
// error, with what came before it.
func TestRunCodeBrokenOff(t *testing.T) {
	t.Parallel()
	c := codeServer(t, `{"type":"stdout","text":"partial"}`)
	ex, err := c.RunCode(context.Background(), "sb-1", codeReq)
	if !errors.Is(err, io.ErrUnexpectedEOF) || ex == nil || strings.Join(ex.Stdout, "") != "partial" {
		t.Errorf("%+v, %v; want what came and io.ErrUnexpectedEOF", ex, err)
	}
}

// TestRunCodeNoInterpreter checks the refusal of a daemon whose
// sandboxes have no code interpreter (the test daemon's fakes).
func TestRunCodeNoInterpreter(t *testing.T) {
	t.Parallel()
	var c client.Client
	ctx := context.Background()
	sb, err := c.Create(ctx, client.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Destroy(ctx, sb.ID)
	_, err = c.RunCode(ctx, sb.ID, client.RunCodeRequest{Code: "1"})
	var e *client.Error
	if !errors.As(err, &e) || e.Status != http.StatusNotImplemented {
		t.Errorf("RunCode: %v, want 501", err)
	}
	if _, err := c.CodeContexts(ctx, sb.ID); !errors.As(err, &e) || e.Status != http.StatusNotImplemented {
		t.Errorf("CodeContexts: %v, want 501", err)
	}
	if _, err := c.RunCode(ctx, sb.ID, client.RunCodeRequest{}); !errors.Is(err, client.ErrInvalid) {
		t.Errorf("RunCode without code: %v, want invalid", err)
	}
}
