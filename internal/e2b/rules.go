package e2b

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/netip"
	"slices"
	"strings"

	"github.com/hutch-sandbox/hutch/internal/daemon"
	"github.com/hutch-sandbox/hutch/internal/egress"
	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/secrets"
)

// E2B's placeholders in a transform's header values, resolved at the
// egress: "${e2b.secrets.NAME}" (Secret.fill) is a secret of the tenant's
// secrets API; "${e2b.identity.tokens.NAME}" is a workload token (iam),
// which hutch does not mint.
const (
	secretRefPrefix = "${e2b.secrets."
	iamRefPrefix    = "${e2b.identity.tokens."
	// SecretEnvPrefix starts the variable that holds, in a sandbox given
	// an E2B secret by a transform, the secret's placeholder.
	SecretEnvPrefix = "E2B_SECRET_"
)

// Bounds of network.rules.
const (
	maxRuleHosts = policy.MaxHeaderRules
	maxRulesHost = 16
)

// ruleBody is E2B's SandboxNetworkRule.
type ruleBody struct {
	Transform *struct {
		Headers map[string]string `json:"headers"`
	} `json:"transform"`
}

// secretLookup finds one of the tenant's secrets by its name or id: its
// canonical name and its value.
type secretLookup func(ref string) (name, value string, err error)

// secretEnv is the variable of the sandbox that holds secret name's
// placeholder: SecretEnvPrefix and the name in upper case, "-" as "_".
func secretEnv(name string) string {
	return SecretEnvPrefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// applyRules maps E2B's network.rules (raw) onto nw's header rules: each
// host's transforms set their headers in the sandbox's egress proxy, on
// its HTTPS requests to the host. A secret a value names
// ("${e2b.secrets.NAME}") becomes a secret of the sandbox bound to the
// hosts whose rules name it, its value from the tenant's secrets API: the
// proxy puts the value in where the rule says, and nowhere else; the
// sandbox sees only the placeholder, in SecretEnvPrefix+NAME. As in E2B,
// a host named here is not allowed by it: one that nw's allow rules do not
// cover is denied (else binding a secret to it would open it). An offline
// sandbox (mode none) gets none of it. It returns the sandbox's secrets
// and their values.
func applyRules(nw *policy.Network, raw json.RawMessage, lookup secretLookup) ([]policy.Secret, map[string]secrets.Value, error) {
	if !present(raw) {
		return nil, nil, nil
	}
	var rules map[string][]ruleBody
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rules); err != nil {
		return nil, nil, errorf(daemon.ErrInvalid, "network.rules: want {host: [{transform: {headers: {name: value}}}]}: %v", err)
	}
	if len(rules) > maxRuleHosts {
		return nil, nil, errorf(daemon.ErrInvalid, "network.rules: %d hosts, more than %d", len(rules), maxRuleHosts)
	}
	if nw.Mode == "none" {
		return nil, nil, nil
	}
	// OperatorRules: an IP literal of the rules and of allowOut are
	// compared alike (the guard is not consulted here).
	allowed, err := egress.NewRules(egress.Config{AllowDomains: nw.AllowedDomains, AllowCIDRs: nw.AllowedCIDRs, HostAddrs: []netip.Addr{}, OperatorRules: true})
	if err != nil {
		return nil, nil, errorf(daemon.ErrInvalid, "network: %v", err)
	}
	type given struct {
		name, value string
		hosts       []string
	}
	byEnv := map[string]*given{}
	for _, host := range slices.Sorted(maps.Keys(rules)) {
		field := fmt.Sprintf("network.rules[%q]", host)
		h := strings.ToLower(host)
		if strings.Contains(h, "/") {
			return nil, nil, errorf(errUnsupported, "%s: hutch transforms requests to a host name or an IP address, not to an address range", field)
		}
		if err := policy.CheckHeaderHost(h); err != nil {
			return nil, nil, errorf(daemon.ErrInvalid, "%s: %v", field, err)
		}
		if len(rules[host]) > maxRulesHost {
			return nil, nil, errorf(daemon.ErrInvalid, "%s: %d rules, more than %d", field, len(rules[host]), maxRulesHost)
		}
		set := map[string]string{}
		for i, rb := range rules[host] {
			if rb.Transform == nil {
				continue
			}
			for name, value := range rb.Transform.Headers {
				at := fmt.Sprintf("%s[%d].transform.headers[%q]", field, i, name)
				v, refs, err := headerValue(value, at)
				if err != nil {
					return nil, nil, err
				}
				for _, ref := range refs {
					if lookup == nil {
						return nil, nil, errorf(errUnsupported, "%s: secrets cannot be used here", at)
					}
					canon, secret, err := lookup(ref)
					if err != nil {
						return nil, nil, fmt.Errorf("%s: %w", at, err)
					}
					env := secretEnv(canon)
					g := byEnv[env]
					switch {
					case g == nil:
						g = &given{name: canon, value: secret}
						byEnv[env] = g
					case g.name != canon:
						return nil, nil, errorf(daemon.ErrInvalid, "%s: secrets %s and %s would both be %s in the sandbox; rename one", at, g.name, canon, env)
					}
					if !slices.Contains(g.hosts, h) {
						g.hosts = append(g.hosts, h)
					}
					v = strings.ReplaceAll(v, secretRefPrefix+ref+"}", "${secrets."+env+"}")
				}
				if err := policy.CheckHeader(name, v); err != nil {
					return nil, nil, errorf(daemon.ErrInvalid, "%s: %v", at, err)
				}
				set[http.CanonicalHeaderKey(name)] = v
			}
		}
		if len(set) == 0 {
			continue
		}
		if len(set) > policy.MaxHeadersPerRule {
			return nil, nil, errorf(daemon.ErrInvalid, "%s: %d headers, more than %d", field, len(set), policy.MaxHeadersPerRule)
		}
		nw.Headers = append(nw.Headers, policy.HeaderRule{Host: h, Set: set})
		if ok, err := allowed.Covers(h); err != nil {
			return nil, nil, errorf(daemon.ErrInvalid, "%s: %v", field, err)
		} else if !ok && !slices.Contains(nw.DeniedDomains, h) {
			nw.DeniedDomains = append(nw.DeniedDomains, h)
		}
	}
	var list []policy.Secret
	values := map[string]secrets.Value{}
	for _, env := range slices.Sorted(maps.Keys(byEnv)) {
		g := byEnv[env]
		list = append(list, policy.Secret{Name: env, Hosts: g.hosts, From: policy.SecretFromRequest})
		values[env] = secrets.NewValue([]byte(g.value))
	}
	if len(list) == 0 {
		values = nil
	}
	return list, values, nil
}

