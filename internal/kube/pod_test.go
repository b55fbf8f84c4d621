package kube

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/hutch-sandbox/hutch/internal/agent"
	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/sandbox"
)

func testCluster() *Cluster {
	return &Cluster{ns: "sandboxes", opts: Options{
		RuntimeClasses: DefaultRuntimeClasses(), Image: "example.test/base:1", NodePolicy: "serve",
		AgentPort: DefaultAgentPort, Daemon: "hutch",
	}}
}

// TestPod: a sandbox's pod has its RuntimeClass, the agent's annotation
// and port, the sandbox's allow-list for hutch-runc, its limits, its
// environment with the agent's secrets from the Secret only, a workspace
// of its own, and nothing of the cluster's (no service account token, no
// service links).
func TestPod(t *testing.T) {
	c := testCluster()
	spec := policy.Spec{
		Root:       policy.ImagePrefix + "example.test/py:3",
		Network:    policy.Network{Mode: "proxy", AllowedDomains: []string{"pypi.org", "*.example.com:8443"}},
		Resources:  policy.Resources{MemoryBytes: 512 << 20, CPUs: 1.5, DiskBytes: 1 << 30},
		Filesystem: policy.Filesystem{Workspace: "/home/user"},
	}
	p, err := c.pod(sandbox.Config{Spec: spec, Name: "sb-abc", Environ: []string{"A=1", agent.TokenEnv + "=leak"}}, "hutch")
	if err != nil {
		t.Fatal(err)
	}
	if p.Name != "hutch-sb-abc" || p.Namespace != "sandboxes" || *p.Spec.RuntimeClassName != "hutch" {
		t.Errorf("name %s/%s class %s", p.Namespace, p.Name, *p.Spec.RuntimeClassName)
	}
	for k, want := range map[string]string{AnnotationAgent: "49983", AnnotationPolicy: "serve", AnnotationAllowDomains: "pypi.org,*.example.com:8443"} {
		if got := p.Annotations[k]; got != want {
			t.Errorf("annotation %s = %q, want %q", k, got, want)
		}
	}
	if p.Labels[LabelSandbox] != "sb-abc" || p.Labels[LabelDaemon] != "hutch" {
		t.Errorf("labels %v", p.Labels)
	}
	ctr := p.Spec.Containers[0]
	if ctr.Image != "example.test/py:3" || ctr.WorkingDir != "/home/user" {
		t.Errorf("image %s, dir %s", ctr.Image, ctr.WorkingDir)
	}
	// The agent is the sandbox's root, whatever user the image names.
	if sc := ctr.SecurityContext; sc == nil || sc.RunAsUser == nil || *sc.RunAsUser != 0 || sc.RunAsGroup == nil || *sc.RunAsGroup != 0 {
		t.Errorf("security context %+v, want the agent as uid and gid 0", sc)
	}
	if got := ctr.Resources.Limits.Memory().Value(); got != 512<<20 {
		t.Errorf("memory limit %d", got)
	}
	if got := ctr.Resources.Limits.Cpu().MilliValue(); got != 1500 {
		t.Errorf("cpu limit %dm", got)
	}
	secretRefs := 0
	for _, e := range ctr.Env {
		switch {
		case e.Name == "A" && e.Value == "1":
		case strings.HasPrefix(e.Name, "HUTCH_AGENT_"):
			if e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef.Name != p.Name {
				t.Errorf("%s not from the Secret: %+v", e.Name, e)
			}
			secretRefs++
		default:
			t.Errorf("env %+v", e)
		}
	}
	if secretRefs != 3 {
		t.Errorf("%d of the agent's secrets from the Secret, want 3", secretRefs)
	}
	if *p.Spec.AutomountServiceAccountToken || *p.Spec.EnableServiceLinks || p.Spec.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("the pod gets the cluster's: %+v", p.Spec)
	}
	if len(ctr.VolumeMounts) != 1 || ctr.VolumeMounts[0].MountPath != "/home/user" || p.Spec.Volumes[0].EmptyDir.SizeLimit.Value() != 1<<30 {
		t.Errorf("workspace: %+v %+v", ctr.VolumeMounts, p.Spec.Volumes)
	}

	// No network: nothing, whatever the node policy allows.
	off := spec
	off.Network = policy.Network{Mode: "none"}
	if p, err := c.pod(sandbox.Config{Spec: off, Name: "sb-abc"}, "hutch"); err != nil || p.Annotations[AnnotationNetwork] != "none" || p.Annotations[AnnotationAllowDomains] != "" {
		t.Errorf("network none: %v %v", p.Annotations, err)
	}

	// Without an image of its own: the daemon's; without one, an error.
	spec.Root = "host"
	if p, err := c.pod(sandbox.Config{Spec: spec, Name: "sb-abc"}, "hutch"); err != nil || p.Spec.Containers[0].Image != "example.test/base:1" {
		t.Errorf("default image: %v", err)
	}
	c.opts.Image = ""
	if _, err := c.pod(sandbox.Config{Spec: spec, Name: "sb-abc"}, "hutch"); err == nil || !strings.Contains(err.Error(), "--kubernetes-image") {
		t.Errorf("no image: %v", err)
	}
}

