package microvm

import "testing"

// TestHardwareVirt: only a CPU whose every processor lists vmx or svm
// among its flags has the hardware virtualization KVM needs to run an
// ordinary guest; a cloud VM's CPU without them (where /dev/kvm may still
// open, PVM's) has not.
func TestHardwareVirt(t *testing.T) {
	for _, c := range []struct {
		name, cpuinfo string
		want          bool
	}{
		{"intel", "processor\t: 0\nflags\t\t: fpu vme de pse vmx sse2\n\nprocessor\t: 1\nflags\t\t: fpu vme de pse vmx sse2\n", true},
		{"amd", "processor\t: 0\nflags\t\t: fpu svm lm\n", true},
		{"cloud VM", "processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu vme de pse tsc msr hypervisor lm\n", false},
		{"one processor without", "flags\t: fpu vmx\nflags\t: fpu\n", false},
		{"no flags line", "processor\t: 0\n", false},
		{"vmx in another field", "model name\t: vmx svm\nflags\t: fpu\n", false},
		{"a flag that contains it", "flags\t: fpu vmxx nosvm\n", false},
	} {
		if got := hardwareVirt([]byte(c.cpuinfo)); got != c.want {
			t.Errorf("%s: hardwareVirt = %v, want %v", c.name, got, c.want)
		}
	}
	t.Logf("this host: usableKVM() = %v", usableKVM())
}
