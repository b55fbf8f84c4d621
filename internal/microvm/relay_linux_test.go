package microvm

import (
	"io"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/yamux"

	"github.com/hutch-sandbox/hutch/internal/microvm/guest"
)

// echoProxy is a proxy whose services echo: HTTP and SOCKS prefix each
// connection's bytes with the service's name, DNS answers each query with
// its bytes again.
type echoProxy struct{}

func (echoProxy) ServeHTTP(l net.Listener) error  { return echoStreams(l, "http:") }
func (echoProxy) ServeSOCKS(l net.Listener) error { return echoStreams(l, "socks:") }
func (echoProxy) Close() error                    { return nil }
func (echoProxy) ServeDNS(pc net.PacketConn) error {
	buf := make([]byte, 512)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return err
		}
		_, _ = pc.WriteTo(append([]byte("dns:"), buf[:n]...), from)
	}
}

func echoStreams(l net.Listener, prefix string) error {
	for {
		c, err := l.Accept()
		if err != nil {
			return err
		}
		go func() {
			defer c.Close()
			if _, err := c.Write([]byte(prefix)); err == nil {
				_, _ = io.Copy(c, c)
			}
		}()
	}
}

// relayConn serves echoProxy on one end of a unix connection and returns
// the relay and the guest's end.
func relayConn(t *testing.T) (*proxyRelay, net.Conn) {
	t.Helper()
	l, err := net.Listen("unix", filepath.Join(t.TempDir(), "relay.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	gc, err := net.Dial("unix", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gc.Close() })
	hc, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	r, err := serveProxyRelay(hc, echoProxy{}, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r, gc
}

// relayPair serves echoProxy on one end of a unix connection and returns
// the guest's yamux session on the other.
func relayPair(t *testing.T) (*proxyRelay, *yamux.Session) {
	t.Helper()
	r, gc := relayConn(t)
	// What an old session left in the port's queues, then the new
	// session's mark: the host skips to it.
	if _, err := gc.Write(append([]byte("\x00\x01 left by an ended session"), guest.RelayMark...)); err != nil {
		t.Fatal(err)
	}
	sess, err := yamux.Client(gc, guest.MuxConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sess.Close() })
	return r, sess
}

// openKind opens a stream for the service kind.
func openKind(t *testing.T, sess *yamux.Session, kind byte) *yamux.Stream {
	t.Helper()
	st, err := sess.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	_ = st.SetDeadline(time.Now().Add(time.Minute)) // a guard against hanging, not a threshold
	if _, err := st.Write([]byte{kind}); err != nil {
		t.Fatal(err)
	}
	return st
}

// readN reads n bytes of st, or what came before an error.
func readN(st io.Reader, n int) string {
	b := make([]byte, n)
	k, _ := io.ReadFull(st, b)
	return string(b[:k])
}

// TestRelayStreams: each stream reaches the service its first byte names
// (DNS framed as over TCP); a stream of no known service, and one beyond
// guest.MaxStreams open at once, are closed, and a slot given back serves
// the next.
func TestRelayStreams(t *testing.T) {
	r, sess := relayPair(t)
	for kind, want := range map[byte]string{guest.StreamHTTP: "http:ping", guest.StreamSOCKS: "socks:ping"} {
		st := openKind(t, sess, kind)
		if _, err := st.Write([]byte("ping")); err != nil {
			t.Fatal(err)
		}
		if got := readN(st, len(want)); got != want {
			t.Errorf("stream %q answered %q, want %q", kind, got, want)
		}
		st.Close()
	}
	st := openKind(t, sess, guest.StreamDNS)
	if _, err := st.Write([]byte{0, 5, 'q', 'u', 'e', 'r', 'y'}); err != nil {
		t.Fatal(err)
	}
	if got := readN(st, 11); got != "\x00\x09dns:query" {
		t.Errorf("the DNS stream answered %q", got)
	}
	st.Close()

	st = openKind(t, sess, 'X')
	if got, err := io.ReadAll(st); len(got) != 0 || err != nil {
		t.Errorf("a stream of no known service: read %q, %v; want it closed", got, err)
	}
	st.Close()

	// guest.MaxStreams held open, then one more, once the streams above
	// have given their slots back.
	waitFor(t, "the slots of the streams ended", func() bool { return r.active.Load() == 0 })
	var held []*yamux.Stream
	for range guest.MaxStreams {
		st := openKind(t, sess, guest.StreamHTTP)
		if got := readN(st, 5); got != "http:" {
			t.Fatalf("stream %d of the bound answered %q", len(held), got)
		}
		held = append(held, st)
	}
	st = openKind(t, sess, guest.StreamHTTP)
	if got, err := io.ReadAll(st); len(got) != 0 || err != nil {
		t.Errorf("a stream beyond the bound: read %q, %v; want it closed", got, err)
	}
	st.Close()
	held[0].Close()
	if got, _ := io.ReadAll(held[0]); string(got) != "" {
		t.Errorf("a closed stream echoed %q", got)
	}
	// Its slot comes back once the host's side has closed it too.
	waitFor(t, "a slot back after a stream ended", func() bool { return r.active.Load() < guest.MaxStreams })
	st = openKind(t, sess, guest.StreamHTTP)
	if got := readN(st, 5); got != "http:" {
		t.Errorf("the stream in the slot given back answered %q", got)
	}
	st.Close()
	for _, st := range held[1:] {
		st.Close()
	}
}

// waitFor waits for cond, for a minute at most (a guard against hanging,
// not a threshold).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within a minute", what)
		}
	}
}

// TestRelayBreach: a guest that pings, or that keeps open the streams the
// host refused, loses its relay.
func TestRelayBreach(t *testing.T) {
	r, sess := relayPair(t)
	go sess.Ping()
	select {
	case <-r.Done():
	case <-time.After(time.Minute): // a guard against hanging, not a threshold
		t.Fatal("a ping did not end the relay")
	}

	r, sess = relayPair(t)
	for range 2*guest.MaxStreams + 1 {
		st, err := sess.OpenStream()
		if err != nil {
			break // the relay ended
		}
		if _, err := st.Write([]byte{guest.StreamHTTP}); err != nil {
			break
		}
		// Never closed: refused or not, the stream stays open here.
	}
	select {
	case <-r.Done():
	case <-time.After(time.Minute): // a guard against hanging, not a threshold
		t.Fatal("streams kept open past twice the bound did not end the relay")
	}

	// A guest that sends more than the host skips looking for a
	// session's mark loses its relay.
	r, gc := relayConn(t)
	go func() { _, _ = gc.Write(make([]byte, guest.MaxRelaySkip+len(guest.RelayMark)+1)) }()
	select {
	case <-r.Done():
	case <-time.After(time.Minute): // a guard against hanging, not a threshold
		t.Fatal("a relay without a session mark did not end")
	}
}
