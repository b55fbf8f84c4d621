package seccomp

import (
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// opJgtK is not emitted, but the interpreter knows it.
const opJgtK = bpfJMP | bpfJGT | bpfK

// seccompData is struct seccomp_data, the input of a seccomp program.
type seccompData struct {
	nr   int32
	arch uint32
	ip   uint64
	args [6]uint64
}

// bytes lays d out as the kernel does on a little-endian machine.
func (d seccompData) bytes() []byte {
	b := make([]byte, 64)
	binary.LittleEndian.PutUint32(b[0:], uint32(d.nr))
	binary.LittleEndian.PutUint32(b[4:], d.arch)
	binary.LittleEndian.PutUint64(b[8:], d.ip)
	for i, a := range d.args {
		binary.LittleEndian.PutUint64(b[16+8*i:], a)
	}
	return b
}

// check validates prog the way the kernel does before it accepts a seccomp
// filter, for the opcodes this package emits: a length within limits, every
// jump landing inside the program, loads aligned and inside seccomp_data,
// and a return as the last instruction.
func check(prog []instruction) error {
	if len(prog) == 0 || len(prog) > maxInsns {
		return fmt.Errorf("length %d", len(prog))
	}
	for pc, in := range prog {
		switch in.Code {
		case opLdAbsW:
			if in.K%4 != 0 || in.K+4 > 64 {
				return fmt.Errorf("pc %d: load of offset %d", pc, in.K)
			}
		case opAndK, opRetK:
		case opJa:
			if uint64(pc)+1+uint64(in.K) >= uint64(len(prog)) {
				return fmt.Errorf("pc %d: ja %d leaves the program", pc, in.K)
			}
		case opJeqK, opJgeK, opJsetK, opJgtK:
			if pc+1+int(in.Jt) >= len(prog) || pc+1+int(in.Jf) >= len(prog) {
				return fmt.Errorf("pc %d: jump leaves the program", pc)
			}
		default:
			return fmt.Errorf("pc %d: opcode %#x not understood", pc, in.Code)
		}
	}
	if prog[len(prog)-1].Code != opRetK {
		return fmt.Errorf("last instruction is not a return")
	}
	return nil
}

// run interprets prog over d and returns the SECCOMP_RET_* value, like the
// kernel's classic BPF interpreter for the subset seccomp allows.
func run(prog []instruction, d seccompData) (uint32, error) {
	if err := check(prog); err != nil {
		return 0, err
	}
	data := d.bytes()
	var a uint32
	for pc := 0; pc < len(prog); pc++ {
		in := prog[pc]
		switch in.Code {
		case opLdAbsW:
			a = binary.LittleEndian.Uint32(data[in.K:])
		case opAndK:
			a &= in.K
		case opJa:
			pc += int(in.K)
		case opJeqK, opJgeK, opJsetK, opJgtK:
			var taken bool
			switch in.Code {
			case opJeqK:
				taken = a == in.K
			case opJgeK:
				taken = a >= in.K
			case opJsetK:
				taken = a&in.K != 0
			case opJgtK:
				taken = a > in.K
			}
			if taken {
				pc += int(in.Jt)
			} else {
				pc += int(in.Jf)
			}
		case opRetK:
			return in.K, nil
		}
	}
	return 0, fmt.Errorf("fell off the end")
}

// retName renders a SECCOMP_RET_* value for test failures.
func retName(k uint32) string {
	switch k {
	case retAllow:
		return "allow"
	case retKillProcess:
		return "kill process"
	case retErrno | errnoEPERM:
		return "EPERM"
	case retErrno | errnoENOSYS:
		return "ENOSYS"
	case retErrno | errnoEAFNOSUPPORT:
		return "EAFNOSUPPORT"
	case retErrno | errnoEOPNOTSUPP:
		return "EOPNOTSUPP"
	case retUserNotif:
		return "notify"
	}
	return fmt.Sprintf("%#x", k)
}

func mustRet(t testing.TB, a Action) uint32 {
	t.Helper()
	k, err := a.ret()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// hostOpts and hostOptsGroup are the options of a sandbox that writes
// host paths, for a user whose umask withholds group write (022) and one
// whose umask does not (002).
var (
	hostOpts      = Options{HostWrites: true, Withheld: sIwoth | sIwgrp}
	hostOptsGroup = Options{HostWrites: true, Withheld: sIwoth}
)

// fullTable is the largest table: every rule of every option.
func fullTable() []Rule { return table(hostOpts) }

// otherNumbers holds calls the rules do not name, for test cases.
var otherNumbers = map[string]map[string]int{
	"amd64": {"read": 0, "write": 1, "getpid": 39, "execve": 59, "openat": 257},
	"arm64": {"read": 63, "write": 64, "getpid": 172, "execve": 221, "openat": 56},
}

func nrOf(t testing.TB, a *arch, name string) int32 {
	t.Helper()
	if nr, ok := a.number(name); ok {
		return int32(nr)
	}
	if nr, ok := otherNumbers[a.name][name]; ok {
		return int32(nr)
	}
	t.Fatalf("no number for %s on %s", name, a.name)
	return 0
}

func TestFilter(t *testing.T) {
	const (
		sigchld      = 17
		cloneVM      = 0x100
		cloneFS      = 0x200
		cloneFiles   = 0x400
		cloneThreads = 0x003d0f00 // what pthread_create and the Go runtime pass
		afNetlink    = 16
		afPacket     = 17
		tcgets       = 0x5401
		addrNoRandom = 0x0040000
	)
	kill := uint32(retKillProcess)
	allow := uint32(retAllow)
	eperm := uint32(retErrno | errnoEPERM)
	enosys := uint32(retErrno | errnoENOSYS)
	eafnosupport := uint32(retErrno | errnoEAFNOSUPPORT)
	eopnotsupp := uint32(retErrno | errnoEOPNOTSUPP)

	tests := []filterCase{
		{name: "read", call: "read", want: allow},
		{name: "write", call: "write", args: [6]uint64{1, 0, 10}, want: allow},
		{name: "getpid", call: "getpid", want: allow},
		{name: "execve", call: "execve", want: allow},
		{name: "i386 call on x86_64", only: "amd64", call: "read", arch: auditArchI386, want: kill},
		{name: "i386 getpid (nr 20)", only: "amd64", nr: 20, arch: auditArchI386, want: kill},
		{name: "arm32 call on arm64", only: "arm64", call: "read", arch: auditArchARM, want: kill},
		{name: "x86_64 call on arm64", only: "arm64", call: "read", arch: auditArchX86_64, want: kill},
		{name: "bogus arch", call: "read", arch: 0xffffffff, want: kill},
		{name: "x32 read", only: "amd64", nr: x32SyscallBit, want: kill},
		{name: "x32 getpid", only: "amd64", nr: x32SyscallBit | 39, want: kill},
		{name: "x32 ptrace", only: "amd64", nr: x32SyscallBit | 521, want: kill},
		{name: "x32 top", only: "amd64", nr: 0x7fffffff, want: kill},
		{name: "negative nr", only: "amd64", nr: -2, want: kill},
		{name: "nr -1 skipped by a tracer", nr: -1, want: allow},
		{name: "unknown nr", nr: 1000, want: allow},

		{name: "socket AF_NETLINK", call: "socket", args: [6]uint64{afNetlink, 3, 0}, want: eopnotsupp},
		{name: "socket AF_PACKET", call: "socket", args: [6]uint64{afPacket, 3, 0}, want: eafnosupport},
		{name: "socket AF_INET", call: "socket", args: [6]uint64{afInet, 1, 0}, want: allow},
		{name: "socket AF_INET6", call: "socket", args: [6]uint64{afInet6, 2, 0}, want: allow},
		{name: "socket AF_UNIX", call: "socket", args: [6]uint64{afUnix, 1, 0}, want: allow},
		{name: "socket AF_UNSPEC", call: "socket", want: eafnosupport},
		{name: "socket AF_NETLINK, high bits set", call: "socket", args: [6]uint64{0xffffffff_00000000 | afNetlink}, want: eopnotsupp},
		{name: "socket AF_INET, high bits set (kernel reads AF_INET)", call: "socket", args: [6]uint64{1<<32 | afInet}, want: allow},
		{name: "socket AF_INET in arg1 only", call: "socket", args: [6]uint64{afPacket, afInet}, want: eafnosupport},
		{name: "socketpair AF_NETLINK", call: "socketpair", args: [6]uint64{afNetlink}, want: eafnosupport},
		{name: "socketpair AF_UNIX", call: "socketpair", args: [6]uint64{afUnix, 1}, want: allow},

		{name: "ioctl TIOCSTI", call: "ioctl", args: [6]uint64{0, tiocsti}, want: eperm},
		{name: "ioctl TIOCSTI, high bits set", call: "ioctl", args: [6]uint64{0, 0xdeadbeef_00005412}, want: eperm},
		{name: "ioctl TIOCSTI, all high bits set", call: "ioctl", args: [6]uint64{0, 0xffffffff_00005412}, want: eperm},
		{name: "ioctl TIOCLINUX", call: "ioctl", args: [6]uint64{0, tioclinux}, want: eperm},
		{name: "ioctl TIOCLINUX, high bits set", call: "ioctl", args: [6]uint64{3, 1<<63 | tioclinux}, want: eperm},
		{name: "ioctl TCGETS", call: "ioctl", args: [6]uint64{0, tcgets}, want: allow},
		{name: "ioctl TIOCSTI+1, high bits set", call: "ioctl", args: [6]uint64{0, 1<<32 | tiocsti + 1}, want: allow},
		{name: "ioctl TIOCSTI as fd", call: "ioctl", args: [6]uint64{tiocsti, tcgets}, want: allow},

		{name: "clone CLONE_NEWUSER|SIGCHLD", call: "clone", args: [6]uint64{cloneNewUser | sigchld}, want: eperm},
		{name: "clone CLONE_NEWNET", call: "clone", args: [6]uint64{cloneNewNet}, want: eperm},
		{name: "clone CLONE_NEWNS|CLONE_VM", call: "clone", args: [6]uint64{cloneNewNS | cloneVM}, want: eperm},
		{name: "clone CLONE_NEWPID, high bits set", call: "clone", args: [6]uint64{0xffffffff_00000000 | cloneNewPID}, want: eperm},
		{name: "clone SIGCHLD", call: "clone", args: [6]uint64{sigchld}, want: allow},
		{name: "clone thread", call: "clone", args: [6]uint64{cloneThreads}, want: allow},
		{name: "clone namespace flag in arg1 only", call: "clone", args: [6]uint64{sigchld, cloneNewUser}, want: allow},
		{name: "clone exit signal with bit 0x80 (CSIGNAL, not CLONE_NEWTIME)", call: "clone", args: [6]uint64{0x80 | sigchld}, want: allow},
		{name: "unshare CLONE_NEWNS", call: "unshare", args: [6]uint64{cloneNewNS}, want: eperm},
		{name: "unshare CLONE_NEWUSER", call: "unshare", args: [6]uint64{cloneNewUser}, want: eperm},
		{name: "unshare CLONE_NEWTIME", call: "unshare", args: [6]uint64{cloneNewTime}, want: eperm},
		{name: "unshare CLONE_NEWCGROUP|CLONE_FS", call: "unshare", args: [6]uint64{cloneNewCgroup | cloneFS}, want: eperm},
		{name: "unshare CLONE_NEWIPC|CLONE_NEWUTS", call: "unshare", args: [6]uint64{cloneNewIPC | cloneNewUTS}, want: eperm},
		{name: "unshare CLONE_FILES", call: "unshare", args: [6]uint64{cloneFiles}, want: allow},
		{name: "unshare 0", call: "unshare", want: allow},
		{name: "clone3", call: "clone3", args: [6]uint64{0x7ffd0000, 88}, want: enosys},

		{name: "ptrace", call: "ptrace", want: eperm},
		{name: "ptrace PTRACE_TRACEME", call: "ptrace", args: [6]uint64{0}, want: eperm},
		{name: "mount", call: "mount", want: eperm},
		{name: "setns", call: "setns", want: eperm},
		{name: "bpf", call: "bpf", want: eperm},
		{name: "io_uring_setup", call: "io_uring_setup", want: eperm},
		{name: "open_tree_attr", call: "open_tree_attr", want: eperm},
		{name: "iopl", only: "amd64", call: "iopl", want: eperm},
		{name: "_sysctl", only: "amd64", call: "_sysctl", want: eperm},

		{name: "personality(PER_LINUX)", call: "personality", args: [6]uint64{perLinux}, want: allow},
		{name: "personality query", call: "personality", args: [6]uint64{perQuery}, want: allow},
		{name: "personality query, 64-bit -1", call: "personality", args: [6]uint64{^uint64(0)}, want: allow},
		{name: "personality ADDR_NO_RANDOMIZE", call: "personality", args: [6]uint64{addrNoRandom}, want: eperm},
		{name: "personality PER_LINUX32", call: "personality", args: [6]uint64{8}, want: eperm},
	}
	// Every sandbox's rules decide the same with and without the rules
	// for host writes.
	for _, a := range []*arch{archAMD64, archARM64} {
		for _, o := range []Options{{}, hostOpts, hostOptsGroup} {
			prog, err := assemble(table(o), a)
			if err != nil {
				t.Fatalf("%s: %v", a.name, err)
			}
			runCases(t, a, prog, fmt.Sprintf("%s/hostwrites=%v", a.name, o.HostWrites), tests)
		}
	}
}

// filterCase is one call and what the filter must answer.
type filterCase struct {
	name string
	only string // run only for this architecture
	call string // syscall name, or "" to use nr
	nr   int32
	arch uint32 // AUDIT_ARCH; 0 means native
	args [6]uint64
	want uint32
}

func runCases(t *testing.T, a *arch, prog []instruction, prefix string, tests []filterCase) {
	t.Helper()
	for _, tt := range tests {
		if tt.only != "" && tt.only != a.name {
			continue
		}
		t.Run(prefix+"/"+tt.name, func(t *testing.T) {
			d := seccompData{nr: tt.nr, arch: a.audit, args: tt.args}
			if tt.call != "" {
				d.nr = nrOf(t, a, tt.call)
			}
			if tt.arch != 0 {
				d.arch = tt.arch
			}
			got, err := run(prog, d)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("nr %d args %#x: got %s, want %s", d.nr, d.args, retName(got), retName(tt.want))
			}
		})
	}
}

// TestHostWriteRules: with host writes, no call may make a file setuid,
// setgid, writable to others (or to the group when withheld), set or
// remove an extended attribute, or set a umask that lacks the withheld
// bits (that goes to the supervisor); everything else about files is
// allowed, and without host writes none of it is refused. Modes are
// umode_t and flags int: only their low bits count, whatever the high
// word holds.
func TestHostWriteRules(t *testing.T) {
	allow := uint32(retAllow)
	eperm := uint32(retErrno | errnoEPERM)
	enosys := uint32(retErrno | errnoENOSYS)
	eopnotsupp := uint32(retErrno | errnoEOPNOTSUPP)
	notify := uint32(retUserNotif)
	const (
		oWronly  = 0o1
		oRdwr    = 0o2
		sIfreg   = 0o100000
		highWord = 0xffffffff_00000000
	)
	oTmpfileFlags := uint64(oTmpfile | 0o200000) // O_TMPFILE with x86_64's O_DIRECTORY
	// mode is where each chmod call takes its mode.
	chmods := map[string]int{"chmod": 1, "fchmod": 1, "fchmodat": 2, "fchmodat2": 2}
	var common, groupWithheld, groupAllowed, off []filterCase
	for call, arg := range chmods {
		only := ""
		if call == "chmod" {
			only = "amd64"
		}
		mode := func(name string, m uint64, want uint32) filterCase {
			c := filterCase{name: fmt.Sprintf("%s %s", call, name), only: only, call: call, want: want}
			c.args[arg] = m
			return c
		}
		common = append(common,
			mode("06755", 0o6755, eperm), mode("04755", 0o4755, eperm), mode("02755", 0o2755, eperm),
			mode("0777", 0o777, eperm), mode("0757 (o+w)", 0o757, eperm), mode("0646", 0o646, eperm),
			mode("0755", 0o755, allow), mode("0700", 0o700, allow), mode("0444", 0o444, allow), mode("01755 (sticky)", 0o1755, allow),
			mode("04755, high word set", 1<<32|0o4755, eperm), mode("0755, high word all ones", highWord|0o755, allow),
			mode("0755 with bit 16 (umode_t drops it)", 1<<16|0o755, allow),
		)
		groupWithheld = append(groupWithheld, mode("0775 (g+w)", 0o775, eperm), mode("0664", 0o664, eperm))
		groupAllowed = append(groupAllowed, mode("0775 (g+w)", 0o775, allow), mode("0664", 0o664, allow), mode("02775", 0o2775, eperm))
		off = append(off, mode("06755", 0o6755, allow), mode("0777", 0o777, allow))
		// The mode in another argument decides nothing.
		other := filterCase{name: call + " 06755 in another argument", only: only, call: call, want: allow}
		other.args[arg-1] = 0o6755
		if arg+1 < 6 {
			other.args[arg+1] = 0o6755
		}
		common = append(common, other)
	}
	// Creates: flags then mode, per call.
	for _, c := range []struct {
		call       string
		only       string
		flags, arg int
	}{{"openat", "", 2, 3}, {"open", "amd64", 1, 2}} {
		create := func(name string, flags, m uint64, want uint32) filterCase {
			fc := filterCase{name: c.call + " " + name, only: c.only, call: c.call, want: want}
			fc.args[c.flags], fc.args[c.arg] = flags, m
			return fc
		}
		common = append(common,
			create("O_CREAT 04755", oCreat|oWronly, 0o4755, eperm),
			create("O_CREAT 02755", oCreat|oWronly, 0o2755, eperm),
			create("O_CREAT 0666 (the umask takes care of it)", oCreat|oWronly, 0o666, allow),
			create("O_CREAT 0777", oCreat|oRdwr, 0o777, allow),
			create("O_RDONLY with a stray 04755", 0, 0o4755, allow),
			create("O_CREAT 04755, flags' high word set", highWord|oCreat, 0o4755, eperm),
			create("O_CREAT 04755, mode's high word set", oCreat, highWord|0o4755, eperm),
			create("O_CREAT with a high-word-only setuid", oCreat, 0o4000<<32|0o644, allow),
			create("O_TMPFILE 0600", oTmpfileFlags|oRdwr, 0o600, allow),
			create("O_TMPFILE 0666", oTmpfileFlags|oRdwr, 0o666, eopnotsupp),
			create("O_TMPFILE 04600", oTmpfileFlags|oRdwr, 0o4600, eopnotsupp),
			create("O_TMPFILE alone (EINVAL in the kernel) 04600", oTmpfile, 0o4600, eopnotsupp),
		)
		groupWithheld = append(groupWithheld, create("O_TMPFILE 0660", oTmpfileFlags|oRdwr, 0o660, eopnotsupp))
		groupAllowed = append(groupAllowed, create("O_TMPFILE 0660", oTmpfileFlags|oRdwr, 0o660, allow))
		off = append(off, create("O_CREAT 04755", oCreat|oWronly, 0o4755, allow), create("O_TMPFILE 0666", oTmpfileFlags|oRdwr, 0o666, allow))
	}
	common = append(common,
		filterCase{name: "creat 04755", only: "amd64", call: "creat", args: [6]uint64{0, 0o4755}, want: eperm},
		filterCase{name: "creat 0644", only: "amd64", call: "creat", args: [6]uint64{0, 0o644}, want: allow},
		filterCase{name: "mknod S_IFREG|04755", only: "amd64", call: "mknod", args: [6]uint64{0, sIfreg | 0o4755}, want: eperm},
		filterCase{name: "mknod S_IFIFO|0644", only: "amd64", call: "mknod", args: [6]uint64{0, 0o010000 | 0o644}, want: allow},
		filterCase{name: "mknodat S_IFREG|02755", call: "mknodat", args: [6]uint64{0, 0, sIfreg | 0o2755}, want: eperm},
		filterCase{name: "mknodat S_IFREG|0644", call: "mknodat", args: [6]uint64{0, 0, sIfreg | 0o644}, want: allow},
		filterCase{name: "openat2", call: "openat2", want: enosys},
		filterCase{name: "umask(022)", call: "umask", args: [6]uint64{0o022}, want: allow},
		filterCase{name: "umask(077)", call: "umask", args: [6]uint64{0o077}, want: allow},
		filterCase{name: "umask(0)", call: "umask", args: [6]uint64{0}, want: notify},
		filterCase{name: "umask(020)", call: "umask", args: [6]uint64{0o020}, want: notify},
		filterCase{name: "umask(0), high word set", call: "umask", args: [6]uint64{highWord}, want: notify},
		filterCase{name: "umask(022), high word set", call: "umask", args: [6]uint64{highWord | 0o022}, want: allow},
	)
	for _, x := range []string{"setxattr", "lsetxattr", "fsetxattr", "setxattrat", "removexattr", "lremovexattr", "fremovexattr", "removexattrat"} {
		common = append(common, filterCase{name: x, call: x, want: eopnotsupp})
		off = append(off, filterCase{name: x, call: x, want: allow})
	}
	groupWithheld = append(groupWithheld, filterCase{name: "umask(002)", call: "umask", args: [6]uint64{0o002}, want: notify})
	groupAllowed = append(groupAllowed, filterCase{name: "umask(002)", call: "umask", args: [6]uint64{0o002}, want: allow})
	off = append(off,
		filterCase{name: "openat2", call: "openat2", want: allow},
		filterCase{name: "umask(0)", call: "umask", want: allow},
	)
	for _, a := range []*arch{archAMD64, archARM64} {
		for _, tt := range []struct {
			o     Options
			cases [][]filterCase
		}{
			{hostOpts, [][]filterCase{common, groupWithheld}},
			{hostOptsGroup, [][]filterCase{common, groupAllowed}},
			{Options{}, [][]filterCase{off}},
		} {
			prog, err := assemble(table(tt.o), a)
			if err != nil {
				t.Fatal(err)
			}
			for _, cs := range tt.cases {
				runCases(t, a, prog, fmt.Sprintf("%s/withheld=%#o", a.name, tt.o.Withheld), cs)
			}
		}
	}
}

func TestOptions(t *testing.T) {
	for _, tt := range []struct {
		o        Options
		ok       bool
		listener bool
	}{
		{Options{}, true, false},
		{hostOpts, true, true},
		{hostOptsGroup, true, true},
		{Options{HostWrites: true}, false, true},
		{Options{HostWrites: true, Withheld: sIwgrp}, false, true},
		{Options{HostWrites: true, Withheld: sIwoth | 0o200}, false, true},
		{Options{Withheld: sIwoth}, false, false},
	} {
		if err := tt.o.validate(); (err == nil) != tt.ok {
			t.Errorf("%+v: validate: %v, want ok=%v", tt.o, err, tt.ok)
		}
		if got := tt.o.Listener(); got != tt.listener {
			t.Errorf("%+v: Listener() = %v", tt.o, got)
		}
	}
}

// TestEveryRule checks that each unconditional rule takes its action on
// each architecture that has its syscall, and that every conditional rule's
// syscall is allowed when its arguments match nothing (all-ones arguments
// match no rule's condition in the table).
func TestEveryRule(t *testing.T) {
	for _, a := range []*arch{archAMD64, archARM64} {
		rules := fullTable()
		prog, err := assemble(rules, a)
		if err != nil {
			t.Fatalf("%s: %v", a.name, err)
		}
		for _, r := range rules {
			nr, _ := a.number(r.Name)
			if nr == absent {
				continue
			}
			d := seccompData{nr: int32(nr), arch: a.audit}
			got, err := run(prog, d)
			if err != nil {
				t.Fatal(err)
			}
			if len(r.When) == 0 {
				// The last, unconditional rule decides for arguments
				// that match nothing before it.
				if r.Name == "personality" || r.Name == "socket" || r.Name == "socketpair" {
					d.args[0] = 0x1234
					got, _ = run(prog, d)
				}
				if want := mustRet(t, r.Action); got != want {
					t.Errorf("%s: %s: got %s, want %s", a.name, r, retName(got), retName(want))
				}
			}
		}
	}
}

// TestLowWordOnly pins the offsets the default program reads: every
// condition in the table is on an int, unsigned int or 32-bit-truncated
// argument, so the program must load only low words (16+8*i) and never a
// high word (20+8*i) that the caller could use to steer a compare.
func TestLowWordOnly(t *testing.T) {
	for _, a := range []*arch{archAMD64, archARM64} {
		prog, err := assemble(fullTable(), a)
		if err != nil {
			t.Fatal(err)
		}
		loads := map[uint32]bool{}
		for _, in := range prog {
			if in.Code == opLdAbsW {
				loads[in.K] = true
			}
		}
		for off := range loads {
			switch {
			case off == offNr, off == offArch:
			case off >= offArgs && (off-offArgs)%8 == 0:
			default:
				t.Errorf("%s: program loads offset %d, not nr, arch or an argument's low word", a.name, off)
			}
		}
		for _, want := range []uint32{offArch, offNr, argLow(0), argLow(1)} {
			if !loads[want] {
				t.Errorf("%s: program never loads offset %d", a.name, want)
			}
		}
	}
}

// testArch is a made-up architecture for synthetic rule tables.
func testArch(names ...string) *arch {
	a := &arch{name: "test", audit: auditArchX86_64, numbers: []syscallNumber{{"absent", absent}}}
	for i, n := range names {
		a.numbers = append(a.numbers, syscallNumber{n, 100 + i})
	}
	return a
}

func TestConditionWords(t *testing.T) {
	rs := []Rule{
		{Name: "eq64", Action: EPERM, When: []Cond{{Arg: 2, Width: Full64, Value: 0x1_00000002}}},
		{Name: "any64", Action: EPERM, When: []Cond{{Arg: 3, Width: Full64, Op: AnyBits, Mask: 1<<63 | 1}}},
		{Name: "eq32masked", Action: EPERM, When: []Cond{{Arg: 0, Mask: 0xff, Value: 0x12}}},
		{Name: "anyhigh", Action: EPERM, When: []Cond{{Arg: 5, Width: Full64, Op: AnyBits, Mask: 0xff_00000000}}},
		{Name: "eqhigh", Action: EPERM, When: []Cond{{Arg: 4, Width: Full64, Mask: 0xffff0000_00000000, Value: 0xdead0000_00000000}}},
		{Name: "both", Action: ENOSYS, When: []Cond{{Arg: 0, Value: 7}, {Arg: 1, Op: AnyBits, Mask: 0x10}}},
		{Name: "absent", Action: EPERM},
	}
	a := testArch("eq64", "any64", "eq32masked", "anyhigh", "eqhigh", "both")
	prog, err := assemble(rs, a)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		call string
		arg  int
		v    uint64
		want Action
	}{
		{"eq64", 2, 0x1_00000002, EPERM},
		{"eq64", 2, 0x2, Allow},
		{"eq64", 2, 0x1_00000003, Allow},
		{"eq64", 2, 0x2_00000002, Allow},
		{"eq64", 1, 0x1_00000002, Allow},
		{"eq64", 3, 0x1_00000002, Allow},
		{"any64", 3, 1, EPERM},
		{"any64", 3, 1 << 63, EPERM},
		{"any64", 3, 1<<63 | 1, EPERM},
		{"any64", 3, 2, Allow},
		{"any64", 3, 1 << 62, Allow},
		{"any64", 2, 1, Allow},
		{"any64", 4, 1 << 63, Allow},
		{"eq32masked", 0, 0xabcd12, EPERM},
		{"eq32masked", 0, 0xffffffff_00000012, EPERM},
		{"eq32masked", 0, 0x13, Allow},
		{"eq32masked", 0, 0x12_00000000, Allow},
		{"anyhigh", 5, 0x1_00000000, EPERM},
		{"anyhigh", 5, 0x80_00000000, EPERM},
		{"anyhigh", 5, 0xffffffff, Allow},
		{"anyhigh", 5, 0x100_00000000, Allow},
		{"eqhigh", 4, 0xdead0000_00000000, EPERM},
		{"eqhigh", 4, 0xdead1234_ffffffff, EPERM},
		{"eqhigh", 4, 0xdeae0000_00000000, Allow},
		{"eqhigh", 4, 0x0000dead_00000000, Allow},
	}
	for _, tt := range tests {
		d := seccompData{nr: nrOf(t, a, tt.call), arch: a.audit}
		d.args[tt.arg] = tt.v
		got, err := run(prog, d)
		if err != nil {
			t.Fatal(err)
		}
		if want := mustRet(t, tt.want); got != want {
			t.Errorf("%s(arg%d=%#x): got %s, want %s", tt.call, tt.arg, tt.v, retName(got), retName(want))
		}
	}

	// Conditions of one rule must all hold.
	both := nrOf(t, a, "both")
	for _, tt := range []struct {
		args [6]uint64
		want Action
	}{
		{[6]uint64{7, 0x10}, ENOSYS},
		{[6]uint64{7, 0x30}, ENOSYS},
		{[6]uint64{7, 0x20}, Allow},
		{[6]uint64{8, 0x10}, Allow},
		{[6]uint64{0, 0}, Allow},
	} {
		got, err := run(prog, seccompData{nr: both, arch: a.audit, args: tt.args})
		if err != nil {
			t.Fatal(err)
		}
		if want := mustRet(t, tt.want); got != want {
			t.Errorf("both(%#x): got %s, want %s", tt.args[:2], retName(got), retName(want))
		}
	}
}

