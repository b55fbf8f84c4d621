package proxyconnect

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"strings"
	"testing"
)

// fakeProxy answers every connection's first request with answer, then
// echoes what follows; it returns the requests it got.
func fakeProxy(t *testing.T, answer string) <-chan string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	old := proxyAddr
	proxyAddr = l.Addr().String()
	t.Cleanup(func() { proxyAddr = old })
	reqs := make(chan string, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		br := bufio.NewReader(c)
		var req strings.Builder
		for {
			line, err := br.ReadString('\n')
			req.WriteString(line)
			if err != nil || line == "\r\n" {
				break
			}
		}
		reqs <- req.String()
		// The answer and the tunnel's first bytes in one write: the
		// helper must not swallow the tunnel with the header.
		_, _ = io.WriteString(c, answer+"early;")
		_, _ = io.Copy(c, br)
	}()
	return reqs
}

func TestTunnel(t *testing.T) {
	reqs := fakeProxy(t, "HTTP/1.1 200 Connection established\r\nX-Extra: 1\r\n\r\n")
	var out, errOut bytes.Buffer
	code := Main([]string{"git.example.com", "22"}, strings.NewReader("ping"), &out, &errOut)
	if code != 0 || out.String() != "early;ping" {
		t.Fatalf("code %d, out %q, stderr %q", code, out.String(), errOut.String())
	}
	if req := <-reqs; !strings.HasPrefix(req, "CONNECT git.example.com:22 HTTP/1.1\r\nHost: git.example.com:22\r\n") {
		t.Errorf("request %q", req)
	}
}

func TestRefused(t *testing.T) {
	for _, tc := range []struct{ answer, want string }{
		{"HTTP/1.1 403 Forbidden\r\nX-Hutch-Blocked: evil.test is not allowed\r\n\r\n", "evil.test is not allowed"},
		{"HTTP/1.1 502 Bad Gateway\r\n\r\n", "502 Bad Gateway"},
		{"SSH-2.0-OpenSSH\r\n\r\n", "not HTTP/1"},
		{"HTTP/1.1 abc\r\n\r\n", "no status code"},
		{"HTTP/1.1 200 OK\r\nX-Long: " + strings.Repeat("a", maxHeaderBytes) + "\r\n\r\n", "longer than"},
	} {
		fakeProxy(t, tc.answer)
		var out, errOut bytes.Buffer
		if code := Main([]string{"h", "22"}, strings.NewReader(""), &out, &errOut); code != 1 || !strings.Contains(errOut.String(), tc.want) {
			t.Errorf("answer %.40q: code %d, stderr %q, want 1 and %q", tc.answer, code, errOut.String(), tc.want)
		}
	}
}

func TestUsage(t *testing.T) {
	for _, args := range [][]string{nil, {"h"}, {"h", "0"}, {"h", "x"}, {"h", "70000"}} {
		var errOut bytes.Buffer
		if code := Main(args, strings.NewReader(""), io.Discard, &errOut); code != 2 || errOut.Len() == 0 {
			t.Errorf("args %q: code %d, stderr %q", args, code, errOut.String())
		}
	}
}
