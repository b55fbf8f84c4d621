package secrets

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

func newTestCA(t *testing.T) *CA {
	t.Helper()
	ca, err := NewCA("test", 0)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// caPool is a pool holding only ca's certificate, read back from its PEM.
func caPool(t *testing.T, ca *CA) *x509.CertPool {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca.CertPEM()) {
		t.Fatal("no certificate in CertPEM")
	}
	return pool
}

func TestNewCA(t *testing.T) {
	before := time.Now()
	ca := newTestCA(t)
	c := ca.Certificate()
	block, rest := pem.Decode(ca.CertPEM())
	if block == nil || block.Type != "CERTIFICATE" || len(rest) != 0 || string(block.Bytes) != string(c.Raw) {
		t.Fatalf("CertPEM is not the one certificate: %q", ca.CertPEM())
	}
	key, ok := c.PublicKey.(*ecdsa.PublicKey)
	switch {
	case !ok || key.Curve != elliptic.P256():
		t.Errorf("public key %T, want ECDSA P-256", c.PublicKey)
	case c.Subject.CommonName != "hutch sandbox CA test":
		t.Errorf("CommonName %q", c.Subject.CommonName)
	case !c.BasicConstraintsValid || !c.IsCA || c.MaxPathLen != 0 || !c.MaxPathLenZero:
		t.Errorf("basic constraints: valid %v, CA %v, MaxPathLen %d, zero %v", c.BasicConstraintsValid, c.IsCA, c.MaxPathLen, c.MaxPathLenZero)
	case c.KeyUsage != x509.KeyUsageCertSign|x509.KeyUsageCRLSign:
		t.Errorf("KeyUsage %v", c.KeyUsage)
	case len(c.PermittedDNSDomains)+len(c.ExcludedDNSDomains)+len(c.PermittedIPRanges)+len(c.ExcludedIPRanges) != 0:
		t.Error("the CA has name constraints")
	case c.CheckSignatureFrom(c) != nil:
		t.Error("not self-signed")
	}
	if nb := before.Add(-time.Minute).Truncate(time.Second); c.NotBefore.Before(nb.Add(-time.Second)) || c.NotBefore.After(nb.Add(time.Second)) {
		t.Errorf("NotBefore %v, want about %v", c.NotBefore, nb)
	}
	if d := c.NotAfter.Sub(before); d < 24*time.Hour-2*time.Second || d > 24*time.Hour+2*time.Second {
		t.Errorf("default lifetime: NotAfter is %v after creation", d)
	}
	week, err := NewCA("", 7*24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if d := week.Certificate().NotAfter.Sub(before); d < 7*24*time.Hour-2*time.Second {
		t.Errorf("lifetime a week: NotAfter is %v after creation", d)
	}
	if cn := week.Certificate().Subject.CommonName; cn != "hutch sandbox CA" {
		t.Errorf("CommonName without a name: %q", cn)
	}
	if ca.Certificate().SerialNumber.Cmp(week.Certificate().SerialNumber) == 0 {
		t.Error("two CAs with one serial")
	}
	if _, err := NewCA("x", -time.Second); err == nil || !strings.Contains(err.Error(), "negative lifetime") {
		t.Errorf("negative lifetime: %v", err)
	}
	// CertPEM is a copy.
	ca.CertPEM()[0] = 'X'
	if ca.CertPEM()[0] != '-' {
		t.Error("CertPEM returns the CA's own slice")
	}
}

func TestLeafVerifies(t *testing.T) {
	ca := newTestCA(t)
	pool := caPool(t, ca)
	tests := []struct {
		host    string
		verify  string // the name to verify (host when empty)
		dns, ip string // what the leaf should hold
	}{
		{host: "api.example.com", dns: "api.example.com"},
		{host: "API.Example.COM.", verify: "api.example.com", dns: "api.example.com"},
		{host: "localhost", dns: "localhost"},
		{host: "my_bucket.s3.amazonaws.com", dns: "my_bucket.s3.amazonaws.com"},
		{host: "127.0.0.1", ip: "127.0.0.1"},
		{host: "10.1.2.3", ip: "10.1.2.3"},
		{host: "::1", ip: "::1"},
		{host: "[2001:db8::1]", verify: "2001:db8::1", ip: "2001:db8::1"},
		{host: "2001:DB8:0::1", verify: "2001:db8::1", ip: "2001:db8::1"},
	}
	for _, tt := range tests {
		leaf, err := ca.Leaf(tt.host)
		if err != nil {
			t.Errorf("Leaf(%q): %v", tt.host, err)
			continue
		}
		c := leaf.Leaf
		if len(leaf.Certificate) != 1 || string(leaf.Certificate[0]) != string(c.Raw) {
			t.Errorf("Leaf(%q): Certificate is not the leaf alone", tt.host)
		}
		if tt.dns != "" && (len(c.DNSNames) != 1 || c.DNSNames[0] != tt.dns || len(c.IPAddresses) != 0) {
			t.Errorf("Leaf(%q): DNSNames %q, IPAddresses %v", tt.host, c.DNSNames, c.IPAddresses)
		}
		if tt.ip != "" && (len(c.IPAddresses) != 1 || !c.IPAddresses[0].Equal(net.ParseIP(tt.ip)) || len(c.DNSNames) != 0) {
			t.Errorf("Leaf(%q): IPAddresses %v, DNSNames %q", tt.host, c.IPAddresses, c.DNSNames)
		}
		name := tt.verify
		if name == "" {
			name = tt.host
		}
		opts := x509.VerifyOptions{DNSName: name, Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
		if _, err := c.Verify(opts); err != nil {
			t.Errorf("Leaf(%q) does not verify for %q: %v", tt.host, name, err)
		}
		if _, err := c.Verify(x509.VerifyOptions{DNSName: name, Roots: x509.NewCertPool()}); err == nil {
			t.Errorf("Leaf(%q) verifies without the CA", tt.host)
		}
		key, ok := leaf.PrivateKey.(*ecdsa.PrivateKey)
		if !ok || key.Curve != elliptic.P256() || !key.PublicKey.Equal(c.PublicKey) {
			t.Errorf("Leaf(%q): private key %T does not match an ECDSA P-256 leaf", tt.host, leaf.PrivateKey)
		}
		if c.IsCA || len(c.ExtKeyUsage) != 1 || c.ExtKeyUsage[0] != x509.ExtKeyUsageServerAuth {
			t.Errorf("Leaf(%q): IsCA %v, ExtKeyUsage %v", tt.host, c.IsCA, c.ExtKeyUsage)
		}
		if c.SerialNumber.Sign() <= 0 || c.SerialNumber.BitLen() > 128 {
			t.Errorf("Leaf(%q): serial %v", tt.host, c.SerialNumber)
		}
	}
}

func TestLeafWrongHost(t *testing.T) {
	ca := newTestCA(t)
	pool := caPool(t, ca)
	pairs := [][2]string{
		{"a.example.com", "b.example.com"},
		{"example.com", "www.example.com"},
		{"www.example.com", "example.com"},
		{"a.example.com", "a.example.com.evil.test"},
		{"127.0.0.1", "127.0.0.2"},
		{"127.0.0.1", "localhost"},
		{"localhost", "127.0.0.1"},
		{"::1", "::2"},
	}
	for _, p := range pairs {
		leaf, err := ca.Leaf(p[0])
		if err != nil {
			t.Fatal(err)
		}
		if _, err := leaf.Leaf.Verify(x509.VerifyOptions{DNSName: p[1], Roots: pool}); err == nil {
			t.Errorf("leaf for %q verifies for %q", p[0], p[1])
		}
	}
	// Another sandbox's CA does not vouch for this one's leaves.
	other := newTestCA(t)
	leaf, err := ca.Leaf("a.example.com")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := leaf.Leaf.Verify(x509.VerifyOptions{DNSName: "a.example.com", Roots: caPool(t, other)}); err == nil {
		t.Error("leaf verifies against another CA")
	}
}

func TestLeafErrors(t *testing.T) {
	ca := newTestCA(t)
	for _, host := range []string{
		"", ".", "a..b", "*.example.com", "a b", "a/b", "example.com:443", "fe80::1%eth0",
		"[127.0.0.1]", "[example.com]", "héllo.example", strings.Repeat("a", 64) + ".com",
		strings.Repeat("abcdefghi.", 26) + "com",
	} {
		if leaf, err := ca.Leaf(host); err == nil {
			t.Errorf("Leaf(%q) = %v, want an error", host, leaf.Leaf.DNSNames)
		} else if !strings.HasPrefix(err.Error(), "leaf certificate: host ") {
			t.Errorf("Leaf(%q): error %q", host, err)
		}
	}
	expired, err := NewCA("old", time.Nanosecond)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond)
	if _, err := expired.Leaf("example.com"); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Errorf("Leaf of an expired CA: %v", err)
	}
	if _, err := expired.ServerConfig("example.com"); err == nil {
		t.Error("ServerConfig of an expired CA: no error")
	}
}