// TestLongBlock checks that a syscall whose rules take more than 255
// instructions is skipped with a BPF_JA and still decided correctly, along
// with the syscalls around it.
func TestLongBlock(t *testing.T) {
	rs := []Rule{{Name: "before", Action: EPERM}}
	for i := range 150 {
		rs = append(rs, Rule{Name: "long", Action: EPERM, When: []Cond{{Arg: 0, Value: uint64(1000 + i)}}})
	}
	rs = append(rs, Rule{Name: "long", Action: ENOSYS, When: []Cond{{Arg: 1, Value: 5}}})
	rs = append(rs, Rule{Name: "after", Action: EAFNOSUPPORT})
	a := testArch("before", "long", "after", "other")
	prog, err := assemble(rs, a)
	if err != nil {
		t.Fatal(err)
	}
	ja := 0
	for _, in := range prog {
		if in.Code == opJa {
			ja++
		}
	}
	if ja != 1 {
		t.Errorf("program has %d BPF_JA, want 1", ja)
	}
	tests := []struct {
		call string
		args [6]uint64
		want Action
	}{
		{"before", [6]uint64{}, EPERM},
		{"long", [6]uint64{1000}, EPERM},
		{"long", [6]uint64{1149}, EPERM},
		{"long", [6]uint64{1150}, Allow},
		{"long", [6]uint64{999, 5}, ENOSYS},
		{"long", [6]uint64{1075, 5}, EPERM},
		{"after", [6]uint64{}, EAFNOSUPPORT},
		{"other", [6]uint64{1000}, Allow},
	}
	for _, tt := range tests {
		got, err := run(prog, seccompData{nr: nrOf(t, a, tt.call), arch: a.audit, args: tt.args})
		if err != nil {
			t.Fatal(err)
		}
		if want := mustRet(t, tt.want); got != want {
			t.Errorf("%s(%#x): got %s, want %s", tt.call, tt.args[:2], retName(got), retName(want))
		}
	}
}

