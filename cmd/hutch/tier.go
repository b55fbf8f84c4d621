package main

import (
	"fmt"

	"github.com/hutch-sandbox/hutch/internal/gvisor"
	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/sandbox"
)

// runtimeFor returns the runtime of an isolation tier: the namespace tier,
// or gVisor with the runsc given (--runsc) or found on PATH, of the pinned
// version, else an error that says how to install it; directFS is
// --gvisor-directfs (gvisor.Runtime.DirectFS).
func runtimeFor(tier, runsc string, directFS bool) (sandbox.Runtime, error) {
	switch tier {
	case "", policy.TierNamespace:
		if runsc != "" {
			return nil, fmt.Errorf("--runsc is for --tier %s only", policy.TierGVisor)
		}
		if directFS {
			return nil, fmt.Errorf("--gvisor-directfs is for --tier %s only", policy.TierGVisor)
		}
		return sandbox.Namespaces{}, nil
	case policy.TierGVisor:
		bin, err := gvisor.Find(runsc)
		if err != nil {
			return nil, err
		}
		return &gvisor.Runtime{Runsc: bin, DirectFS: directFS}, nil
	}
	return nil, fmt.Errorf("unknown tier %q", tier)
}
