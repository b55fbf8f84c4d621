package daemon

import (
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/hutch-sandbox/hutch/internal/egress"
	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/sandbox"
	"github.com/hutch-sandbox/hutch/internal/secrets"
)

// sandboxSecrets are the secrets of one sandbox: their real values live in
// the daemon's memory only (its proxy uses them); the sandbox gets their
// placeholders in its environment.
type sandboxSecrets struct {
	list   []*secrets.Secret
	bundle string // the trust bundle file (host roots + the sandbox's CA)
}

// loadSecrets makes the secrets of a normalized spec from the request's
// values (policy.SecretFromRequest) or the daemon's own environment and
// files (only the operator may ask for those: package api refuses them to
// remote tenants). It returns nil when the spec has none.
func loadSecrets(spec policy.Spec, values map[string]secrets.Value) (*sandboxSecrets, error) {
	if len(spec.Secrets) == 0 {
		if len(values) > 0 {
			return nil, invalid("create sandbox: secret values given, but the policy has no secrets")
		}
		return nil, nil
	}
	if values == nil {
		values = map[string]secrets.Value{} // none came with the request
	}
	list, err := egress.LoadSecrets(spec.Secrets, values)
	if err != nil {
		return nil, invalid("create sandbox: %v", err)
	}
	return &sandboxSecrets{list: list}, nil
}

// env gives each secret's variable its placeholder in env, and refuses an
// environment that carries a real value in any other way (S3).
func (s *sandboxSecrets) env(env []string) ([]string, error) {
	if s == nil {
		return env, nil
	}
	out := make([]string, 0, len(env)+len(s.list))
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if !s.named(name) {
			out = append(out, kv)
		}
	}
	for _, sec := range s.list {
		out = append(out, sec.Name+"="+sec.Placeholder)
	}
	if err := egress.CheckNoRealValues(s.list, out, nil); err != nil {
		return nil, invalid("create sandbox: %v", err)
	}
	return out, nil
}

func (s *sandboxSecrets) named(name string) bool {
	for _, sec := range s.list {
		if sec.Name == name {
			return true
		}
	}
	return false
}

// intercept gives proxy p of sandbox id the secrets, a CA of the sandbox's
// own for the hosts they are bound to, and the roots it verifies those
// upstreams with; it writes the sandbox's trust bundle into dir.
func (s *sandboxSecrets) intercept(p *egress.Proxy, id, dir string, upstream *x509.CertPool) error {
	ca, err := secrets.NewCA(id, 0)
	if err != nil {
		return fmt.Errorf("sandbox CA: %w", err)
	}
	p.CA = ca
	p.UpstreamRoots = upstream
	if p.UpstreamRoots == nil {
		if p.UpstreamRoots, err = x509.SystemCertPool(); err != nil || p.UpstreamRoots == nil {
			p.UpstreamRoots = x509.NewCertPool()
		}
	}
	s.bundle = filepath.Join(dir, "ca-certificates.crt")
	bundle := append(append(sandbox.SystemRootsPEM(), '\n'), ca.CertPEM()...)
	if err := os.WriteFile(s.bundle, bundle, 0o644); err != nil {
		return fmt.Errorf("trust bundle: %w", err)
	}
	return nil
}

// secrets is the list for the proxy (nil without secrets).
func (s *sandboxSecrets) secrets() []*secrets.Secret {
	if s == nil {
		return nil
	}
	return s.list
}

// values is the memory that holds the real values (nil without secrets).
func (s *sandboxSecrets) values() [][]byte {
	if s == nil {
		return nil
	}
	out := make([][]byte, 0, len(s.list))
	for _, sec := range s.list {
		out = append(out, sec.Value.Bytes())
	}
	return out
}

// caBundle is the trust bundle file ("" without secrets).
func (s *sandboxSecrets) caBundle() string {
	if s == nil {
		return ""
	}
	return s.bundle
}
