package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/microvm"
	"github.com/hutch-sandbox/hutch/internal/runner"
	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// microVMEnv is hutch's environment for the microvm tier's tests, with the
// guest kernel of $HUTCH_TEST_GUEST_KERNEL (else the cache's current one),
// or skips (fails under HUTCH_TEST_ROOT=1) when the host cannot boot a
// guest: no root, no QEMU or virtiofsd, no kernel fetched by
// scripts/guest-kernel.sh.
func microVMEnv(t *testing.T, ws string) []string {
	t.Helper()
	testutil.RequireRoot(t)
	_, err := exec.LookPath("qemu-system-x86_64")
	testutil.Need(t, err == nil, "no qemu-system-x86_64 (scripts/guest-kernel.sh installs it)")
	_, err = os.Stat(microvm.DefaultVirtiofsd)
	testutil.Need(t, err == nil, "no virtiofsd (Debian's qemu-system-common)")
	dir := os.Getenv("HUTCH_TEST_GUEST_KERNEL")
	if dir == "" {
		k, err := microvm.FindKernel("")
		testutil.Need(t, err == nil, "no guest kernel (run scripts/guest-kernel.sh)")
		dir = k.Dir
	}
	return append(baseEnv(ws), runner.GuestKernelEnv+"="+dir)
}

// TestMicroVMRun runs one command in a microVM (under emulation when the
// host has no KVM): its kernel is not the host's, the workspace is shared
// read-write with the owner's ids, a write elsewhere stays in the guest,
// the policy's environment and the exit code come through, the
// credentials of the deny list are hidden, --net none relays nothing (one
// boot for all of these: each is seconds of emulation), and a missing
// command exits 127.
func TestMicroVMRun(t *testing.T) {
	t.Parallel() // its guest and workspace are its own
	ws := t.TempDir()
	env := microVMEnv(t, ws)
	id := testutil.UnprivilegedUID
	if err := os.Chown(ws, id, id); err != nil {
		t.Fatal(err)
	}
	outside := "/tmp/hutch-microvm-test-" + filepath.Base(ws)
	script := `uname -r; pwd; id -u; echo "$GREETING"; echo made > made.txt; echo x > ` + outside + ` && echo wrote-outside; wc -c < /etc/shadow
curl -sS --max-time 10 http://127.0.0.1:3128/; echo "RC relay $?"
curl -sS --max-time 10 --noproxy '*' http://192.0.2.1/; echo "RC direct $?"
ls /dev/hutch >/dev/null 2>&1; echo "RC hutch $?"
/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(); socket.create_connection(s.getsockname()); print("loopback up")'
exit 7`
	r := sandboxed(t, invocation{dir: ws, env: env, args: sh(script, "--tier", "microvm", "--allow-emulation", "--net", "none", "--env", "GREETING=hello")})
	t.Log(r)
	wantCode(t, r, 7)
	// --net none (the default): no relay, so no listener on the proxy's
	// addresses, no route out, no /dev/hutch; the loopback works.
	for _, want := range []string{"RC relay 7", "RC direct 7", "RC hutch 2", "loopback up"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stdout lacks %q\n%s", want, r)
		}
	}
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(r.stdout, "\n")
	if len(lines) < 6 {
		t.Fatalf("stdout has %d lines, want 6 or more", len(lines))
	}
	if host := unix.ByteSliceToString(u.Release[:]); lines[0] == host || lines[0] == "" {
		t.Errorf("the guest's kernel is %q, the host's %q: want another", lines[0], host)
	}
	if lines[1] != ws || lines[2] != "4242" || lines[3] != "hello" || lines[4] != "wrote-outside" {
		t.Errorf("stdout %q: want the workspace, its owner's uid, the policy's GREETING and the write outside done", r.stdout)
	}
	if lines[5] != "0" && !strings.Contains(r.stderr, "shadow") {
		t.Errorf("/etc/shadow is readable in the guest: %q bytes", lines[5])
	}
	fi, err := os.Stat(filepath.Join(ws, "made.txt"))
	if err != nil {
		t.Fatalf("the workspace's new file is not on the host: %v", err)
	}
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != uint32(id) || st.Gid != uint32(id) {
		t.Errorf("the workspace's new file is %d:%d on the host, want %d:%d", st.Uid, st.Gid, id, id)
	}
	if _, err := os.Stat(outside); err == nil {
		os.Remove(outside)
		t.Errorf("a write outside the workspace reached the host's %s", outside)
	}
	if !strings.Contains(r.stderr, "software emulation") && noKVM() {
		t.Errorf("stderr does not say the guest is emulated:\n%s", r.stderr)
	}

	// A command the guest does not have ends as a shell's would.
	r = sandboxed(t, invocation{dir: ws, env: env, args: []string{"--tier", "microvm", "--allow-emulation", "--", "hutch-no-such-command"}})
	wantCode(t, r, 127)
	if !strings.Contains(r.stderr, "hutch-no-such-command: command not found") {
		t.Errorf("stderr does not say the command was not found:\n%s", r.stderr)
	}
}