func TestLeafValidity(t *testing.T) {
	before := time.Now()
	short, err := NewCA("short", 2*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	long, err := NewCA("long", 30*24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	sl, err := short.Leaf("example.com")
	if err != nil {
		t.Fatal(err)
	}
	if !sl.Leaf.NotAfter.Equal(short.Certificate().NotAfter) {
		t.Errorf("leaf of a 2 h CA expires %v, the CA %v", sl.Leaf.NotAfter, short.Certificate().NotAfter)
	}
	ll, err := long.Leaf("example.com")
	if err != nil {
		t.Fatal(err)
	}
	if d := ll.Leaf.NotAfter.Sub(before); d < 24*time.Hour-2*time.Second || d > 24*time.Hour+2*time.Second {
		t.Errorf("leaf of a 30 day CA lasts %v", d)
	}
	if d := before.Sub(ll.Leaf.NotBefore); d < time.Minute-time.Second || d > time.Minute+2*time.Second {
		t.Errorf("leaf valid from %v before creation", d)
	}
	// A cached leaf about to expire, of a CA that outlives it, is renewed.
	if !long.renew(ll.Leaf, ll.Leaf.NotAfter.Add(-30*time.Second)) || long.renew(ll.Leaf, before) {
		t.Error("renew: wrong about a leaf near its expiry")
	}
	if short.renew(sl.Leaf, sl.Leaf.NotAfter.Add(-30*time.Second)) {
		t.Error("renew: a leaf that lasts as long as its CA cannot be bettered")
	}
	// Leaf replaces such a leaf (made to look old here) by a new one.
	ll.Leaf.NotAfter = time.Now().Add(30 * time.Second)
	renewed, err := long.Leaf("example.com")
	if err != nil || renewed == ll || len(long.leaves) != 1 || long.order.Len() != 1 {
		t.Errorf("near its expiry: renewed %v, err %v, %d cached", renewed != ll, err, len(long.leaves))
	}
	if again, _ := long.Leaf("example.com"); again != renewed {
		t.Error("the renewed leaf is not cached")
	}
}

func TestLeafCache(t *testing.T) {
	ca := newTestCA(t)
	a1, _ := ca.Leaf("a.example.com")
	a2, _ := ca.Leaf("A.EXAMPLE.COM")
	b, _ := ca.Leaf("b.example.com")
	if a1 == nil || a1 != a2 {
		t.Error("Leaf does not return the cached leaf")
	}
	if a1 == b || a1.Leaf.SerialNumber.Cmp(b.Leaf.SerialNumber) == 0 {
		t.Error("two hosts share a leaf or a serial")
	}
	i1, _ := ca.Leaf("::1")
	i2, _ := ca.Leaf("[::1]")
	if i1 == nil || i1 != i2 {
		t.Error("[::1] and ::1 have different leaves")
	}

	// Eviction, oldest first, with a small cache.
	ca = newTestCA(t)
	ca.maxLeaves = 3
	first := map[string]*tls.Certificate{}
	for _, h := range []string{"h1", "h2", "h3", "h4"} {
		first[h], _ = ca.Leaf(h + ".test")
	}
	if len(ca.leaves) != 3 || ca.order.Len() != 3 {
		t.Fatalf("%d cached, %d in order, want 3", len(ca.leaves), ca.order.Len())
	}
	if c, _ := ca.Leaf("h2.test"); c != first["h2"] {
		t.Error("h2 was evicted before h1")
	}
	if c, _ := ca.Leaf("h1.test"); c == first["h1"] {
		t.Error("h1, the oldest, was not evicted")
	}
	// h1 came back as the newest: h2 is now the oldest.
	if _, ok := ca.leaves["h2.test"]; ok {
		t.Error("h2 not evicted after h1 came back")
	}
}

func TestLeafCacheLimit(t *testing.T) {
	ca := newTestCA(t)
	for i := range 1100 {
		if _, err := ca.Leaf(fmt.Sprintf("h%d.test", i)); err != nil {
			t.Fatal(err)
		}
	}
	if len(ca.leaves) != 1024 || ca.order.Len() != 1024 {
		t.Errorf("%d leaves cached, %d in order, want 1024", len(ca.leaves), ca.order.Len())
	}
	if _, ok := ca.leaves["h75.test"]; ok {
		t.Error("h75 should have been evicted")
	}
	if _, ok := ca.leaves["h76.test"]; !ok {
		t.Error("h76 should be cached")
	}
}

func TestLeafConcurrent(t *testing.T) {
	hosts := []string{"a.test", "b.test", "c.test", "127.0.0.1", "::1", "d.test", "e.test", "f.test"}
	// run has workers ask ca for every host, each from its own start, at
	// once, and returns what each got, in the order of hosts.
	run := func(ca *CA, workers int) [][]*tls.Certificate {
		results := make([][]*tls.Certificate, workers)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for w := range workers {
			results[w] = make([]*tls.Certificate, len(hosts))
			wg.Go(func() {
				<-start
				for i := range hosts {
					j := (i + w) % len(hosts)
					c, err := ca.Leaf(hosts[j])
					if err != nil {
						t.Error(err)
						return
					}
					results[w][j] = c
					if _, err := ca.ServerConfig(hosts[j]); err != nil {
						t.Error(err)
					}
				}
			})
		}
		close(start)
		wg.Wait()
		return results
	}

	// Concurrent first calls for a host make one leaf, which all get.
	ca := newTestCA(t)
	results := run(ca, 32)
	for w := range results {
		for i, c := range results[w] {
			if c != results[0][i] {
				t.Errorf("worker %d got another leaf for %s", w, hosts[i])
			}
		}
	}
	if len(ca.leaves) != len(hosts) {
		t.Errorf("%d leaves cached, want %d", len(ca.leaves), len(hosts))
	}

	// With a cache too small for the hosts, leaves are evicted while
	// others are made and waited for; every caller still gets a right one.
	ca = newTestCA(t)
	ca.maxLeaves = 3
	for w, certs := range run(ca, 32) {
		for i, c := range certs {
			if c == nil {
				continue
			}
			if err := c.Leaf.VerifyHostname(hosts[i]); err != nil {
				t.Errorf("worker %d, %s: %v", w, hosts[i], err)
			}
		}
	}
	if len(ca.leaves) > 3 || ca.order.Len() != len(ca.leaves) {
		t.Errorf("%d leaves cached, %d in order, want at most 3", len(ca.leaves), ca.order.Len())
	}
}

// handshake runs a TLS handshake over net.Pipe between a server using cfg
// and a client using ccfg, and returns both connections' states. When one
// side fails, both connections are closed, so the other fails too rather
// than wait on the synchronous pipe. A side that fails while the other is
// still writing (a client refusing the certificate of a TLS 1.3 server
// still sending its flight) cannot send its alert: the pipe has no buffer.
// Both then wait for the deadline, timeout from now.
func handshake(t *testing.T, cfg, ccfg *tls.Config, timeout time.Duration) (server, client tls.ConnectionState, serr, cerr error) {
	t.Helper()
	sc, cc := net.Pipe()
	deadline := time.Now().Add(timeout)
	_ = sc.SetDeadline(deadline)
	_ = cc.SetDeadline(deadline)
	closeBoth := sync.OnceFunc(func() {
		sc.Close()
		cc.Close()
	})
	defer closeBoth()
	srv, cli := tls.Server(sc, cfg), tls.Client(cc, ccfg)
	var wg sync.WaitGroup
	wg.Go(func() {
		if serr = srv.Handshake(); serr != nil {
			closeBoth()
		}
	})
	if cerr = cli.Handshake(); cerr != nil {
		closeBoth()
	}
	wg.Wait()
	return srv.ConnectionState(), cli.ConnectionState(), serr, cerr
}

func TestServerConfigHandshake(t *testing.T) {
	ca := newTestCA(t)
	pool := caPool(t, ca)
	for _, host := range []string{"api.example.com", "127.0.0.1", "::1"} {
		for _, version := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
			cfg, err := ca.ServerConfig(host)
			if err != nil {
				t.Fatal(err)
			}
			ccfg := &tls.Config{
				RootCAs: pool, ServerName: host, NextProtos: []string{"h2", "http/1.1"},
				MinVersion: version, MaxVersion: version,
			}
			s, c, serr, cerr := handshake(t, cfg, ccfg, 10*time.Second)
			if serr != nil || cerr != nil {
				t.Errorf("%s, TLS %x: server %v, client %v", host, version, serr, cerr)
				continue
			}
			if c.NegotiatedProtocol != "http/1.1" || s.NegotiatedProtocol != "http/1.1" || c.Version != version {
				t.Errorf("%s: protocol %q/%q, version %x", host, c.NegotiatedProtocol, s.NegotiatedProtocol, c.Version)
			}
		}
	}
}

func TestServerConfig(t *testing.T) {
	ca := newTestCA(t)
	pool := caPool(t, ca)
	cfg, err := ca.ServerConfig("api.example.com")
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := ca.Leaf("api.example.com")
	if len(cfg.Certificates) != 1 || cfg.Certificates[0].Leaf != leaf.Leaf || cfg.GetCertificate != nil ||
		cfg.MinVersion != tls.VersionTLS12 || len(cfg.NextProtos) != 1 || cfg.NextProtos[0] != "http/1.1" {
		t.Errorf("config: %d certificates, MinVersion %x, NextProtos %q", len(cfg.Certificates), cfg.MinVersion, cfg.NextProtos)
	}
	if cfg2, _ := ca.ServerConfig("api.example.com"); cfg2 == cfg {
		t.Error("ServerConfig returns one shared config")
	}

	// The leaf follows the host given, whatever SNI the client sends.
	var presented *x509.Certificate
	ccfg := &tls.Config{
		ServerName: "other.example.org", InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			presented = cs.PeerCertificates[0]
			return nil
		},
	}
	if _, _, serr, cerr := handshake(t, cfg, ccfg, 10*time.Second); serr != nil || cerr != nil {
		t.Fatalf("server %v, client %v", serr, cerr)
	}
	if presented == nil || presented.DNSNames[0] != "api.example.com" {
		t.Errorf("presented a certificate for %v", presented.DNSNames)
	}
	// A verifying client of another host refuses it.
	ccfg = &tls.Config{RootCAs: pool, ServerName: "other.example.org"}
	if _, _, _, cerr := handshake(t, cfg, ccfg, 500*time.Millisecond); cerr == nil || !strings.Contains(cerr.Error(), "valid for api.example.com") {
		t.Errorf("client verifying other.example.org: %v", cerr)
	}
	// TLS 1.1 is refused.
	ccfg = &tls.Config{RootCAs: pool, ServerName: "api.example.com", MinVersion: tls.VersionTLS10, MaxVersion: tls.VersionTLS11}
	if _, _, serr, _ := handshake(t, cfg, ccfg, 10*time.Second); serr == nil {
		t.Error("server accepted TLS 1.1")
	}
	// HTTP/1.1 only: a client that insists on h2 is refused.
	ccfg = &tls.Config{RootCAs: pool, ServerName: "api.example.com", NextProtos: []string{"h2"}}
	if _, _, serr, _ := handshake(t, cfg, ccfg, 10*time.Second); serr == nil {
		t.Error("server accepted a client offering only h2")
	}
	// Without ALPN the handshake still works.
	ccfg = &tls.Config{RootCAs: pool, ServerName: "api.example.com"}
	if _, c, serr, cerr := handshake(t, cfg, ccfg, 10*time.Second); serr != nil || cerr != nil || c.NegotiatedProtocol != "" {
		t.Errorf("without ALPN: server %v, client %v, protocol %q", serr, cerr, c.NegotiatedProtocol)
	}
	if _, err := ca.ServerConfig("bad host"); err == nil {
		t.Error("ServerConfig of a bad host: no error")
	}
}
