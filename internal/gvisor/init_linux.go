package gvisor

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/sandbox"
)

// InitCommand is the hidden command of hutch's binary that is the first
// process of a gVisor sandbox with a proxy: `/dev/hutch gvisor-init --
// CMD...` (InitMain).
const InitCommand = "gvisor-init"

// The view's directory of the proxy's sockets (a read-only bind of the
// state directory's "net"), and the sockets in it.
const (
	sandboxNetDir = "/dev/hutch-proxy"
	httpSocket    = "http.sock"
	socksSocket   = "socks.sock"
	dnsSocket     = "dns.sock"
)

// maxRelayedDNS bounds a DNS message the relay passes on (the proxy reads
// at most this much from a datagram too).
const maxRelayedDNS = 4096

// InitMain is `gvisor-init -- CMD...`, run inside gVisor as the sandbox's
// first process: it listens on the sandbox's 127.0.0.1:3128 (HTTP proxy),
// :1080 (SOCKS5) and :53 (DNS, UDP) and relays every connection, and every
// query, to hutch's proxy over the host's unix sockets bound at
// /dev/hutch-proxy; it then runs CMD in a process group of its own (in the
// terminal's foreground when there is one), passes on the signals runsc
// kill delivers to it, reaps orphans, and exits as CMD did (128+N when
// killed by signal N). It holds nothing the command could use: the
// sockets it relays to are in the command's view too.
func InitMain(args []string, stderr io.Writer) int {
	if len(args) < 2 || args[0] != "--" {
		fmt.Fprintln(stderr, "hutch: usage: hutch "+InitCommand+" -- COMMAND [ARGS...] (the first process of a gVisor sandbox)")
		return sandbox.ExitHutchError
	}
	if err := startRelays(sandboxNetDir); err != nil {
		fmt.Fprintf(stderr, "hutch: %s: %v\n", InitCommand, err)
		return sandbox.ExitHutchError
	}
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, forwarded...)
	cmd := exec.Command(args[1], args[2:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if _, err := unix.IoctlGetTermios(0, unix.TCGETS); err == nil {
		// The command's group is the terminal's foreground: the keys
		// that send signals reach it, not this process.
		signal.Ignore(unix.SIGTTOU, unix.SIGTTIN)
		cmd.SysProcAttr.Foreground, cmd.SysProcAttr.Ctty = true, 0
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(stderr, "hutch: %v\n", err)
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			return sandbox.ExitNotFound
		}
		return sandbox.ExitNotExecutable
	}
	pid := cmd.Process.Pid
	go func() {
		for sig := range sigs {
			_ = unix.Kill(-pid, sig.(syscall.Signal))
		}
	}()
	for {
		var ws unix.WaitStatus
		got, err := unix.Wait4(-1, &ws, 0, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			fmt.Fprintf(stderr, "hutch: %s: wait: %v\n", InitCommand, err)
			return sandbox.ExitHutchError
		}
		if got != pid {
			continue // an orphan
		}
		switch {
		case ws.Exited():
			return ws.ExitStatus()
		case ws.Signaled():
			return 128 + int(ws.Signal())
		}
	}
}

// startRelays listens on the sandbox's proxy addresses and relays to the
// sockets in dir.
func startRelays(dir string) error {
	for _, r := range []struct {
		port   int
		socket string
	}{{sandbox.ProxyHTTPPort, httpSocket}, {sandbox.ProxySOCKSPort, socksSocket}} {
		l, err := net.Listen("tcp4", "127.0.0.1:"+strconv.Itoa(r.port))
		if err != nil {
			return fmt.Errorf("proxy relay: %w", err)
		}
		go relayStreams(l, filepath.Join(dir, r.socket))
	}
	pc, err := net.ListenPacket("udp4", "127.0.0.1:"+strconv.Itoa(sandbox.DNSPort))
	if err != nil {
		return fmt.Errorf("DNS relay: %w", err)
	}
	go relayDNS(pc, filepath.Join(dir, dnsSocket))
	return nil
}

// relayStreams passes each connection l accepts on to the unix socket at
// path, both ways, until either side ends.
func relayStreams(l net.Listener, path string) {
	for {
		c, err := l.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return
		}
		go func() {
			defer c.Close()
			u, err := net.Dial("unix", path)
			if err != nil {
				return
			}
			defer u.Close()
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, _ = io.Copy(u, c)
				_ = u.(*net.UnixConn).CloseWrite()
			}()
			_, _ = io.Copy(c, u)
			_ = c.(*net.TCPConn).CloseWrite()
			wg.Wait()
		}()
	}
}

// relayDNS passes each datagram pc gets to the unix stream socket at path,
// framed as DNS over TCP frames its messages (a two-byte length first), one
// connection a query, and sends the answer back.
func relayDNS(pc net.PacketConn, path string) {
	buf := make([]byte, maxRelayedDNS)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return
		}
		q := make([]byte, 2+n)
		binary.BigEndian.PutUint16(q, uint16(n))
		copy(q[2:], buf[:n])
		go func() {
			u, err := net.Dial("unix", path)
			if err != nil {
				return
			}
			defer u.Close()
			if _, err := u.Write(q); err != nil {
				return
			}
			a, err := readFrame(u)
			if err != nil {
				return
			}
			_, _ = pc.WriteTo(a, from)
		}()
	}
}

// readFrame reads one length-prefixed DNS message of at most
// maxRelayedDNS bytes.
func readFrame(r io.Reader) ([]byte, error) {
	var l [2]byte
	if _, err := io.ReadFull(r, l[:]); err != nil {
		return nil, err
	}
	n := int(binary.BigEndian.Uint16(l[:]))
	if n > maxRelayedDNS {
		return nil, fmt.Errorf("DNS message of %d bytes", n)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, err
	}
	return b, nil
}
