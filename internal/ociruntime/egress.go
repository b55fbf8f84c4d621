package ociruntime

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/hutch-sandbox/hutch/internal/egress"
	"github.com/hutch-sandbox/hutch/internal/policy"
)

// The annotations with which a container's creator (a pod's, through
// containerd's pod_annotations; ctr --annotation) chooses its egress.
const (
	// AnnotationPolicy names a policy of the node: the file NAME.yaml in
	// the node's policy directory (/etc/hutch/policies), in hutch's
	// policy format, whose network and secrets sections apply.
	AnnotationPolicy = "dev.hutch.policy"
	// AnnotationAllowDomains adds destinations, comma-separated, in the
	// syntax of the policy's network.allowed_domains. They are the
	// container creator's rules: no address the guard refuses is opened
	// by them.
	AnnotationAllowDomains = "dev.hutch.allow-domains"
	// AnnotationSecrets names, comma-separated, the secrets of the node
	// policy the container gets (all of them without it; none with an
	// empty value).
	AnnotationSecrets = "dev.hutch.secrets"
	// AnnotationAgent is a TCP port (1–65535): the container's process
	// is hutch's agent listening on it (`agent --listen :PORT`, with its
	// token and TLS pair from the container's environment) instead of
	// the image's command, and the container's firewall lets in new
	// connections to that port and to no other.
	AnnotationAgent = "dev.hutch.agent"
	// AnnotationNetwork "none" gives the container no destination at all,
	// whatever the node policy allows (hutch's proxy refuses
	// everything), and none of its secrets: a creator may always narrow.
	AnnotationNetwork = "dev.hutch.network"
)

// containerTypeAnnotation is CRI's annotation of a container's kind: a
// pod's sandbox ("sandbox", its pause process) or one of its containers
// ("container"). A pod's annotations reach both.
const containerTypeAnnotation = "io.kubernetes.cri.container-type"

// agentPort reads the annotation AnnotationAgent: 0 without it.
func agentPort(annotations map[string]string) (int, error) {
	v, ok := annotations[AnnotationAgent]
	if !ok {
		return 0, nil
	}
	port, err := strconv.Atoi(v)
	if err != nil || port < 1 || port > 65535 || strconv.Itoa(port) != v {
		return 0, fmt.Errorf("annotation %s: %q is not a TCP port (1-65535)", AnnotationAgent, v)
	}
	return port, nil
}

// DefaultPolicyDir is where the node's policies are.
const DefaultPolicyDir = "/etc/hutch/policies"

// DefaultPolicy is the policy a container gets when neither an annotation
// nor --hutch-policy names one, if the node has it; without it the
// container reaches nothing (network mode "none": hutch's proxy answers
// and refuses every destination).
const DefaultPolicy = "default"

