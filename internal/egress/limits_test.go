package egress

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/secrets"
)

// What a sandbox can make the proxy hold — connections, request bodies
// read ahead — is bounded per sandbox: the proxy runs in the daemon, whose
// memory and descriptors the sandbox's own limits do not count.

// TestMaxConns: beyond MaxConns connections at once, the next one is
// closed at once, and the first refusal of a run is recorded; once one
// ends, a new one is served.
func TestMaxConns(t *testing.T) {
	echo := startEchoServer(t)
	target := fmt.Sprintf("allowed.test:%d", echo)
	cfg := testConfig(target)
	rules, err := NewRules(cfg)
	if err != nil {
		t.Fatal(err)
	}
	env := startProxy(t, cfg)
	env.close()
	env = &testEnv{t: t, rec: NewRecorder(nil), accepted: env.accepted, serveErrs: make(chan error, 2)}
	env.p = &Proxy{Rules: rules, Sandbox: "sb-test", Record: env.rec.Record, MaxConns: 2}
	env.serve()

	first, _ := connectTunnel(t, env, target, "")
	connectTunnel(t, env, target, "")
	for range 3 {
		c := env.dial(env.httpAddr)
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
		if n, err := c.Read(make([]byte, 1)); err == nil {
			t.Errorf("a third connection was served (%d bytes)", n)
		}
	}
	if b := env.blocked(); len(b) != 1 || !strings.Contains(b[0].Reason, "more than 2 connections") {
		t.Errorf("refusals recorded: %+v, want one naming the limit", b)
	}
	first.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c := env.dial(env.httpAddr)
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
		if _, err := c.Read(make([]byte, 1)); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no connection served after one ended")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestReadAheadStopsAtBudget: what readAhead reads ahead is taken from
// the budget; when the budget refuses, the body streams, whole.
func TestReadAheadStopsAtBudget(t *testing.T) {
	body := bytes.Repeat([]byte("x"), 200<<10)
	var taken int
	take := func(n int) bool {
		if taken+n > 64<<10 {
			return false
		}
		taken += n
		return true
	}
	b, rest, err := readAhead(bytes.NewReader(body), maxResizedBody, time.Second, take)
	if err != nil || b != nil || rest == nil {
		t.Fatalf("readAhead = %d bytes, %v, %v; want the body to stream", len(b), rest, err)
	}
	got, err := io.ReadAll(rest)
	if err != nil || !bytes.Equal(got, body) {
		t.Errorf("streamed %d bytes (%v), want the %d of the body", len(got), err, len(body))
	}
	if taken > 64<<10 {
		t.Errorf("took %d bytes from a budget of 64 KiB", taken)
	}
}

// TestReadAheadBudget: through a proxy whose read-ahead budget is small,
// a body to watch streams past the budget and arrives whole; a body whose
// length must be counted again is refused (503) when the budget is used
// up; and every request gives back what it held.
func TestReadAheadBudget(t *testing.T) {
	pki := newTestPKI(t)
	up := startRecUpstream(t, pki, false, realToken)
	tok := newSecret(t, "TOKEN", realToken, fmt.Sprintf("bound.test:%d", up.port))
	tok.InBody = true
	short := newSecret(t, "SHORT", realShort, fmt.Sprintf("loose.test:%d", up.port))
	short.InBody = true
	other := newSecret(t, "OTHER", realOther, "second.test:1")
	env := startSecretProxy(t, secretConfig([]*secrets.Secret{tok, short, other}), pki.pool, func(p *Proxy) { p.MaxReadAhead = 64 << 10 })
	client := env.client(env.caPool)
	target := fmt.Sprintf("https://bound.test:%d", up.port)

	// Watched for the placeholders of OTHER and SHORT, which are not bound
	// there: 256 KiB, more than the budget.
	big := strings.Repeat("y", 256<<10)
	req, _ := http.NewRequest("POST", target+"/big", strings.NewReader(big))
	resp, body := do(t, client, req)
	mustOK(t, resp, body)
	if got := up.last(t); got.Body != big {
		t.Errorf("the upstream got %d bytes, want the %d of the body", len(got.Body), len(big))
	}
	// A body whose length changes (SHORT's value is shorter than its
	// placeholder) and that the budget cannot hold: refused.
	resize := "v=" + short.Placeholder + strings.Repeat("z", 128<<10)
	loose := fmt.Sprintf("https://loose.test:%d", up.port)
	req, _ = http.NewRequest("POST", loose+"/resize", strings.NewReader(resize))
	resp, body = do(t, client, req)
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(resp.Header.Get("X-Hutch-Blocked"), "request bodies held") {
		t.Errorf("a body over the budget to count again: %s %q %s", resp.Status, resp.Header.Get("X-Hutch-Blocked"), body)
	}
	// Within the budget it goes, with its new length.
	req, _ = http.NewRequest("POST", loose+"/small", strings.NewReader("v="+short.Placeholder))
	resp, body = do(t, client, req)
	mustOK(t, resp, body)
	if got := up.last(t); got.Body != "v="+realShort {
		t.Errorf("the upstream got %q", got.Body)
	}
	env.p.ahead.mu.Lock()
	used := env.p.ahead.used
	env.p.ahead.mu.Unlock()
	if used != 0 {
		t.Errorf("%d bytes of the budget still held after every request ended", used)
	}
}
