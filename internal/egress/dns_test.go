package egress

import (
	"context"
	"encoding/binary"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// The wire format the tests build and read (RFC 1035), spelled out here
// independently of the library hutch answers with.
const (
	dnsHeaderLen = 12
	dnsFlagQR    = 1 << 15
	dnsFlagAA    = 1 << 10
	dnsFlagRD    = 1 << 8

	dnsRcodeOK       = 0
	dnsRcodeFormErr  = 1
	dnsRcodeNXDomain = 3
	dnsRcodeNotImp   = 4

	dnsTypeA    = 1
	dnsTypeAAAA = 28
	dnsClassIN  = 1
)

// query builds a DNS query for name (dotted) of type qt, with flags.
func query(id uint16, flags uint16, name string, qt uint16) []byte {
	b := make([]byte, dnsHeaderLen)
	binary.BigEndian.PutUint16(b, id)
	binary.BigEndian.PutUint16(b[2:], flags)
	binary.BigEndian.PutUint16(b[4:], 1)
	for _, l := range strings.Split(strings.TrimSuffix(name, "."), ".") {
		if l == "" {
			continue
		}
		b = append(b, byte(len(l)))
		b = append(b, l...)
	}
	b = append(b, 0)
	b = binary.BigEndian.AppendUint16(b, qt)
	return binary.BigEndian.AppendUint16(b, dnsClassIN)
}

func TestDNSAnswer(t *testing.T) {
	local := func(n string) bool { return isLoopbackName(n, "hutch") }
	type want struct {
		none    bool // no response at all
		rcode   uint16
		answers uint16
		addr    []byte // the one answer's data
		name    string
		ok      bool
	}
	for _, tt := range []struct {
		what string
		q    []byte
		want want
	}{
		{"a name", query(7, dnsFlagRD, "Registry.NPMJS.org.", dnsTypeA), want{rcode: dnsRcodeNXDomain, name: "registry.npmjs.org", ok: true}},
		{"AAAA", query(7, 0, "example.com", dnsTypeAAAA), want{rcode: dnsRcodeNXDomain, name: "example.com", ok: true}},
		{"localhost A", query(1, dnsFlagRD, "localhost", dnsTypeA), want{rcode: dnsRcodeOK, answers: 1, addr: []byte{127, 0, 0, 1}, name: "localhost", ok: true}},
		{"hostname AAAA", query(1, dnsFlagRD, "HUTCH", dnsTypeAAAA), want{rcode: dnsRcodeOK, answers: 1, addr: netip.IPv6Loopback().AsSlice(), name: "hutch", ok: true}},
		{"below localhost, MX", query(1, 0, "a.b.localhost", 15), want{rcode: dnsRcodeOK, name: "a.b.localhost", ok: true}},
		{"not below localhost", query(1, 0, "evil-localhost", dnsTypeA), want{rcode: dnsRcodeNXDomain, name: "evil-localhost", ok: true}},
		{"root", query(1, 0, ".", dnsTypeA), want{rcode: dnsRcodeNXDomain, name: "", ok: true}},
		{"odd bytes", query(1, 0, "a\x00b.te st", dnsTypeA), want{rcode: dnsRcodeNXDomain, name: "a?b.te?st", ok: true}},
		{"a response", query(1, dnsFlagQR, "example.com", dnsTypeA), want{none: true}},
		{"short", []byte{1, 2, 3}, want{none: true}},
		{"an update", query(1, 5<<11, "example.com", dnsTypeA), want{rcode: dnsRcodeNotImp}},
		{"two questions", func() []byte { b := query(1, 0, "example.com", dnsTypeA); b[5] = 2; return b }(), want{rcode: dnsRcodeFormErr}},
		{"compressed", func() []byte { b := query(1, 0, "example.com", dnsTypeA); b[12] = 0xc0; return b }(), want{rcode: dnsRcodeFormErr}},
		{"cut", query(1, 0, "example.com", dnsTypeA)[:20], want{rcode: dnsRcodeFormErr}},
		{"no type", query(1, 0, "example.com", dnsTypeA)[:26], want{rcode: dnsRcodeFormErr}},
		{"too long", query(1, 0, strings.Repeat("a123456789.", 26), dnsTypeA), want{rcode: dnsRcodeFormErr}},
	} {
		t.Run(tt.what, func(t *testing.T) {
			resp, q, ok := dnsAnswer(tt.q, local)
			if tt.want.none {
				if resp != nil {
					t.Errorf("answered %x, want no answer", resp)
				}
				return
			}
			if len(resp) < dnsHeaderLen {
				t.Fatalf("answer %x", resp)
			}
			if ok != tt.want.ok || (ok && q.name != tt.want.name) {
				t.Errorf("question %+v ok=%v, want %q ok=%v", q, ok, tt.want.name, tt.want.ok)
			}
			if resp[0] != tt.q[0] || resp[1] != tt.q[1] {
				t.Errorf("the answer's id %x differs from the query's %x", resp[:2], tt.q[:2])
			}
			flags := binary.BigEndian.Uint16(resp[2:])
			if flags&dnsFlagQR == 0 || flags&dnsFlagAA == 0 || flags&0xf != tt.want.rcode {
				t.Errorf("flags %#04x, want a final answer with rcode %d", flags, tt.want.rcode)
			}
			if flags&dnsFlagRD != binary.BigEndian.Uint16(tt.q[2:])&dnsFlagRD {
				t.Errorf("RD not copied: %#04x", flags)
			}
			if an := binary.BigEndian.Uint16(resp[6:]); an != tt.want.answers {
				t.Errorf("%d answers, want %d", an, tt.want.answers)
			}
			if tt.want.addr != nil && !strings.HasSuffix(string(resp), string(tt.want.addr)) {
				t.Errorf("answer %x does not end in %x", resp, tt.want.addr)
			}
		})
	}
}

// dnsEnv is a proxy serving DNS on a loopback UDP socket, and a Go
// resolver that asks it.
type dnsEnv struct {
	p   *Proxy
	rec *Recorder
	r   *net.Resolver
	err chan error
}

// startDNS serves DNS with cfg; record, when not nil, gets the events
// instead of env.rec.
func startDNS(t *testing.T, cfg Config, record func(Event)) *dnsEnv {
	t.Helper()
	rules, err := NewRules(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	env := &dnsEnv{rec: NewRecorder(nil), err: make(chan error, 1)}
	env.p = &Proxy{Rules: rules, Sandbox: "sb-dns", Record: env.rec.Record, Hostname: "hutch",
		Log: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))}
	if record != nil {
		env.p.Record = record
	}
	go func() { env.err <- env.p.ServeDNS(c) }()
	addr := c.LocalAddr().String()
	env.r = &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp", addr)
	}}
	t.Cleanup(func() {
		env.p.Close()
		if err := <-env.err; err != nil {
			t.Errorf("ServeDNS: %v", err)
		}
	})
	return env
}

