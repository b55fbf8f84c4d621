//go:build linux

package escape

import (
	"bufio"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// The sandbox has no egress yet: its network namespace holds only its own
// loopback. These tests pin that down; none of them sends traffic off this
// machine (with no route, connect fails before any packet is sent, and
// the addresses tried are TEST-NET, link-local or private).

// listenTCP listens on addr ("127.0.0.1:0", "[::1]:0", ...) until the test
// ends; it returns nil when the host cannot listen there.
func listenTCP(t *testing.T, addr string) *listener {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Logf("cannot listen on %s on this host (%v); that probe is skipped", addr, err)
		return nil
	}
	return count(t, l, l.Addr().String())
}

// udpListener is a host UDP socket counting the datagrams it receives.
type udpListener struct {
	addr     string
	received atomic.Int64
}

func listenUDP(t *testing.T, addr string) *udpListener {
	t.Helper()
	c, err := net.ListenPacket("udp", addr)
	if err != nil {
		t.Fatalf("listen on udp %s: %v", addr, err)
	}
	h := &udpListener{addr: c.LocalAddr().String()}
	go func() {
		buf := make([]byte, 1500)
		for {
			if _, _, err := c.ReadFrom(buf); err != nil {
				return
			}
			h.received.Add(1)
		}
	}()
	t.Cleanup(func() { c.Close() })
	return h
}

// hostAddrs lists the host's own global unicast addresses (not loopback,
// not link-local).
func hostAddrs() []net.IP {
	var out []net.IP
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.IsGlobalUnicast() {
			out = append(out, n.IP)
		}
	}
	return out
}

// TestItem15_DirectEgress: no direct connection leaves the sandbox (S6):
// TCP to a listener on the host's 127.0.0.1 and ::1 is refused (the
// sandbox's loopback is its own) and the listener accepts nothing; TCP to
// the host's own non-loopback addresses, to a TEST-NET address over IPv4
// and IPv6, and UDP to TEST-NET fail at once with "network unreachable";
// a UDP datagram to the host's loopback never arrives; raw ICMP sockets are
// refused; proxy variables are not passed, and curl with --noproxy fails.
// The sandbox's own loopback works (the control).
func TestItem15_DirectEgress(t *testing.T) {
	forEachMode(t, func(t *testing.T, sb *harness) {
		var tcp []*listener
		for _, addr := range []string{"127.0.0.1:0", "[::1]:0"} {
			if l := listenTCP(t, addr); l != nil {
				tcp = append(tcp, l)
			}
		}
		var own []*listener
		for _, ip := range hostAddrs() {
			if l := listenTCP(t, net.JoinHostPort(ip.String(), "0")); l != nil {
				own = append(own, l)
			}
		}
		udp := listenUDP(t, "127.0.0.1:0")
		a := sb.attacker()
		want := map[string][]string{
			"tcp:192.0.2.1:80":     {"ENETUNREACH"},
			"tcp:[2001:db8::1]:80": {"ENETUNREACH"},
			"udp:192.0.2.1:9":      {"ENETUNREACH"},
			"udp:" + udp.addr:      {"ECONNREFUSED", "noreply"},
			"socket:raw4":          {"EPERM"},
			"socket:raw6":          {"EPERM"},
			"tcp_self":             {"ok"},
		}
		for _, l := range tcp {
			want["tcp:"+l.addr] = []string{"ECONNREFUSED"}
		}
		for _, l := range own {
			want["tcp:"+l.addr] = []string{"ENETUNREACH"}
		}
		script := argv(a, sortedKeys(want)...) + `
echo "PROXY=${HTTP_PROXY:-unset}${HTTPS_PROXY:-unset}${ALL_PROXY:-unset}"
if command -v curl >/dev/null; then
	unset HTTP_PROXY HTTPS_PROXY http_proxy https_proxy ALL_PROXY
	curl -sS --noproxy '*' --max-time 5 http://192.0.2.1/; echo "RC curl $?"
fi
`
		r := sb.run(opts{env: []string{"HTTP_PROXY=http://127.0.0.1:3128", "HTTPS_PROXY=http://127.0.0.1:3128", "ALL_PROXY=socks5://127.0.0.1:1080"}}, script)
		expect(t, r, want)
		if !strings.Contains(r.stdout, "PROXY=unsetunsetunset") {
			t.Errorf("proxy variables were passed into the sandbox\n%s", r)
		}
		if strings.Contains(r.stdout, "RC curl 0") {
			t.Errorf("curl --noproxy reached TEST-NET\n%s", r)
		}
		for _, l := range append(tcp, own...) {
			if n := l.accepted.Load(); n != 0 {
				t.Errorf("S6 violated: host listener %s accepted %d connection(s) from the sandbox", l.addr, n)
			}
		}
		time.Sleep(100 * time.Millisecond) // a datagram in flight would have landed
		if n := udp.received.Load(); n != 0 {
			t.Errorf("S6 violated: host UDP socket %s received %d datagram(s) from the sandbox", udp.addr, n)
		}
	})
}

// nameservers returns the nameserver addresses of /etc/resolv.conf.
func nameservers() []string {
	f, err := os.Open("/etc/resolv.conf")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) >= 2 && f[0] == "nameserver" {
			if ip := net.ParseIP(strings.Split(f[1], "%")[0]); ip != nil {
				out = append(out, net.JoinHostPort(ip.String(), "53"))
			}
		}
	}
	return out
}

