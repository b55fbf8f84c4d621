// Package portfwd reaches servers listening inside sandboxes from the
// host: Dial connects to a port on a sandbox's own loopback through its
// agent (an exec of `hutch port-connect PORT`, package portconnect, with
// its standard streams as the connection), which works for every
// isolation tier and needs no privilege, since the sandbox's network
// namespace is never entered from the host. On top of it, Forwards keeps
// a loopback TCP listener on the host per sandbox and port (hutch mcp's
// port_url), and Handler reverse-proxies HTTP, upgrades included, to a
// sandbox's port behind a capability URL (for hutch serve).
package portfwd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hutch-sandbox/hutch/internal/agent"
	"github.com/hutch-sandbox/hutch/internal/portconnect"
	"github.com/hutch-sandbox/hutch/internal/sandbox"
)

// maxStderr bounds what is kept of port-connect's standard error (the
// reason of a refusal).
const maxStderr = 4 << 10

// ErrNotListening is wrapped by Dial's error when nothing listens on the
// port inside the sandbox.
var ErrNotListening = errors.New("nothing listens on that port in the sandbox")

// CheckPort checks that port is a TCP port number, 1 to 65535.
func CheckPort(port int) error {
	if port < 1 || port > 65535 {
		return fmt.Errorf("port %d: want a TCP port from 1 to 65535", port)
	}
	return nil
}

// Dial connects to port on the loopback of the sandbox whose agent c is
// (127.0.0.1, then [::1]). ctx bounds the connecting only. The connection
// is a process in the sandbox for as long as it is open: close it.
func Dial(ctx context.Context, c *agent.Client, port int) (*Conn, error) {
	if err := CheckPort(port); err != nil {
		return nil, err
	}
	p, err := c.Exec(ctx, agent.ExecRequest{
		Args:  []string{sandbox.SandboxHutch, portconnect.Command, strconv.Itoa(port)},
		Stdin: true,
		Own:   true,
	})
	if err != nil {
		return nil, fmt.Errorf("connect to port %d in the sandbox: %w", port, err)
	}
	conn := &Conn{p: p, port: port, stderr: &boundedBuffer{max: maxStderr}, errDone: make(chan struct{})}
	go func() {
		_, _ = io.Copy(conn.stderr, p.Stderr)
		close(conn.errDone)
	}()
	ready := make(chan error, 1)
	go func() {
		var b [1]byte
		_, err := io.ReadFull(p.Stdout, b[:])
		if err == nil && b[0] != portconnect.Ready {
			err = fmt.Errorf("port-connect answered %q", b[0])
		}
		ready <- err
	}()
	select {
	case err = <-ready:
	case <-ctx.Done():
		conn.Close()
		return nil, fmt.Errorf("connect to port %d in the sandbox: %w", port, ctx.Err())
	}
	if err != nil {
		if !errors.Is(err, io.EOF) {
			// Not port-connect's refusal: it is still running.
			conn.Close()
		}
		err = conn.failure(err)
		conn.Close()
		return nil, err
	}
	return conn, nil
}

// failure is why the connection was not made (readErr: how reading its
// first byte failed): port-connect's own words when it said something.
func (c *Conn) failure(readErr error) error {
	st, werr := c.p.Wait()
	<-c.errDone
	msg := strings.TrimSpace(c.stderr.String())
	msg = strings.TrimPrefix(msg, "hutch: port-connect: ")
	switch {
	case strings.HasPrefix(msg, "nothing listens"):
		return fmt.Errorf("port %d: %w (start the server first, listening on 127.0.0.1, ::1 or every address): %s", c.port, ErrNotListening, msg)
	case msg != "":
		return fmt.Errorf("connect to port %d in the sandbox: %s", c.port, msg)
	case werr != nil:
		return fmt.Errorf("connect to port %d in the sandbox: %w", c.port, werr)
	}
	return fmt.Errorf("connect to port %d in the sandbox: %v (exit code %d)", c.port, readErr, st.Code)
}

// Conn is a connection to a port inside a sandbox (Dial). Reads and
// writes have no deadlines: SetDeadline and its kin fail with
// os.ErrNoDeadline.
type Conn struct {
	p       *agent.Process
	port    int
	stderr  *boundedBuffer
	errDone chan struct{}

	readMu sync.Mutex // held by Read, and by the drain after Close
	closed atomic.Bool
}

// Read reads from the server.
func (c *Conn) Read(b []byte) (int, error) {
	if c.closed.Load() {
		return 0, net.ErrClosed
	}
	c.readMu.Lock()
	defer c.readMu.Unlock()
	if c.closed.Load() {
		return 0, net.ErrClosed
	}
	return c.p.Stdout.Read(b)
}

// Write writes to the server.
func (c *Conn) Write(b []byte) (int, error) {
	if c.closed.Load() {
		return 0, net.ErrClosed
	}
	return c.p.Stdin.Write(b)
}

// CloseWrite ends what is sent to the server (a half-close: it still
// answers).
func (c *Conn) CloseWrite() error { return c.p.Stdin.Close() }

// Close ends the connection and the process in the sandbox that holds it.
func (c *Conn) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	_ = c.p.Stdin.Close()
	// It fails only when the process ended, or the agent did and took
	// the process with it.
	_ = c.p.Signal(syscall.SIGKILL)
	go func() {
		// What the agent still sends is read and dropped, once a Read in
		// progress returned.
		c.readMu.Lock()
		defer c.readMu.Unlock()
		_, _ = io.Copy(io.Discard, c.p.Stdout)
	}()
	return nil
}

// LocalAddr is a placeholder address: the connection is an agent's exec.
func (c *Conn) LocalAddr() net.Addr { return sandboxAddr("host") }

// RemoteAddr names the port in the sandbox.
func (c *Conn) RemoteAddr() net.Addr { return sandboxAddr("sandbox:" + strconv.Itoa(c.port)) }

// SetDeadline fails: the connection has no deadlines.
func (c *Conn) SetDeadline(time.Time) error { return os.ErrNoDeadline }

// SetReadDeadline fails: the connection has no deadlines.
func (c *Conn) SetReadDeadline(time.Time) error { return os.ErrNoDeadline }

// SetWriteDeadline fails: the connection has no deadlines.
func (c *Conn) SetWriteDeadline(time.Time) error { return os.ErrNoDeadline }

// sandboxAddr is the address of either end of a Conn.
type sandboxAddr string

func (a sandboxAddr) Network() string { return "hutch-agent" }
func (a sandboxAddr) String() string  { return string(a) }

// boundedBuffer keeps the first max bytes written to it and drops the rest.
type boundedBuffer struct {
	mu  sync.Mutex
	b   bytes.Buffer
	max int
}

func (b *boundedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := b.max - b.b.Len(); room > 0 {
		b.b.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (b *boundedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
