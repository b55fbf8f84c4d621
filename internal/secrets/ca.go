package secrets

import (
	"container/list"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"
)

const (
	// defaultCALifetime is a CA's lifetime when NewCA is given 0.
	defaultCALifetime = 24 * time.Hour
	// maxLeafLifetime bounds a leaf's validity.
	maxLeafLifetime = 24 * time.Hour
	// backdate is how long before its creation a certificate is valid
	// from, for clocks slightly behind.
	backdate = time.Minute
	// leafRenewal is how close to its expiry a cached leaf is replaced
	// (when the CA outlives it).
	leafRenewal = time.Minute
	// maxLeaves is how many leaves a CA caches.
	maxLeaves = 1024
)

// CA is a certificate authority made for one sandbox. Its certificate goes
// into the sandbox's trust bundle; its private key never leaves the
// process (no method returns it). Hutch's egress proxy presents the CA's
// leaf certificates to the sandbox when it terminates the sandbox's TLS.
//
// A CA is safe for concurrent use.
type CA struct {
	key     *ecdsa.PrivateKey
	cert    *x509.Certificate
	certPEM []byte
	// maxLeaves is how many leaves are cached (maxLeaves but in tests).
	maxLeaves int

	mu sync.Mutex
	// leaves are the cached leaves by host name, and order holds the same
	// entries, oldest first.
	leaves map[string]*leafEntry
	order  list.List
}

// leafEntry is one cached leaf. ready is closed once cert or err is set;
// callers that find the entry before then wait for it, so concurrent first
// calls for a host make one leaf.
type leafEntry struct {
	host  string
	elem  *list.Element
	ready chan struct{}
	cert  *tls.Certificate
	err   error
}

