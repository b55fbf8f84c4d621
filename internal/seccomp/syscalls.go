package seccomp

// arch is one architecture's syscall ABI as the filter sees it.
//
// The tables are plain data compiled on every platform, so the x86_64
// program is tested on arm64 machines and the other way round; the build
// tags of native_linux_*.go pick the one Install uses. The Linux tests
// compare each table with golang.org/x/sys/unix on its own architecture.
type arch struct {
	// name is the Go architecture name.
	name string
	// audit is the AUDIT_ARCH_* value the kernel puts in seccomp_data.arch
	// for the native ABI.
	audit uint32
	// x32 marks x86_64, whose kernel also accepts x32 calls: the native
	// AUDIT_ARCH with syscall numbers that have bit 30 set.
	x32 bool
	// numbers holds every syscall the rules name with its number, or with
	// absent if the architecture does not have it, but for those of
	// unifiedNumbers. It is a list, not a
	// map, so that it is plain data in the binary: a map literal would be
	// built during package initialization, at every start of hutch.
	numbers []syscallNumber
}

// syscallNumber is one syscall's name and number.
type syscallNumber struct {
	name string
	nr   int
}

// number returns the number of the syscall name, absent if the
// architecture does not have it, and false if the table does not list it.
func (a *arch) number(name string) (int, bool) {
	for _, list := range [][]syscallNumber{a.numbers, unifiedNumbers} {
		for _, n := range list {
			if n.name == name {
				return n.nr, true
			}
		}
	}
	return 0, false
}

// is reports whether nr is the number of the syscall name.
func (a *arch) is(nr int, name string) bool {
	n, ok := a.number(name)
	return ok && n != absent && n == nr
}

// unifiedNumbers are the syscalls numbered from 424 up, which every
// architecture numbers alike (since Linux 5.1); each arch's own list
// holds the others.
var unifiedNumbers = []syscallNumber{
	{"io_uring_setup", 425},
	{"io_uring_enter", 426},
	{"io_uring_register", 427},
	{"open_tree", 428},
	{"move_mount", 429},
	{"fsopen", 430},
	{"fsconfig", 431},
	{"fsmount", 432},
	{"fspick", 433},
	{"clone3", 435},
	{"openat2", 437},
	{"pidfd_getfd", 438},
	{"mount_setattr", 442},
	{"quotactl_fd", 443},
	{"fchmodat2", 452},
	{"setxattrat", 463},
	{"removexattrat", 466},
	{"open_tree_attr", 467},
}

// absent marks a syscall an architecture does not have.
const absent = -1

// Values from linux/audit.h.
const (
	auditArchX86_64  = 0xc000003e
	auditArchAArch64 = 0xc00000b7
	auditArchI386    = 0x40000003
	auditArchARM     = 0x40000028
)

// x32SyscallBit is __X32_SYSCALL_BIT from arch/x86/include/uapi/asm/unistd.h.
const x32SyscallBit = 0x40000000

// archAMD64 is x86_64, from arch/x86/entry/syscalls/syscall_64.tbl.
var archAMD64 = &arch{
	name:  "amd64",
	audit: auditArchX86_64,
	x32:   true,
	numbers: []syscallNumber{
		{"open", 2},
		{"ioctl", 16},
		{"socket", 41},
		{"socketpair", 53},
		{"clone", 56},
		{"ptrace", 101},
		{"syslog", 103},
		{"uselib", 134},
		{"creat", 85},
		{"chmod", 90},
		{"fchmod", 91},
		{"umask", 95},
		{"mknod", 133},
		{"personality", 135},
		{"ustat", 136},
		{"sysfs", 139},
		{"vhangup", 153},
		{"pivot_root", 155},
		{"_sysctl", 156},
		{"adjtimex", 159},
		{"chroot", 161},
		{"acct", 163},
		{"settimeofday", 164},
		{"mount", 165},
		{"umount2", 166},
		{"swapon", 167},
		{"swapoff", 168},
		{"reboot", 169},
		{"sethostname", 170},
		{"setdomainname", 171},
		{"iopl", 172},
		{"ioperm", 173},
		{"init_module", 175},
		{"delete_module", 176},
		{"quotactl", 179},
		{"nfsservctl", 180},
		{"setxattr", 188},
		{"lsetxattr", 189},
		{"fsetxattr", 190},
		{"removexattr", 197},
		{"lremovexattr", 198},
		{"fremovexattr", 199},
		{"lookup_dcookie", 212},
		{"clock_settime", 227},
		{"kexec_load", 246},
		{"add_key", 248},
		{"request_key", 249},
		{"keyctl", 250},
		{"openat", 257},
		{"mknodat", 259},
		{"fchmodat", 268},
		{"unshare", 272},
		{"perf_event_open", 298},
		{"fanotify_init", 300},
		{"name_to_handle_at", 303},
		{"open_by_handle_at", 304},
		{"clock_adjtime", 305},
		{"setns", 308},
		{"process_vm_readv", 310},
		{"process_vm_writev", 311},
		{"kcmp", 312},
		{"finit_module", 313},
		{"kexec_file_load", 320},
		{"bpf", 321},
		{"userfaultfd", 323},
	},
}

// archARM64 is aarch64, from include/uapi/asm-generic/unistd.h. The
// generic table never had the legacy calls marked absent.
var archARM64 = &arch{
	name:  "arm64",
	audit: auditArchAArch64,
	numbers: []syscallNumber{
		{"setxattr", 5},
		{"lsetxattr", 6},
		{"fsetxattr", 7},
		{"removexattr", 14},
		{"lremovexattr", 15},
		{"fremovexattr", 16},
		{"lookup_dcookie", 18},
		{"ioctl", 29},
		{"mknodat", 33},
		{"umount2", 39},
		{"mount", 40},
		{"pivot_root", 41},
		{"nfsservctl", 42},
		{"chroot", 51},
		{"fchmod", 52},
		{"fchmodat", 53},
		{"openat", 56},
		{"vhangup", 58},
		{"quotactl", 60},
		{"acct", 89},
		{"personality", 92},
		{"unshare", 97},
		{"kexec_load", 104},
		{"init_module", 105},
		{"delete_module", 106},
		{"clock_settime", 112},
		{"syslog", 116},
		{"ptrace", 117},
		{"reboot", 142},
		{"sethostname", 161},
		{"setdomainname", 162},
		{"umask", 166},
		{"settimeofday", 170},
		{"adjtimex", 171},
		{"socket", 198},
		{"socketpair", 199},
		{"add_key", 217},
		{"request_key", 218},
		{"keyctl", 219},
		{"clone", 220},
		{"swapon", 224},
		{"swapoff", 225},
		{"perf_event_open", 241},
		{"fanotify_init", 262},
		{"name_to_handle_at", 264},
		{"open_by_handle_at", 265},
		{"clock_adjtime", 266},
		{"setns", 268},
		{"process_vm_readv", 270},
		{"process_vm_writev", 271},
		{"kcmp", 272},
		{"finit_module", 273},
		{"bpf", 280},
		{"userfaultfd", 282},
		{"kexec_file_load", 294},

		{"uselib", absent},
		{"ustat", absent},
		{"sysfs", absent},
		{"_sysctl", absent},
		{"iopl", absent},
		{"ioperm", absent},
		{"open", absent},
		{"creat", absent},
		{"chmod", absent},
		{"mknod", absent},
	},
}
