package agent

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// listenAgent runs ServeListener on a loopback TCP port and returns its
// address; the test's end closes the listener and checks that the agent
// returned.
func listenAgent(t *testing.T, lo ListenOptions, opts ServeOptions) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if opts.Log == nil {
		opts.Log = testLog(t)
	}
	errc := make(chan error, 1)
	go func() { errc <- ServeListener(l, lo, opts) }()
	t.Cleanup(func() {
		closeListener(t, l, errc)
	})
	return l.Addr().String()
}

func tcpDial(addr string) func(context.Context) (net.Conn, error) {
	return func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}
}

// TestListenTakeover: a client that authenticates is served; a second
// one takes over — the first's calls end, the command it started goes on,
// the second's requests are served — and a third takes over again; the
// agent outlives every connection.
func TestListenTakeover(t *testing.T) {
	dir := t.TempDir()
	addr := listenAgent(t, ListenOptions{Token: "s3cret"}, ServeOptions{DefaultDir: dir, DefaultEnv: []string{"PATH=" + os.Getenv("PATH")}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	c1, err := DialListener(ctx, tcpDial(addr), "s3cret", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	counter, err := c1.Exec(ctx, ExecRequest{Args: []string{"sh", "-c", "i=0; while :; do i=$((i+1)); echo $i >count.new; mv count.new count; echo $i; sleep 0.02; done"}})
	if err != nil {
		t.Fatal(err)
	}
	count := func() int {
		b, _ := os.ReadFile(filepath.Join(dir, "count"))
		n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		return n
	}
	waitFor(t, "the counter starts", func() bool { return count() > 0 })

	for round := range 2 {
		c2, err := DialListener(ctx, tcpDial(addr), "s3cret", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer c2.Close()
		out, err := execOut(ctx, c2, "sh", "-c", "echo taken over")
		if err != nil || strings.TrimSpace(out) != "taken over" {
			t.Fatalf("round %d: the new client's exec: %q %v", round, out, err)
		}
		if _, err := execOut(ctx, c1, "true"); err == nil {
			t.Errorf("round %d: the client taken over from still runs commands", round)
		}
		if round == 0 {
			if _, err := counter.Wait(); err == nil {
				t.Errorf("a command of the client taken over from still reports to it")
			}
		}
		at := count()
		waitFor(t, "the first client's command goes on", func() bool { return count() > at })
		c1 = c2
	}
}

// TestListenAuth: a connection is served only after the token: a wrong
// one, a line too long, no line within the time allowed, or a connection
// its Refuse rejects get no hello and are closed, and the client already
// served keeps its place; over TLS, the same.
func TestListenAuth(t *testing.T) {
	serverTLS := testutil.NewServerTLS(t, "agent.test")
	for _, withTLS := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "tls"}[withTLS], func(t *testing.T) {
			lo := ListenOptions{Token: "s3cret", AuthWithin: 300 * time.Millisecond, Refuse: func(a net.Addr) error {
				return nil
			}}
			var tc *tls.Config
			if withTLS {
				lo.TLS = &tls.Config{Certificates: []tls.Certificate{serverTLS.Cert}}
				tc = &tls.Config{RootCAs: serverTLS.Pool, ServerName: "agent.test"}
			}
			addr := listenAgent(t, lo, ServeOptions{DefaultEnv: []string{"PATH=" + os.Getenv("PATH")}})
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			good, err := DialListener(ctx, tcpDial(addr), "s3cret", tc)
			if err != nil {
				t.Fatal(err)
			}
			defer good.Close()
			if _, err := execOut(ctx, good, "true"); err != nil {
				t.Fatalf("the right token: %v", err)
			}
			for name, line := range map[string]string{
				"wrong token":  AuthPrefix + "s3creT\n",
				"no prefix":    "s3cret\n",
				"too long":     AuthPrefix + strings.Repeat("x", 4096) + "\n",
				"no line":      "",
				"token prefix": AuthPrefix + "s3cre\n",
			} {
				c, err := tcpDial(addr)(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if withTLS {
					tlsConn := tls.Client(c, tc)
					if err := tlsConn.HandshakeContext(ctx); err != nil {
						t.Fatal(err)
					}
					c = tlsConn
				}
				io.WriteString(c, line)
				// The refusal: the agent closes it, with no hello.
				c.SetReadDeadline(time.Now().Add(20 * time.Second))
				b, err := io.ReadAll(bufio.NewReader(c))
				if len(b) != 0 || (err != nil && !errors.Is(err, io.EOF) && !strings.Contains(err.Error(), "reset")) {
					t.Errorf("%s: the agent sent %d bytes (%v)", name, len(b), err)
				}
				c.Close()
			}
			// The client before keeps its place.
			if _, err := execOut(ctx, good, "true"); err != nil {
				t.Errorf("the client served after refused connections: %v", err)
			}
		})
	}
	t.Run("refused address", func(t *testing.T) {
		addr := listenAgent(t, ListenOptions{Token: "s3cret", Refuse: func(net.Addr) error { return errors.New("from the sandbox itself") }}, ServeOptions{})
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		c, err := DialListener(ctx, tcpDial(addr), "s3cret", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := execOut(ctx, c, "true"); err == nil {
			t.Errorf("a refused address is served")
		}
	})
}

// execOut runs args through c to its end and returns its stdout, or why
// it could not.
func execOut(ctx context.Context, c *Client, args ...string) (string, error) {
	p, err := c.Exec(ctx, ExecRequest{Args: args})
	if err != nil {
		return "", err
	}
	go io.Copy(io.Discard, p.Stderr)
	out, err := io.ReadAll(p.Stdout)
	if err != nil {
		return "", err
	}
	st, err := p.Wait()
	if err != nil {
		return "", err
	}
	if st.Code != 0 {
		return string(out), errors.New("exit " + strconv.Itoa(st.Code))
	}
	return string(out), nil
}

// TestRefuseOwnAddrs: `agent --listen` refuses connections from the
// sandbox's loopback and its own interfaces' addresses, not others.
func TestRefuseOwnAddrs(t *testing.T) {
	for _, ip := range []string{"127.0.0.1", "::1", "0.0.0.0"} {
		if err := refuseOwnAddrs(&net.TCPAddr{IP: net.ParseIP(ip), Port: 1}); err == nil {
			t.Errorf("%s is not refused", ip)
		}
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if err := refuseOwnAddrs(&net.TCPAddr{IP: n.IP, Port: 1}); err == nil {
				t.Errorf("the interface's address %s is not refused", n.IP)
			}
		}
	}
	if err := refuseOwnAddrs(&net.TCPAddr{IP: net.ParseIP("192.0.2.7"), Port: 1}); err != nil {
		t.Errorf("another address is refused: %v", err)
	}
}

// TestListenFirst: ListenOptions.First is served at once, without a
// token, beside the listener, and a client of the listener takes over from
// it, the agent outliving First. Once First's client detaches, the
// listener is closed (no connection gets through any more), the same
// connection attaches again, and ServeListener returns when First ends.
func TestListenFirst(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	ours, theirs := net.Pipe()
	errc := make(chan error, 1)
	opts := ServeOptions{Log: testLog(t), DefaultDir: t.TempDir(), DefaultEnv: []string{"PATH=" + os.Getenv("PATH")}}
	go func() { errc <- ServeListener(l, ListenOptions{Token: "s3cret", First: theirs}, opts) }()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	first := NewClient(ours)
	if out, err := execOut(ctx, first, "echo", "first"); err != nil || out != "first\n" {
		t.Fatalf("First's client: %q, %v", out, err)
	}
	other, err := DialListener(ctx, tcpDial(addr), "s3cret", nil)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := execOut(ctx, other, "echo", "other"); err != nil || out != "other\n" {
		t.Fatalf("the listener's client: %q, %v", out, err)
	}
	other.Close()

	// A second agent, whose First's client detaches (a save of the
	// sandbox's memory follows).
	ours2, theirs2 := net.Pipe()
	l2, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr2 := l2.Addr().String()
	errc2 := make(chan error, 1)
	go func() { errc2 <- ServeListener(l2, ListenOptions{Token: "s3cret", First: theirs2}, opts) }()
	first = NewClient(ours2)
	if out, err := execOut(ctx, first, "echo", "first"); err != nil || out != "first\n" {
		t.Fatalf("First's client: %q, %v", out, err)
	}
	conn, err := first.Detach(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if c, err := DialListener(ctx, tcpDial(addr2), "s3cret", nil); err == nil {
		c.Close()
		t.Error("the listener still takes connections after First's detach")
	}
	again, err := Attach(conn)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := execOut(ctx, again, "echo", "again"); err != nil || out != "again\n" {
		t.Fatalf("First attached again: %q, %v", out, err)
	}
	again.Close()
	select {
	case err := <-errc2:
		if err == nil {
			t.Error("ServeListener returned no error once First ended")
		}
	case <-time.After(20 * time.Second):
		t.Error("ServeListener did not return once First ended after its detach")
	}
	// The first agent, whose listener is open, outlives First.
	closeListener(t, l, errc)
}

// closeListener closes l and checks that ServeListener, whose error errc
// brings, returns for that reason.
func closeListener(t *testing.T, l net.Listener, errc <-chan error) {
	t.Helper()
	l.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("ServeListener: %v, want the listener's end", err)
		}
	case <-time.After(20 * time.Second):
		t.Error("ServeListener did not return once its listener closed")
	}
}
