package egress

import (
	"bytes"
	"fmt"
	"os"
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