// validPolicyName reports whether name may name a policy: a file name in
// the policy directory, nothing that walks out of it — letters, digits,
// '.', '_' and '-', a letter or digit first, at most 128 bytes.
func validPolicyName(name string) bool {
	if name == "" || len(name) > 128 || !isAlnum(name[0]) {
		return false
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; !isAlnum(c) && c != '.' && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

// validID reports whether id is a container ID runc takes (its
// `^[\w+\-.]+$`), and not "." or "..", which would name directories.
func validID(id string) bool {
	if id == "" || id == "." || id == ".." {
		return false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; !isAlnum(c) && c != '_' && c != '+' && c != '-' && c != '.' {
			return false
		}
	}
	return true
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// egressPlan is a container's egress, decided at create and kept in its
// state directory for its hook and its proxy.
type egressPlan struct {
	// Mode is "none" (hutch's proxy refuses everything), "proxy" (it
	// allows what the rules allow) or "host" (the engine's network as
	// it is: no egress policy; only a node policy can say it).
	Mode string `json:"mode"`
	// Policy is the node policy's name, "" for the built-in one.
	Policy string `json:"policy"`
	// Network is the policy's network section with the annotation's
	// domains added.
	Network policy.Network `json:"network"`
	// Secrets are the policy's secrets the container gets.
	Secrets []policy.Secret `json:"secrets,omitempty"`
	// Placeholders are the secrets' placeholders, by name: what the
	// container's environment holds.
	Placeholders map[string]string `json:"placeholders,omitempty"`
	// Operator says that the rules are the node's alone (no annotation
	// added any): the policy's IP-literal rules may open the private
	// addresses they name.
	Operator bool `json:"operator"`
	// Hostname is the container's host name, which its lookups answer
	// with its loopback.
	Hostname string `json:"hostname,omitempty"`
	// Files is the directory of the files bound into the container
	// (resolv.conf, the proxy's CA), which its own ids can reach.
	Files string `json:"files"`
	// UpstreamCAs are files of certificates the proxy trusts besides
	// the system's, for the hosts it intercepts.
	UpstreamCAs []string `json:"upstream_cas,omitempty"`
	// Tier is the container's isolation tier (Options.Tier).
	Tier string `json:"tier,omitempty"`
	// Env is what hutch set in the container's environment, NAME=VALUE,
	// which the processes `exec` starts get too.
	Env []string `json:"env,omitempty"`
	// AgentPort is the port of hutch's agent (AnnotationAgent), which
	// the firewall lets connections in to; 0 for none.
	AgentPort int `json:"agent_port,omitempty"`
}

// intercepts says whether the proxy terminates TLS for some hosts (secrets
// or header rules): the container then trusts the proxy's CA.
func (p egressPlan) intercepts() bool {
	return len(p.Secrets) > 0 || len(p.Network.Headers) > 0
}

// planEgress decides a container's egress from its annotations, the
// runtime's --hutch-policy (flagPolicy) and the node's policies in dir.
func planEgress(annotations map[string]string, flagPolicy, dir string) (egressPlan, error) {
	name, explicit := annotations[AnnotationPolicy]
	what := "annotation " + AnnotationPolicy
	if !explicit && flagPolicy != "" {
		name, explicit, what = flagPolicy, true, "--hutch-policy"
	}
	if !explicit {
		name = DefaultPolicy
	}
	if !validPolicyName(name) {
		return egressPlan{}, fmt.Errorf("%s: %q is not a policy's name (letters, digits, '.', '_', '-')", what, name)
	}
	plan := egressPlan{Mode: "none", Policy: name, Operator: true}
	path := filepath.Join(dir, name+".yaml")
	spec, scope, err := loadNodePolicy(path)
	switch {
	case err == nil:
		// The flag's choice is the operator's; an annotation's, the
		// pod's creator's, within the policy's scope.
		if what != "--hutch-policy" {
			if err := scope.admits(annotations); err != nil {
				return egressPlan{}, fmt.Errorf("%s: the node policy %q: %w", what, name, err)
			}
		}
	case errors.Is(err, os.ErrNotExist) && !explicit:
		plan.Policy = ""
		spec = policy.Spec{}
	case errors.Is(err, os.ErrNotExist):
		return egressPlan{}, fmt.Errorf("%s: the node has no policy %q (%s)", what, name, path)
	default:
		return egressPlan{}, fmt.Errorf("%s %q: %w", what, name, err)
	}
	plan.Network = spec.Network
	plan.Secrets = spec.Secrets
	if v, ok := annotations[AnnotationSecrets]; ok {
		var keep []policy.Secret
		for _, n := range splitList(v) {
			i := slices.IndexFunc(plan.Secrets, func(s policy.Secret) bool { return s.Name == n })
			if i < 0 {
				return egressPlan{}, fmt.Errorf("annotation %s: the node policy %q has no secret %s", AnnotationSecrets, plan.Policy, n)
			}
			keep = append(keep, plan.Secrets[i])
		}
		plan.Secrets = keep
	}
	if v, ok := annotations[AnnotationAllowDomains]; ok {
		domains := splitList(v)
		if _, err := egress.NewRules(egress.Config{AllowDomains: domains}); err != nil {
			return egressPlan{}, fmt.Errorf("annotation %s: %w", AnnotationAllowDomains, err)
		}
		if m := plan.Network.Mode; len(domains) > 0 && (m == "none" || m == "host") {
			// The node said how the container's network is: none is
			// nothing, which the creator's rules would turn into
			// everything they name; host has no rules to add to.
			return egressPlan{}, fmt.Errorf("annotation %s: the node policy %q says network.mode %s, to which a container's creator adds no destinations", AnnotationAllowDomains, plan.Policy, m)
		}
		if len(domains) > 0 {
			plan.Network.AllowedDomains = append(slices.Clone(plan.Network.AllowedDomains), domains...)
			plan.Operator = false
		}
	}
	if v, ok := annotations[AnnotationNetwork]; ok {
		if v != "none" {
			return egressPlan{}, fmt.Errorf("annotation %s: %q: the one value is none", AnnotationNetwork, v)
		}
		if len(annotations[AnnotationAllowDomains]) > 0 {
			return egressPlan{}, fmt.Errorf("annotation %s: none, and %s adds destinations", AnnotationNetwork, AnnotationAllowDomains)
		}
		plan.Network, plan.Secrets, plan.Mode = policy.Network{Mode: "none"}, nil, "none"
		return plan, nil
	}
	switch {
	case plan.Network.Mode == "host":
		plan.Mode = "host"
	case plan.Network.Mode == "proxy" || len(plan.Network.AllowedDomains) > 0 || len(plan.Network.AllowedCIDRs) > 0 || len(plan.Secrets) > 0:
		plan.Mode = "proxy"
	}
	return plan, nil
}

// nodePolicySections are the sections of a policy file that apply to a
// container: its own configuration decides the rest.
var nodePolicySections = []string{"network", "secrets"}

// containersSection is the section of a node policy, hutch-runc's own,
// that says which containers may name it.
const containersSection = "containers"

// nodeScope is a node policy's containers section.
type nodeScope struct {
	// KubernetesNamespaces, when set, are the Kubernetes namespaces
	// whose pods may name the policy (containerd's CRI says a pod's
	// namespace; its creator cannot); a container of another namespace,
	// or of no pod, is refused. A policy with secrets or wide network
	// rules should have it: any pod of the RuntimeClass may name any
	// policy of its node.
	KubernetesNamespaces []string `yaml:"kubernetes_namespaces"`
}

// podNamespaceAnnotation is the annotation in which containerd's CRI gives
// a pod's containers its namespace.
const podNamespaceAnnotation = "io.kubernetes.cri.sandbox-namespace"

// loadNodePolicy reads a node policy, refusing sections that do not apply
// to containers (file:line), rather than ignoring them.
func loadNodePolicy(path string) (policy.Spec, nodeScope, error) {
	var scope nodeScope
	data, err := os.ReadFile(path)
	if err != nil {
		return policy.Spec{}, scope, err
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err == nil && len(doc.Content) == 1 && doc.Content[0].Kind == yaml.MappingNode {
		m := doc.Content[0]
		for i := 0; i+1 < len(m.Content); i += 2 {
			k, v := m.Content[i], m.Content[i+1]
			if k.Value == containersSection {
				if scope, err = parseScope(path, v); err != nil {
					return policy.Spec{}, scope, err
				}
				// The policy's parser sees blank lines in its place:
				// its errors keep the file's line numbers.
				end := 0
				if i+2 < len(m.Content) {
					end = m.Content[i+2].Line
				}
				data = blankLines(data, k.Line, end)
				continue
			}
			if !slices.Contains(nodePolicySections, k.Value) {
				return policy.Spec{}, scope, fmt.Errorf("%s:%d: %s does not apply to a container: hutch-runc takes only %s (and its own %s) from a node policy, and the container's own configuration decides the rest", path, k.Line, k.Value, strings.Join(nodePolicySections, " and "), containersSection)
			}
		}
	}
	spec, err := policy.Parse(path, data)
	return spec, scope, err
}

// parseScope reads a containers section.
func parseScope(path string, n *yaml.Node) (nodeScope, error) {
	var scope nodeScope
	if n.Kind != yaml.MappingNode {
		return scope, fmt.Errorf("%s:%d: %s: want a mapping (kubernetes_namespaces: [...])", path, n.Line, containersSection)
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Value != "kubernetes_namespaces" {
			return scope, fmt.Errorf("%s:%d: %s: unknown field %q (kubernetes_namespaces)", path, k.Line, containersSection, k.Value)
		}
		var list []string
		if err := v.Decode(&list); err != nil || len(list) == 0 {
			return scope, fmt.Errorf("%s:%d: %s.kubernetes_namespaces: want a list of namespaces", path, v.Line, containersSection)
		}
		for _, ns := range list {
			if !dnsLabel(ns) {
				return scope, fmt.Errorf("%s:%d: %s.kubernetes_namespaces: %q is not a namespace's name (lowercase letters, digits and '-', at most 63)", path, v.Line, containersSection, ns)
			}
		}
		scope.KubernetesNamespaces = list
	}
	return scope, nil
}

// dnsLabel reports whether s is a DNS label as Kubernetes names its
// namespaces: 1 to 63 lowercase letters, digits and '-', a letter or
// digit at each end.
func dnsLabel(s string) bool {
	if len(s) == 0 || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// blankLines empties lines from to before end (1-based; end 0: to the
// end) of data, keeping their newlines.
func blankLines(data []byte, from, end int) []byte {
	lines := strings.SplitAfter(string(data), "\n")
	for i := range lines {
		if n := i + 1; n >= from && (end == 0 || n < end) {
			if strings.HasSuffix(lines[i], "\n") {
				lines[i] = "\n"
			} else {
				lines[i] = ""
			}
		}
	}
	return []byte(strings.Join(lines, ""))
}

// admits reports, as an error, why a container of annotations may not name
// the policy of scope, or nil.
func (scope nodeScope) admits(annotations map[string]string) error {
	if len(scope.KubernetesNamespaces) == 0 {
		return nil
	}
	ns, ok := annotations[podNamespaceAnnotation]
	switch {
	case !ok:
		return fmt.Errorf("it is for pods of the Kubernetes namespaces %s only (containers.kubernetes_namespaces), and this container is of no pod", strings.Join(scope.KubernetesNamespaces, ", "))
	case !slices.Contains(scope.KubernetesNamespaces, ns):
		return fmt.Errorf("it is for pods of the Kubernetes namespaces %s only (containers.kubernetes_namespaces), not of %s", strings.Join(scope.KubernetesNamespaces, ", "), ns)
	}
	return nil
}

// splitList splits a comma-separated annotation, dropping blanks.
func splitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}
