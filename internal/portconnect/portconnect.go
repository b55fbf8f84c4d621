// Package portconnect is the sandbox's end of a port forward: `hutch
// port-connect PORT`, run inside a sandbox through its agent, connects to
// PORT on the sandbox's own loopback (127.0.0.1, then [::1]) and copies its
// standard input to the connection and the connection to its standard
// output. The host's end (package portfwd) turns that exec into a
// connection, for every isolation tier alike and without privileges: the
// sandbox's network namespace is reached through its agent only. Both
// hutch and the lean hutch-agent binary serve it, so it stays small: no
// net/http.
package portconnect

import (
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
)

// Command is the subcommand's name.
const Command = "port-connect"

// Ready is the byte written to standard output once the connection is
// made, before anything of the connection: the host's end reads it to
// tell a connection from a refusal, which is reported on standard error
// with exit code 1 instead.
const Ready = '+'

// hosts are the loopback addresses tried, in order (tests change them).
var hosts = []string{"127.0.0.1", "::1"}

// Main is `port-connect PORT`: it returns the process's exit code, 0 once
// the connection ended, 1 when nothing listens on PORT, 2 on bad
// arguments.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) != 1 {
		fmt.Fprintln(stderr, "hutch: usage: hutch port-connect PORT (inside a sandbox)")
		return 2
	}
	port, err := strconv.Atoi(args[0])
	if err != nil || port < 1 || port > 65535 || args[0][0] == '+' || args[0][0] == '0' {
		fmt.Fprintf(stderr, "hutch: port-connect: invalid port %q: want a number from 1 to 65535\n", args[0])
		return 2
	}
	var conn net.Conn
	var firstErr error
	for _, h := range hosts {
		conn, err = net.Dial("tcp", net.JoinHostPort(h, strconv.Itoa(port)))
		if err == nil {
			break
		}
		if firstErr == nil {
			firstErr = err
		}
	}
	if conn == nil {
		fmt.Fprintf(stderr, "hutch: port-connect: nothing listens on port %d in the sandbox (on 127.0.0.1 or [::1]): %v\n", port, firstErr)
		return 1
	}
	defer conn.Close()
	if _, err := stdout.Write([]byte{Ready}); err != nil {
		return 1
	}
	// The server's end of the stream ends the helper; stdin's end only
	// half-closes the connection, so that a request sent whole still gets
	// its answer.
	go func() {
		_, _ = io.Copy(conn, stdin)
		if tc, ok := conn.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
	}()
	_, _ = io.Copy(stdout, conn)
	if f, ok := stdout.(*os.File); ok {
		_ = f.Close()
	}
	return 0
}
