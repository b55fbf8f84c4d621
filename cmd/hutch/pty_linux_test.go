package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// terminal is a pty pair standing for the user's terminal: hutch gets the
// slave as its controlling terminal and stdio, the test types into and
// reads from the master.
type terminal struct {
	master, slave *os.File

	mu   sync.Mutex
	out  bytes.Buffer
	more chan struct{} // signalled on every read
	done chan struct{} // closed when the master reads EOF or EIO
}

func newTerminal(t *testing.T, rows, cols uint16) *terminal {
	t.Helper()
	m, s := testutil.OpenPty(t)
	if err := unix.IoctlSetWinsize(int(m.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols}); err != nil {
		t.Fatalf("set window size: %v", err)
	}
	return &terminal{master: m, slave: s, more: make(chan struct{}, 1), done: make(chan struct{})}
}

// read collects everything the terminal shows until every slave is closed.
func (term *terminal) read() {
	defer close(term.done)
	buf := make([]byte, 4096)
	for {
		n, err := term.master.Read(buf)
		term.mu.Lock()
		term.out.Write(buf[:n])
		term.mu.Unlock()
		select {
		case term.more <- struct{}{}:
		default:
		}
		if err != nil {
			return
		}
	}
}

// shown returns what the terminal showed so far, without carriage returns.
func (term *terminal) shown() string {
	term.mu.Lock()
	defer term.mu.Unlock()
	return strings.ReplaceAll(term.out.String(), "\r", "")
}

// waitFor waits until the terminal shows s.
func (term *terminal) waitFor(t *testing.T, s string) {
	t.Helper()
	deadline := time.After(guard)
	for !strings.Contains(term.shown(), s) {
		select {
		case <-term.more:
		case <-term.done:
			if !strings.Contains(term.shown(), s) {
				t.Fatalf("terminal closed before showing %q; it showed:\n%s", s, term.shown())
			}
		case <-deadline:
			t.Fatalf("terminal did not show %q within %s; it showed:\n%s", s, guard, term.shown())
		}
	}
}

// startOnTerminal starts `hutch run ARGS` as the session leader of term,
// as a shell would start it, and returns the command and its wait error.
func startOnTerminal(t *testing.T, term *terminal, args ...string) (*exec.Cmd, <-chan error) {
	t.Helper()
	testutil.RequireRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	t.Cleanup(cancel)
	ws := t.TempDir()
	cmd := exec.CommandContext(ctx, testutil.Hutch(t), append([]string{"run"}, args...)...)
	cmd.Dir = ws
	cmd.Env = append(baseEnv(ws), "TERM=xterm")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = term.slave, term.slave, term.slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	term.slave.Close() // hutch holds the terminal now
	go term.read()
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	return cmd, waited
}

// typeHello waits until the command on term printed "ready", types
// "hello" and Enter, checks that hutch exits with the command's 3 and
// returns what the terminal showed.
func typeHello(t *testing.T, term *terminal, waited <-chan error) string {
	t.Helper()
	term.waitFor(t, "ready\n")
	if _, err := term.master.Write([]byte("hello\r")); err != nil {
		t.Fatal(err)
	}
	if code := exitCode(t, waited); code != 3 {
		t.Errorf("exit code: got %d, want the command's 3", code)
	}
	<-term.done
	out := term.shown()
	return out
}

// exitCode waits for hutch and returns its exit code.
func exitCode(t *testing.T, waited <-chan error) int {
	t.Helper()
	err := <-waited
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.ExitCode()
	}
	t.Fatalf("hutch: %v", err)
	return -1
}

// TestTerminal checks that a command started from a terminal gets a
// terminal of its own, in a new session, that typed input reaches it and
// its output and window size come through, and that the user's terminal is
// restored afterwards.
func TestTerminal(t *testing.T) {
	t.Parallel()
	term := newTerminal(t, 33, 77)
	before, err := unix.IoctlGetTermios(int(term.master.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	var userTTY unix.Stat_t
	if err := unix.Fstat(int(term.slave.Fd()), &userTTY); err != nil {
		t.Fatal(err)
	}
	script := `tty
set -- $(cat /proc/$$/stat)
echo "session=$6 pid=$$ tty_nr=$7"
stat -L -c 'ttyid=%d:%i' /proc/self/fd/0
stty size
echo ready
read x
echo "got:$x"
exit 3`
	_, waited := startOnTerminal(t, term, "--", "sh", "-c", script)
	out := typeHello(t, term, waited)

	fields := map[string]string{}
	for _, l := range lines(out) {
		for _, f := range strings.Fields(l) {
			if k, v, ok := strings.Cut(f, "="); ok {
				fields[k] = v
			}
		}
	}
	// Programs find their terminal's name (tty, ttyname(3)) through the
	// sandbox's own /dev/pts.
	if first, _, _ := strings.Cut(out, "\n"); !strings.HasPrefix(first, "/dev/pts/") {
		t.Errorf("tty: got %q, want the name of the command's terminal, /dev/pts/N:\n%s", first, out)
	}
	if fields["session"] == "" || fields["session"] != fields["pid"] {
		t.Errorf("the command is not a session leader (session %q, pid %q):\n%s", fields["session"], fields["pid"], out)
	}
	if fields["tty_nr"] == "" || fields["tty_nr"] == "0" {
		t.Errorf("the command has no controlling terminal:\n%s", out)
	}
	if user := fmt.Sprintf("%d:%d", userTTY.Dev, userTTY.Ino); fields["ttyid"] == "" || fields["ttyid"] == user {
		t.Errorf("the command's stdin is the user's terminal (%s), not a pty of its own:\n%s", user, out)
	}
	if !strings.Contains(out, "33 77\n") {
		t.Errorf("window size 33x77 did not reach the command:\n%s", out)
	}
	if !strings.Contains(out, "got:hello\n") {
		t.Errorf("typed input did not reach the command:\n%s", out)
	}

	after, err := unix.IoctlGetTermios(int(term.master.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	if before.Iflag != after.Iflag || before.Oflag != after.Oflag || before.Lflag != after.Lflag || before.Cflag != after.Cflag {
		t.Errorf("terminal modes not restored: before %s, after %s", modes(before), modes(after))
	}
}

func modes(t *unix.Termios) string {
	return fmt.Sprintf("iflag=%#x oflag=%#x lflag=%#x cflag=%#x", t.Iflag, t.Oflag, t.Lflag, t.Cflag)
}

// TestTerminalInterrupt checks that Ctrl-C typed at the terminal interrupts
// the command, and hutch reports it as killed by SIGINT.
func TestTerminalInterrupt(t *testing.T) {
	t.Parallel()
	term := newTerminal(t, 24, 80)
	_, waited := startOnTerminal(t, term, "--", "sh", "-c", "echo ready; sleep 30")
	term.waitFor(t, "ready\n")
	if _, err := term.master.Write([]byte{0x03}); err != nil {
		t.Fatal(err)
	}
	if code := exitCode(t, waited); code != 128+int(syscall.SIGINT) {
		t.Errorf("exit code after Ctrl-C: got %d, want %d\n%s", code, 128+int(syscall.SIGINT), term.shown())
	}
}

// TestNoTerminalWithPipes checks that a command whose stdin is not a
// terminal gets none.
func TestNoTerminalWithPipes(t *testing.T) {
	t.Parallel()
	r := sandboxed(t, invocation{args: sh("tty; true")})
	wantOK(t, r)
	if r.stdout != "not a tty\n" {
		t.Errorf("tty: got %q, want \"not a tty\"", r.stdout)
	}
}
