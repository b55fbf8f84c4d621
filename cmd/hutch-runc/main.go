// Command hutch-runc is hutch as an OCI runtime: the command line of runc,
// for containerd's runc shim (ctr --runc-binary, a Kubernetes
// RuntimeClass) and Docker (--runtime), with hutch's confinement added to
// every container. See package ociruntime.
package main

import (
	"os"

	"github.com/hutch-sandbox/hutch/internal/ociruntime"
)

func main() {
	os.Exit(ociruntime.Main(os.Args[1:], os.Stderr))
}
