// Package ociruntime is hutch-runc: an OCI runtime with the command line of
// runc, for containerd's runc shim, Docker and Kubernetes' RuntimeClass.
//
// hutch-runc does not set up namespaces, mounts and cgroups itself: it
// hardens the bundle's configuration and hands it to the node's low-level
// runtime (runc, or crun), which every containerd and Docker node has and
// which honours the whole OCI runtime specification. What hutch adds is
// what no low-level runtime does:
//
//   - the container's first program is hutch's own, bound read-only at
//     /dev/hutch: it applies Landlock (writes only where the spec's mounts
//     are writable, ioctl only on the spec's devices, abstract unix sockets
//     and signals scoped to the container) and hutch's seccomp table,
//     stacked on the spec's filter (a call passes only when both allow it),
//     then executes the container's program in its place, with the same
//     pid; `exec` starts every process the same way;
//   - no_new_privs is always set, so that nothing in the container gains
//     privilege by executing a set-id file;
//   - a hook in the runtime's namespace, after the container's namespaces
//     exist and before its program runs, and another when it is deleted.
//
// hutch-runc's own commands besides the runtime's: check tells what a
// node offers; install and uninstall put hutch-runc and containerd's
// runtime handler on a node, and take them off, from a pod that has the
// node's root mounted (a DaemonSet, deploy/kubernetes/hutch-runc.yaml),
// where check --host is the readiness probe.
//
// Commands other than create, run and exec go to the low-level runtime
// unchanged, with its state kept under hutch-runc's --root. The decision
// and what it leaves to the low-level runtime are in docs/ARCHITECTURE.md
// ("hutch as an OCI runtime").
package ociruntime
