package testutil

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"strings"
	"testing"
	"time"
)

// ServerTLS is a certificate authority made for one test and a server
// certificate it signed.
type ServerTLS struct {
	// CAPEM is the authority's certificate, PEM; Pool holds it.
	CAPEM []byte
	Pool  *x509.CertPool
	// CertPEM and KeyPEM are the server's certificate and key, PEM;
	// Cert is the pair.
	CertPEM, KeyPEM []byte
	Cert            tls.Certificate
}

// NewServerTLS makes a certificate authority and a server certificate for
// names (DNS names, wildcards such as *.example.test, or IP addresses),
// valid for a day.
func NewServerTLS(t testing.TB, names ...string) ServerTLS {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	ca := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "hutch test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leaf := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: strings.Join(names, ",")},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			leaf.IPAddresses = append(leaf.IPAddresses, ip)
		} else {
			leaf.DNSNames = append(leaf.DNSNames, n)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	s := ServerTLS{
		CAPEM:   pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
		Pool:    x509.NewCertPool(),
	}
	s.Pool.AddCert(caCert)
	if s.Cert, err = tls.X509KeyPair(s.CertPEM, s.KeyPEM); err != nil {
		t.Fatal(err)
	}
	return s
}

// ResolvingDialer is a DialContext that connects every host name under
// domain (and domain itself) to addr, and any other address as it is: a
// resolver that answers *.domain with a loopback server.
func ResolvingDialer(domain, addr string) func(ctx context.Context, network, address string) (net.Conn, error) {
	var d net.Dialer
	return func(ctx context.Context, network, address string) (net.Conn, error) {
		host, _, err := net.SplitHostPort(address)
		if err == nil {
			h := strings.TrimSuffix(strings.ToLower(host), ".")
			if h == domain || strings.HasSuffix(h, "."+domain) {
				address = addr
			}
		}
		return d.DialContext(ctx, network, address)
	}
}
