package ociruntime

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestPlanEgress: the policy a container gets — an annotation's, else
// the runtime's flag's, else the node's default, else nothing allowed —
// with the annotation's domains as the creator's rules and its choice of
// secrets; a bad name, a missing named policy, a section that does not
// apply to a container and an unknown secret are refused, naming why.
func TestPlanEgress(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(dir, name+".yaml"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("web", "network:\n  allowed_domains: [\"pypi.org\"]\nsecrets:\n  - name: A\n    hosts: [\"a.test\"]\n    from: file:/x\n  - name: B\n    hosts: [\"b.test\"]\n    from: file:/y\n")
	write("open", "network:\n  mode: host\n")
	write("wide", "network:\n  allowed_domains: [\"x.test\"]\nfilesystem:\n  allow_write: [\"/tmp\"]\n")

	plan, err := planEgress(nil, "", dir)
	if err != nil || plan.Mode != "none" || plan.Policy != "" {
		t.Errorf("no policy anywhere: %+v %v", plan, err)
	}
	write("default", "network:\n  allowed_domains: [\"deb.debian.org\"]\n")
	if plan, err := planEgress(nil, "", dir); err != nil || plan.Mode != "proxy" || plan.Policy != "default" || !plan.Operator {
		t.Errorf("the node's default: %+v %v", plan, err)
	}
	if plan, err := planEgress(nil, "open", dir); err != nil || plan.Mode != "host" {
		t.Errorf("--hutch-policy open: %+v %v", plan, err)
	}
	plan, err = planEgress(map[string]string{AnnotationPolicy: "web", AnnotationAllowDomains: " a.example.com, ,*.b.example.com:8443", AnnotationSecrets: "B"}, "open", dir)
	if err != nil || plan.Mode != "proxy" || plan.Policy != "web" || plan.Operator ||
		!reflect.DeepEqual(plan.Network.AllowedDomains, []string{"pypi.org", "a.example.com", "*.b.example.com:8443"}) ||
		len(plan.Secrets) != 1 || plan.Secrets[0].Name != "B" {
		t.Errorf("annotations: %+v %v", plan, err)
	}
	if plan, err := planEgress(map[string]string{AnnotationPolicy: "web", AnnotationSecrets: ""}, "", dir); err != nil || len(plan.Secrets) != 0 {
		t.Errorf("no secrets: %+v %v", plan, err)
	}
	for _, tc := range []struct {
		annotations map[string]string
		flag, want  string
	}{
		{map[string]string{AnnotationPolicy: "../etc/passwd"}, "", "is not a policy's name"},
		{nil, "missing", "--hutch-policy: the node has no policy \"missing\""},
		{map[string]string{AnnotationPolicy: "missing"}, "", "annotation dev.hutch.policy: the node has no policy"},
		{map[string]string{AnnotationPolicy: "wide"}, "", "wide.yaml:3: filesystem does not apply to a container"},
		{map[string]string{AnnotationPolicy: "web", AnnotationSecrets: "C"}, "", "has no secret C"},
	} {
		if _, err := planEgress(tc.annotations, tc.flag, dir); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v %q: %v, want %q", tc.annotations, tc.flag, err, tc.want)
		}
	}
}

// TestPolicyScope: a node policy's containers.kubernetes_namespaces admits
// the pods of those namespaces (as containerd's CRI names them) by
// annotation, refuses the others and containers of no pod, saying why;
// the operator's --hutch-policy is not held by it; its section's errors
// and the rest's keep the file's line numbers.
func TestPolicyScope(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(dir, name+".yaml"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("keys", `# for the agents' namespace only
containers:
  kubernetes_namespaces: [agents, ci]
network:
  allowed_domains: ["api.example.com"]
`)
	pod := func(ns string) map[string]string {
		return map[string]string{AnnotationPolicy: "keys", podNamespaceAnnotation: ns}
	}
	if plan, err := planEgress(pod("agents"), "", dir); err != nil || plan.Mode != "proxy" || plan.Network.AllowedDomains[0] != "api.example.com" {
		t.Errorf("a pod of a namespace it names: %+v %v", plan, err)
	}
	for _, ann := range []map[string]string{pod("default"), {AnnotationPolicy: "keys"}} {
		if _, err := planEgress(ann, "", dir); err == nil || !strings.Contains(err.Error(), "kubernetes_namespaces") {
			t.Errorf("%v: %v, want a refusal naming the scope", ann, err)
		}
	}
	if _, err := planEgress(nil, "keys", dir); err != nil {
		t.Errorf("the operator's --hutch-policy: %v", err)
	}
	for body, want := range map[string]string{
		"containers:\n  kubernetes_namespaces: [Agents]\n":                    "keys.yaml:2: containers.kubernetes_namespaces: \"Agents\"",
		"containers:\n  users: [a]\n":                                         "keys.yaml:2: containers: unknown field \"users\"",
		"containers: [a]\n":                                                   "keys.yaml:1: containers: want a mapping",
		"containers:\n  kubernetes_namespaces: [a]\nnetwork:\n  mode: wide\n": "keys.yaml:4",
	} {
		write("keys", body)
		if _, err := planEgress(pod("a"), "", dir); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", body, err, want)
		}
	}
}

// TestNetworkNone: dev.hutch.network none leaves a container nothing of
// its node policy — no destination, no secret — and takes no other value
// nor destinations beside it.
func TestNetworkNone(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "default.yaml"), []byte("network:\n  allowed_domains: [\"a.example.com\"]\nsecrets:\n  - name: K\n    hosts: [\"a.example.com\"]\n    from: env:K\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	plan, err := planEgress(map[string]string{AnnotationNetwork: "none"}, "", dir)
	if err != nil || plan.Mode != "none" || len(plan.Network.AllowedDomains) != 0 || len(plan.Secrets) != 0 {
		t.Errorf("none: %+v %v", plan, err)
	}
	for _, ann := range []map[string]string{
		{AnnotationNetwork: "host"},
		{AnnotationNetwork: "none", AnnotationAllowDomains: "b.example.com"},
	} {
		if _, err := planEgress(ann, "", dir); err == nil || !strings.Contains(err.Error(), AnnotationNetwork) {
			t.Errorf("%v: %v", ann, err)
		}
	}
}
