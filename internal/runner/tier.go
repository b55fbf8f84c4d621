package runner

import (
	"fmt"

	"github.com/hutch-sandbox/hutch/internal/gvisor"
	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/sandbox"
)

// RuntimeFor returns the runtime of an isolation tier: the namespace tier,
// or gVisor with the runsc of --runsc or found on PATH, of the pinned
// version, else an error that says how to install it; --gvisor-directfs
// is gvisor.Runtime.DirectFS.
func (rf *Flags) RuntimeFor(tier string) (sandbox.Runtime, error) {
	runsc, directFS := rf.Runsc, rf.DirectFS
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
