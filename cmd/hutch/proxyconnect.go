package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"

	"github.com/hutch-sandbox/hutch/internal/sandbox"
)

// cmdProxyConnect connects stdin and stdout to HOST:PORT through the
// sandbox's HTTP proxy with CONNECT: ssh's ProxyCommand inside a sandbox in
// proxy mode (GIT_SSH_COMMAND points at it). A refusal is printed with the
// proxy's reason.
func cmdProxyConnect(args []string, stdin io.Reader, stdout io.Writer, stderr io.Writer) int {
	if len(args) != 2 {
		fmt.Fprintln(stderr, "hutch: usage: hutch proxy-connect HOST PORT")
		return 2
	}
	host, port := args[0], args[1]
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		fmt.Fprintf(stderr, "hutch: proxy-connect: invalid port %q\n", port)
		return 2
	}
	proxy := "127.0.0.1:" + strconv.Itoa(sandbox.ProxyHTTPPort)
	conn, err := net.Dial("tcp", proxy)
	if err != nil {
		fmt.Fprintf(stderr, "hutch: proxy-connect: no proxy at %s (is the sandbox running with --net proxy?): %v\n", proxy, err)
		return 1
	}
	defer conn.Close()
	target := net.JoinHostPort(strings.Trim(host, "[]"), port)
	if _, err := fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target); err != nil {
		fmt.Fprintf(stderr, "hutch: proxy-connect: %v\n", err)
		return 1
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		fmt.Fprintf(stderr, "hutch: proxy-connect: %v\n", err)
		return 1
	}
	if resp.StatusCode != http.StatusOK {
		reason := resp.Header.Get("X-Hutch-Blocked")
		if reason == "" {
			reason = resp.Status
		}
		fmt.Fprintf(stderr, "hutch: proxy-connect: %s refused: %s\n", target, reason)
		return 1
	}
	// The upstream's end of the stream ends the helper; stdin's end only
	// half-closes the connection.
	go func() {
		_, _ = io.Copy(conn, stdin)
		if tc, ok := conn.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
	}()
	_, _ = io.Copy(stdout, br)
	if f, ok := stdout.(*os.File); ok {
		_ = f.Close()
	}
	return 0
}
