package agent

import (
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/testutil"
	"golang.org/x/sys/unix"
)

// sudoRun sends req to the agent's sudo as a client does, with pipes for
// the command's streams, and returns its exit code, output and error.
func sudoRun(t *testing.T, req sudoRequest, stdin string) (int, string, string, error) {
	t.Helper()
	var ends [3][2]*os.File
	for i := range ends {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		ends[i] = [2]*os.File{r, w}
	}
	go func() {
		io.WriteString(ends[0][1], stdin)
		ends[0][1].Close()
	}()
	outs := make([]chan string, 2)
	for i := range outs {
		outs[i] = make(chan string, 1)
		go func(r *os.File) {
			b, _ := io.ReadAll(r)
			outs[i] <- string(b)
		}(ends[i+1][0])
	}
	code, err := sudoCall(req, ends[0][0], ends[1][1], ends[2][1])
	ends[0][0].Close()
	ends[1][1].Close()
	ends[2][1].Close()
	return code, <-outs[0], <-outs[1], err
}

// TestSudo runs commands as root through an agent that serves sudo: the
// command is uid 0 with sudo's reset environment and the client's streams
// and directory, its exit code is the client's, and what is not a request
// (no descriptors, not JSON, a missing command) is refused by name while
// the agent goes on serving.
func TestSudo(t *testing.T) {
	testutil.RequireRoot(t)
	old := sudoAddr
	sudoAddr = fmt.Sprintf("@hutch-sudo-test-%d", os.Getpid())
	t.Cleanup(func() { sudoAddr = old })
	agentPair(t, ServeOptions{Sudo: true}, false)

	dir := t.TempDir()
	code, out, errOut, err := sudoRun(t, sudoRequest{
		Args: []string{"sh", "-c", `id -u; echo "$HOME $USER $FOO $SECRET"; pwd; cat; echo oops >&2; exit 7`},
		Env:  []string{"SECRET=kept-out", "LANG=C.UTF-8", "PATH=/nowhere"},
		Set:  []string{"FOO=bar"},
		Dir:  dir,
	}, "from stdin\n")
	if err != nil || code != 7 {
		t.Fatalf("sudo sh: code %d, err %v (stderr %q)", code, err, errOut)
	}
	if want := "0\n/root root bar \n" + dir + "\nfrom stdin\n"; out != want {
		t.Errorf("sudo sh wrote %q, want %q", out, want)
	}
	if errOut != "oops\n" {
		t.Errorf("sudo sh's stderr: %q", errOut)
	}
	// -E keeps the client's environment.
	_, out, _, err = sudoRun(t, sudoRequest{Args: []string{"sh", "-c", `echo "$SECRET $USER"`}, Env: []string{"SECRET=kept"}, KeepEnv: true, Dir: "/"}, "")
	if err != nil || out != "kept root\n" {
		t.Errorf("sudo -E: %q, %v", out, err)
	}
	if _, _, _, err := sudoRun(t, sudoRequest{Args: []string{"no-such-command-here"}, Dir: "/"}, ""); err == nil || !strings.Contains(err.Error(), "no-such-command-here: command not found") {
		t.Errorf("sudo of a missing command: %v", err)
	}

	// Hostile requests: each is answered with an error, none stops sudo.
	for _, c := range []struct {
		name string
		msg  []byte
		fds  bool
		want string
	}{
		{"no descriptors", []byte(`{"args":["true"]}`), false, "three descriptors"},
		{"not JSON", []byte("{"), true, "malformed request"},
		{"no command", []byte(`{"args":[]}`), true, "no command"},
		{"NUL", []byte(`{"args":["tr\u0000ue"]}`), true, "contains NUL"},
	} {
		conn, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: sudoAddr, Net: "unixpacket"})
		if err != nil {
			t.Fatal(err)
		}
		var oob []byte
		if c.fds {
			oob = unix.UnixRights(0, 1, 2)
		}
		if _, _, err := conn.WriteMsgUnix(c.msg, oob, nil); err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 4096)
		n, _ := conn.Read(b)
		conn.Close()
		if !strings.Contains(string(b[:n]), c.want) {
			t.Errorf("%s: answered %q, want %q", c.name, b[:n], c.want)
		}
	}
	if code, _, _, err := sudoRun(t, sudoRequest{Args: []string{"true"}, Dir: "/"}, ""); code != 0 || err != nil {
		t.Errorf("sudo true after hostile requests: %d, %v", code, err)
	}
}

// TestSudoMainOptions checks how sudo's command line becomes a request.
func TestSudoMainOptions(t *testing.T) {
	var b strings.Builder
	if code := SudoMain([]string{"-u", "user", "true"}, &b); code != 1 || !strings.Contains(b.String(), `only root is served in this sandbox, not "user"`) {
		t.Errorf("sudo -u user: %d %q", code, b.String())
	}
	b.Reset()
	if code := SudoMain([]string{"-Z", "true"}, &b); code != 1 || !strings.Contains(b.String(), "unknown option -Z") {
		t.Errorf("sudo -Z: %d %q", code, b.String())
	}
	b.Reset()
	if code := SudoMain(nil, &b); code != 1 || !strings.Contains(b.String(), "no command") {
		t.Errorf("sudo: %d %q", code, b.String())
	}
}
