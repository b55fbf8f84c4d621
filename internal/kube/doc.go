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
//
// Store keeps hutch serve's state in the namespace, so that the replicas
// of hutch serve behind one Service share it: it is a store.Backend, the
// interface through which the daemon reads and writes its state (the
// SQLite file of one hutch serve is the other). A sandbox's record is a
// ConfigMap hutch-rec-<id> whose key "record" holds it as JSON (its
// policy and volumes as text, times in RFC 3339, UTC), labelled
// app.kubernetes.io/managed-by=hutch, hutch.dev/kind=sandbox,
// hutch.dev/tenant=<hex of the first 16 bytes of the tenant's SHA-256>
// and hutch.dev/state=<state>: lists select by tenant and state on the
// API server, by the sandbox's own labels in hutch. An update writes the
// ConfigMap with the resourceVersion it read, and on a conflict reads
// and changes it again. An API token is a Secret hutch-token-<hex of the
// first 20 bytes of the token's SHA-256>, holding the tenant and the
// token's SHA-256 (never the token), labelled managed-by, hutch.dev/kind=token
// and hutch.dev/tenant. Snapshots are not kept: their layers are files
// of one machine. None of these objects carries hutch.dev/daemon, so that
// a daemon's clean-up of its pods never takes them.
package kube
