package seccomp

import "fmt"

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

	afUnix    = 1
	afInet    = 2
	afInet6   = 10
	afNetlink = 16

	tiocsti   = 0x5412
	tioclinux = 0x541c

	perLinux = 0x0000
	perQuery = 0xffffffff // personality(0xffffffff) reads the persona

	// File modes (linux/stat.h) and open flags (asm-generic/fcntl.h, the
	// same on x86_64 and aarch64). oTmpfile is __O_TMPFILE, the bit that
	// O_TMPFILE adds to O_DIRECTORY.
	sIsuid   = 0o4000
	sIsgid   = 0o2000
	sIwgrp   = 0o020
	sIwoth   = 0o002
	oCreat   = 0o100
	oTmpfile = 0o20000000
)

// Options selects the parts of the filter that depend on the sandbox.
type Options struct {
	// HostWrites adds the rules for a sandbox that writes into host paths
	// (hutch run's workspace and allow_write paths): what it creates or
	// changes there may not grant or widen privilege on the host. See
	// hostWriteRules.
	HostWrites bool
	// Withheld, with HostWrites, is the set of write permissions that no
	// file the sandbox makes may get: S_IWOTH, and S_IWGRP when the user's
	// umask withholds group write (package hostperm decides). chmod may not
	// grant them, and a umask that lacks them is answered by the
	// supervisor instead of being set.
	Withheld uint32
}

// validate checks that o describes a filter that can be built.
func (o Options) validate() error {
	if !o.HostWrites {
		if o.Withheld != 0 {
			return fmt.Errorf("withheld bits %#o without host writes", o.Withheld)
		}
		return nil
	}
	if o.Withheld&sIwoth == 0 || o.Withheld&^(sIwoth|sIwgrp) != 0 {
		return fmt.Errorf("withheld bits %#o: want S_IWOTH, and at most S_IWGRP besides", o.Withheld)
	}
	return nil
}

// Listener reports whether the filter hands calls to a supervisor (it
// has a [Notify] rule): it must then be installed with a listener, whose
// descriptor the supervisor reads.
func (o Options) Listener() bool {
	for _, r := range table(o) {
		if r.Action == Notify {
			return true
		}
	}
	return false
}

// table is the filter table for o: the rules for host writes, when asked
// for, ahead of the rules every sandbox gets (openat, the most frequent of
// the calls they name, is then found after a few compares).
func table(o Options) []Rule {
	if !o.HostWrites {
		return baseRules
	}
	return append(hostWriteRules(uint64(o.Withheld)), baseRules...)
}

