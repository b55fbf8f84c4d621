// Package kube runs hutch's sandboxes as pods of a Kubernetes cluster, for
// `hutch serve --kubernetes`: a sandbox is a pod of the RuntimeClass of its
// tier (hutch-runc on the node: hutch's confinement and egress, see package
// ociruntime), whose process is hutch's agent listening on the pod network
// (`dev.hutch.agent`); the daemon reaches the agent at the pod's IP,
// authenticated by a token and a TLS certificate of the sandbox's own, kept
// in a Secret that the pod owns. Kubernetes schedules the pod, pulls its
// image and enforces its resources; the node's hutch-runc holds its egress
// to the allow-list the daemon writes into the pod's annotations.
//
// Runtime is a sandbox.Runtime per tier, which the daemon uses as it uses
// the tiers of one machine; what a pod cannot honour (host directories,
// secrets swapped by the daemon's own proxy, pauses) the daemon refuses
// before it gets here.
package kube
