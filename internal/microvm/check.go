package microvm

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// Check tells what this host offers the microvm tier, one line a
// requirement, and whether a guest can boot: hardware virtualization (or
// emulation only), QEMU, virtiofsd, the guest kernel of kernelDir (""
// means the cache's current one), root; and, without its lack counting
// against ok, mkfs.erofs, which guests of images need.
func Check(kernelDir string, allowEmulation bool) (lines []string, ok bool) {
	ok = true
	add := func(good bool, format string, args ...any) {
		mark := "ok  "
		if !good {
			mark, ok = "no  ", false
		}
		lines = append(lines, mark+fmt.Sprintf(format, args...))
	}
	if err := usableKVM(); err == nil {
		add(true, "KVM: /dev/kvm opens, the CPU has hardware virtualization")
	} else {
		add(allowEmulation, "KVM: %v: only software emulation, tens of times slower (--allow-emulation)", err)
	}
	if p, err := exec.LookPath("qemu-system-x86_64"); err == nil {
		add(true, "QEMU: %s", p)
	} else {
		add(false, "QEMU: no qemu-system-x86_64 (scripts/guest-kernel.sh installs it)")
	}
	if _, err := os.Stat(DefaultVirtiofsd); err == nil {
		add(true, "virtiofsd: %s", DefaultVirtiofsd)
	} else {
		add(false, "virtiofsd: %v (Debian's qemu-system-common)", err)
	}
	var k *Kernel
	var err error
	if kernelDir != "" {
		k, err = LoadKernel(kernelDir)
	} else {
		k, err = FindKernel("")
	}
	if err == nil {
		how := "boots " + filepath.Base(k.Image) + ", uncompressed"
		if k.Image == k.Packaged {
			how = "boots vmlinuz, decompressed at each boot: run scripts/guest-kernel.sh again to add vmlinux, 0.4 s less a boot under emulation"
		}
		add(true, "guest kernel: %s (%s; %s)", k.Release, k.Dir, how)
	} else {
		add(false, "guest kernel: %v", err)
	}
	add(os.Geteuid() == 0, "root: hutch runs the tier as root only in this version")
	// Guests of images only: its lack leaves the tier working.
	if p, err := exec.LookPath("mkfs.erofs"); err == nil {
		lines = append(lines, "ok  mkfs.erofs: "+p+" (guests of images, under hutch serve)")
	} else {
		lines = append(lines, "no  mkfs.erofs: none, so guests of images are refused; the tier works without (Debian's erofs-utils: scripts/guest-kernel.sh installs it)")
	}
	return lines, ok
}
