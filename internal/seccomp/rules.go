package seccomp

// Constants from the Linux UAPI headers (linux/sched.h, linux/socket.h,
// asm-generic/ioctls.h, linux/personality.h). They are written out so the
// table compiles on every platform; the Linux tests compare them with
// golang.org/x/sys/unix.
const (
	cloneNewNS     = 0x00020000
	cloneNewCgroup = 0x02000000
	cloneNewUTS    = 0x04000000
	cloneNewIPC    = 0x08000000
	cloneNewUser   = 0x10000000
	cloneNewPID    = 0x20000000
	cloneNewNet    = 0x40000000
	cloneNewTime   = 0x00000080

	// unshareNamespaces is every flag with which unshare(2) creates a
	// namespace.
	unshareNamespaces = cloneNewNS | cloneNewCgroup | cloneNewUTS | cloneNewIPC |
		cloneNewUser | cloneNewPID | cloneNewNet | cloneNewTime

	// cloneNamespaces is the same for clone(2). It leaves out CLONE_NEWTIME:
	// in clone(2) that bit belongs to CSIGNAL, the exit signal in the low
	// byte, which the kernel strips before it reads the flags, so clone(2)
	// cannot create a time namespace (only unshare and clone3 can).
	cloneNamespaces = unshareNamespaces &^ cloneNewTime

	afUnix  = 1
	afInet  = 2
	afInet6 = 10

	tiocsti   = 0x5412
	tioclinux = 0x541c

	perLinux = 0x0000
	perQuery = 0xffffffff // personality(0xffffffff) reads the persona
)

