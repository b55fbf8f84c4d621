package microvm

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/agent"
	"github.com/hutch-sandbox/hutch/internal/microvm/guest"
	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// TestMain lets the test binary stand in for hutch as the guest's init.
func TestMain(m *testing.M) {
	guest.MainIfInit()
	os.Exit(m.Run())
}

// needVM returns the cached guest kernel, or skips (fails under
// HUTCH_TEST_ROOT=1) when the host cannot boot a guest: no root, no QEMU,
// no kernel fetched by scripts/guest-kernel.sh.
func needVM(t *testing.T) *Kernel {
	t.Helper()
	testutil.RequireRoot(t)
	_, err := exec.LookPath("qemu-system-x86_64")
	testutil.Need(t, err == nil, "no qemu-system-x86_64 (scripts/guest-kernel.sh installs it)")
	k, err := FindKernel("")
	testutil.Need(t, err == nil, "no guest kernel (run scripts/guest-kernel.sh): "+errString(err))
	return k
}

// testLog is a logger that writes to the test's log.
func testLog(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// TestBootAgent boots a guest (under software emulation when the host has
// no KVM), reaches its agent over the virtio-serial port, reads the
// guest's kernel release, runs a command, and checks that Close ends QEMU.
func TestBootAgent(t *testing.T) {
	k := needVM(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	vm, err := Boot(ctx, Config{Kernel: k, AllowEmulation: true, Log: testLog(t)})
	if err != nil {
		t.Fatal(err)
	}
	ready := time.Since(start)
	defer vm.Close()
	t.Logf("boot -> agent ready: %v (emulated: %v)", ready, vm.Emulated())

	c := agent.NewClient(vm.Conn())
	var rel bytes.Buffer
	if _, err := c.ReadFile(ctx, "/proc/sys/kernel/osrelease", &rel); err != nil {
		t.Fatalf("read the guest's kernel release: %v\nconsole: %s", err, tail(vm.ConsolePath(), 2000))
	}
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		t.Fatal(err)
	}
	host := unix.ByteSliceToString(u.Release[:])
	release := strings.TrimSpace(rel.String())
	t.Logf("guest kernel %q, host kernel %q", release, host)
	if release != k.Release {
		t.Errorf("guest kernel release %q, want the cached kernel's %q", release, k.Release)
	}
	if release == host {
		t.Errorf("guest kernel release %q is the host's", release)
	}

	// The guest's init, run again as a command, is not PID 1: it refuses
	// with exit code 2.
	p, err := c.Exec(ctx, agent.ExecRequest{Args: []string{"/init", guest.InitCommand}})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	done := make(chan struct{})
	go func() {
		out.ReadFrom(p.Stderr)
		close(done)
	}()
	st, err := p.Wait()
	if err != nil {
		t.Fatal(err)
	}
	<-done
	if st.Code != 2 || !strings.Contains(out.String(), "runs only as the init") {
		t.Errorf("exec /init %s: exit %+v, stderr %q; want exit code 2 and the refusal", guest.InitCommand, st, out.String())
	}

	// Closing the agent's connection powers the guest off: QEMU exits by
	// itself.
	pid := vm.PID()
	if err := c.Close(); err != nil {
		t.Logf("close client: %v", err)
	}
	select {
	case <-vm.Done():
	case <-ctx.Done():
		t.Errorf("QEMU still running after the agent's connection closed\nconsole: %s", tail(vm.ConsolePath(), 2000))
	}
	console, _ := os.ReadFile(vm.ConsolePath())
	t.Logf("console:\n%s", console)
	if err := vm.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-vm.Done():
	default:
		t.Fatal("QEMU still running after Close")
	}
	if err := syscall.Kill(pid, 0); err == nil {
		t.Errorf("QEMU (pid %d) still exists after Close", pid)
	}
	if _, err := os.Stat(vm.Dir()); !os.IsNotExist(err) {
		t.Errorf("VM directory %s left after Close: %v", vm.Dir(), err)
	}
}
