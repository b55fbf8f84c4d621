package portfwd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"

	"github.com/hutch-sandbox/hutch/internal/agent"
)

// Forward bounds.
const (
	// MaxForwards is how many listeners a Forwards keeps at once.
	MaxForwards = 256
	// MaxConns is how many connections one listener forwards at once
	// (each is a process in the sandbox); more are closed at once.
	MaxConns = 256
)

// AgentFunc returns the client of a sandbox's agent, or why there is none
// (the sandbox ended).
type AgentFunc func(ctx context.Context) (*agent.Client, error)

// Forwards are loopback TCP listeners on the host, one per sandbox and
// port, each forwarding the connections it accepts to that port inside
// the sandbox (Dial): what hutch mcp's port_url hands out. Whoever can
// connect to the host's loopback can use them, as with a port a container
// publishes on 127.0.0.1.
type Forwards struct {
	// Log receives the forwards' events; nil discards them.
	Log *slog.Logger

	mu     sync.Mutex
	byKey  map[forwardKey]*forward
	closed bool
}

type forwardKey struct {
	sandbox string
	port    int
}

// forward is one listener and the connections it forwards.
type forward struct {
	key    forwardKey
	l      net.Listener
	agent  AgentFunc
	log    *slog.Logger
	ctx    context.Context // ends with the forward: connecting stops
	cancel context.CancelFunc

	mu sync.Mutex
	// conns are the accepted connections, with their sandbox side once
	// it is connected.
	conns  map[net.Conn]io.Closer
	closed bool
	wg     sync.WaitGroup
}

// URL returns http://127.0.0.1:N/, a listener of the host's loopback that
// reaches port inside sandbox (whose agent client returns), made at the
// first call for that sandbox and port.
func (f *Forwards) URL(sandbox string, port int, client AgentFunc) (string, error) {
	if err := CheckPort(port); err != nil {
		return "", err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case f.closed:
		return "", errors.New("the port forwards are closed")
	case f.byKey == nil:
		f.byKey = map[forwardKey]*forward{}
	}
	k := forwardKey{sandbox, port}
	fw := f.byKey[k]
	if fw == nil {
		if len(f.byKey) >= MaxForwards {
			return "", fmt.Errorf("%d ports are forwarded already, the most hutch keeps: kill a sandbox to free its ports", MaxForwards)
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", fmt.Errorf("forward port %d: %w", port, err)
		}
		log := f.Log
		if log == nil {
			log = slog.New(slog.DiscardHandler)
		}
		fw = &forward{key: k, l: l, agent: client, conns: map[net.Conn]io.Closer{}, log: log.With("sandbox", sandbox, "port", port)}
		fw.ctx, fw.cancel = context.WithCancel(context.Background())
		f.byKey[k] = fw
		fw.wg.Add(1)
		go fw.serve()
		fw.log.Debug("port forwarded", "addr", l.Addr().String())
	}
	return "http://" + fw.l.Addr().String() + "/", nil
}

// CloseSandbox closes the listeners of sandbox, and the connections they
// forward.
func (f *Forwards) CloseSandbox(sandbox string) {
	f.mu.Lock()
	var gone []*forward
	for k, fw := range f.byKey {
		if k.sandbox == sandbox {
			gone = append(gone, fw)
			delete(f.byKey, k)
		}
	}
	f.mu.Unlock()
	for _, fw := range gone {
		fw.close()
	}
}

// Close closes every listener and connection; URL fails afterwards.
func (f *Forwards) Close() {
	f.mu.Lock()
	f.closed = true
	all := f.byKey
	f.byKey = nil
	f.mu.Unlock()
	for _, fw := range all {
		fw.close()
	}
}

// serve accepts connections until the listener is closed.
func (fw *forward) serve() {
	defer fw.wg.Done()
	for {
		c, err := fw.l.Accept()
		if err != nil {
			return
		}
		if !fw.track(c) {
			c.Close()
			continue
		}
		fw.wg.Add(1)
		go func() {
			defer fw.wg.Done()
			defer fw.untrack(c)
			fw.relay(c)
		}()
	}
}

// track adds c to the connections, unless the forward is closed or full.
func (fw *forward) track(c net.Conn) bool {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	if fw.closed || len(fw.conns) >= MaxConns {
		return false
	}
	fw.conns[c] = nil
	return true
}

// connected records sc as c's sandbox side; false when the forward was
// closed meanwhile.
func (fw *forward) connected(c net.Conn, sc io.Closer) bool {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	if fw.closed {
		return false
	}
	fw.conns[c] = sc
	return true
}

func (fw *forward) untrack(c net.Conn) {
	fw.mu.Lock()
	delete(fw.conns, c)
	fw.mu.Unlock()
	c.Close()
}

// relay connects c to the port in the sandbox and copies both ways until
// both directions ended; each side's end half-closes the other.
func (fw *forward) relay(c net.Conn) {
	client, err := fw.agent(fw.ctx)
	if err != nil {
		fw.log.Debug("forward: no sandbox", "err", err)
		return
	}
	sc, err := Dial(fw.ctx, client, fw.key.port)
	if err != nil {
		fw.log.Debug("forward: connect", "err", err)
		return
	}
	defer sc.Close()
	if fw.connected(c, sc) {
		Splice(c, sc)
	}
}

// Splice copies a to b and b to a until both directions ended, each
// direction's end half-closing the other side (CloseWrite) when it can.
func Splice(a, b io.ReadWriter) {
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(b, a)
		closeWrite(b)
		close(done)
	}()
	_, _ = io.Copy(a, b)
	closeWrite(a)
	<-done
}

func closeWrite(w any) {
	if cw, ok := w.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
}

// close closes the listener and every connection, and waits for their
// goroutines.
func (fw *forward) close() {
	fw.mu.Lock()
	fw.closed = true
	var open []io.Closer
	for c, sc := range fw.conns {
		open = append(open, c)
		if sc != nil {
			open = append(open, sc)
		}
	}
	fw.mu.Unlock()
	fw.cancel()
	_ = fw.l.Close()
	for _, c := range open {
		c.Close()
	}
	fw.wg.Wait()
}

// Addr returns the host address of the listener of sandbox's port, "" when
// none (for tests and logs).
func (f *Forwards) Addr(sandbox string, port int) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if fw := f.byKey[forwardKey{sandbox, port}]; fw != nil {
		return fw.l.Addr().String()
	}
	return ""
}