// NewCA makes a certificate authority for one sandbox: a new ECDSA P-256
// key and a self-signed certificate with CommonName "hutch sandbox CA
// <name>", valid from a minute ago for lifetime (24 hours when lifetime is
// 0). The certificate has BasicConstraints CA:true with MaxPathLen 0 and
// KeyUsage CertSign and CRLSign, and no name constraints: the hosts it
// signs for vary.
func NewCA(name string, lifetime time.Duration) (*CA, error) {
	if lifetime < 0 {
		return nil, fmt.Errorf("sandbox ca %q: negative lifetime %v", name, lifetime)
	}
	if lifetime == 0 {
		lifetime = defaultCALifetime
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("sandbox ca %q: key: %w", name, err)
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, fmt.Errorf("sandbox ca %q: %w", name, err)
	}
	cn := "hutch sandbox CA"
	if name != "" {
		cn += " " + name
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(lifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLen:            0,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("sandbox ca %q: certificate: %w", name, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("sandbox ca %q: certificate: %w", name, err)
	}
	return &CA{
		key:       key,
		cert:      cert,
		certPEM:   pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		maxLeaves: maxLeaves,
		leaves:    make(map[string]*leafEntry),
	}, nil
}

// CertPEM is the CA certificate in PEM, for the sandbox's trust bundle. It
// returns a new copy on each call.
func (c *CA) CertPEM() []byte {
	return append([]byte(nil), c.certPEM...)
}

// Certificate is the parsed CA certificate. It is shared: the caller must
// not modify it.
func (c *CA) Certificate() *x509.Certificate {
	return c.cert
}

// Leaf returns a TLS certificate for host, a DNS name or an IP literal
// (IPv6 with or without brackets, without a zone), signed by the CA: a new
// ECDSA P-256 key, the host in DNSNames or IPAddresses (and as CommonName
// when it fits in 64 bytes), ExtKeyUsage ServerAuth, a random 128-bit
// serial, valid from a minute ago until the CA expires or for 24 hours,
// whichever is first. Certificate holds the leaf alone and Leaf its parsed
// form. DNS names are case-insensitive and a trailing dot is dropped.
//
// Leaves are cached per host, at most 1024, evicting the oldest; a cached
// leaf is replaced a minute before it expires if the CA outlives it. The
// result is shared: the caller must not modify it. Concurrent first calls
// for a host make one leaf. It is an error once the CA has expired.
func (c *CA) Leaf(host string) (*tls.Certificate, error) {
	name, ip, err := leafName(host)
	if err != nil {
		return nil, err
	}
	for {
		now := time.Now()
		if !now.Before(c.cert.NotAfter) {
			return nil, fmt.Errorf("leaf certificate for %s: the sandbox ca expired at %v", name, c.cert.NotAfter)
		}
		c.mu.Lock()
		e, ok := c.leaves[name]
		if !ok {
			e = &leafEntry{host: name, ready: make(chan struct{})}
			c.addLocked(e)
			c.mu.Unlock()
			e.cert, e.err = c.newLeaf(name, ip, now)
			close(e.ready)
			if e.err != nil {
				c.mu.Lock()
				c.removeLocked(e)
				c.mu.Unlock()
			}
			return e.cert, e.err
		}
		c.mu.Unlock()
		<-e.ready
		if e.err != nil {
			return nil, e.err
		}
		if !c.renew(e.cert.Leaf, now) {
			return e.cert, nil
		}
		c.mu.Lock()
		c.removeLocked(e)
		c.mu.Unlock()
	}
}

// renew reports whether a cached leaf should be replaced at now: it
// expires within leafRenewal and a new one would last longer.
func (c *CA) renew(leaf *x509.Certificate, now time.Time) bool {
	return !now.Add(leafRenewal).Before(leaf.NotAfter) && leaf.NotAfter.Before(c.cert.NotAfter)
}

// addLocked caches e as the newest entry, evicting the oldest beyond
// c.maxLeaves. Callers waiting on an evicted entry still get its leaf.
func (c *CA) addLocked(e *leafEntry) {
	c.leaves[e.host] = e
	e.elem = c.order.PushBack(e)
	for c.order.Len() > c.maxLeaves {
		c.removeLocked(c.order.Front().Value.(*leafEntry))
	}
}

// removeLocked drops e from the cache if it is still there.
func (c *CA) removeLocked(e *leafEntry) {
	if c.leaves[e.host] != e {
		return
	}
	delete(c.leaves, e.host)
	c.order.Remove(e.elem)
}

// newLeaf makes and signs a leaf for name (ip when it is an IP literal).
func (c *CA) newLeaf(name string, ip net.IP, now time.Time) (*tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("leaf certificate for %s: key: %w", name, err)
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, fmt.Errorf("leaf certificate for %s: %w", name, err)
	}
	notAfter := now.Add(maxLeafLifetime)
	if c.cert.NotAfter.Before(notAfter) {
		notAfter = c.cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		NotBefore:             now.Add(-backdate),
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	if len(name) <= 64 {
		tmpl.Subject.CommonName = name
	}
	if ip != nil {
		tmpl.IPAddresses = []net.IP{ip}
	} else {
		tmpl.DNSNames = []string{name}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, key.Public(), c.key)
	if err != nil {
		return nil, fmt.Errorf("leaf certificate for %s: %w", name, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("leaf certificate for %s: %w", name, err)
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, nil
}

// ServerConfig returns a new tls.Config for terminating a sandbox's TLS to
// host: its one certificate is the leaf for host, so the leaf follows the
// host the proxy was asked to connect to (the CONNECT target), never the
// client's SNI; TLS 1.2 at least; and ALPN offers only "http/1.1", so the
// sandbox speaks HTTP/1.1 to the proxy (a client that offers h2 alone is
// refused by the handshake).
func (c *CA) ServerConfig(host string) (*tls.Config, error) {
	leaf, err := c.Leaf(host)
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		Certificates: []tls.Certificate{*leaf},
		MinVersion:   tls.VersionTLS12,
		NextProtos:   []string{"http/1.1"},
	}, nil
}

// leafName checks host and returns its canonical form, the cache key and
// the certificate's name, with its IP address if it is an IP literal.
func leafName(host string) (string, net.IP, error) {
	h := host
	if len(h) > 2 && h[0] == '[' && h[len(h)-1] == ']' {
		h = h[1 : len(h)-1]
		if _, err := netip.ParseAddr(h); err != nil || !strings.Contains(h, ":") {
			return "", nil, fmt.Errorf("leaf certificate: host %q: brackets around something other than an IPv6 address", host)
		}
	}
	if a, err := netip.ParseAddr(h); err == nil {
		if a.Zone() != "" {
			return "", nil, fmt.Errorf("leaf certificate: host %q: an IP address with a zone", host)
		}
		return a.String(), net.IP(a.AsSlice()), nil
	}
	h = strings.ToLower(strings.TrimSuffix(h, "."))
	if err := checkDNSName(h); err != nil {
		return "", nil, fmt.Errorf("leaf certificate: host %q: %w", host, err)
	}
	return h, nil, nil
}

// checkDNSName checks a lower-case DNS name without its trailing dot:
// labels of letters, digits, '-' and '_' (found in real host names), each
// 1 to 63 bytes, 253 bytes in all.
func checkDNSName(h string) error {
	if h == "" {
		return errors.New("empty name")
	}
	if len(h) > 253 {
		return errors.New("longer than 253 bytes")
	}
	for label := range strings.SplitSeq(h, ".") {
		if label == "" {
			return errors.New("empty label")
		}
		if len(label) > 63 {
			return errors.New("label longer than 63 bytes")
		}
		for i := 0; i < len(label); i++ {
			switch c := label[i]; {
			case 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '-', c == '_':
			default:
				return fmt.Errorf("character %q is not allowed in a DNS name", c)
			}
		}
	}
	return nil
}

// randomSerial returns a random positive 128-bit certificate serial.
func randomSerial() (*big.Int, error) {
	b := make([]byte, 16)
	for {
		if _, err := rand.Read(b); err != nil {
			return nil, fmt.Errorf("serial: %w", err)
		}
		if s := new(big.Int).SetBytes(b); s.Sign() > 0 {
			return s, nil
		}
	}
}
