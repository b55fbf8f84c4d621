package portfwd

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/agent"
	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/portconnect"
	"github.com/hutch-sandbox/hutch/internal/sandbox"
	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// TestMain lets this test binary be what a sandbox runs of hutch: its
// agent (PID 1), and port-connect, which Dial runs at sandbox.SandboxHutch.
func TestMain(m *testing.M) {
	agent.MainIfAgent()
	if len(os.Args) >= 2 && os.Args[1] == portconnect.Command {
		os.Exit(portconnect.Main(os.Args[2:], os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// startSandbox starts a long-lived sandbox of the namespace tier without
// network (its own loopback only) and returns its agent's client.
func startSandbox(t *testing.T) *agent.Client {
	t.Helper()
	testutil.RequireRoot(t)
	var s policy.Spec
	if err := s.Normalize(t.TempDir(), t.TempDir()); err != nil {
		t.Fatal(err)
	}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	sb, err := sandbox.Start(sandbox.Config{Spec: s, Environ: []string{"PATH=/usr/bin:/bin", "HOME=/tmp"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Close() })
	c := agent.NewClient(sb.Conn())
	t.Cleanup(func() { c.Close() })
	return c
}

// serveInSandbox starts a one-line HTTP server on port inside the sandbox
// (python3's, else busybox httpd) serving a file that says what it is,
// and waits until Dial reaches it.
func serveInSandbox(t *testing.T, ctx context.Context, c *agent.Client, port int) {
	t.Helper()
	ps := strconv.Itoa(port)
	var server string
	switch {
	case exists("/usr/bin/python3"):
		server = "exec /usr/bin/python3 -m http.server --bind 127.0.0.1 " + ps
	case exists("/usr/bin/busybox"):
		server = "exec /usr/bin/busybox httpd -f -p 127.0.0.1:" + ps
	default:
		testutil.Need(t, false, "neither /usr/bin/python3 nor /usr/bin/busybox for an HTTP server in the sandbox")
	}
	p, err := c.Exec(ctx, agent.ExecRequest{Args: []string{"sh", "-c", "mkdir -p www && cd www && echo inside > hello.txt && " + server}})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = io.Copy(io.Discard, p.Stdout) }()
	go func() { _, _ = io.Copy(io.Discard, p.Stderr) }()
	t.Cleanup(func() { _ = p.Signal(9) })
	if !testutil.Eventually(30*time.Second, func() bool {
		conn, err := Dial(ctx, c, port)
		if err == nil {
			conn.Close()
		}
		return err == nil
	}) {
		t.Fatalf("the server on port %d in the sandbox never answered", port)
	}
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

// TestDialSandbox reaches an HTTP server inside a real sandbox, through
// Dial, a Forwards listener and a Handler; a port nothing listens on is
// ErrNotListening; closing the sandbox's forwards closes their listener.
func TestDialSandbox(t *testing.T) {
	c := startSandbox(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	_, err := Dial(ctx, c, 1)
	if !errors.Is(err, ErrNotListening) {
		t.Fatalf("Dial of a port nothing listens on: %v, want ErrNotListening", err)
	}

	const port = 8765
	serveInSandbox(t, ctx, c, port)

	// Dial: a request written whole, half-closed, and its answer.
	conn, err := Dial(ctx, c, port)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.WriteString(conn, "GET /hello.txt HTTP/1.0\r\nHost: x\r\n\r\n")
	_ = conn.CloseWrite()
	b, _ := io.ReadAll(conn)
	conn.Close()
	if !bytes.HasPrefix(b, []byte("HTTP/1.0 200")) || !bytes.HasSuffix(b, []byte("inside\n")) {
		t.Errorf("through Dial: %q", b)
	}

	// Forwards: a loopback listener of the host.
	var f Forwards
	defer f.Close()
	agentOf := func(context.Context) (*agent.Client, error) { return c, nil }
	u, err := f.URL("sb", port, agentOf)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(u, "http://127.0.0.1:") {
		t.Errorf("forward URL %q: want one of the host's loopback", u)
	}
	if again, _ := f.URL("sb", port, agentOf); again != u {
		t.Errorf("the same port forwarded again: %q, want %q", again, u)
	}
	for range 3 { // a connection each, one after another
		if body := fetch(t, u+"hello.txt"); body != "inside\n" {
			t.Errorf("through the forward: %q", body)
		}
	}

	// Handler: behind a capability URL.
	h := NewHandler()
	fe := front(t, h)
	pu, err := h.URL(fe.URL+"/ports/", "sb", port, Dialer(agentOf, port))
	if err != nil {
		t.Fatal(err)
	}
	if body := fetch(t, pu+"hello.txt"); body != "inside\n" {
		t.Errorf("through the handler: %q", body)
	}

	addr := f.Addr("sb", port)
	f.CloseSandbox("sb")
	if f.Addr("sb", port) != "" {
		t.Error("the forward is still listed after CloseSandbox")
	}
	if conn, err := net.Dial("tcp", addr); err == nil {
		conn.Close()
		t.Errorf("%s still accepts connections after CloseSandbox", addr)
	}
}

func fetch(t *testing.T, url string) string {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{Proxy: nil}, Timeout: time.Minute}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %s %s", url, resp.Status, b)
	}
	return string(b)
}
