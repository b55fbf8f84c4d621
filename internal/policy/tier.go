package policy

import (
	"fmt"
	"slices"
)

// The isolation tiers (Spec.Tier).
const (
	// TierNamespace shares the host's kernel: namespaces, Landlock,
	// seccomp and cgroups around the sandbox's processes.
	TierNamespace = "namespace"
	// TierGVisor runs the sandbox on gVisor's application kernel (runsc):
	// its system calls are served by gVisor, not by the host's kernel.
	TierGVisor = "gvisor"
	// TierMicroVM runs the sandbox in a virtual machine of its own (QEMU's
	// microvm machine), with a kernel of its own.
	TierMicroVM = "microvm"
	// DefaultTier is Spec.Tier's default.
	DefaultTier = TierNamespace
)

// Tiers lists the values Spec.Tier accepts, weakest isolation first: the
// one ordered table of the tiers (TierRank; a microvm tier goes last).
var Tiers = []string{TierNamespace, TierGVisor, TierMicroVM}

// CheckTier checks a value of Spec.Tier.
func CheckTier(tier string) error {
	if !contains(Tiers, tier) {
		return fmt.Errorf("unknown tier %q (allowed: %s)", tier, quoteList(Tiers))
	}
	return nil
}

// tierRefusal is one policy field a tier cannot honour yet, and why.
type tierRefusal struct {
	tier  string
	field string
	// applies reports whether s asks for what the tier cannot give.
	applies func(s Spec) bool
	why     string
}

// tierRefusals is the one table of what each tier refuses (S2: a field a
// tier cannot honour is refused, never silently dropped). The namespace
// tier honours every field.
var tierRefusals = slices.Concat(gvisorRefusals, microVMRefusals)

// gvisorRefusals is what the gvisor tier cannot honour.
var gvisorRefusals = []tierRefusal{
	{TierGVisor, "network.mode", func(s Spec) bool { return s.Network.Mode == "host" },
		`"host" is not supported under tier "gvisor": gVisor's sandbox has no route to the host's network; use network mode "none" or tier "namespace"`},
	{TierGVisor, "root", func(s Spec) bool {
		_, image := s.Image()
		return s.Root != "" && s.Root != DefaultRoot && !image
	}, `a root directory is not yet supported under tier "gvisor": its sandboxes start from the host's root or an image; use tier "namespace" for a root directory`},
	{TierGVisor, "filesystem.home", func(s Spec) bool { return s.Filesystem.Home == "persist" },
		`"persist" is not yet supported under tier "gvisor"; use "ro" or "tmp"`},
	{TierGVisor, "filesystem.workspace_mode", func(s Spec) bool { return s.Filesystem.WorkspaceMode == WorkspaceReview },
		`"review" is not yet supported under tier "gvisor"; use tier "namespace" for review mode`},
}

// microVMRefusals is what the microvm tier cannot honour in this version:
// its guest has no network device (only hutch's proxy, relayed), its root
// is the host's system directories or an image, and its limits are the VM's size
// (resources.disk, hutch serve's, bounds the guest root's writable layer).
var microVMRefusals = []tierRefusal{
	{TierMicroVM, "network.mode", func(s Spec) bool { return s.Network.Mode == "host" },
		`"host" is not supported under tier "microvm": its guest has no network device, only hutch's proxy relayed to it; use network mode "proxy" or "none", or tier "namespace"`},
	{TierMicroVM, "root", func(s Spec) bool {
		_, image := s.Image()
		return s.Root != "" && s.Root != DefaultRoot && !image
	}, `a root directory is not yet supported under tier "microvm": its guest's root is the host's system directories or an image`},
	{TierMicroVM, "filesystem.allow_write", func(s Spec) bool { return len(s.Filesystem.AllowWrite) > 0 },
		`not yet supported under tier "microvm": only the workspace is shared writable`},
	{TierMicroVM, "filesystem.home", func(s Spec) bool { return s.Filesystem.Home == "persist" },
		`"persist" is not yet supported under tier "microvm"; its guest sees no home directory of the host's`},
	{TierMicroVM, "filesystem.workspace_mode", func(s Spec) bool { return s.Filesystem.WorkspaceMode == WorkspaceReview },
		`"review" is not yet supported under tier "microvm"; use tier "namespace" for review mode`},
	{TierMicroVM, "resources.cpus", func(s Spec) bool { return s.Resources.CPUs != float64(int(s.Resources.CPUs)) },
		`under tier "microvm" it is the guest's number of virtual CPUs: give a whole number`},
	{TierMicroVM, "resources.pids", func(s Spec) bool { return s.Resources.Pids != 0 && s.Resources.Pids != DefaultPids },
		`not yet supported under tier "microvm": the guest's memory bounds its processes`},
	{TierMicroVM, "resources.tmp_size", func(s Spec) bool { return s.Resources.TmpBytes != 0 && s.Resources.TmpBytes != DefaultTmpBytes },
		`not yet supported under tier "microvm": the guest's /tmp is bounded by its memory`},
}

// TierRefusals lists, one message a field, what s asks for that its tier
// cannot honour. Empty when the tier honours all of s.
func TierRefusals(s Spec) []string {
	var out []string
	for _, r := range tierRefusals {
		if r.tier == s.Tier && r.applies(s) {
			out = append(out, fmt.Sprintf("%s: %s", r.field, r.why))
		}
	}
	return out
}
