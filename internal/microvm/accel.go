package microvm

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
)

// usableKVM tells why this host's KVM cannot run the tier's guests, or
// nil when it can: /dev/kvm must open, and the CPU must have hardware
// virtualization (vmx or svm among /proc/cpuinfo's flags). A /dev/kvm
// without it is a KVM that virtualizes in software, such as PVM's (the
// module kvm_pvm, on cloud VMs without nested virtualization), which runs
// only kernels built for it: Debian's kernel hangs there before its first
// message, and QEMU's CPU model "host" aborts on a model-specific
// register it cannot set.
func usableKVM() error {
	f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("/dev/kvm: %w", err)
	}
	f.Close()
	info, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return fmt.Errorf("/dev/kvm opens, but which virtualization the CPU has is unknown: %w", err)
	}
	if !hardwareVirt(info) {
		return errors.New("/dev/kvm opens, but the CPU has no hardware virtualization (no vmx or svm among /proc/cpuinfo's flags): " +
			"a KVM without it" + kvmModules() + " runs no ordinary guest kernel")
	}
	return nil
}

// hardwareVirt tells whether cpuinfo, /proc/cpuinfo's text, names Intel's
// (vmx) or AMD's (svm) hardware virtualization among every CPU's flags.
func hardwareVirt(cpuinfo []byte) bool {
	seen := false
	for line := range strings.Lines(string(cpuinfo)) {
		name, value, ok := strings.Cut(line, ":")
		if !ok || strings.TrimSpace(name) != "flags" {
			continue
		}
		flags := strings.Fields(value)
		if !slices.Contains(flags, "vmx") && !slices.Contains(flags, "svm") {
			return false
		}
		seen = true
	}
	return seen
}

// kvmModules names the KVM modules the kernel shows (" (kvm, kvm_pvm)"),
// for usableKVM's error; "" when it shows none.
func kvmModules() string {
	entries, _ := os.ReadDir("/sys/module")
	var names []string
	for _, e := range entries {
		if n := e.Name(); n == "kvm" || strings.HasPrefix(n, "kvm_") {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return ""
	}
	return " (" + strings.Join(names, ", ") + ")"
}
