// Package guest is the inside of hutch's microVM guests (package microvm
// is the host's side): hutch's binary as the guest's PID 1.
//
// The kernel runs the initramfs's /init, hutch's binary (or hutch-agent),
// with the argument InitCommand from its command line (MainIfInit,
// InitMain). It mounts /proc, /sys, devtmpfs on /dev and devpts, loads the
// initramfs's kernel modules in their order (ModuleDir, ModuleOrder),
// waits for the virtio-serial port named PortName and for the host to
// connect its end, and serves the agent's protocol (package agent) on the
// port. In network mode "proxy" (NetEnv) it also relays the guest's
// loopback proxy addresses to the host over the port NetPortName. When that connection ends
// the guest powers off. It is a package of its own so that the binaries
// that run inside sandboxes link none of the host's side (QEMU, the
// initramfs builder).
package guest