// hostWriteRules keep what a sandbox writes into host paths from granting
// or widening privilege on the host (ESCAPES 21): no setuid or setgid file,
// no file capability or ACL, no host-owned entry made writable to others
// (or to the group, when withheld says so). The filter cannot tell which
// file a call names, so the rules hold everywhere in the sandbox, its own
// /tmp included. Together with the sandbox's umask (the user's plus the
// withheld bits, which a Notify rule keeps) they cover every way a mode is
// set: chmod, fchmod, fchmodat, fchmodat2; the mode of a create (open,
// openat, creat, mknod, mknodat; the kernel keeps S_ISUID and S_ISGID of a
// create's mode, while the umask takes care of write bits); openat2,
// whose mode the filter cannot read; and extended attributes, whose names
// it cannot read either (security.capability, POSIX ACLs that grant
// others write, a removed ACL entry that widens the group's access).
// mkdir needs no rule: the kernel drops set-id bits from its mode.
func hostWriteRules(withheld uint64) []Rule {
	const setid = sIsuid | sIsgid
	bad := setid | withheld
	return []Rule{
		{Name: "openat", Action: EOPNOTSUPP, When: []Cond{{Arg: 2, Op: AnyBits, Mask: oTmpfile}, {Arg: 3, Op: AnyBits, Mask: bad}},
			Why: "an unnamed file (O_TMPFILE) with a set-id or withheld mode: kernels before 6.0 do not apply the umask to it; callers fall back to a named file"},
		{Name: "openat", Action: EPERM, When: []Cond{{Arg: 2, Op: AnyBits, Mask: oCreat | oTmpfile}, {Arg: 3, Op: AnyBits, Mask: setid}},
			Why: "create a setuid or setgid file"},
		{Name: "open", Action: EOPNOTSUPP, When: []Cond{{Arg: 1, Op: AnyBits, Mask: oTmpfile}, {Arg: 2, Op: AnyBits, Mask: bad}},
			Why: "an unnamed file (O_TMPFILE) with a set-id or withheld mode: kernels before 6.0 do not apply the umask to it; callers fall back to a named file"},
		{Name: "open", Action: EPERM, When: []Cond{{Arg: 1, Op: AnyBits, Mask: oCreat | oTmpfile}, {Arg: 2, Op: AnyBits, Mask: setid}},
			Why: "create a setuid or setgid file"},
		{Name: "creat", Action: EPERM, When: []Cond{{Arg: 1, Op: AnyBits, Mask: setid}}, Why: "create a setuid or setgid file"},
		{Name: "mknod", Action: EPERM, When: []Cond{{Arg: 1, Op: AnyBits, Mask: setid}}, Why: "create a setuid or setgid file"},
		{Name: "mknodat", Action: EPERM, When: []Cond{{Arg: 2, Op: AnyBits, Mask: setid}}, Why: "create a setuid or setgid file"},
		{Name: "openat2", Action: ENOSYS, Why: "its flags and mode are in a struct the filter cannot read; callers fall back to openat"},

		{Name: "chmod", Action: EPERM, When: []Cond{{Arg: 1, Op: AnyBits, Mask: bad}}, Why: "make a file setuid, setgid or writable to others"},
		{Name: "fchmod", Action: EPERM, When: []Cond{{Arg: 1, Op: AnyBits, Mask: bad}}, Why: "make a file setuid, setgid or writable to others"},
		{Name: "fchmodat", Action: EPERM, When: []Cond{{Arg: 2, Op: AnyBits, Mask: bad}}, Why: "make a file setuid, setgid or writable to others"},
		{Name: "fchmodat2", Action: EPERM, When: []Cond{{Arg: 2, Op: AnyBits, Mask: bad}}, Why: "make a file setuid, setgid or writable to others"},

		{Name: "setxattr", Action: EOPNOTSUPP, Why: "file capabilities and ACLs; names cannot be inspected"},
		{Name: "lsetxattr", Action: EOPNOTSUPP, Why: "file capabilities and ACLs; names cannot be inspected"},
		{Name: "fsetxattr", Action: EOPNOTSUPP, Why: "file capabilities and ACLs; names cannot be inspected"},
		{Name: "setxattrat", Action: EOPNOTSUPP, Why: "file capabilities and ACLs; names cannot be inspected"},
		{Name: "removexattr", Action: EOPNOTSUPP, Why: "removing an ACL entry can widen access; names cannot be inspected"},
		{Name: "lremovexattr", Action: EOPNOTSUPP, Why: "removing an ACL entry can widen access; names cannot be inspected"},
		{Name: "fremovexattr", Action: EOPNOTSUPP, Why: "removing an ACL entry can widen access; names cannot be inspected"},
		{Name: "removexattrat", Action: EOPNOTSUPP, Why: "removing an ACL entry can widen access; names cannot be inspected"},

		// umask's mask is an int; the kernel keeps its permission bits.
		{Name: "umask", Action: Allow, When: []Cond{{Arg: 0, Mask: withheld, Value: withheld}}, Why: "a umask that keeps the withheld bits"},
		{Name: "umask", Action: Notify,
			Why: "a umask that would let new files be writable by others: the supervisor answers with the thread's current umask, which stays"},
	}
}

// baseRules is the filter table every sandbox gets. See the package
// documentation for how it is read; the tests check that every name has a
// number on every architecture (or is known to be absent there).
var baseRules = []Rule{
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
	// Netlink is refused as "not supported" (EOPNOTSUPP) rather than as
	// an unknown family: libzmq (every Jupyter kernel) lists the network
	// interfaces (getifaddrs, a netlink socket) before it binds a TCP
	// address, carries on without them on EOPNOTSUPP or EINVAL, and
	// aborts on any other error.
	{Name: "socket", Action: EOPNOTSUPP, When: []Cond{{Arg: 0, Value: afNetlink}}, Why: "AF_NETLINK (refused so that libzmq carries on)"},
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

// HostWriteRules returns a copy of the rules Options.HostWrites adds (see
// hostWriteRules), for a tier that enforces them with a filter of its own
// (gVisor's Sentry reads them from the OCI spec).
func HostWriteRules(withheld uint32) []Rule {
	return Rules(Options{HostWrites: true, Withheld: withheld})[:len(hostWriteRules(uint64(withheld)))]
}

// Rules returns a copy of the filter table for o, in the order the filter
// tries it. It is the same on every architecture; calls an architecture
// lacks are left out of its program.
func Rules(o Options) []Rule {
	rules := table(o)
	out := make([]Rule, len(rules))
	for i, r := range rules {
		r.When = append([]Cond(nil), r.When...)
		out[i] = r
	}
	return out
}
