// Package proxyconnect is ssh's ProxyCommand inside a sandbox in network
// mode "proxy": it connects its standard input and output to HOST:PORT
// through the sandbox's HTTP proxy with CONNECT. Both hutch and the lean
// hutch-agent binary serve it as "proxy-connect", so it stays small: no
// net/http.
package proxyconnect

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
)

// Port is the sandbox's HTTP proxy port on its loopback.
const Port = 3128

// maxHeaderBytes bounds the proxy's answer to CONNECT.
const maxHeaderBytes = 64 << 10

// proxyAddr is where the proxy listens when set (tests set it); else
// 127.0.0.1:Port.
var proxyAddr string

// Main is `proxy-connect HOST PORT`: it returns the process's exit code. A
// refusal is printed with the proxy's reason.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) != 2 {
		fmt.Fprintln(stderr, "hutch: usage: hutch proxy-connect HOST PORT")
		return 2
	}
	host, port := args[0], args[1]
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		fmt.Fprintf(stderr, "hutch: proxy-connect: invalid port %q\n", port)
		return 2
	}
	proxy := proxyAddr
	if proxy == "" {
		proxy = "127.0.0.1:" + strconv.Itoa(Port)
	}
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
	code, status, blocked, err := readAnswer(br)
	if err != nil {
		fmt.Fprintf(stderr, "hutch: proxy-connect: %v\n", err)
		return 1
	}
	if code != 200 {
		reason := blocked
		if reason == "" {
			reason = status
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

// readAnswer reads the proxy's answer to CONNECT from br, and nothing of
// the tunnel after it: its status code, its status line after the version,
// and the X-Hutch-Blocked reason of a refusal. The answer is bounded in
// size.
func readAnswer(br *bufio.Reader) (code int, status, blocked string, err error) {
	total := 0
	readLine := func() (string, error) {
		var line []byte
		for {
			chunk, err := br.ReadSlice('\n')
			total += len(chunk)
			if total > maxHeaderBytes {
				return "", fmt.Errorf("the proxy's answer is longer than %d bytes", maxHeaderBytes)
			}
			line = append(line, chunk...)
			if err == bufio.ErrBufferFull {
				continue
			}
			if err != nil {
				return "", fmt.Errorf("the proxy's answer: %w", err)
			}
			return strings.TrimRight(string(line), "\r\n"), nil
		}
	}
	line, err := readLine()
	if err != nil {
		return 0, "", "", err
	}
	version, rest, ok := strings.Cut(line, " ")
	if !ok || !strings.HasPrefix(version, "HTTP/1.") {
		return 0, "", "", fmt.Errorf("the proxy's answer %q is not HTTP/1", line)
	}
	codeText, _, _ := strings.Cut(rest, " ")
	if code, err = strconv.Atoi(codeText); err != nil || code < 100 || code > 999 {
		return 0, "", "", fmt.Errorf("the proxy's answer %q has no status code", line)
	}
	for {
		h, err := readLine()
		if err != nil {
			return 0, "", "", err
		}
		if h == "" {
			return code, rest, blocked, nil
		}
		if name, value, ok := strings.Cut(h, ":"); ok && strings.EqualFold(strings.TrimSpace(name), "X-Hutch-Blocked") {
			blocked = strings.TrimSpace(value)
		}
	}
}