// TestItem16_DNS: no name lookup leaves the sandbox (S6): getent for a
// name only DNS could answer fails, a query to each of the host's
// nameservers fails at once (unreachable, or refused by the sandbox's own
// loopback for a local stub resolver), and a fake resolver on the host's
// loopback receives nothing. /etc/hosts still answers (the control).
func TestItem16_DNS(t *testing.T) {
	forEachMode(t, func(t *testing.T, sb *harness) {
		resolver := listenUDP(t, "127.0.0.1:0")
		a := sb.attacker()
		want := map[string][]string{"udp:" + resolver.addr: {"ECONNREFUSED", "noreply"}}
		for _, ns := range nameservers() {
			want["udp:"+ns] = []string{"ENETUNREACH", "ECONNREFUSED"}
		}
		name := randomName("hutch-exfil-") + ".example.invalid"
		script := argv(a, sortedKeys(want)...) + `
getent hosts localhost >/dev/null; echo "RC control $?"
getent hosts ` + name + `; echo "RC lookup $?"
getent ahosts example.com; echo "RC lookup2 $?"
`
		r := sb.run(opts{}, script)
		expect(t, r, want)
		if !strings.Contains(r.stdout, "RC control 0") {
			t.Errorf("control failed: localhost did not resolve from /etc/hosts\n%s", r)
		}
		for _, bad := range []string{"RC lookup 0", "RC lookup2 0"} {
			if strings.Contains(r.stdout, bad) {
				t.Errorf("S6 violated: a DNS lookup succeeded inside the sandbox (%s)\n%s", bad, r)
			}
		}
		time.Sleep(100 * time.Millisecond)
		if n := resolver.received.Load(); n != 0 {
			t.Errorf("S6 violated: the host's fake resolver got %d query(ies) from the sandbox", n)
		}
	})
}

// TestItem17_FilterCoverage is the first test of ESCAPES item 17, before
// the egress proxy exists: a policy that allows a domain must not open the
// network by itself (fail closed, S2/S6). hutch either refuses the policy
// or runs with no route out: plain HTTP, a CONNECT-style TCP connection to
// port 443 and to port 22 all fail with "network unreachable".
func TestItem17_FilterCoverage(t *testing.T) {
	forEachMode(t, func(t *testing.T, sb *harness) {
		dir := hostDir(t, sb.mode.uid, "policy")
		pol := dir + "/policy.yaml"
		writeFile(t, pol, "network:\n  allowed_domains: [example.com]\n", 0o644, sb.mode.uid)
		a := sb.attacker()
		r := sb.run(opts{flags: []string{"--policy", pol}, noCheck: true},
			argv(a, "tcp:192.0.2.1:80", "tcp:192.0.2.1:443", "tcp:192.0.2.1:22", "tcp:[2001:db8::1]:443"))
		if r.code == 125 {
			if !strings.Contains(r.stderr, "network") {
				t.Errorf("hutch refused the policy without naming the network part\n%s", r)
			}
			return
		}
		expect(t, r, map[string][]string{
			"tcp:192.0.2.1:80": {"ENETUNREACH"}, "tcp:192.0.2.1:443": {"ENETUNREACH"},
			"tcp:192.0.2.1:22": {"ENETUNREACH"}, "tcp:[2001:db8::1]:443": {"ENETUNREACH"},
		})
	})
}

// TestItem18_SSRF is the first test of ESCAPES item 18, before the egress
// proxy exists: the cloud metadata address, private and link-local
// addresses and their v4-mapped and NAT64 spellings are unreachable (S6),
// and the v4-mapped spelling of the host's loopback reaches only the
// sandbox's own loopback: the host listener accepts nothing.
func TestItem18_SSRF(t *testing.T) {
	forEachMode(t, func(t *testing.T, sb *harness) {
		host := listenTCP(t, "127.0.0.1:0")
		if host == nil {
			t.Fatal("cannot listen on the host's loopback")
		}
		_, port, _ := net.SplitHostPort(host.addr)
		a := sb.attacker()
		want := map[string][]string{
			"tcp:169.254.169.254:80":          {"ENETUNREACH"},
			"tcp:[::ffff:169.254.169.254]:80": {"ENETUNREACH"},
			"tcp:[64:ff9b::a9fe:a9fe]:80":     {"ENETUNREACH"},
			"tcp:[fd00:ec2::254]:80":          {"ENETUNREACH"},
			"tcp:10.0.0.1:80":                 {"ENETUNREACH"},
			"tcp:172.17.0.1:2375":             {"ENETUNREACH"},
			"tcp:192.168.0.1:80":              {"ENETUNREACH"},
			"tcp:[fe80::1%lo]:80":             {"ECONNREFUSED", "ENETUNREACH", "EADDRNOTAVAIL", "EINVAL"},
			"tcp:[::ffff:127.0.0.1]:" + port:  {"ECONNREFUSED"},
			"tcp:127.0.0.2:" + port:           {"ECONNREFUSED"},
			"tcp:0.0.0.0:" + port:             {"ECONNREFUSED"},
		}
		r := sb.run(opts{}, argv(a, sortedKeys(want)...))
		expect(t, r, want)
		if n := host.accepted.Load(); n != 0 {
			t.Errorf("S6 violated: the host's loopback listener accepted %d connection(s) from the sandbox", n)
		}
	})
}
