package daemon

import (
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"

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
	// upstream, when not nil, replaces the daemon's roots for the
	// secrets' hosts (the request's UpstreamCA added to them).
	upstream *x509.CertPool
}

// withUpstreamCA returns base (the system's roots when nil) with the
// certificates of pem added.
func withUpstreamCA(base *x509.CertPool, pem []byte) (*x509.CertPool, error) {
	var pool *x509.CertPool
	if base != nil {
		pool = base.Clone()
	} else if pool, _ = x509.SystemCertPool(); pool == nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, invalid("create sandbox: upstream CA: no PEM certificate in it")
	}
	return pool, nil
}

// loadSecrets makes the secrets of a normalized spec from the request's
// values (policy.SecretFromRequest) or the daemon's own environment and
// files (only the operator may ask for those: package api refuses them to
// remote tenants). It returns nil when the spec has none, and no header
// rules (policy.Network.Headers, which need the interception too).
func loadSecrets(spec policy.Spec, values map[string]secrets.Value) (*sandboxSecrets, error) {
	if len(spec.Secrets) == 0 {
		if len(values) > 0 {
			return nil, invalid("create sandbox: secret values given, but the policy has no secrets")
		}
		if len(spec.Network.Headers) > 0 {
			// Header rules alone: the proxy intercepts their hosts too.
			return &sandboxSecrets{}, nil
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
	out, err := egress.PlaceholderEnv(s.list, env, nil)
	if err != nil {
		return nil, invalid("create sandbox: %v", err)
	}
	return out, nil
}

// intercept gives proxy p of sandbox id the secrets' interception (its own
// CA, the roots it verifies upstreams with: the system's when upstream is
// nil) and writes the sandbox's trust bundle into dir.
func (s *sandboxSecrets) intercept(p *egress.Proxy, id, dir string, upstream *x509.CertPool) error {
	if s.upstream != nil {
		upstream = s.upstream
	}
	bundle, err := p.Intercept(id, upstream, sandbox.SystemRootsPEM())
	if err != nil {
		return err
	}
	s.bundle = filepath.Join(dir, "ca-certificates.crt")
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
	return egress.Values(s.list)
}

// caBundle is the trust bundle file ("" without secrets).
func (s *sandboxSecrets) caBundle() string {
	if s == nil {
		return ""
	}
	return s.bundle
}
