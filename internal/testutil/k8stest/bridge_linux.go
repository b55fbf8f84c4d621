package k8stest

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"sync"
	"testing"
)

// bridgeAddress is the node's address on the pods' bridge: the last of
// subnet (a /24) that is not its broadcast address, which the CNI's range
// leaves out (cniConfig).
func bridgeAddress(subnet string) (netip.Addr, error) {
	prefix, err := netip.ParsePrefix(subnet)
	if err != nil || !prefix.Addr().Is4() || prefix.Bits() != 24 {
		return netip.Addr{}, fmt.Errorf("the pods' subnet %q: not an IPv4 /24 (%v)", subnet, err)
	}
	a := prefix.Addr().As4()
	a[3] = 254
	return netip.AddrFrom4(a), nil
}

// NodeOnBridge gives the pods' bridge the node's address there (the
// subnet's last, which no pod gets) until the cluster ends, so that the
// node reaches the pods as a daemon's node does, and the pods it; it
// returns the address. Before the first pod there is no bridge yet: it is
// made here, and the CNI plugin takes it as it is. Called again, it
// returns the address it gave.
func (c *Cluster) NodeOnBridge(t testing.TB) netip.Addr {
	t.Helper()
	c.bridgeMu.Lock()
	defer c.bridgeMu.Unlock()
	addr, err := bridgeAddress(c.Subnet)
	if err != nil {
		t.Fatal(err)
	}
	if c.onBridge {
		return addr
	}
	if _, err := os.Stat("/sys/class/net/" + c.Bridge); err != nil {
		for _, args := range [][]string{{"link", "add", c.Bridge, "type", "bridge"}, {"link", "set", c.Bridge, "up"}} {
			if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
				t.Fatalf("ip %v: %v\n%s", args, err, out)
			}
		}
	}
	// The bridge, and the address with it, goes at the cluster's
	// teardown (removeLeftovers).
	cidr := addr.String() + "/24"
	if out, err := exec.Command("ip", "addr", "add", cidr, "dev", c.Bridge).CombinedOutput(); err != nil {
		t.Fatalf("ip addr add %s dev %s: %v\n%s", cidr, c.Bridge, err, out)
	}
	c.onBridge = true
	return addr
}

// APIServerOnBridge lets the pods reach the API server, which listens on
// 127.0.0.1 only, until the test ends: a TCP relay of the test's own on
// the node's address on the pods' bridge (NodeOnBridge), which sends each
// connection on to the API server. It returns the relay's address; the
// API server's certificate names that address, so that a pod's client
// checks it as it would the API server's Service (KUBERNETES_SERVICE_HOST
// and KUBERNETES_SERVICE_PORT set to it: no kube-proxy routes the Service
// of the cluster's). The bridge has no route off the machine: nothing
// outside it reaches the relay.
func (c *Cluster) APIServerOnBridge(t testing.TB) netip.AddrPort {
	t.Helper()
	addr := c.NodeOnBridge(t)
	l, err := net.Listen("tcp", netip.AddrPortFrom(addr, 0).String())
	if err != nil {
		t.Fatal(err)
	}
	r := &relay{l: l, to: fmt.Sprintf("127.0.0.1:%d", c.ports.apiServer), conns: map[net.Conn]bool{}}
	r.wg.Add(1)
	go r.serve()
	t.Cleanup(r.close)
	return l.Addr().(*net.TCPAddr).AddrPort()
}

// relay sends the connections it accepts on l on to the address to.
type relay struct {
	l  net.Listener
	to string
	wg sync.WaitGroup

	mu     sync.Mutex
	closed bool
	conns  map[net.Conn]bool
}

func (r *relay) serve() {
	defer r.wg.Done()
	for {
		in, err := r.l.Accept()
		if err != nil {
			return
		}
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			r.pipe(in)
		}()
	}
}

// track adds conns to those close closes, or closes them and says false
// when the relay is closed.
func (r *relay) track(conns ...net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		for _, c := range conns {
			c.Close()
		}
		return false
	}
	for _, c := range conns {
		r.conns[c] = true
	}
	return true
}

// pipe copies between in and a new connection to r.to until either ends.
func (r *relay) pipe(in net.Conn) {
	if !r.track(in) {
		return
	}
	out, err := net.Dial("tcp", r.to)
	if err != nil {
		in.Close()
		return
	}
	if !r.track(out) {
		in.Close()
		return
	}
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		if _, err := io.Copy(dst, src); err != nil {
			// One way broke: both go.
			in.Close()
			out.Close()
		} else if tc, ok := dst.(*net.TCPConn); ok {
			// src ended: dst is told, and the other way may still
			// carry the end of an answer.
			tc.CloseWrite()
		}
		done <- struct{}{}
	}
	go cp(out, in)
	go cp(in, out)
	<-done
	<-done
	r.mu.Lock()
	delete(r.conns, in)
	delete(r.conns, out)
	r.mu.Unlock()
	in.Close()
	out.Close()
}

// close stops the relay and ends its connections, and waits for it.
func (r *relay) close() {
	r.mu.Lock()
	r.closed = true
	for c := range r.conns {
		c.Close()
	}
	r.mu.Unlock()
	r.l.Close()
	r.wg.Wait()
}

// lastPodAddress is the last address of subnet the CNI gives a pod: the
// one before the node's (bridgeAddress).
func lastPodAddress(subnet string) string {
	a, err := bridgeAddress(subnet)
	if err != nil {
		return ""
	}
	return a.Prev().String()
}
