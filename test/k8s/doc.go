// Package k8s tests the single-node Kubernetes cluster hutch's tests run
// (internal/testutil/k8stest): a pod of the default runtime handler (the
// cluster's runc 1.5) is scheduled, becomes Ready, answers kubectl exec and
// logs, and is deleted; a RuntimeClass's handler gets the pod's
// annotations; a pod of the RuntimeClass hutch runs confined, each of its
// containers in a user namespace of hutch-runc's; and the DaemonSet of
// deploy/kubernetes/hutch-runc.yaml installs hutch-runc and its runtime
// handler under a directory that stands for the node's root.
package k8s
