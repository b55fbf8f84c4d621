package microvm

import (
	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/sandbox"
)

// Runtime is the microvm tier: hutch run's command in a guest of its own
// (Run), and hutch serve's long-lived sandboxes (Start).
type Runtime struct {
	// KernelDir is the guest kernel's directory (LoadKernel); "" means
	// the current one of DefaultKernelCache.
	KernelDir string
	// Init is the guest's init binary; "" means hutch-agent beside the
	// running binary, else the running binary.
	Init string
	// Virtiofsd is QEMU's virtiofsd; "" means DefaultVirtiofsd.
	Virtiofsd string
	// AllowEmulation lets the guest run under QEMU's software emulation
	// when the host has no KVM (Config.AllowEmulation): the
	// --allow-emulation of hutch run and hutch serve.
	AllowEmulation bool
}

var _ sandbox.Runtime = (*Runtime)(nil)

// Tier returns policy.TierMicroVM.
func (*Runtime) Tier() string { return policy.TierMicroVM }
