package microvm

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
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
	MainIfReaper()
	code := m.Run()
	testutil.RemoveBuilds()
	os.Exit(code)
}

// needVM returns the guest kernel of $HUTCH_TEST_GUEST_KERNEL (the
// directory scripts/guest-kernel.sh printed), else the cache's current
// one, or skips (fails under HUTCH_TEST_ROOT=1) when the host cannot boot
// a guest: no root, no QEMU, no kernel fetched by scripts/guest-kernel.sh.
func needVM(t testing.TB) *Kernel {
	t.Helper()
	testutil.RequireRoot(t)
	_, err := exec.LookPath("qemu-system-x86_64")
	testutil.Need(t, err == nil, "no qemu-system-x86_64 (scripts/guest-kernel.sh installs it)")
	var k *Kernel
	if dir := os.Getenv("HUTCH_TEST_GUEST_KERNEL"); dir != "" {
		k, err = LoadKernel(dir)
	} else {
		k, err = FindKernel("")
	}
	testutil.Need(t, err == nil, "no guest kernel (run scripts/guest-kernel.sh): "+errString(err))
	return k
}

// testLog is a logger that writes to the test's log.
func testLog(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct{ t testing.TB }

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
// no KVM) whose init is the test binary, standing in for hutch, reaches its
// agent over the virtio-serial port, reads the guest's kernel release,
// runs a command, and checks that closing the connection powers the guest
// off and Close leaves nothing behind.
func TestBootAgent(t *testing.T) {
	k := needVM(t)
	bootAndCheck(t, Config{Kernel: k, AllowEmulation: true, Log: testLog(t)}, nil, checkClock)
}

// checkClock: the guest's clock is the host's, and runs at its pace (the
// host's time-stamp counter's frequency, measured, is what an emulated
// guest is told): a file the guest writes has the host's time as its
// modification time, and ten seconds of the host's between two writes
// are ten of the guest's. The bounds only widen on a busy host.
func checkClock(ctx context.Context, t *testing.T, c *agent.Client) {
	stamp := func(name string) (guest, before, after time.Time) {
		before = time.Now()
		if _, err := c.WriteFile(ctx, "/tmp/"+name, strings.NewReader("t"), 0o600); err != nil {
			t.Fatal(err)
		}
		fi, err := c.Stat(ctx, "/tmp/"+name)
		if err != nil {
			t.Fatal(err)
		}
		return fi.ModTime, before, time.Now()
	}
	const skew = 500 * time.Millisecond
	g0, b0, a0 := stamp("clock0")
	if g0.Before(b0.Add(-skew)) || g0.After(a0.Add(skew)) {
		t.Errorf("the guest's clock reads %v while the host's read %v to %v", g0, b0, a0)
	}
	time.Sleep(10 * time.Second)
	g1, _, a1 := stamp("clock1")
	guestTook, hostTook := g1.Sub(g0), a1.Sub(b0)
	t.Logf("ten seconds of the host's: %v of the guest's (host: %v around them)", guestTook, hostTook)
	if guestTook < 10*time.Second-skew || guestTook > hostTook+skew {
		t.Errorf("the guest's clock ran %v while the host's ran at least 10s and at most %v", guestTook, hostTook)
	}
}

// TestBootHutchAgent is TestBootAgent with hutch-agent as the guest's init,
// as released: a static binary, without the test binary's libraries.
func TestBootHutchAgent(t *testing.T) {
	k := needVM(t)
	init := filepath.Join(filepath.Dir(testutil.Hutch(t)), "hutch-agent")
	libs, err := sharedLibs(init)
	if err != nil || len(libs) != 0 {
		t.Fatalf("hutch-agent needs libraries %v (%v), want a static binary", libs, err)
	}
	bootAndCheck(t, Config{Kernel: k, Init: init, AllowEmulation: true, Log: testLog(t)}, nil)
}

// TestBootRunAs is TestBootAgent with QEMU under ids of its own and in an
// empty root once it started, paused and resumed over its monitor.
func TestBootRunAs(t *testing.T) {
	k := needVM(t)
	id := testutil.UnprivilegedUID
	bootAndCheck(t, Config{Kernel: k, AllowEmulation: true, UID: id, GID: id, Log: testLog(t)}, func(vm *VM) {
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", vm.PID()))
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{fmt.Sprintf("Uid:\t%d\t%d\t%d\t%d\n", id, id, id, id), fmt.Sprintf("Gid:\t%d\t%d\t%d\t%d\n", id, id, id, id)} {
			if !strings.Contains(string(status), want) {
				t.Errorf("QEMU's status has no %q:\n%s", want, status)
			}
		}
		root, err := os.Readlink(fmt.Sprintf("/proc/%d/root", vm.PID()))
		if err != nil {
			t.Fatal(err)
		}
		if root != filepath.Join(vm.Dir(), "root") {
			t.Errorf("QEMU's root is %s, want %s", root, filepath.Join(vm.Dir(), "root"))
		}
		// QEMU's monitor answers it as it runs there: the guest stops
		// and goes on (the agent answers after, below).
		if err := vm.Pause(); err != nil {
			t.Errorf("pause: %v", err)
		}
		if err := vm.Resume(); err != nil {
			t.Errorf("resume: %v", err)
		}
	})
}

// TestBootOnlyQEMU checks that a connection to the agent's socket from a
// process other than QEMU is not taken for the agent's: QEMU here is a
// script that has another process connect (and send a byte) before it
// becomes QEMU.
func TestBootOnlyQEMU(t *testing.T) {
	k := needVM(t)
	qemu, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	script := filepath.Join(dir, "qemu")
	write(t, script, `#!/bin/sh
for a; do case "$a" in socket,id=agent,path=*) sock=${a#socket,id=agent,path=} ;; esac; done
/usr/bin/python3 -c '
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
open(sys.argv[2], "w").close()
try:
    s.sendall(b"x")
    s.recv(1)  # until hutch closes it
except OSError:
    pass
open(sys.argv[3], "w").close()
' "$sock" `+dir+`/connected `+dir+`/closed &
while [ ! -e `+dir+`/connected ]; do sleep 0.01; done
exec `+qemu+` "$@"
`)
	if err := os.Chmod(script, 0o755); err != nil {
		t.Fatal(err)
	}
	bootAndCheck(t, Config{Kernel: k, QEMU: script, AllowEmulation: true, Log: testLog(t)}, func(*VM) {
		if _, err := os.Stat(filepath.Join(dir, "closed")); err != nil {
			t.Errorf("the other process's connection is still open: %v", err)
		}
	})
}

// TestBootInitFails checks that a guest whose init ends at once (the
// kernel panics, and resets, which ends QEMU) makes Boot fail, quoting the
// guest's console, and leaves nothing behind.
func TestBootInitFails(t *testing.T) {
	k := needVM(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := filepath.Join(t.TempDir(), "vm")
	_, err := Boot(ctx, Config{Kernel: k, Init: "/bin/true", AllowEmulation: true, Dir: dir, Log: testLog(t)})
	if err == nil || !strings.Contains(err.Error(), "Attempted to kill init") {
		t.Fatalf("got %v, want the guest's kernel panic quoted", err)
	}
	t.Log(err)
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("VM directory %s left after a failed boot: %v", dir, err)
	}
}

// TestBootNeedsAccel checks that without a KVM that can run the guest
// (no /dev/kvm, or one without the CPU's hardware virtualization) Boot
// refuses to emulate unless allowed.
func TestBootNeedsAccel(t *testing.T) {
	if usableKVM() == nil {
		t.Skip("the host has KVM")
	}
	_, err := Boot(context.Background(), Config{Kernel: &Kernel{}})
	if !errors.Is(err, ErrNoAccel) || !strings.Contains(err.Error(), "/dev/kvm") {
		t.Errorf("got %v, want ErrNoAccel naming /dev/kvm", err)
	}
}

// bootAndCheck boots a guest of cfg and checks it as TestBootAgent says;
// check, if not nil, sees the VM once it booted; each of checkAgent, its
// agent.
func bootAndCheck(t *testing.T, cfg Config, check func(*VM), checkAgent ...func(context.Context, *testing.T, *agent.Client)) {
	// The guest's init watches the agent's port: what a request left
	// unanswered was stuck in is on the console.
	cfg.Debug = true
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	k := cfg.Kernel
	start := time.Now()
	vm, err := Boot(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ready := time.Since(start)
	defer vm.Close()
	t.Logf("boot -> agent ready: %v (emulated: %v)", ready, vm.Emulated())
	if check != nil {
		check(vm)
	}

	c := agent.NewClient(vm.Conn())
	var rel bytes.Buffer
	if _, err := c.ReadFile(ctx, "/proc/sys/kernel/osrelease", &rel); err != nil {
		t.Fatalf("read the guest's kernel release: %v\n%s", err, portReport(vm))
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

	// The init's descriptor of the agent's port is non-blocking, in its
	// runtime's poller: a blocking one, left in the poller, can miss the
	// wake-up of a request (see openPort).
	checkPortNonblocking(ctx, t, c)
	for _, f := range checkAgent {
		f(ctx, t, c)
	}

	// The initramfs's /tmp is anyone's, with the sticky bit.
	if fi, err := c.Stat(ctx, "/tmp"); err != nil {
		t.Errorf("stat /tmp: %v", err)
	} else if !fi.IsDir || fi.Mode.Perm() != 0o777 || fi.Mode&os.ModeSticky == 0 {
		t.Errorf("the guest's /tmp has mode %v, want drwxrwxrwt", fi.Mode)
	}

	// Megabytes each way through the port, in the agent's flow-controlled
	// chunks, arrive whole.
	big := make([]byte, 3<<20+12345)
	if _, err := rand.Read(big); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WriteFile(ctx, "/tmp/big", bytes.NewReader(big), 0o600); err != nil {
		t.Fatalf("write a file in the guest: %v", err)
	}
	var back bytes.Buffer
	if _, err := c.ReadFile(ctx, "/tmp/big", &back); err != nil {
		t.Fatalf("read it back: %v", err)
	}
	if !bytes.Equal(back.Bytes(), big) {
		t.Errorf("read back %d bytes, not the %d written", back.Len(), len(big))
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
	// The same on a terminal: its output is the terminal's.
	p, err = c.Exec(ctx, agent.ExecRequest{Args: []string{"/init", guest.InitCommand}, TTY: true})
	if err != nil {
		t.Fatalf("exec on a terminal: %v", err)
	}
	out.Reset()
	done = make(chan struct{})
	go func() {
		out.ReadFrom(p.Stdout)
		close(done)
	}()
	st, err = p.Wait()
	if err != nil {
		t.Fatal(err)
	}
	<-done
	if st.Code != 2 || !strings.Contains(out.String(), "runs only as the init") {
		t.Errorf("exec /init %s on a terminal: exit %+v, output %q; want exit code 2 and the refusal", guest.InitCommand, st, out.String())
	}

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

// checkPortNonblocking checks that the guest's init holds the agent's
// port (a /dev/vport* device) with O_NONBLOCK, from its /proc entries.
func checkPortNonblocking(ctx context.Context, t *testing.T, c *agent.Client) {
	t.Helper()
	fds, err := c.List(ctx, "/proc/1/fd")
	if err != nil {
		t.Fatalf("list the init's descriptors: %v", err)
	}
	var ports []string
	for _, fd := range fds {
		if !strings.HasPrefix(fd.Link, "/dev/vport") {
			continue
		}
		var info bytes.Buffer
		if _, err := c.ReadFile(ctx, "/proc/1/fdinfo/"+fd.Name, &info); err != nil {
			t.Fatalf("read the init's fdinfo of %s: %v", fd.Link, err)
		}
		flags := ""
		for _, line := range strings.Split(info.String(), "\n") {
			if v, ok := strings.CutPrefix(line, "flags:"); ok {
				flags = strings.TrimSpace(v)
			}
		}
		f, err := strconv.ParseUint(flags, 8, 32)
		if err != nil {
			t.Fatalf("the init's fdinfo of %s: flags %q: %v", fd.Link, flags, err)
		}
		if f&unix.O_NONBLOCK == 0 {
			t.Errorf("the init holds %s (descriptor %s) blocking (flags %s), want O_NONBLOCK", fd.Link, fd.Name, flags)
		}
		ports = append(ports, fd.Link)
	}
	if len(ports) == 0 {
		t.Errorf("the init holds no /dev/vport* device: %+v", fds)
	}
}

// portReport is what the host and the guest's console say about the
// agent's port of vm: how many bytes the host wrote that QEMU has not
// read, and the whole console (with Config.Debug, the guest's watch of
// the port).
func portReport(vm *VM) string {
	unread := "unknown"
	var uc *net.UnixConn
	if bc, ok := vm.conn.(*bufConn); ok {
		uc, _ = bc.Conn.(*net.UnixConn)
	}
	if uc != nil {
		if rc, err := uc.SyscallConn(); err == nil {
			rc.Control(func(fd uintptr) {
				if n, err := unix.IoctlGetInt(int(fd), unix.SIOCOUTQ); err == nil {
					unread = strconv.Itoa(n)
				}
			})
		}
	}
	console, err := os.ReadFile(vm.ConsolePath())
	if err != nil {
		console = []byte(err.Error())
	}
	return fmt.Sprintf("bytes the host wrote to the agent's socket that QEMU has not read: %s\nconsole:\n%s", unread, console)
}
