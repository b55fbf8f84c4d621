package agent

import (
	"bufio"
	"context"
	"crypto/subtle"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// ListenOptions says how ServeListener admits a connection.
type ListenOptions struct {
	// Token is what a client must send first, on a line of its own
	// after AuthPrefix. Required.
	Token string
	// TLS, when set, is the server side of TLS on every connection
	// (before the token).
	TLS *tls.Config
	// Refuse, when set, refuses a connection before anything is read
	// from it: one from the sandbox's own addresses, say, whose code must
	// not take the daemon's place.
	Refuse func(remote net.Addr) error
	// AuthWithin bounds the time a connection has to authenticate; 0
	// means 10 s.
	AuthWithin time.Duration
	// First, when set, is served first, without authentication: the
	// daemon's own connection, handed to the agent at its start (a gVisor
	// sandbox's standard input, which gVisor gives a restored sandbox
	// again). A detach on it closes the listener for good, before it is
	// answered: the sandbox is about to be saved, which gVisor refuses
	// while the sandbox listens on a socket of the host's; from then on
	// the daemon reaches the agent on First alone, and ServeListener
	// returns once First ends (the sandbox no longer outlives its daemon).
	First net.Conn
}

// AuthPrefix starts the line with which a client of ServeListener
// authenticates: "hutch-agent/1 TOKEN\n".
const AuthPrefix = "hutch-agent/1 "

// maxAuthLine bounds the authentication line (S7).
const maxAuthLine = 512

// ServeListener runs the agent for the daemon on the connections l
// accepts, one at a time, for a sandbox whose daemon reaches it over a
// network (a pod's). A connection must authenticate with lo.Token; the
// agent then sends its hello and serves it. A newer connection that
// authenticates takes over from the one before, as a detach and an attach
// would: the commands in flight keep running without their streams, and
// the new client's request ids start above the old ones — so a daemon
// that lost its connection, or another replica of it, reaches the
// sandbox again. The commands do not end with a connection; ServeListener
// returns only when l fails (it is closed), after it killed the process
// group of every command it started.
func ServeListener(l net.Listener, lo ListenOptions, opts ServeOptions) error {
	if lo.Token == "" {
		return errors.New("agent: listening without a token")
	}
	if lo.AuthWithin == 0 {
		lo.AuthWithin = 10 * time.Second
	}
	s, err := newServer(nil, opts)
	if err != nil {
		return err
	}
	defer func() {
		s.cancel()
		s.wmu.Lock()
		if s.conn != nil {
			s.conn.Close()
		}
		s.wmu.Unlock()
		s.wg.Wait()
		s.procs.close()
	}()
	var closed atomic.Bool
	firstDone := make(chan struct{})
	if lo.First != nil {
		s.beforeDetach = func() {
			s.wmu.Lock()
			on := s.conn == lo.First
			s.wmu.Unlock()
			if on && closed.CompareAndSwap(false, true) {
				l.Close()
				s.log.Info("agent listener closed: the daemon's own connection detached")
			}
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer close(firstDone)
			br := bufio.NewReaderSize(lo.First, 64<<10)
			if err := s.takeover(lo.First); err != nil {
				s.log.Warn("agent connection ended", "err", err)
				return
			}
			if err := s.readLoop(lo.First, br); err != nil {
				s.log.Warn("agent connection ended", "err", err)
			}
		}()
	}
	for {
		c, err := l.Accept()
		if err != nil && closed.Load() {
			<-firstDone
			return errors.New("agent: the daemon's connection ended, and the listener was closed")
		}
		if err != nil {
			return fmt.Errorf("agent: accept: %w", err)
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.admit(c, lo)
		}()
	}
}

// admit authenticates c and, if it passes, serves it until it ends.
func (s *server) admit(c net.Conn, lo ListenOptions) {
	if lo.Refuse != nil {
		if err := lo.Refuse(c.RemoteAddr()); err != nil {
			s.log.Warn("agent connection refused", "remote", c.RemoteAddr().String(), "err", err)
			c.Close()
			return
		}
	}
	if lo.TLS != nil {
		c = tls.Server(c, lo.TLS)
	}
	br := bufio.NewReaderSize(c, 64<<10)
	if err := authenticate(c, br, lo); err != nil {
		s.log.Warn("agent connection refused", "remote", c.RemoteAddr().String(), "err", err)
		c.Close()
		return
	}
	if err := s.takeover(c); err != nil {
		s.log.Warn("agent connection ended", "err", err)
		return
	}
	s.log.Info("agent connection taken", "remote", c.RemoteAddr().String())
	if err := s.readLoop(c, br); err != nil {
		s.log.Warn("agent connection ended", "err", err)
	}
}

// authenticate reads the authentication line within lo.AuthWithin and
// compares its token with lo.Token in constant time.
func authenticate(c net.Conn, br *bufio.Reader, lo ListenOptions) error {
	c.SetDeadline(time.Now().Add(lo.AuthWithin))
	defer c.SetDeadline(time.Time{})
	line, err := br.ReadSlice('\n')
	if err != nil {
		if errors.Is(err, bufio.ErrBufferFull) || len(line) > maxAuthLine {
			return errors.New("authentication line too long")
		}
		return fmt.Errorf("read the authentication line: %w", err)
	}
	if len(line) > maxAuthLine {
		return errors.New("authentication line too long")
	}
	token, ok := strings.CutPrefix(strings.TrimSuffix(string(line), "\n"), AuthPrefix)
	if !ok || subtle.ConstantTimeCompare([]byte(token), []byte(lo.Token)) != 1 {
		return errors.New("wrong token")
	}
	return nil
}

// takeover makes c the daemon's connection: the requests of the
// connection before, if any, are handed over as a detach would (their
// commands go on without streams), that connection is closed, and c gets
// a hello whose first_id is above every id seen.
func (s *server) takeover(c net.Conn) error {
	s.rmu.Lock()
	defer s.rmu.Unlock()
	s.mu.Lock()
	reqs := s.reqs
	s.reqs = make(map[uint32]*areq)
	first := s.maxID + 1
	s.mu.Unlock()
	if first == 0 {
		c.Close()
		return fmt.Errorf("%w: request ids exhausted", ErrProtocol)
	}
	b, err := jsonFrame(frameHello, 0, hello{Version: protocolVersion, MaxFrame: s.maxFrame, FirstID: first})
	if err != nil {
		c.Close()
		return err
	}
	s.wmu.Lock()
	old := s.conn
	if s.orphans == nil {
		s.orphans = make(map[uint32]bool)
	}
	for id := range reqs {
		s.orphans[id] = true
	}
	s.conn, s.werr, s.detached = c, nil, false
	err = s.sendLocked(b)
	s.wmu.Unlock()
	if old != nil {
		old.Close()
	}
	s.orphan(reqs)
	return peerClosed(err)
}

// readLoop reads and dispatches c's frames while c is the daemon's
// connection.
func (s *server) readLoop(c net.Conn, br *bufio.Reader) error {
	for {
		f, err := readFrame(br, s.maxFrame)
		if err != nil {
			if err == io.EOF || errors.Is(err, net.ErrClosed) || errors.Is(err, context.Canceled) {
				return nil
			}
			return err
		}
		s.rmu.Lock()
		if s.conn != c {
			s.rmu.Unlock()
			return nil
		}
		err = s.dispatch(f)
		s.rmu.Unlock()
		if err != nil {
			c.Close()
			return err
		}
	}
}

// DialListener connects to an agent that ServeListener serves at address
// (through dial: a TCP dialer, a pod's port forward), over TLS when tc is
// not nil, authenticates with token and returns its client, which takes
// over from any client before it.
func DialListener(ctx context.Context, dial func(context.Context) (net.Conn, error), token string, tc *tls.Config) (*Client, error) {
	c, err := DialConn(ctx, dial, token, tc)
	if err != nil {
		return nil, err
	}
	return NewClient(c), nil
}

// DialConn is DialListener's connection, authenticated, for a caller that
// makes its client later (NewClient).
func DialConn(ctx context.Context, dial func(context.Context) (net.Conn, error), token string, tc *tls.Config) (net.Conn, error) {
	c, err := dial(ctx)
	if err != nil {
		return nil, err
	}
	if tc != nil {
		tlsConn := tls.Client(c, tc)
		if err := tlsConn.HandshakeContext(ctx); err != nil {
			c.Close()
			return nil, fmt.Errorf("agent: TLS: %w", err)
		}
		c = tlsConn
	}
	if _, err := io.WriteString(c, AuthPrefix+token+"\n"); err != nil {
		c.Close()
		return nil, fmt.Errorf("agent: authenticate: %w", err)
	}
	return c, nil
}

// The environment variables with which listenMain gets its secrets (the
// daemon puts them in the sandbox's spec, out of the commands' reach:
// they are removed from the environment the commands inherit and wiped
// from the agent's initial environment block, and the agent is not
// dumpable, so its memory cannot be read).
const (
	// TokenEnv holds the token a client authenticates with.
	TokenEnv = "HUTCH_AGENT_TOKEN"
	// TLSCertEnv and TLSKeyEnv hold the agent's certificate and key,
	// PEM; without them connections are not encrypted.
	TLSCertEnv = "HUTCH_AGENT_TLS_CERT"
	TLSKeyEnv  = "HUTCH_AGENT_TLS_KEY"
)

// SecretEnv are the environment variables of the agent's secrets.
var SecretEnv = []string{TokenEnv, TLSCertEnv, TLSKeyEnv}

// listenMain is `agent --listen ADDR`, `agent [--stdin] --accept-at PATH`
// and `agent --accept`: ServeListener on a TCP address (refusing connections
// from the sandbox's own addresses), on a unix socket it binds at path,
// mode 0600 (a sandbox of the gVisor tier that outlives its daemon: the
// socket's directory is the host's, where gVisor's gofer makes the socket
// for the next daemon to connect to; with --stdin, descriptor 0 is the
// first daemon's connection, ListenOptions.First), or on the unix listener the daemon
// handed over on descriptor fd (a sandbox of the namespace tier that
// outlives its daemon), with the token and the TLS certificate from the
// environment.
func listenMain(addr, path string, fd int, stderr io.Writer) int {
	lo, err := listenSecrets()
	if err != nil {
		fmt.Fprintf(stderr, "hutch: agent: %v\n", err)
		return 2
	}
	if path != "" && fd == 0 {
		// With --stdin: the daemon's connection (ListenOptions.First).
		f := os.NewFile(0, "agent-connection")
		lo.First, err = net.FileConn(f)
		f.Close()
		if err != nil {
			fmt.Fprintf(stderr, "hutch: agent: no agent connection on descriptor 0: %v\n", err)
			return 2
		}
	}
	if err := clearInitialEnv(SecretEnv); err != nil {
		// Not dumpable, the agent's environment is still out of the
		// reach of every process without CAP_SYS_PTRACE.
		fmt.Fprintf(stderr, "hutch: agent: warning: %v\n", err)
	}
	var l net.Listener
	if addr != "" {
		l, err = net.Listen("tcp", addr)
	} else if path != "" {
		l, err = listenUnix(path)
	} else {
		f := os.NewFile(uintptr(fd), "agent-listener")
		l, err = net.FileListener(f)
		f.Close()
	}
	if err != nil {
		fmt.Fprintf(stderr, "hutch: agent: %v\n", err)
		return 1
	}
	dir, _ := os.Getwd()
	_, marker := os.Lstat(SudoMarker)
	err = ServeListener(l, lo, ServeOptions{
		Sudo:       marker == nil && os.Getpid() == 1,
		PID1:       os.Getpid() == 1,
		Log:        slog.New(slog.DiscardHandler),
		DefaultDir: dir,
		DefaultEnv: os.Environ(),
	})
	fmt.Fprintf(stderr, "hutch: agent: %v\n", err)
	return 1
}

// listenUnix listens on a unix socket at path, mode 0600 from its start
// (the umask is the agent's alone: no command runs yet).
func listenUnix(path string) (net.Listener, error) {
	old := syscall.Umask(0o177)
	defer syscall.Umask(old)
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	// The agent never removes it: a later daemon connects to it.
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	return l, nil
}

// listenSecrets takes the agent's secrets out of its environment: copies
// of their values make its ListenOptions, and the variables are unset (the
// commands do not inherit them); they are still in the process's initial
// environment block (/proc/1/environ), for clearInitialEnv.
func listenSecrets() (ListenOptions, error) {
	lo := ListenOptions{Token: os.Getenv(TokenEnv), Refuse: refuseOwnAddrs}
	if lo.Token == "" {
		return lo, fmt.Errorf("--listen needs %s", TokenEnv)
	}
	if cert, key := os.Getenv(TLSCertEnv), os.Getenv(TLSKeyEnv); cert != "" || key != "" {
		// X509KeyPair keeps copies, not the environment's bytes.
		pair, err := tls.X509KeyPair([]byte(cert), []byte(key))
		if err != nil {
			return lo, fmt.Errorf("%s, %s: %v", TLSCertEnv, TLSKeyEnv, err)
		}
		lo.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS13}
	}
	for _, k := range SecretEnv {
		os.Unsetenv(k)
	}
	return lo, nil
}

// refuseOwnAddrs refuses a connection from an address of the sandbox's
// own (its loopback, its interfaces'): its code must not take the daemon's
// place, even with the token. An address is the sandbox's when a socket
// can be bound to it — the kernel's own answer, which needs no netlink
// socket (hutch's seccomp table refuses them to the agent as to the
// sandbox's code). A failure to tell refuses.
func refuseOwnAddrs(remote net.Addr) error {
	ta, ok := remote.(*net.TCPAddr)
	if !ok {
		return nil
	}
	ip := ta.IP
	if ip.IsLoopback() || ip.IsUnspecified() {
		return fmt.Errorf("from the sandbox's loopback (%s)", ip)
	}
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: ip, Zone: ta.Zone})
	if err == nil {
		c.Close()
		return fmt.Errorf("from the sandbox's own address %s", ip)
	}
	if errors.Is(err, syscall.EADDRNOTAVAIL) {
		return nil
	}
	return fmt.Errorf("whether %s is the sandbox's own address: %w", ip, err)
}