// TestUnsupported: each part of a policy a pod cannot honour is named.
func TestUnsupported(t *testing.T) {
	for _, s := range []policy.Spec{
		{Network: policy.Network{Mode: "host"}},
		{Network: policy.Network{AllowedCIDRs: []string{"10.0.0.0/8"}}},
		{Network: policy.Network{DeniedDomains: []string{"x.test"}}},
		{Network: policy.Network{AllowPrivate: []string{"10.0.0.0/8"}}},
		{Network: policy.Network{Hosts: []string{"a.test:10.0.0.1"}}},
		{Secrets: []policy.Secret{{Name: "K"}}},
	} {
		if Unsupported(s) == "" {
			t.Errorf("%+v is not refused", s)
		}
	}
	if why := Unsupported(policy.Spec{Network: policy.Network{Mode: "proxy", AllowedDomains: []string{"a.test"}}}); why != "" {
		t.Errorf("an allow-list is refused: %s", why)
	}
}

// TestStuckWhy: a pod whose image cannot be pulled is given up at once; one
// waiting for a reason the kubelet retries (a busy API server's "failed to
// sync secret cache") only after RetryGrace of it, the same reason all
// along; a pod that moves on starts its grace again.
func TestStuckWhy(t *testing.T) {
	waiting := func(reason string) *corev1.Pod {
		return &corev1.Pod{Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: "m"}}}}}}
	}
	t0 := time.Unix(1000, 0)
	var st stuckSince
	if why := st.why(waiting("ImagePullBackOff"), t0); !strings.HasPrefix(why, "ImagePullBackOff: m") {
		t.Errorf("image pull: %q", why)
	}
	st = stuckSince{}
	if why := st.why(waiting("CreateContainerConfigError"), t0); why != "" {
		t.Errorf("at first sight: %q", why)
	}
	if why := st.why(waiting("CreateContainerConfigError"), t0.Add(RetryGrace-time.Second)); why != "" {
		t.Errorf("within the grace: %q", why)
	}
	if why := st.why(waiting("ContainerCreating"), t0.Add(RetryGrace)); why != "" || st.reason != "" {
		t.Errorf("moved on: %q %+v", why, st)
	}
	if why := st.why(waiting("RunContainerError"), t0.Add(RetryGrace)); why != "" {
		t.Errorf("a new reason: %q", why)
	}
	if why := st.why(waiting("RunContainerError"), t0.Add(2*RetryGrace)); !strings.HasPrefix(why, "RunContainerError for 2m0s: m") {
		t.Errorf("after the grace: %q", why)
	}
}