// noKVM reports whether the host has no hardware virtualization.
func noKVM() bool {
	f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0)
	if err != nil {
		return true
	}
	f.Close()
	return false
}

// TestMicroVMRefusals checks, without booting, that the tier refuses to
// emulate unless asked and names a policy field it cannot honour, and that
// --check says what the host offers.
func TestMicroVMRefusals(t *testing.T) {
	t.Parallel() // its guest and workspace are its own
	ws := t.TempDir()
	env := microVMEnv(t, ws)
	if noKVM() {
		r := sandboxed(t, invocation{dir: ws, env: env, args: sh("true", "--tier", "microvm")})
		wantCode(t, r, 125)
		for _, want := range []string{"--allow-emulation", "tens of times slower"} {
			if !strings.Contains(r.stderr, want) {
				t.Errorf("without --allow-emulation, stderr does not say %q:\n%s", want, r.stderr)
			}
		}
	}
	r := sandboxed(t, invocation{dir: ws, env: env, args: sh("true", "--tier", "microvm", "--allow-emulation", "--net", "host")})
	if r.code == 0 || !strings.Contains(r.stderr, "network.mode") {
		t.Errorf("network mode host under tier microvm: want a refusal naming network.mode\n%s", r)
	}
	r = sandboxed(t, invocation{dir: ws, env: env, args: sh("true", "--tier", "microvm", "--allow-emulation", "--image", "hutch.test/nowhere:1")})
	if r.code != 125 || !strings.Contains(r.stderr, "an image is not yet supported under hutch run (hutch serve starts microVMs of images") {
		t.Errorf("--image under tier microvm: want a refusal before any pull, naming hutch serve\n%s", r)
	}
	r = sandboxed(t, invocation{dir: ws, env: env, args: []string{"--tier", "microvm", "--check", "--allow-emulation"}})
	if r.code != 0 || !strings.Contains(r.stdout, "ok  virtiofsd: ") || !strings.Contains(r.stdout, "ok  guest kernel: ") {
		t.Errorf("--check on a host that boots guests: want exit 0 and every line ok\n%s", r)
	}
	// scripts/guest-kernel.sh keeps the kernel uncompressed too.
	if !strings.Contains(r.stdout, "boots vmlinux, uncompressed") {
		t.Errorf("--check: the guest kernel's line does not say it boots vmlinux\n%s", r)
	}
	r = sandboxed(t, invocation{dir: ws, env: env, args: sh("true", "--allow-emulation")})
	if r.code == 0 || !strings.Contains(r.stderr, "--allow-emulation is for --tier microvm") {
		t.Errorf("--allow-emulation under tier namespace: want a refusal\n%s", r)
	}
}

// TestMicroVMTerminal checks that a command started from a terminal gets a
// terminal of the guest's, of the user's terminal's size, that typed input
// reaches it and that its exit code comes through.
func TestMicroVMTerminal(t *testing.T) {
	t.Parallel()               // its guest and workspace are its own
	microVMEnv(t, t.TempDir()) // the gate; hutch finds the cache's kernel
	term := newTerminal(t, 30, 100)
	_, waited := startOnTerminal(t, term, sh(`stty size; tty; echo ready; read x; echo "got $x"; exit 3`, "--tier", "microvm", "--allow-emulation")...)
	out := typeHello(t, term, waited)
	for _, want := range []string{"30 100\n", "/dev/pts/", "got hello\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("the terminal does not show %q:\n%s", want, out)
		}
	}
}
