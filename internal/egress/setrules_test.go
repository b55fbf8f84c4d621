package egress

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"testing"
)

// TestSetRules: new rules apply to the next connection at once; an open
// tunnel the new rules refuse is closed, one they still allow goes on.
func TestSetRules(t *testing.T) {
	echo := startEchoServer(t)
	allowed, other := fmt.Sprintf("allowed.test:%d", echo), fmt.Sprintf("other.test:%d", echo)
	env := startProxy(t, testConfig(allowed, other))
	a, abr := connectTunnel(t, env, allowed, "")
	b, bbr := connectTunnel(t, env, other, "")
	for _, c := range []struct {
		w io.Writer
		r io.Reader
	}{{a, abr}, {b, bbr}} {
		echoOnce(t, c.w, c.r)
	}

	narrow, err := NewRules(testConfig(other))
	if err != nil {
		t.Fatal(err)
	}
	if n, err := env.p.SetRules(narrow); err != nil || n != 1 {
		t.Fatalf("SetRules: closed %d, %v; want the one tunnel to allowed.test", n, err)
	}
	// The tunnel to allowed.test is gone: its upstream side was closed.
	if _, err := io.ReadAll(abr); err != nil {
		t.Logf("the closed tunnel: %v", err)
	}
	echoOnce(t, b, bbr)

	c := env.dial(env.httpAddr)
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", allowed, allowed)
	if resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect}); err != nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("CONNECT %s after the rules narrowed: %v, %v; want 403", allowed, resp, err)
	}
	checkBlocked(t, env.onlyBlocked(), "connect", "allowed.test", echo, "not in allowedDomains")

	// Wider again: the next connection goes through.
	wide, err := NewRules(testConfig(allowed, other))
	if err != nil {
		t.Fatal(err)
	}
	if n, err := env.p.SetRules(wide); err != nil || n != 0 {
		t.Fatalf("SetRules wider: closed %d, %v", n, err)
	}
	a, abr = connectTunnel(t, env, allowed, "")
	echoOnce(t, a, abr)
	if _, err := env.p.SetRules(nil); err == nil {
		t.Error("SetRules(nil) succeeded")
	}
}

// echoOnce writes a line through a tunnel to the echo server and reads it
// back.
func echoOnce(t *testing.T, w io.Writer, r io.Reader) {
	t.Helper()
	if _, err := io.WriteString(w, "ping\n"); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5)
	if _, err := io.ReadFull(r, buf); err != nil || string(buf) != "ping\n" {
		t.Fatalf("echo: %q, %v", buf, err)
	}
}
