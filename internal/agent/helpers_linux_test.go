package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// childMain, when set, runs instead of the tests in a re-executed test
// binary (see pid1_linux_test.go).
var childMain func() int

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" && childMain != nil {
		os.Exit(childMain())
	}
	os.Exit(m.Run())
}

// socketPair returns the two ends of a connected unix stream socket.
func socketPair(t testing.TB) (net.Conn, net.Conn) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("socketpair: %v", err)
	}
	var conns [2]net.Conn
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), fmt.Sprintf("agent-test-%d", i))
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			t.Fatalf("file conn: %v", err)
		}
		conns[i] = c
	}
	return conns[0], conns[1]
}

// testLog writes the agent's log to the test's log.
func testLog(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// agentPair runs Serve in this process (PID1 off) on one end of a
// socketpair (or net.Pipe) and returns a client of it and the server. The
// test fails unless Serve returns nil once the client is closed.
func agentPair(t testing.TB, opts ServeOptions, pipe bool) (*Client, *server) {
	t.Helper()
	var a, b net.Conn
	if pipe {
		a, b = net.Pipe()
	} else {
		a, b = socketPair(t)
	}
	if opts.Log == nil {
		if _, bench := t.(*testing.B); !bench {
			opts.Log = testLog(t)
		}
	}
	srv := make(chan *server, 1)
	errc := make(chan error, 1)
	go func() { errc <- serve(b, opts, func(s *server) { srv <- s }) }()
	c := NewClient(a)
	t.Cleanup(func() {
		c.Close()
		select {
		case err := <-errc:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Errorf("Serve did not return after the client closed")
		}
	})
	select {
	case s := <-srv:
		return c, s
	case err := <-errc:
		t.Fatalf("Serve: %v", err)
	}
	return nil, nil
}

// noLeaks fails the test if goroutines started during it are still
// running when it ends (after its other cleanups).
func noLeaks(t *testing.T) {
	t.Helper()
	base := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(5 * time.Second)
		for runtime.NumGoroutine() > base {
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<20)
				t.Errorf("%d goroutines before the test, %d after:\n%s", base, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
}

// result is what run collected of a command.
type result struct {
	stdout, stderr string
	status         ExitStatus
}

// run runs r to its end, feeding it stdin (if r.Stdin) and collecting its
// output.
func run(t testing.TB, c *Client, r ExecRequest, stdin string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := c.Exec(ctx, r)
	if err != nil {
		t.Fatalf("exec %q: %v", r.Args, err)
	}
	var res result
	var wg sync.WaitGroup
	var outErr, errErr error
	var out, errb bytes.Buffer
	wg.Add(2)
	go func() { defer wg.Done(); _, outErr = io.Copy(&out, p.Stdout) }()
	go func() { defer wg.Done(); _, errErr = io.Copy(&errb, p.Stderr) }()
	if p.Stdin != nil {
		if _, err := io.Copy(p.Stdin, strings.NewReader(stdin)); err != nil {
			t.Errorf("write stdin of %q: %v", r.Args, err)
		}
		if err := p.Stdin.Close(); err != nil {
			t.Errorf("close stdin of %q: %v", r.Args, err)
		}
	}
	res.status, err = p.Wait()
	if err != nil {
		t.Fatalf("wait %q: %v", r.Args, err)
	}
	wg.Wait()
	if outErr != nil || errErr != nil {
		t.Fatalf("output of %q: %v, %v", r.Args, outErr, errErr)
	}
	res.stdout, res.stderr = out.String(), errb.String()
	return res
}

// agentError checks that err is an *Error of code.
func agentError(t testing.TB, err error, code string) *Error {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T) is not an *agent.Error", err, err)
	}
	if e.Code != code {
		t.Fatalf("error %q has code %q, want %q", e.Message, e.Code, code)
	}
	return e
}

// drainSlowly reads r to its end in reads of at most size bytes, calling
// each after every read with its index and the bytes read so far (to pace
// the reader), and returns the number of bytes read.
func drainSlowly(t testing.TB, r io.Reader, size int, each func(i int, n int64)) int64 {
	t.Helper()
	buf := make([]byte, size)
	var n int64
	for i := 0; ; i++ {
		k, err := r.Read(buf)
		n += int64(k)
		if err == io.EOF {
			return n
		}
		if err != nil {
			t.Fatal(err)
		}
		each(i, n)
	}
}
