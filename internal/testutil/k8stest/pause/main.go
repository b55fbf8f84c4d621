// Command pause is the sandbox ("pause") container of the pods in the test
// cluster of internal/testutil/k8stest, built into an image of its own so
// that no registry is needed: it holds the pod's namespaces, reaps the
// orphans it inherits as their PID 1, and ends at SIGTERM or SIGINT.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 8)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sig {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			if pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil); pid <= 0 || err != nil {
				break
			}
		}
	}
}