// headerValue turns an E2B header value into a header rule's
// (policy.HeaderRule), its text escaped, each "${e2b.secrets.NAME}"
// kept for the caller to replace; it returns the secrets named.
func headerValue(value, at string) (string, []string, error) {
	var out strings.Builder
	var refs []string
	for rest := value; rest != ""; {
		i := strings.Index(rest, "${e2b.")
		if i < 0 {
			out.WriteString(policy.EscapeHeaderText(rest))
			break
		}
		out.WriteString(policy.EscapeHeaderText(rest[:i]))
		rest = rest[i:]
		end := strings.IndexByte(rest, '}')
		switch {
		case strings.HasPrefix(rest, iamRefPrefix):
			return "", nil, errorf(errUnsupported, "%s: workload identity tokens (iam, %s…}) are not supported by hutch", at, iamRefPrefix)
		case strings.HasPrefix(rest, secretRefPrefix) && end > len(secretRefPrefix):
			ref := rest[len(secretRefPrefix):end]
			if !slices.Contains(refs, ref) {
				refs = append(refs, ref)
			}
			out.WriteString(rest[:end+1])
			rest = rest[end+1:]
		default:
			return "", nil, errorf(daemon.ErrInvalid, "%s: %.40q is not a placeholder hutch knows (%sNAME})", at, rest, secretRefPrefix)
		}
	}
	return out.String(), refs, nil
}

// secretLookupOf is the lookup of tenant's secrets in h's store.
func (h *Handler) secretLookupOf(tenant string) secretLookup {
	return func(ref string) (string, string, error) {
		st, err := h.secretStore()
		if err != nil {
			return "", "", err
		}
		list, err := st.list(tenant)
		if err != nil {
			return "", "", err
		}
		i := findSecret(list, ref)
		if i < 0 {
			return "", "", errorf(daemon.ErrInvalid, "secret %q: not found (Secret.create makes it)", ref)
		}
		return list[i].Name, list[i].Value, nil
	}
}