// rules is the filter table. See the package documentation for how it is
// read; the tests check that every name has a number on every architecture
// (or is known to be absent there).
var rules = []Rule{
	// Other processes.
	{Name: "ptrace", Action: EPERM, Why: "trace and control other processes"},
	{Name: "process_vm_readv", Action: EPERM, Why: "read another process's memory"},
	{Name: "process_vm_writev", Action: EPERM, Why: "write another process's memory"},
	{Name: "kcmp", Action: EPERM, Why: "probe other processes' kernel objects"},
	{Name: "pidfd_getfd", Action: EPERM, Why: "steal another process's file descriptors"},

	// Mounts and the root directory.
	{Name: "mount", Action: EPERM, Why: "change the mount table"},
	{Name: "umount2", Action: EPERM, Why: "uncover what the sandbox's mounts hide"},
	{Name: "pivot_root", Action: EPERM, Why: "change the root filesystem"},
	{Name: "chroot", Action: EPERM, Why: "change the root directory"},
	{Name: "move_mount", Action: EPERM, Why: "new mount API"},
	{Name: "open_tree", Action: EPERM, Why: "new mount API: clone a mount tree"},
	{Name: "open_tree_attr", Action: EPERM, Why: "new mount API: clone a mount tree"},
	{Name: "fsopen", Action: EPERM, Why: "new mount API"},
	{Name: "fsconfig", Action: EPERM, Why: "new mount API"},
	{Name: "fsmount", Action: EPERM, Why: "new mount API"},
	{Name: "fspick", Action: EPERM, Why: "new mount API"},
	{Name: "mount_setattr", Action: EPERM, Why: "new mount API: make read-only mounts writable"},

	// Namespaces. clone3 passes its flags in a struct the filter cannot
	// read, so it fails with ENOSYS and C libraries fall back to clone.
	{Name: "setns", Action: EPERM, Why: "join another namespace"},
	{Name: "unshare", Action: EPERM, When: []Cond{{Arg: 0, Op: AnyBits, Mask: unshareNamespaces}},
		Why: "create namespaces, the door to more kernel attack surface"},
	{Name: "clone", Action: EPERM, When: []Cond{{Arg: 0, Op: AnyBits, Mask: cloneNamespaces}},
		Why: "create namespaces, the door to more kernel attack surface"},
	{Name: "clone3", Action: ENOSYS, Why: "its flags cannot be inspected; callers fall back to clone"},

	// Kernel keyrings.
	{Name: "keyctl", Action: EPERM, Why: "kernel keyrings are not namespaced"},
	{Name: "add_key", Action: EPERM, Why: "kernel keyrings are not namespaced"},
	{Name: "request_key", Action: EPERM, Why: "kernel keyrings are not namespaced"},

	// Large kernel attack surface.
	{Name: "bpf", Action: EPERM, Why: "eBPF programs and maps"},
	{Name: "perf_event_open", Action: EPERM, Why: "performance counters leak and have a long bug history"},
	{Name: "userfaultfd", Action: EPERM, Why: "stalls kernel page faults, a classic exploit aid"},
	{Name: "io_uring_setup", Action: EPERM, Why: "io_uring bypasses syscall filtering"},
	{Name: "io_uring_enter", Action: EPERM, Why: "io_uring bypasses syscall filtering"},
	{Name: "io_uring_register", Action: EPERM, Why: "io_uring bypasses syscall filtering"},

	// Kernel code and the machine.
	{Name: "kexec_load", Action: EPERM, Why: "load a new kernel"},
	{Name: "kexec_file_load", Action: EPERM, Why: "load a new kernel"},
	{Name: "init_module", Action: EPERM, Why: "load a kernel module"},
	{Name: "finit_module", Action: EPERM, Why: "load a kernel module"},
	{Name: "delete_module", Action: EPERM, Why: "unload a kernel module"},
	{Name: "reboot", Action: EPERM, Why: "reboot or halt the machine"},
	{Name: "swapon", Action: EPERM, Why: "change swap"},
	{Name: "swapoff", Action: EPERM, Why: "change swap"},
	{Name: "iopl", Action: EPERM, Why: "raw I/O port access"},
	{Name: "ioperm", Action: EPERM, Why: "raw I/O port access"},
	{Name: "syslog", Action: EPERM, Why: "read or clear the kernel log"},
	{Name: "acct", Action: EPERM, Why: "switch process accounting"},
	{Name: "quotactl", Action: EPERM, Why: "change disk quotas"},
	{Name: "quotactl_fd", Action: EPERM, Why: "change disk quotas"},
	{Name: "vhangup", Action: EPERM, Why: "hang up the terminal"},

	// Files by handle, which skips path checks.
	{Name: "open_by_handle_at", Action: EPERM, Why: "open files by handle, around the sandbox's mounts"},
	{Name: "name_to_handle_at", Action: EPERM, Why: "make file handles for open_by_handle_at"},
	{Name: "fanotify_init", Action: EPERM, Why: "watch filesystem events outside the sandbox"},

	// Clocks and names the whole host shares.
	{Name: "settimeofday", Action: EPERM, Why: "set the host's clock"},
	{Name: "clock_settime", Action: EPERM, Why: "set the host's clock"},
	{Name: "clock_adjtime", Action: EPERM, Why: "adjust the host's clock"},
	{Name: "adjtimex", Action: EPERM, Why: "adjust the host's clock"},
	{Name: "sethostname", Action: EPERM, Why: "rename the host"},
	{Name: "setdomainname", Action: EPERM, Why: "rename the host's NIS domain"},

	// Obsolete calls nothing needs.
	{Name: "uselib", Action: EPERM, Why: "obsolete"},
	{Name: "ustat", Action: EPERM, Why: "obsolete"},
	{Name: "sysfs", Action: EPERM, Why: "obsolete"},
	{Name: "_sysctl", Action: EPERM, Why: "obsolete"},
	{Name: "lookup_dcookie", Action: EPERM, Why: "obsolete profiling interface"},
	{Name: "nfsservctl", Action: EPERM, Why: "obsolete"},

	// personality: reading it and setting plain Linux are fine; other
	// personas change address-space layout (ADDR_NO_RANDOMIZE,
	// READ_IMPLIES_EXEC) and exist mainly to ease exploits.
	{Name: "personality", Action: Allow, When: []Cond{{Arg: 0, Value: perLinux}}, Why: "set the default persona"},
	{Name: "personality", Action: Allow, When: []Cond{{Arg: 0, Value: perQuery}}, Why: "read the persona"},
	{Name: "personality", Action: EPERM, Why: "weaken address-space randomisation"},

	// Sockets: only unix, IPv4 and IPv6. Netlink, packet, vsock and the
	// rest are large, rarely needed and a common source of kernel bugs.
	{Name: "socket", Action: Allow, When: []Cond{{Arg: 0, Value: afUnix}}, Why: "AF_UNIX"},
	{Name: "socket", Action: Allow, When: []Cond{{Arg: 0, Value: afInet}}, Why: "AF_INET"},
	{Name: "socket", Action: Allow, When: []Cond{{Arg: 0, Value: afInet6}}, Why: "AF_INET6"},
	{Name: "socket", Action: EAFNOSUPPORT, Why: "other address families"},
	{Name: "socketpair", Action: Allow, When: []Cond{{Arg: 0, Value: afUnix}}, Why: "AF_UNIX"},
	{Name: "socketpair", Action: Allow, When: []Cond{{Arg: 0, Value: afInet}}, Why: "AF_INET"},
	{Name: "socketpair", Action: Allow, When: []Cond{{Arg: 0, Value: afInet6}}, Why: "AF_INET6"},
	{Name: "socketpair", Action: EAFNOSUPPORT, Why: "other address families"},

	// Terminal ioctls that type into or take over the (host's) terminal.
	// The request is an unsigned int: only its low 32 bits count.
	{Name: "ioctl", Action: EPERM, When: []Cond{{Arg: 1, Value: tiocsti}},
		Why: "TIOCSTI: type commands into the controlling terminal"},
	{Name: "ioctl", Action: EPERM, When: []Cond{{Arg: 1, Value: tioclinux}},
		Why: "TIOCLINUX: read the console and inject selections"},
}

// Rules returns a copy of the filter table, in the order the filter tries
// it. It is the same on every architecture; calls an architecture lacks are
// left out of its program.
func Rules() []Rule {
	out := make([]Rule, len(rules))
	for i, r := range rules {
		r.When = append([]Cond(nil), r.When...)
		out[i] = r
	}
	return out
}
