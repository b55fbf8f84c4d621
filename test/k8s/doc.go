// Package k8s tests the single-node Kubernetes cluster hutch's tests run
// (internal/testutil/k8stest): a pod of the default runtime handler (runc)
// is scheduled, becomes Ready, answers kubectl exec and logs, and is
// deleted.
package k8s
