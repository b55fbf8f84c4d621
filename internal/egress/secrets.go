package egress

import (
	"bytes"
	"crypto/x509"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/secrets"
)

// LoadSecrets reads the real values of a normalized policy's secrets and
// makes their placeholders. A secret from policy.SecretFromRequest takes its
// value from values (the create request of hutch serve), which must hold
// one for it; the others read hutch's environment or a file.
func LoadSecrets(list []policy.Secret, values map[string]secrets.Value) ([]*secrets.Secret, error) {
	var out []*secrets.Secret
	for _, ps := range list {
		var value []byte
		switch kind, src, _ := strings.Cut(ps.From, ":"); kind {
		case policy.SecretFromRequest:
			if values == nil {
				return nil, fmt.Errorf("secret %s: from: %s is for hutch serve, whose create request carries the value", ps.Name, ps.From)
			}
			v, ok := values[ps.Name]
			if !ok || v.Len() == 0 {
				return nil, fmt.Errorf("secret %s: the request carries no value for it (from: %s)", ps.Name, ps.From)
			}
			value = bytes.Clone(v.Bytes())
		case "env":
			v, ok := os.LookupEnv(src)
			if !ok || v == "" {
				return nil, fmt.Errorf("secret %s: hutch's environment has no %s (from: %s)", ps.Name, src, ps.From)
			}
			value = []byte(v)
		case "file":
			b, err := os.ReadFile(src)
			if err != nil {
				return nil, fmt.Errorf("secret %s: %w", ps.Name, err)
			}
			value = bytes.TrimSuffix(bytes.TrimSuffix(b, []byte("\n")), []byte("\r"))
			if len(value) == 0 {
				return nil, fmt.Errorf("secret %s: %s is empty", ps.Name, src)
			}
		default:
			return nil, fmt.Errorf("secret %s: unknown source %q", ps.Name, ps.From)
		}
		placeholder, err := secrets.NewPlaceholder(ps.PlaceholderPrefix, len(value))
		if err != nil {
			return nil, fmt.Errorf("secret %s: %w", ps.Name, err)
		}
		out = append(out, &secrets.Secret{
			Name: ps.Name, Hosts: ps.Hosts, Value: secrets.NewValue(value), Placeholder: placeholder,
			InQuery: ps.InQuery, InBody: ps.InBody, AllowPlainHTTP: ps.AllowPlainHTTP,
		})
		clear(value)
	}
	for name := range values {
		if !secretNamed(list, name) {
			return nil, fmt.Errorf("secret %s: the request carries a value for it, but the policy has no such secret", name)
		}
	}
	return out, nil
}

func secretNamed(list []policy.Secret, name string) bool {
	for _, s := range list {
		if s.Name == name {
			return true
		}
	}
	return false
}

// CheckNoRealValues refuses an environment or a command line that would
// carry a real value into the sandbox in any other way than through the
// proxy (S3): the sandbox gets placeholders only. It looks for the value
// as it is and for its encoded forms (secrets.RedactionPairs).
func CheckNoRealValues(list []*secrets.Secret, env, args []string) error {
	for _, s := range list {
		forms := secrets.RedactionPairs(s.Value.Bytes(), []byte(s.Placeholder))
		holds := func(x string) (bool, string) {
			for k, f := range forms {
				if strings.Contains(x, string(f[0])) {
					if k == 0 {
						return true, "its real value"
					}
					return true, "its real value, encoded"
				}
			}
			return false, ""
		}
		for _, kv := range env {
			if ok, what := holds(kv); ok {
				name, _, _ := strings.Cut(kv, "=")
				return fmt.Errorf("secret %s: the sandbox's variable %s holds %s; hutch gives the sandbox only placeholders", s.Name, name, what)
			}
		}
		for i, a := range args {
			if ok, what := holds(a); ok {
				return fmt.Errorf("secret %s: argument %d of the command holds %s; pass $%s (the placeholder) instead", s.Name, i, what, s.Name)
			}
		}
	}
	return nil
}

// PlaceholderEnv is env with each secret's variable set to its placeholder
// (whatever env had for it); it refuses an environment or command line
// args that would carry a real value into the sandbox in any other way
// (S3).
func PlaceholderEnv(list []*secrets.Secret, env, args []string) ([]string, error) {
	if len(list) == 0 {
		return env, nil
	}
	names := make(map[string]bool, len(list))
	for _, s := range list {
		names[s.Name] = true
	}
	out := make([]string, 0, len(env)+len(list))
	for _, kv := range env {
		if name, _, _ := strings.Cut(kv, "="); !names[name] {
			out = append(out, kv)
		}
	}
	for _, s := range list {
		out = append(out, s.Name+"="+s.Placeholder)
	}
	if err := CheckNoRealValues(list, out, args); err != nil {
		return nil, err
	}
	return out, nil
}

// Values is the memory that holds the secrets' real values, for a
// sandbox's first process (a fork of hutch) to wipe in its copy.
func Values(list []*secrets.Secret) [][]byte {
	out := make([][]byte, 0, len(list))
	for _, s := range list {
		out = append(out, s.Value.Bytes())
	}
	return out
}

// Intercept readies p to terminate TLS for the hosts its secrets are bound
// to: a CA of the sandbox's own (named name), and the roots it verifies
// those upstreams with (the system's when upstream is nil). It returns the
// trust bundle the sandbox gets: systemPEM, the host's trusted
// certificates, and the CA.
func (p *Proxy) Intercept(name string, upstream *x509.CertPool, systemPEM []byte) ([]byte, error) {
	ca, err := secrets.NewCA(name, 0)
	if err != nil {
		return nil, fmt.Errorf("sandbox CA: %w", err)
	}
	if upstream == nil {
		if upstream, err = x509.SystemCertPool(); err != nil || upstream == nil {
			upstream = x509.NewCertPool()
		}
	}
	p.CA, p.UpstreamRoots = ca, upstream
	return append(append(slices.Clip(systemPEM), '\n'), ca.CertPEM()...), nil
}

// UpstreamRoots are the roots a proxy verifies the hosts of secrets with:
// the system's, and the certificates in each PEM of pems (at least one in
// each; name(i) says which one failed).
func UpstreamRoots(pems [][]byte, name func(i int) string) (*x509.CertPool, error) {
	roots, err := x509.SystemCertPool()
	if err != nil || roots == nil {
		roots = x509.NewCertPool()
	}
	for i, pem := range pems {
		if !roots.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s: no PEM certificate in it", name(i))
		}
	}
	return roots, nil
}
