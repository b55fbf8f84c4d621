package runner

import (
	"fmt"
	"os"

	"github.com/hutch-sandbox/hutch/internal/gvisor"
	"github.com/hutch-sandbox/hutch/internal/microvm"
	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/sandbox"
)

// GuestKernelEnv names the environment variable that, when set, is the
// directory of the microvm tier's guest kernel (scripts/guest-kernel.sh
// --print-dir) rather than the cache's current one.
const GuestKernelEnv = "HUTCH_GUEST_KERNEL"

// RuntimeFor returns the runtime of an isolation tier: the namespace tier,
// or gVisor with the runsc of --runsc or found on PATH, of the pinned
// version, else an error that says how to install it; --gvisor-directfs
// is gvisor.Runtime.DirectFS; or the microVM tier, with --allow-emulation.
func (rf *Flags) RuntimeFor(tier string) (sandbox.Runtime, error) {
	runsc, directFS := rf.Runsc, rf.DirectFS
	if rf.AllowEmulation && tier != policy.TierMicroVM {
		return nil, fmt.Errorf("--allow-emulation is for --tier %s only", policy.TierMicroVM)
	}
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
	case policy.TierMicroVM:
		if runsc != "" || directFS {
			return nil, fmt.Errorf("--runsc and --gvisor-directfs are for --tier %s only", policy.TierGVisor)
		}
		return &microvm.Runtime{KernelDir: os.Getenv(GuestKernelEnv), AllowEmulation: rf.AllowEmulation}, nil
	}
	return nil, fmt.Errorf("unknown tier %q", tier)
}
