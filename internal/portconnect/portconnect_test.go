package portconnect

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// TestForward connects to a loopback echo server that answers once the
// request ended (stdin's end half-closes the connection): the answer comes
// after the Ready byte, and the helper ends with the server's end.
func TestForward(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		b, _ := io.ReadAll(c) // until the helper's half-close
		_, _ = c.Write(append([]byte("got "), b...))
	}()
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	var out, errOut bytes.Buffer
	code := Main([]string{port}, strings.NewReader("ping"), &out, &errOut)
	if code != 0 || out.String() != string(Ready)+"got ping" {
		t.Fatalf("code %d, out %q, stderr %q", code, out.String(), errOut.String())
	}
}

// TestIPv6 reaches a server listening on [::1] only.
func TestIPv6(t *testing.T) {
	l, err := net.Listen("tcp", "[::1]:0")
	testutil.Need(t, err == nil, fmt.Sprintf("no IPv6 loopback: %v", err))
	defer l.Close()
	go func() {
		if c, err := l.Accept(); err == nil {
			_, _ = c.Write([]byte("six"))
			c.Close()
		}
	}()
	var out, errOut bytes.Buffer
	code := Main([]string{strconv.Itoa(l.Addr().(*net.TCPAddr).Port)}, strings.NewReader(""), &out, &errOut)
	if code != 0 || out.String() != string(Ready)+"six" {
		t.Fatalf("code %d, out %q, stderr %q", code, out.String(), errOut.String())
	}
}

// TestNothingListens: a refused connection is exit code 1 with the reason,
// and no Ready byte.
func TestNothingListens(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	l.Close()
	old := hosts
	hosts = []string{"127.0.0.1"}
	defer func() { hosts = old }()
	var out, errOut bytes.Buffer
	code := Main([]string{port}, strings.NewReader(""), &out, &errOut)
	if code != 1 || out.Len() != 0 || !strings.Contains(errOut.String(), "nothing listens on port "+port) {
		t.Fatalf("code %d, out %q, stderr %q", code, out.String(), errOut.String())
	}
}

func TestBadArgs(t *testing.T) {
	for _, args := range [][]string{nil, {"1", "2"}, {"0"}, {"65536"}, {"+80"}, {"080"}, {"http"}} {
		var out, errOut bytes.Buffer
		if code := Main(args, strings.NewReader(""), &out, &errOut); code != 2 || errOut.Len() == 0 {
			t.Errorf("%q: code %d, stderr %q", args, code, errOut.String())
		}
	}
}
