//go:build linux

package escape

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// listener is a host unix socket that counts the connections it accepts.
type listener struct {
	addr     string
	accepted atomic.Int64
}

// awaitAccept reports whether the listener has accepted a connection,
// waiting up to d for its accept loop to catch up with a client that
// already connected and left.
func (l *listener) awaitAccept(d time.Duration) bool {
	deadline := time.Now().Add(d)
	for l.accepted.Load() == 0 {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

// listenUnix listens on the unix socket addr (a path, or "@name" for an
// abstract socket), connectable by anyone, until the test ends.
func listenUnix(t *testing.T, addr string) *listener {
	t.Helper()
	l, err := net.Listen("unix", addr)
	if err != nil {
		t.Fatalf("listen on %s: %v", addr, err)
	}
	if !strings.HasPrefix(addr, "@") {
		if err := os.Chmod(addr, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	return count(t, l, addr)
}

// count accepts and closes connections on l until the test ends, counting
// them.
func count(t *testing.T, l net.Listener, addr string) *listener {
	h := &listener{addr: addr}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			h.accepted.Add(1)
			c.Close()
		}
	}()
	t.Cleanup(func() { l.Close() })
	return h
}

// hostSocket makes a listener at path for the test if nothing is there
// yet, creating missing parent directories (removed again afterwards). It
// returns nil, touching nothing, when path or a parent is in use on this
// host. What it makes, it makes holding the host root's lock alone until
// the test ends: the test runs its modes with forEachModeSerially.
func hostSocket(t *testing.T, path string) *listener {
	t.Helper()
	if _, err := os.Lstat(path); err == nil {
		t.Logf("%s exists on this host; it is probed but left alone", path)
		return nil
	}
	testutil.HostRootChanges(t)
	var made []string
	for dir := filepath.Dir(path); ; dir = filepath.Dir(dir) {
		if _, err := os.Lstat(dir); err == nil {
			break
		} else if !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		made = append(made, dir)
	}
	for i := len(made) - 1; i >= 0; i-- {
		if err := os.Mkdir(made[i], 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, d := range made {
			os.Remove(d)
		}
	})
	return listenUnix(t, path)
}

// TestItem12_HostUnixSockets: host daemons' unix sockets are out of reach
// (S1): the default-denied docker socket and per-user runtime directory
// (D-Bus session bus), the X11 directory, an ssh and a gpg agent socket in
// the home, and a socket named with --deny-read. A host listener at a
// path no rule covers is reachable (the control: path sockets do cross
// namespaces, only hutch's masks stop them). None of the protected
// listeners accepts a connection, and SSH_AUTH_SOCK is not passed.
func TestItem12_HostUnixSockets(t *testing.T) {
	testutil.RequireRoot(t)
	shared := map[string]*listener{}
	for _, p := range []string{"/run/docker.sock", "/var/run/docker.sock", "/run/user/4242/bus", "/tmp/.X11-unix/X73"} {
		if p == "/var/run/docker.sock" && shared["/run/docker.sock"] != nil {
			// /var/run is usually a link to /run: the same socket.
			if fi, err := os.Lstat("/var/run"); err == nil && fi.Mode()&os.ModeSymlink != 0 {
				continue
			}
		}
		shared[p] = hostSocket(t, p)
	}
	forEachModeSerially(t, func(t *testing.T, sb *harness) {
		socks := hostDir(t, sb.mode.uid, "sock")
		mkdirs(t, sb.home, sb.mode.uid, ".ssh", ".gnupg")
		own := map[string]*listener{}
		for _, p := range []string{filepath.Join(socks, "denied.sock"), filepath.Join(sb.home, ".ssh/agent.sock"), filepath.Join(sb.home, ".gnupg/S.gpg-agent")} {
			own[p] = listenUnix(t, p)
		}
		open := listenUnix(t, filepath.Join(socks, "open.sock"))
		a := sb.attacker()
		var probes []string
		for p := range shared {
			probes = append(probes, "unix:"+p)
		}
		for p := range own {
			probes = append(probes, "unix:"+p)
		}
		script := argv(a, append(probes, "unix:"+open.addr)...) + "\necho \"SSH_AUTH_SOCK=${SSH_AUTH_SOCK:-unset}\"\n"
		r := sb.run(opts{
			flags: []string{"--deny-read", filepath.Join(socks, "denied.sock")},
			env:   []string{"SSH_AUTH_SOCK=" + filepath.Join(sb.home, ".ssh/agent.sock")},
		}, script)
		want := map[string][]string{"unix:" + open.addr: {"ok"}}
		if sb.gvisor() {
			// gVisor's kernel connects to no host unix socket (runsc
			// runs without --host-uds): the unprotected one is refused
			// too, and accepts nothing.
			want["unix:"+open.addr] = []string{"ECONNREFUSED"}
		}
		for _, p := range probes {
			want[p] = []string{"EACCES", "ECONNREFUSED", "ENOENT"}
		}
		expect(t, r, want)
		if !strings.Contains(r.stdout, "SSH_AUTH_SOCK=unset") {
			t.Errorf("SSH_AUTH_SOCK was passed into the sandbox\n%s", r)
		}
		if accepted := open.awaitAccept(5 * time.Second); accepted == sb.gvisor() {
			t.Errorf("the unprotected host socket accepted %v from a sandbox of tier %s\n%s", accepted, sb.mode.tier, r)
		}
		for p, l := range own {
			if n := l.accepted.Load(); n != 0 {
				t.Errorf("host socket %s accepted %d connection(s) from the sandbox", p, n)
			}
		}
		for p, l := range shared {
			if l != nil && l.accepted.Load() != 0 {
				t.Errorf("host socket %s accepted a connection from a sandbox", p)
			}
		}
	})
}

// TestItem13_AbstractSockets: an abstract unix socket of the host is not
// reachable from the sandbox (its network namespace has its own abstract
// names, and Landlock's scope confines them too), while an abstract socket
// inside the sandbox works (the control) (S1, S6).
func TestItem13_AbstractSockets(t *testing.T) {
	forEachMode(t, func(t *testing.T, sb *harness) {
		name := randomName("hutch-test-")
		host := listenUnix(t, "@"+name)
		a := sb.attacker()
		r := sb.run(opts{}, argv(a, "abstract:"+name, "abstract_self"))
		expect(t, r, map[string][]string{
			"abstract:" + name: {"ECONNREFUSED", "EPERM"},
			"abstract_self":    {"ok"},
		})
		if n := host.accepted.Load(); n != 0 {
			t.Errorf("the host's abstract socket @%s accepted %d connection(s) from the sandbox", name, n)
		}
	})
}

// TestItem13_SocketFamilies: packet, netlink, vsock and crypto (AF_ALG)
// sockets cannot be made (EAFNOSUPPORT from the seccomp filter; netlink
// EOPNOTSUPP, which libzmq carries on after), raw IPv4
// and IPv6 sockets and ICMP "ping" sockets are refused, while TCP and unix
// sockets work, on the sandbox's own loopback too (the controls) (S1, S6).
func TestItem13_SocketFamilies(t *testing.T) {
	forEachMode(t, func(t *testing.T, sb *harness) {
		a := sb.attacker()
		r := sb.run(opts{}, argv(a, "socket:packet", "socket:netlink", "socket:vsock", "socket:alg",
			"socket:raw4", "socket:raw6", "socket:ping4", "socket:tcp4", "socket:unix", "tcp_self"))
		// Under gVisor the families it has are its own kernel's, on a
		// network stack with loopback only (no route out: TestItem15_*):
		// a netlink socket speaks to gVisor's stack, an ICMP socket sends
		// nowhere; packet sockets need a capability the command lacks.
		expect(t, r, sb.gvisorAlso(map[string][]string{
			"socket:packet":  {"EAFNOSUPPORT"},
			"socket:netlink": {"ENOTSUP"}, // EOPNOTSUPP, the same errno
			"socket:vsock":   {"EAFNOSUPPORT"},
			"socket:alg":     {"EAFNOSUPPORT"},
			"socket:raw4":    {"EPERM"},
			"socket:raw6":    {"EPERM"},
			"socket:ping4":   {"EACCES", "EPERM"},
			"socket:tcp4":    {"ok"},
			"socket:unix":    {"ok"},
			"tcp_self":       {"ok"},
		}, map[string][]string{
			"socket:packet":  {"EPERM"},
			"socket:netlink": {"ok"},
			"socket:ping4":   {"ok"},
		}))
	})
}

// noPendingInput fails the test if anything waits to be read on the
// terminal slave: what TIOCSTI would have pushed into the host's terminal.
func noPendingInput(t *testing.T, slave *os.File) {
	t.Helper()
	fd := int(slave.Fd())
	if err := unix.SetNonblock(fd, true); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 256)
	n, err := unix.Read(fd, buf)
	if err == nil && n > 0 {
		t.Errorf("input was injected into the host's terminal: %q", buf[:n])
	} else if err != nil && err != unix.EAGAIN {
		t.Errorf("reading the host terminal: %v", err)
	}
}

// TestItem14_TerminalInjection: the sandbox cannot push input into a
// terminal with TIOCSTI (plain, through /dev/tty, or with the request's
// high bits set, which the kernel ignores) nor use TIOCLINUX: all EPERM.
// With a terminal on stdin the command gets a pty of its own; with only
// stdout on the host's terminal, the terminal has no injected input
// afterwards. A harmless terminal ioctl works (the control). Injected
// input would run as the user outside the sandbox (S1).
func TestItem14_TerminalInjection(t *testing.T) {
	forEachMode(t, func(t *testing.T, sb *harness) {
		a := sb.attacker()
		t.Run("stdin-tty", func(t *testing.T) {
			master, slave := openPty(t)
			out := &syncBuffer{}
			go out.collect(master)
			script := `test -t 0 && echo "STDIN-IS-TTY"; stty size >/dev/null && echo "STTY-OK"
` + argv(a, "tiocsti:0", "tiocsti_hi:0", "tiocsti:/dev/tty", "tiocsti_hi:/dev/tty", "tioclinux:0") + "\necho END"
			r := sb.run(opts{stdin: slave, stdout: slave, stderr: slave}, script)
			if !out.waitFor("END") {
				t.Fatalf("no output through the terminal (exit %d): %q", r.code, out.String())
			}
			r.stdout = strings.ReplaceAll(out.String(), "\r\n", "\n")
			for _, c := range []string{"STDIN-IS-TTY", "STTY-OK"} {
				if !strings.Contains(r.stdout, c) {
					t.Errorf("control failed: %s missing\n%s", c, r)
				}
			}
			// gVisor's terminal implements neither TIOCSTI nor
			// TIOCLINUX: refused as unknown (ENOTTY), and no input is
			// pending below either way.
			expect(t, r, sb.gvisorAlso(map[string][]string{
				"tiocsti:0": {"EPERM"}, "tiocsti_hi:0": {"EPERM"},
				"tiocsti:/dev/tty": {"EPERM"}, "tiocsti_hi:/dev/tty": {"EPERM"}, "tioclinux:0": {"EPERM"},
			}, map[string][]string{
				"tiocsti:0": {"ENOTTY"}, "tiocsti_hi:0": {"ENOTTY"},
				"tiocsti:/dev/tty": {"ENOTTY"}, "tiocsti_hi:/dev/tty": {"ENOTTY"}, "tioclinux:0": {"ENOTTY"},
			}))
			noPendingInput(t, slave)
		})
		t.Run("stdout-tty", func(t *testing.T) {
			master, slave := openPty(t)
			out := &syncBuffer{}
			go out.collect(master)
			script := `test -t 1 && echo "STDOUT-IS-TTY"
` + argv(a, "tiocsti:1", "tiocsti_hi:1", "tiocsti:2", "tioclinux:1") + "\necho END"
			r := sb.run(opts{stdout: slave, stderr: slave}, script)
			if !out.waitFor("END") {
				t.Fatalf("no output through the terminal (exit %d): %q", r.code, out.String())
			}
			r.stdout = strings.ReplaceAll(out.String(), "\r\n", "\n")
			if !strings.Contains(r.stdout, "STDOUT-IS-TTY") {
				t.Errorf("control failed: stdout is not the terminal\n%s", r)
			}
			// gVisor: ENOTTY, as above.
			expect(t, r, sb.gvisorAlso(map[string][]string{
				"tiocsti:1": {"EPERM"}, "tiocsti_hi:1": {"EPERM"}, "tiocsti:2": {"EPERM"}, "tioclinux:1": {"EPERM"},
			}, map[string][]string{
				"tiocsti:1": {"ENOTTY"}, "tiocsti_hi:1": {"ENOTTY"}, "tiocsti:2": {"ENOTTY"}, "tioclinux:1": {"ENOTTY"},
			}))
			noPendingInput(t, slave)
		})
	})
}
