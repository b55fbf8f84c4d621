package guest

import (
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"github.com/hashicorp/yamux"
	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/relay"
)

// startRelay relays the guest's proxy
// addresses (relay.Listen: 127.0.0.1:3128, :1080 and :53) to hutch's
// egress proxy on the host: each connection, and each DNS query, is a
// stream of a yamux session over the virtio-serial port NetPortName,
// whose first byte names the service. At most MaxStreams are open at
// once; the next connection waits for one to end.
func startRelay() error {
	port, err := openPort(NetPortName, portWait)
	if err != nil {
		return err
	}
	r := &relaySessions{changed: make(chan struct{})}
	go r.run(port)
	slots := make(chan struct{}, MaxStreams)
	kinds := map[string]byte{relay.HTTPSocket: StreamHTTP, relay.SOCKSSocket: StreamSOCKS, relay.DNSSocket: StreamDNS}
	return relay.Listen(func(service string) (net.Conn, error) {
		sess, err := r.session(sessionWait)
		if err != nil {
			return nil, err
		}
		select {
		case slots <- struct{}{}:
		case <-sess.CloseChan():
			return nil, yamux.ErrSessionShutdown
		}
		st, err := sess.OpenStream()
		if err == nil {
			_, err = st.Write([]byte{kinds[service]})
			if err != nil {
				st.Close()
			}
		}
		if err != nil {
			<-slots
			return nil, err
		}
		return &slotStream{Stream: st, release: func() { <-slots }}, nil
	})
}

// sessionWait bounds how long a connection to the proxy's addresses
// waits for a relay session (one starting again after a restore).
const sessionWait = 30 * time.Second

// relaySessions is the relay's yamux session of the moment, one after
// another on the port.
type relaySessions struct {
	mu      sync.Mutex
	sess    *yamux.Session // nil between two
	changed chan struct{}  // closed when sess changes
}

// run serves sessions on port one after another: each starts with
// RelayMark and lasts as long as the host's end is connected.
func (r *relaySessions) run(port *os.File) {
	for {
		conn := &portConn{f: port}
		if _, err := conn.Write(RelayMark); err == nil {
			if sess, err := yamux.Client(conn, MuxConfig()); err == nil {
				r.set(sess)
				<-sess.CloseChan()
				r.set(nil)
			}
		}
		port.Close()
		for {
			var err error
			if port, err = openPort(NetPortName, 24*time.Hour); err == nil {
				break
			}
			time.Sleep(time.Second)
		}
	}
}

func (r *relaySessions) set(s *yamux.Session) {
	r.mu.Lock()
	r.sess = s
	close(r.changed)
	r.changed = make(chan struct{})
	r.mu.Unlock()
}

// session is the session of the moment, waiting up to d for one.
func (r *relaySessions) session(d time.Duration) (*yamux.Session, error) {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		s, changed := r.sess, r.changed
		r.mu.Unlock()
		if s != nil && !s.IsClosed() {
			return s, nil
		}
		select {
		case <-changed:
		case <-deadline.C:
			return nil, yamux.ErrSessionShutdown
		}
	}
}

// slotStream is a relayed stream that gives its slot back once closed.
type slotStream struct {
	*yamux.Stream
	release func()
	closed  bool
}

// CloseWrite ends the guest's side of the stream (yamux's Close is a
// half-close: the host's data still comes).
func (s *slotStream) CloseWrite() error { return s.Stream.Close() }

// Close ends the stream and gives its slot back; relay.Streams calls it
// once, from one goroutine.
func (s *slotStream) Close() error {
	err := s.Stream.Close()
	if !s.closed {
		s.closed = true
		s.release()
	}
	return err
}

// loopbackUp brings the guest's lo up; the kernel gives it 127.0.0.1.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("loopback: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return fmt.Errorf("loopback: %w", err)
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("loopback: flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("loopback: up: %w", err)
	}
	return nil
}

// bindSelf binds the init's binary, read-only, at sandbox.SandboxHutch
// (/dev/hutch) in the devtmpfs that the switch of root carries along:
// ssh's ProxyCommand in GIT_SSH_COMMAND runs its proxy-connect there, as
// in the other tiers.
func bindSelf() error {
	if err := os.WriteFile(SelfPath, nil, 0o555); err != nil {
		return fmt.Errorf("%s: %w", SelfPath, err)
	}
	if err := unix.Mount(InitPath, SelfPath, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind %s at %s: %w", InitPath, SelfPath, err)
	}
	if err := unix.Mount("", SelfPath, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		return fmt.Errorf("%s read-only: %w", SelfPath, err)
	}
	return nil
}
