//go:build linux

package k8s

import (
	"bytes"
	"errors"
	"io"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/testutil"
	"github.com/hutch-sandbox/hutch/internal/testutil/k8stest"
)

// execTTY runs `kubectl exec -it POD -c CONTAINER -- sh -c SCRIPT` on a
// terminal of its own, writes input to it, and returns what the terminal
// showed and the exit code: the container's command on a terminal the
// runtime made for it.
func execTTY(t *testing.T, c *k8stest.Cluster, pod, container, script, input string) (string, int) {
	t.Helper()
	master, slave := testutil.OpenPty(t)
	cmd := c.Command("exec", "-it", pod, "-c", container, "--", "sh", "-c", script)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	slave.Close()
	var out bytes.Buffer
	read := make(chan struct{})
	go func() { io.Copy(&out, master); close(read) }()
	if input != "" {
		master.WriteString(input)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(2 * time.Minute):
		cmd.Process.Kill()
		err = <-done
		t.Errorf("kubectl exec -it %s did not end", pod)
	}
	<-read
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return strings.ReplaceAll(out.String(), "\r\n", "\n"), code
}

// testTTY: kubectl exec -it reaches the container on a terminal: the
// command's stdin is one (isatty: under gVisor the Sentry's terminal has
// no name in the container's /dev, so tty(1) says "not a tty" of it), it
// reads what is typed, and its exit code comes back.
func testTTY(t *testing.T, c *k8stest.Cluster, pod, container string) {
	t.Helper()
	out, code := execTTY(t, c, pod, container, "[ -t 0 ] && echo on a terminal; read line; echo got $line; exit 5", "typed\n")
	if code != 5 || !strings.Contains(out, "on a terminal") || !strings.Contains(out, "got typed") {
		t.Errorf("kubectl exec -it %s -c %s: exit %d, want 5, a terminal and the typed line:\n%s", pod, container, code, out)
	}
}