// sync returns once every lookup made so far is recorded: ServeDNS
// records a lookup after its answer, before it reads the next query, and
// a lookup of the sandbox's host name (which the host's /etc/hosts does
// not know, unlike localhost) is answered after them.
func (env *dnsEnv) sync(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := env.r.LookupNetIP(ctx, "ip4", "hutch"); err != nil {
		t.Fatal(err)
	}
}

// TestServeDNS: every name is "no such host" at once, loopback names are
// the loopback, and each lookup is recorded once with what would allow it.
func TestServeDNS(t *testing.T) {
	env := startDNS(t, Config{Offline: true, OperatorRules: true}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for range 2 {
		_, err := env.r.LookupNetIP(ctx, "ip", "registry.npmjs.org")
		var dnsErr *net.DNSError
		if !errors.As(err, &dnsErr) || !dnsErr.IsNotFound || dnsErr.IsTemporary {
			t.Errorf("lookup: %v, want a final \"no such host\"", err)
		}
	}
	if _, err := env.r.LookupNetIP(ctx, "ip4", "pypi.org"); err == nil {
		t.Error("pypi.org resolved")
	}
	for _, name := range []string{"localhost", "hutch", "x.localhost"} {
		addrs, err := env.r.LookupNetIP(ctx, "ip", name)
		if err != nil || !slices.ContainsFunc(addrs, func(a netip.Addr) bool { return a.Unmap() == netip.MustParseAddr("127.0.0.1") }) {
			t.Errorf("lookup %s: %v %v, want the loopback", name, addrs, err)
		}
	}
	if _, err := env.r.LookupAddr(ctx, "192.0.2.1"); err == nil {
		t.Error("a reverse lookup resolved")
	}
	env.sync(t)
	// The lookups were recorded, each once (Go asks A and AAAA from two
	// sockets at once, glibc from one), the loopback names and reverse
	// lookups not at all.
	lines := env.rec.Lines()
	if len(lines) != 2 {
		t.Fatalf("Lines = %q, want the lookups and the fix", lines)
	}
	if want := "3 name lookups answered \"no such host\" (" + OfflineReason + "): registry.npmjs.org ×2, pypi.org"; lines[0] != want {
		t.Errorf("lookups line %q, want %q", lines[0], want)
	}
	if want := "to allow them: --allow-domain registry.npmjs.org --allow-domain pypi.org"; lines[1] != want {
		t.Errorf("fix line %q, want %q", lines[1], want)
	}
}

// TestServeDNSProxyMode: in proxy mode, a lookup of an allowed name needs
// no rule but the proxy, and names no fix; another one names
// --allow-domain.
func TestServeDNSProxyMode(t *testing.T) {
	env := startDNS(t, Config{AllowDomains: []string{"allowed.test"}, Lookup: failLookup, HostAddrs: []netip.Addr{}}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, name := range []string{"allowed.test", "other.test"} {
		if _, err := env.r.LookupNetIP(ctx, "ip4", name); err == nil {
			t.Errorf("%s resolved in the sandbox", name)
		}
	}
	env.sync(t)
	lines := env.rec.Lines()
	if len(lines) != 2 || !strings.Contains(lines[0], "use HTTP_PROXY, HTTPS_PROXY or ALL_PROXY): allowed.test, other.test") ||
		lines[1] != "to allow it: --allow-domain other.test" {
		t.Errorf("Lines = %q", lines)
	}
}

// TestServeDNSTwins: the A and AAAA queries of one lookup count once;
// the same name and type asked again counts again; malformed queries are
// answered and not recorded.
func TestServeDNSTwins(t *testing.T) {
	var mu sync.Mutex
	var got []Event
	env := startDNS(t, Config{Offline: true}, func(e Event) {
		mu.Lock()
		got = append(got, e)
		mu.Unlock()
	})
	server := func() string {
		env.p.mu.Lock()
		defer env.p.mu.Unlock()
		for pc := range env.p.packets {
			return pc.LocalAddr().String()
		}
		return ""
	}
	var addr string
	for i := 0; addr == "" && i < 100; i++ {
		addr = server()
		time.Sleep(10 * time.Millisecond)
	}
	conn, err := net.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ask := func(q []byte) []byte {
		t.Helper()
		if _, err := conn.Write(q); err != nil {
			t.Fatal(err)
		}
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		buf := make([]byte, 512)
		n, err := conn.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		return buf[:n]
	}
	ask(query(1, dnsFlagRD, "one.test", dnsTypeA))
	ask(query(2, dnsFlagRD, "one.test", dnsTypeAAAA))
	ask(query(3, dnsFlagRD, "one.test", dnsTypeA))
	if r := ask(query(4, 0, "bad.test", dnsTypeA)[:20]); binary.BigEndian.Uint16(r[2:])&0xf != dnsRcodeFormErr {
		t.Errorf("a cut query got %x", r)
	}
	ask(query(5, dnsFlagRD, "two.test", dnsTypeA))
	// ServeDNS records a lookup before it reads the next query: once this
	// one is answered, every lookup above is recorded.
	ask(query(6, dnsFlagRD, "localhost", dnsTypeA))
	mu.Lock()
	defer mu.Unlock()
	var names []string
	for _, e := range got {
		if e.Action != "lookup" || e.Protocol != "dns" || e.Reason != OfflineReason || e.Sandbox != "sb-dns" {
			t.Errorf("event %+v", e)
		}
		names = append(names, e.Host)
	}
	if want := []string{"one.test", "one.test", "two.test"}; !slices.Equal(names, want) {
		t.Errorf("recorded %q, want %q", names, want)
	}
}

// FuzzDNSAnswer: whatever the sandbox sends, the answer is nothing or a
// well-formed response with the query's id, and a well-formed question
// gives a name in lower case without the root's dot.
func FuzzDNSAnswer(f *testing.F) {
	f.Add(query(7, dnsFlagRD, "registry.npmjs.org", dnsTypeA))
	f.Add(query(1, 0, "localhost", dnsTypeAAAA))
	f.Add(query(1, 5<<11, "example.com", dnsTypeA))
	f.Add([]byte{0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0xc0, 12, 0, 1, 0, 1})
	local := func(n string) bool { return isLoopbackName(n, "hutch") }
	f.Fuzz(func(t *testing.T, b []byte) {
		resp, q, ok := dnsAnswer(b, local)
		if resp == nil {
			return
		}
		var p dnsmessage.Parser
		h, err := p.Start(resp)
		if err != nil || !h.Response || len(b) < 2 || resp[0] != b[0] || resp[1] != b[1] {
			t.Fatalf("answer %x to %x: %+v, %v", resp, b, h, err)
		}
		if ok && (q.name != strings.ToLower(q.name) || strings.HasSuffix(q.name, ".")) {
			t.Fatalf("question name %q", q.name)
		}
	})
}
