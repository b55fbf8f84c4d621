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
