package daemon

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/secrets"
	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// TestSecrets: a served sandbox gets a placeholder for a secret whose value
// came with the create request; its proxy puts the real value in on
// requests to the secret's host only (over TLS it terminates with the
// sandbox's own CA, which the sandbox trusts) and swaps it back out of the
// response; the value is in no variable of the sandbox.
func TestSecrets(t *testing.T) {
	_, err := exec.LookPath("curl")
	testutil.Need(t, err == nil, "curl is not installed")
	const real = "real-secret-value-42"
	var (
		mu   sync.Mutex
		seen []string
	)
	up := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("Authorization"))
		mu.Unlock()
		_, _ = w.Write([]byte("auth=" + r.Header.Get("Authorization")))
	}))
	defer up.Close()
	roots := x509.NewCertPool()
	roots.AddCert(up.Certificate())
	u, err := url.Parse(up.URL)
	if err != nil {
		t.Fatal(err)
	}
	host := "example.com:" + u.Port() // the test certificate's name

	m := newManager(t, Config{UpstreamRoots: roots})
	var p policy.Spec
	p.Network.AllowPrivate = []string{"127.0.0.1/32"}
	p.Network.Hosts = []string{"example.com:127.0.0.1"}
	p.Secrets = []policy.Secret{{Name: "TOKEN", Hosts: []string{host}, From: policy.SecretFromRequest}}
	values := map[string]secrets.Value{"TOKEN": secrets.NewValue([]byte(real))}
	info := mustCreate(t, m, "a", CreateRequest{Policy: p, Secrets: values, Operator: true})

	out := mustRun(t, m, "a", info.ID, `curl -sS https://`+host+`/ -H "Authorization: Bearer $TOKEN"; echo; echo "token=$TOKEN"; env | grep -c `+real+`; true`)
	lines := strings.Split(out, "\n")
	if len(lines) < 3 || !strings.HasPrefix(lines[1], "token=") {
		t.Fatalf("output %q", out)
	}
	placeholder := strings.TrimPrefix(lines[1], "token=")
	if placeholder == "" || strings.Contains(placeholder, real) {
		t.Errorf("placeholder %q", placeholder)
	}
	if lines[0] != "auth=Bearer "+placeholder {
		t.Errorf("the sandbox got %q, want the upstream's echo with the placeholder back in", lines[0])
	}
	if lines[2] != "0" {
		t.Errorf("the real value is in %s of the sandbox's variables", lines[2])
	}
	mu.Lock()
	if len(seen) != 1 || seen[0] != "Bearer "+real {
		t.Errorf("the upstream saw %q, want the real value", seen)
	}
	mu.Unlock()

	for _, tc := range []struct {
		name string
		r    CreateRequest
		want string
	}{
		{"no value", CreateRequest{Policy: p, Operator: true}, "carries no value"},
		{"a value without a secret", CreateRequest{Secrets: values}, "no secrets"},
		{"the real value in a variable", CreateRequest{Policy: p, Secrets: values, Env: map[string]string{"X": "a" + real}, Operator: true}, "holds its real value"},
	} {
		_, err := m.Create(testCtx(t), "a", tc.r)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrInvalid with %q", tc.name, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), real) {
			t.Errorf("%s: the error shows the real value: %v", tc.name, err)
		}
	}
}

// TestSecretsUpstreamCA: a create request's own upstream CA (hutch create
// --upstream-ca) lets its sandbox's proxy verify a secret's host that the
// daemon's roots do not; without it the proxy refuses that host's
// certificate; something that holds no certificate is refused.
func TestSecretsUpstreamCA(t *testing.T) {
	_, err := exec.LookPath("curl")
	testutil.Need(t, err == nil, "curl is not installed")
	up := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("reached"))
	}))
	defer up.Close()
	u, err := url.Parse(up.URL)
	if err != nil {
		t.Fatal(err)
	}
	host := "example.com:" + u.Port()
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: up.Certificate().Raw})

	m := newManager(t, Config{}) // the system's roots only
	var p policy.Spec
	p.Network.AllowPrivate = []string{"127.0.0.1/32"}
	p.Network.Hosts = []string{"example.com:127.0.0.1"}
	p.Secrets = []policy.Secret{{Name: "TOKEN", Hosts: []string{host}, From: policy.SecretFromRequest}}
	values := map[string]secrets.Value{"TOKEN": secrets.NewValue([]byte("upstream-ca-test-value"))}
	script := `curl -sS https://` + host + `/ -H "Authorization: Bearer $TOKEN" 2>&1; true`

	with := mustCreate(t, m, "a", CreateRequest{Policy: p, Secrets: values, UpstreamCA: caPEM, Operator: true})
	if out := mustRun(t, m, "a", with.ID, script); out != "reached" {
		t.Errorf("with the request's upstream CA: %q, want the upstream's answer", out)
	}
	without := mustCreate(t, m, "a", CreateRequest{Policy: p, Secrets: values, Operator: true})
	if out := mustRun(t, m, "a", without.ID, script); out == "reached" {
		t.Errorf("without an upstream CA the proxy trusted the test server: %q", out)
	}
	_, err = m.Create(testCtx(t), "a", CreateRequest{Policy: p, Secrets: values, UpstreamCA: []byte("not a certificate"), Operator: true})
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "upstream CA") {
		t.Errorf("a request's upstream CA without a certificate: %v, want ErrInvalid", err)
	}
}
