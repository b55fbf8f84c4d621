// Package oci tests hutch-runc through the engines that call it: containerd
// (ctr with --runc-binary, as a Kubernetes RuntimeClass does through the
// runc shim) and Docker (dockerd with hutch-runc as a runtime). Each test
// starts its engine privately (ocitest) and imports its images without a
// registry.
package oci
