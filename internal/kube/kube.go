package kube

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Labels and annotations hutch puts on what it makes in the cluster.
const (
	// LabelManaged marks every object of hutch's (value "hutch").
	LabelManaged = "app.kubernetes.io/managed-by"
	// LabelSandbox names the sandbox a pod or Secret belongs to.
	LabelSandbox = "hutch.dev/sandbox"
	// LabelDaemon names the hutch serve (Options.Daemon) that made it.
	LabelDaemon = "hutch.dev/daemon"
	// AnnotationAgent is hutch-runc's: the port of the pod's agent
	// (ociruntime's dev.hutch.agent).
	AnnotationAgent = "dev.hutch.agent"
	// AnnotationPolicy, AnnotationAllowDomains and AnnotationNetwork are
	// hutch-runc's egress annotations (package ociruntime).
	AnnotationPolicy       = "dev.hutch.policy"
	AnnotationAllowDomains = "dev.hutch.allow-domains"
	AnnotationNetwork      = "dev.hutch.network"
)

// DefaultAgentPort is the port of the agent in a sandbox's pod.
const DefaultAgentPort = 49983

// Options says how hutch serve uses a cluster.
type Options struct {
	// Kubeconfig is the kubeconfig file; "" means $KUBECONFIG, else the
	// cluster the process runs in (its service account).
	Kubeconfig string
	// Namespace holds the sandboxes' pods; "" means the kubeconfig's
	// namespace, or the one the process runs in, or "default".
	Namespace string
	// RuntimeClasses maps each tier to the RuntimeClass of its pods
	// (DefaultRuntimeClasses).
	RuntimeClasses map[string]string
	// Image is the image of a sandbox whose policy names none (whose root
	// is the host's: a cluster has no host root to show).
	Image string
	// NodePolicy, when set, is the node policy every pod names
	// (dev.hutch.policy): its network and secrets are the ground the
	// sandbox's own allow-list adds to.
	NodePolicy string
	// AgentPort is the agent's port in each pod; 0 means DefaultAgentPort.
	AgentPort int
	// Daemon names this hutch serve in its pods' labels, so that it finds
	// its own again after a restart.
	Daemon string
	// Replica names this replica among the replicas of Daemon (Join), in
	// the labels of the pods it makes; "" for a hutch serve alone.
	Replica string
}

// DefaultRuntimeClasses are the RuntimeClasses of hutch's tiers as
// docs/oci-runtime.md installs them.
func DefaultRuntimeClasses() map[string]string {
	return map[string]string{"namespace": "hutch", "gvisor": "hutch-gvisor"}
}

// Cluster is a connection to the API server, in one namespace.
type Cluster struct {
	core  api // the core group, v1
	node  api // node.k8s.io/v1
	coord api // coordination.k8s.io/v1
	ns    string
	opts  Options
	// leases is the view of the replicas' Leases (replica.go).
	leases leaseView
}

// Connect connects to the cluster o names and checks that its API server
// answers and that the namespace exists.
func Connect(ctx context.Context, o Options) (*Cluster, error) {
	cfg, ns, err := restConfig(o.Kubeconfig)
	if err != nil {
		return nil, err
	}
	if o.Namespace == "" {
		o.Namespace = ns
	}
	if o.AgentPort == 0 {
		o.AgentPort = DefaultAgentPort
	}
	if o.RuntimeClasses == nil {
		o.RuntimeClasses = DefaultRuntimeClasses()
	}
	if o.Daemon == "" {
		o.Daemon = "hutch"
	}
	if errs := validLabelValue(o.Daemon); errs != "" {
		return nil, fmt.Errorf("kubernetes: daemon name %q: %s", o.Daemon, errs)
	}
	cfg.UserAgent = "hutch-serve"
	// hutch serve's requests are many and small (every read and write of
	// its Store is one): client-go's default of 5 a second would queue
	// them behind each other.
	if cfg.QPS == 0 {
		cfg.QPS, cfg.Burst = 100, 200
	}
	core, err := newAPI(cfg, "/api", corev1.SchemeGroupVersion)
	if err != nil {
		return nil, err
	}
	node, err := newAPI(cfg, "/apis", schema.GroupVersion{Group: nodev1.GroupName, Version: "v1"})
	if err != nil {
		return nil, err
	}
	// A list of its pods: the API server answers, the namespace is
	// there, and hutch serve may read it (a Role of that namespace, not
	// the cluster's namespaces).
	if err := core.list(ctx, o.Namespace, "pods", metav1.ListOptions{Limit: 1}, &corev1.PodList{}); err != nil {
		return nil, fmt.Errorf("kubernetes: the pods of namespace %s: %w", o.Namespace, err)
	}
	coord, err := newAPI(cfg, "/apis", coordinationv1.SchemeGroupVersion)
	if err != nil {
		return nil, err
	}
	return &Cluster{core: core, node: node, coord: coord, ns: o.Namespace, opts: o}, nil
}

// Namespace is the namespace of the sandboxes' pods.
func (c *Cluster) Namespace() string { return c.ns }

// restConfig loads the client's configuration and its namespace: from
// path, else $KUBECONFIG, else the pod's service account.
func restConfig(path string) (*rest.Config, string, error) {
	if path == "" {
		path = os.Getenv("KUBECONFIG")
	}
	if path == "" {
		cfg, err := rest.InClusterConfig()
		if errors.Is(err, rest.ErrNotInCluster) {
			return nil, "", errors.New("kubernetes: no kubeconfig (--kubeconfig or $KUBECONFIG) and not running in a cluster")
		}
		if err != nil {
			return nil, "", fmt.Errorf("kubernetes: in-cluster configuration: %w", err)
		}
		ns := "default"
		if b, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace"); err == nil && len(b) > 0 {
			ns = strings.TrimSpace(string(b))
		}
		return cfg, ns, nil
	}
	if _, err := os.Stat(path); err != nil {
		return nil, "", fmt.Errorf("kubernetes: kubeconfig: %w", err)
	}
	loader := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
		&clientcmd.ClientConfigLoadingRules{ExplicitPath: path}, &clientcmd.ConfigOverrides{})
	cfg, err := loader.ClientConfig()
	if err != nil {
		return nil, "", fmt.Errorf("kubernetes: kubeconfig %s: %w", path, err)
	}
	ns, _, err := loader.Namespace()
	if err != nil || ns == "" {
		ns = "default"
	}
	return cfg, ns, nil
}

// validLabelValue says what is wrong with v as a label's value, or "".
func validLabelValue(v string) string {
	if len(v) == 0 || len(v) > 63 {
		return "must be 1 to 63 characters"
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && ((c != '-' && c != '_' && c != '.') || i == 0 || i == len(v)-1) {
			return "letters, digits, '-', '_' and '.', a letter or digit at each end"
		}
	}
	return ""
}

// CheckRuntimeClass says whether the cluster has RuntimeClass name.
func (c *Cluster) CheckRuntimeClass(ctx context.Context, name string) error {
	if err := c.node.get(ctx, "", "runtimeclasses", name, &nodev1.RuntimeClass{}); err != nil {
		return fmt.Errorf("RuntimeClass %s: %w (docs/kubernetes.md installs it)", name, err)
	}
	return nil
}
