package forward

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// where is a Locator of a fixed map: sandbox → address; errors for
// "broken"; a fresh answer for id is the map's "fresh:"+id when it has one.
type where map[string]string

func (w where) Locate(_ context.Context, id string, fresh bool) (string, error) {
	if id == "broken" {
		return "", fmt.Errorf("cannot tell")
	}
	if a, ok := w["fresh:"+id]; ok && fresh {
		return a, nil
	}
	return w[id], nil
}

func TestForward(t *testing.T) {
	// The owner answers with what it saw, and streams /stream line by
	// line, waiting for the client to read each.
	next := make(chan struct{})
	owner := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/sandboxes/sb-a/stream" {
			for i := range 3 {
				fmt.Fprintf(w, "line %d\n", i)
				w.(http.Flusher).Flush()
				<-next
			}
			return
		}
		body, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "owner host=%s by=%s auth=%s body=%s", r.Host, r.Header.Get(Header), r.Header.Get("Authorization"), body)
	}))
	defer owner.Close()
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close()
	local := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "here body=%s", body)
	})
	h := New(local, where{"sb-a": owner.URL, "sb-gone": gone.URL,
		"sb-moved": gone.URL, "fresh:sb-moved": owner.URL, // its owner went; the view does not know yet
		"sb-mine": gone.URL, "fresh:sb-mine": "", // taken over here meanwhile
	}, Config{
		Self: "r2",
		IDs: []func(*http.Request) string{
			PathID("/v1/sandboxes/"),
			func(r *http.Request) string { return r.Header.Get("E2b-Sandbox-Id") },
		},
		Here: func(r *http.Request) bool { return r.Header.Get("X-Operator") != "" },
	})
	srv := httptest.NewServer(h)
	defer srv.Close()

	do := func(method, path, body string, hdr ...string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		req.Host = "api.example.test"
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, c := range []struct {
		name, method, path string
		hdr                []string
		want               string
	}{
		{"path of another's sandbox", "POST", "/v1/sandboxes/sb-a/exec", []string{"Authorization", "Bearer t"},
			"owner host=api.example.test by=r2 auth=Bearer t body=payload"},
		{"header of another's sandbox", "GET", "/files", []string{"E2b-Sandbox-Id", "sb-a"}, "owner host=api.example.test by=r2 auth= body=payload"},
		{"a sandbox served here", "POST", "/v1/sandboxes/sb-b/exec", nil, "here body=payload"},
		{"no sandbox", "GET", "/v1/sandboxes", nil, "here body=payload"},
		{"where cannot be told", "GET", "/v1/sandboxes/broken", nil, "here body=payload"},
		{"forwarded already", "GET", "/v1/sandboxes/sb-a", []string{Header, "r3"}, "here body=payload"},
		{"the operator's", "GET", "/v1/sandboxes/sb-a", []string{"X-Operator", "1"}, "here body=payload"},
		{"a replica gone, asked again", "POST", "/v1/sandboxes/sb-moved/exec", nil, "owner host=api.example.test by=r2 auth= body=payload"},
		{"a replica gone, taken over here", "POST", "/v1/sandboxes/sb-mine/exec", nil, "here body=payload"},
	} {
		if code, got := do(c.method, c.path, "payload", c.hdr...); code != 200 || got != c.want {
			t.Errorf("%s: %d %q, want %q", c.name, code, got, c.want)
		}
	}
	if code, got := do("GET", "/v1/sandboxes/sb-gone", ""); code != http.StatusBadGateway || !strings.Contains(got, "did not answer") {
		t.Errorf("a replica that does not answer: %d %q", code, got)
	}

	// A stream comes through as the owner writes it.
	resp, err := http.Get(srv.URL + "/v1/sandboxes/sb-a/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	for i := range 3 {
		line := make(chan string, 1)
		go func() { l, _ := br.ReadString('\n'); line <- l }()
		select {
		case l := <-line:
			if l != fmt.Sprintf("line %d\n", i) {
				t.Fatalf("stream: %q", l)
			}
		case <-time.After(time.Minute):
			t.Fatalf("line %d of the stream did not come through before the next was written", i)
		}
		next <- struct{}{}
	}
}

func TestPathID(t *testing.T) {
	f := PathID("/v1/sandboxes/", "/sandboxes/")
	for path, want := range map[string]string{
		"/v1/sandboxes/sb-1":          "sb-1",
		"/v1/sandboxes/sb-1/exec":     "sb-1",
		"/sandboxes/x/connect":        "x",
		"/v1/sandboxes/":              "",
		"/v1/sandboxes":               "",
		"/v2/sandboxes/y":             "",
		"/v1/sandboxesX/sb":           "",
		"/v1/sandboxes/sb-2/files/ab": "sb-2",
	} {
		r := httptest.NewRequest("GET", path, nil)
		if got := f(r); got != want {
			t.Errorf("%s: %q, want %q", path, got, want)
		}
	}
}

// TestForwardFullDuplex: an owner that answers before it read the whole
// request body, then reads the rest, answers whole through the forwarding
// replica (whose HTTP/1 server would otherwise end the body once the
// answer starts, and the connection to the owner with it).
func TestForwardFullDuplex(t *testing.T) {
	owner := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = http.NewResponseController(w).EnableFullDuplex()
		fmt.Fprint(w, "early\n")
		w.(http.Flusher).Flush()
		n, err := io.Copy(io.Discard, r.Body)
		fmt.Fprintf(w, "read %d %v\n", n, err)
	}))
	defer owner.Close()
	h := New(http.NotFoundHandler(), where{"sb-a": owner.URL}, Config{IDs: []func(*http.Request) string{PathID("/v1/sandboxes/")}})
	srv := httptest.NewServer(h)
	defer srv.Close()
	const size = 4 << 20
	for range 5 {
		resp, err := http.Post(srv.URL+"/v1/sandboxes/sb-a/files", "application/octet-stream", strings.NewReader(strings.Repeat("x", size)))
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if want := fmt.Sprintf("early\nread %d <nil>\n", size); err != nil || string(b) != want {
			t.Fatalf("answer %q %v, want %q", b, err, want)
		}
	}
}