func TestAssembleErrors(t *testing.T) {
	many := make([]Cond, 200)
	for i := range many {
		many[i] = Cond{Arg: i % 6, Value: uint64(i)}
	}
	var huge []Rule
	for i := range 1400 {
		huge = append(huge, Rule{Name: "x", Action: EPERM, When: []Cond{{Arg: 0, Value: uint64(i)}}})
	}
	tests := []struct {
		name  string
		rules []Rule
		want  string
	}{
		{"unknown syscall", []Rule{{Name: "nope", Action: EPERM}}, `no syscall "nope"`},
		{"argument 6", []Rule{{Name: "x", Action: EPERM, When: []Cond{{Arg: 6}}}}, "argument 6 out of range"},
		{"negative argument", []Rule{{Name: "x", Action: EPERM, When: []Cond{{Arg: -1}}}}, "argument -1 out of range"},
		{"wide low32 mask", []Rule{{Name: "x", Action: EPERM, When: []Cond{{Mask: 1 << 32, Value: 1 << 32}}}}, "wider than 32 bits"},
		{"value outside mask", []Rule{{Name: "x", Action: EPERM, When: []Cond{{Mask: 0xff, Value: 0x100}}}}, "can never match"},
		{"value outside 32 bits", []Rule{{Name: "x", Action: EPERM, When: []Cond{{Value: 1 << 32}}}}, "can never match"},
		{"any-bits value", []Rule{{Name: "x", Action: EPERM, When: []Cond{{Op: AnyBits, Mask: 1, Value: 1}}}}, "any-bits"},
		{"unknown op", []Rule{{Name: "x", Action: EPERM, When: []Cond{{Op: 9}}}}, "unknown op"},
		{"unknown width", []Rule{{Name: "x", Action: EPERM, When: []Cond{{Width: 9}}}}, "unknown width"},
		{"unknown action", []Rule{{Name: "x", Action: 42}}, "unknown action"},
		{"bad rule for an absent call", []Rule{{Name: "absent", Action: 42}}, "unknown action"},
		{"unreachable", []Rule{{Name: "x", Action: EPERM}, {Name: "x", Action: ENOSYS}}, "unreachable"},
		{"rule too long", []Rule{{Name: "x", Action: EPERM, When: many}}, "does not fit"},
		{"program too long", huge, "exceeds the kernel's limit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := assemble(tt.rules, testArch("x"))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

// TestTables checks the rule table against the syscall tables: every rule
// names a syscall each architecture either has or is known to lack, no two
// names share a number, no number is unused, and every rule says why.
func TestTables(t *testing.T) {
	used := map[string]bool{}
	for i, r := range fullTable() {
		used[r.Name] = true
		if r.Why == "" {
			t.Errorf("rule %d (%s) has no Why", i, r.Name)
		}
	}
	for _, a := range []*arch{archAMD64, archARM64} {
		seen := map[int]string{}
		for _, n := range numbersOf(a) {
			name, nr := n.name, n.nr
			if first, _ := a.number(name); first != nr {
				t.Errorf("%s: %s listed twice", a.name, name)
			}
			if !used[name] {
				t.Errorf("%s: %s has a number but no rule", a.name, name)
			}
			if nr == absent {
				continue
			}
			if nr < 0 || nr >= x32SyscallBit {
				t.Errorf("%s: %s has number %d", a.name, name, nr)
			}
			if other, ok := seen[nr]; ok {
				t.Errorf("%s: %s and %s share number %d", a.name, name, other, nr)
			}
			seen[nr] = name
		}
		for name := range used {
			if _, ok := a.number(name); !ok {
				t.Errorf("%s: no number for %s", a.name, name)
			}
		}
	}
	// x86_64 must have every call in the table.
	for _, n := range numbersOf(archAMD64) {
		if n.nr == absent {
			t.Errorf("amd64: %s marked absent", n.name)
		}
	}
}

func TestRulesIsACopy(t *testing.T) {
	rules := baseRules
	rs := Rules(Options{})
	if len(rs) != len(rules) {
		t.Fatalf("Rules() has %d rules, table has %d", len(rs), len(rules))
	}
	rs[0].Name = "changed"
	for i := range rs {
		if len(rs[i].When) > 0 {
			rs[i].When[0].Value = 12345
			if rules[i].When[0].Value == 12345 {
				t.Error("Rules() shares condition slices with the table")
			}
			break
		}
	}
	if rules[0].Name == "changed" {
		t.Error("Rules() shares the table")
	}
}

func TestStrings(t *testing.T) {
	tests := []struct {
		got, want string
	}{
		{Rule{Name: "ptrace", Action: EPERM}.String(), "ptrace: EPERM"},
		{Rule{Name: "ioctl", Action: EPERM, When: []Cond{{Arg: 1, Value: tiocsti}}}.String(), "ioctl: EPERM when low32(arg1) == 0x5412"},
		{Rule{Name: "unshare", Action: EPERM, When: []Cond{{Op: AnyBits, Mask: unshareNamespaces}}}.String(), "unshare: EPERM when low32(arg0) & 0x7e020080 != 0"},
		{Rule{Name: "x", Action: ENOSYS, When: []Cond{{Arg: 2, Width: Full64, Value: 1 << 40}, {Arg: 3, Mask: 0xf0, Value: 0x10}}}.String(),
			"x: ENOSYS when arg2 == 0x10000000000 && low32(arg3) & 0xf0 == 0x10"},
		{Cond{Arg: 5, Width: Full64, Op: AnyBits}.String(), "arg5 & 0xffffffffffffffff != 0"},
		{KillProcess.String(), "kill process"},
		{Allow.String(), "allow"},
		{EAFNOSUPPORT.String(), "EAFNOSUPPORT"},
		{Action(42).String(), "Action(42)"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
}

// numbersOf is every syscall number a's filter uses: its own and the
// unified ones.
func numbersOf(a *arch) []syscallNumber {
	return append(slices.Clone(a.numbers), unifiedNumbers...)
}
