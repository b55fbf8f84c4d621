// Package microvm is the foundation of hutch's microVM isolation tier: each
// sandbox is a virtual machine of QEMU's microvm machine type, with a kernel
// of its own, so that the sandbox's system calls never reach the host's
// kernel.
//
// The guest runs Debian's cloud kernel, fetched and unpacked once by
// scripts/guest-kernel.sh into a cache directory that LoadKernel and
// FindKernel read, checking every file against the directory's SHA-256
// manifest before use. Its root is a small initramfs (WriteInitramfs):
// hutch's own binary as /init, the kernel modules the guest needs (the
// virtio transport, virtio-serial and what later steps of the tier mount
// with), and for a binary linked dynamically its ELF interpreter and
// libraries — nothing else.
//
// In the guest hutch's binary runs as PID 1 with the argument
// guest.InitCommand, which the kernel passes to init from its command line
// (package guest): it mounts /proc, /sys, devtmpfs and devpts, loads the modules in
// order, waits for the virtio-serial port named guest.PortName and serves
// the agent's protocol (package agent) on it. A virtio-serial port needs
// nothing of the host's beyond QEMU (no vhost, no /dev/kvm), and the guest
// has no network device at all: in network mode "proxy" (Config.Relay) a
// second port, guest.NetPortName, carries the guest's connections to
// hutch's egress proxy as yamux streams, which the host serves the
// sandbox's proxy on (serveProxyRelay).
//
// Boot starts QEMU (KVM when /dev/kvm opens on a CPU with hardware
// virtualization, usableKVM; software emulation, TCG, only
// when Config.AllowEmulation says so), accepts the connection QEMU makes
// for the port's character device on a unix socket of the VM's directory,
// and returns once the guest's agent has spoken: VM.Conn is the agent's
// connection, from which an agent.Client is made. Closing the VM kills QEMU
// and removes its files.
//
// With Config.Share the guest's root is the host's system directories
// (SystemDirs), served read-only by QEMU's virtiofsd from a view built in a
// private mount namespace that hides the deny-read list, under a writable
// layer in the guest's memory, and the workspace is a second virtiofs share,
// read-write; the init switches into that root before it serves the agent.
// Runtime is the tier for hutch run (sandbox.Runtime's Run).
package microvm
