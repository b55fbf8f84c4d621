package kube

import (
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hutch-sandbox/hutch/internal/agent"
	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/sandbox"
)

// Keys of a sandbox's Secret.
const (
	secretToken = "token"
	secretCert  = "tls.crt"
	secretKey   = "tls.key"
)

// containerName is the name of the sandbox's container in its pod.
const containerName = "sandbox"

// podName is the name of sandbox id's pod and Secret.
func podName(id string) string { return "hutch-" + id }

// Unsupported says why a sandbox's policy cannot run as a pod, or "": what
// only the daemon's own machine can do (S2: refused, not dropped). The
// filesystem's lists are the daemon's to check, on the request's policy:
// the defaults Normalize adds hide the host's credentials, which a pod's
// image does not hold.
func Unsupported(s policy.Spec) string {
	switch {
	case s.Network.Mode == "host":
		return "network.mode host: a pod's network is the node's policy's"
	case len(s.Network.AllowedCIDRs) > 0:
		return "network.allowed_cidrs: the node's hutch-runc takes destinations by name only"
	case len(s.Network.DeniedDomains) > 0:
		return "network.denied_domains: the node's hutch-runc takes allowed destinations only"
	case len(s.Network.AllowPrivate) > 0:
		return "network.allow_private: private addresses are the node policy's to open"
	case len(s.Network.Hosts) > 0:
		return "network.hosts: names are resolved by the node policy's proxy"
	case len(s.Secrets) > 0:
		return "secrets: a pod's secrets are the node policy's (dev.hutch.secrets)"
	}
	return ""
}

// pod is the pod of sandbox c.Name in tier class, reached at port.
func (c *Cluster) pod(cfg sandbox.Config, class string) (*corev1.Pod, error) {
	spec := cfg.Spec
	image := c.opts.Image
	if ref, ok := spec.Image(); ok {
		image = ref
	}
	if image == "" {
		return nil, fmt.Errorf("policy: root: %s: a sandbox on Kubernetes needs an image (policy root image:REF, or hutch serve --kubernetes-image)", spec.Root)
	}
	if why := Unsupported(spec); why != "" {
		return nil, fmt.Errorf("policy: %s", why)
	}
	name := podName(cfg.Name)
	ann := map[string]string{AnnotationAgent: strconv.Itoa(c.opts.AgentPort)}
	if c.opts.NodePolicy != "" {
		ann[AnnotationPolicy] = c.opts.NodePolicy
	}
	switch {
	case spec.Network.Mode == "none":
		// Nothing, whatever the node policy allows.
		ann[AnnotationNetwork] = "none"
	case spec.Network.Mode == "proxy" && len(spec.Network.AllowedDomains) > 0:
		ann[AnnotationAllowDomains] = strings.Join(spec.Network.AllowedDomains, ",")
	}
	var env []corev1.EnvVar
	for _, kv := range cfg.Environ {
		k, v, _ := strings.Cut(kv, "=")
		if k == agent.TokenEnv || k == agent.TLSCertEnv || k == agent.TLSKeyEnv {
			continue
		}
		env = append(env, corev1.EnvVar{Name: k, Value: v})
	}
	for k, key := range map[string]string{agent.TokenEnv: secretToken, agent.TLSCertEnv: secretCert, agent.TLSKeyEnv: secretKey} {
		env = append(env, corev1.EnvVar{Name: k, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: key,
		}}})
	}
	limits := corev1.ResourceList{}
	if m := spec.Resources.MemoryBytes; m > 0 {
		limits[corev1.ResourceMemory] = *resource.NewQuantity(m, resource.BinarySI)
	}
	if cpus := spec.Resources.CPUs; cpus > 0 {
		limits[corev1.ResourceCPU] = *resource.NewMilliQuantity(int64(cpus*1000), resource.DecimalSI)
	}
	if d := spec.Resources.DiskBytes; d > 0 {
		limits[corev1.ResourceEphemeralStorage] = *resource.NewQuantity(d, resource.BinarySI)
	}
	// Requests small (a limit without a request would request the
	// limit): the limits bound a sandbox, and most sit idle. None of a
	// node's disk is reserved; its limit holds once written.
	requests := corev1.ResourceList{
		corev1.ResourceCPU:              resource.MustParse("10m"),
		corev1.ResourceMemory:           resource.MustParse("16Mi"),
		corev1.ResourceEphemeralStorage: resource.MustParse("0"),
	}
	for k, v := range requests {
		if l, ok := limits[k]; ok && l.Cmp(v) < 0 {
			requests[k] = l
		}
	}
	falseV := false
	var zero int64
	// The agent is the sandbox's root, as on one machine (it runs each
	// command as the user asked for, E2B's "user" by default, and keeps
	// the sandbox's accounts), whatever user the image names: root of the
	// pod's user namespace, confined by the node's hutch-runc.
	root := &corev1.SecurityContext{RunAsUser: &zero, RunAsGroup: &zero}
	var mounts []corev1.VolumeMount
	var volumes []corev1.Volume
	if ws := spec.Filesystem.Workspace; ws != "" && ws != "/" {
		// The workspace: a directory of the pod's own, writable by
		// whoever the image runs as, bounded like the sandbox's disk.
		var size *resource.Quantity
		if d := spec.Resources.DiskBytes; d > 0 {
			size = resource.NewQuantity(d, resource.BinarySI)
		}
		volumes = append(volumes, corev1.Volume{Name: "workspace", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: size}}})
		mounts = append(mounts, corev1.VolumeMount{Name: "workspace", MountPath: ws})
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Namespace:   c.ns,
			Labels:      c.labels(cfg.Name),
			Annotations: ann,
		},
		Spec: corev1.PodSpec{
			RuntimeClassName:              &class,
			RestartPolicy:                 corev1.RestartPolicyNever,
			AutomountServiceAccountToken:  &falseV,
			EnableServiceLinks:            &falseV,
			TerminationGracePeriodSeconds: &zero,
			Volumes:                       volumes,
			Containers: []corev1.Container{{
				Name:            containerName,
				Image:           image,
				ImagePullPolicy: corev1.PullIfNotPresent,
				// hutch-runc replaces the command with hutch's agent
				// (dev.hutch.agent); this is what a node without it
				// would run: nothing.
				Command:         []string{"/dev/hutch", "agent", "--listen", fmt.Sprintf("[::]:%d", c.opts.AgentPort)},
				Env:             env,
				WorkingDir:      spec.Filesystem.Workspace,
				VolumeMounts:    mounts,
				SecurityContext: root,
				Resources:       corev1.ResourceRequirements{Limits: limits, Requests: requests},
				Ports:           []corev1.ContainerPort{{Name: "hutch-agent", ContainerPort: int32(c.opts.AgentPort), Protocol: corev1.ProtocolTCP}},
			}},
		},
	}, nil
}

// labels are the labels of what sandbox id has in the cluster.
func (c *Cluster) labels(id string) map[string]string {
	l := map[string]string{LabelManaged: "hutch", LabelSandbox: id, LabelDaemon: c.opts.Daemon}
	if c.opts.Replica != "" {
		l[LabelReplica] = c.opts.Replica
	}
	return l
}
