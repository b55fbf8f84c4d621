// Package seccomp builds and installs hutch's seccomp filter: the last
// hardening step the sandbox init applies before it executes the command.
//
// The filter is a deny list. Every system call is allowed unless a rule in
// the table returned by [Rules] says otherwise; the rules close the kernel
// interfaces a sandboxed process has no business with even after its
// capabilities are gone: ptrace and cross-process memory access, the mount
// API, namespace creation, kernel keyrings, eBPF, perf, io_uring, module
// loading, clock setting, terminal keystroke injection and network address
// families other than unix, IPv4 and IPv6.
//
// A sandbox that writes into host paths (hutch run's workspace) gets more
// rules ([Options].HostWrites): nothing it writes may grant or widen
// privilege on the host, so set-id modes, modes that give others (or the
// group, as the user's umask says) write, extended attributes and openat2
// are refused, and a umask that would let new files be writable by others
// is never set: that call goes to the sandbox's PID 1 ([Notify]; the
// agent runs a [Supervisor]), which answers with the calling thread's
// current umask.
//
// The table is data, not code. A [Rule] names a system call, the [Action] to
// take and, optionally, [Cond]itions on its arguments. Rules for one system
// call are tried in table order and the first whose conditions all hold
// decides; a call no rule matches is allowed. Syscall numbers come from
// per-architecture tables (x86_64 and aarch64); a rule for a call that does
// not exist on an architecture (aarch64 has no iopl, ustat, _sysctl, …) is
// left out of that architecture's program.
//
// The generated classic BPF program first checks seccomp_data.arch and kills
// the process for any ABI other than the native one (i386 and x32 calls on an
// x86_64 kernel, arm32 calls on arm64), so no rule can be bypassed through a
// second syscall table. It then compares the syscall number against each
// listed call in turn; each call's block is short and self-contained, so the
// program is a linear list of compares whose jumps never need more than the
// 8-bit offsets of classic BPF (a longer block is skipped with a 32-bit
// BPF_JA). Linux 5.11 and later cache the verdict of calls whose outcome does
// not depend on their arguments, so the list length costs nothing for them.
//
// Arguments are compared 32 bits at a time, as classic BPF must. The kernel
// reads int and unsigned int arguments (socket's domain, ioctl's request,
// personality's persona) as their low 32 bits and ignores the rest, and it
// truncates clone's flags the same way, so such a condition must look at the
// low word only: a caller can set the high word to anything, and a filter
// that compared it could be bypassed. [Low32] conditions do exactly that;
// [Full64] conditions check both halves (seccomp_data is little-endian on both
// supported architectures: the low word of args[i] is at offset 16+8*i and the
// high word at 20+8*i).
//
// [Install] applies the filter to the calling thread only (the sandbox's
// first process installs it with its own system call list instead). The caller (the
// sandbox init) locks its goroutine to the OS thread, sets no_new_privs and
// then executes the command from that same thread, which carries the filter
// into the new program and every process it starts.
package seccomp

import (
	"errors"
	"fmt"
	"strings"
)

// ErrNotSupported reports that seccomp filters cannot be used here: the
// platform is not Linux, the architecture has no syscall table, or the kernel
// lacks seccomp filter support.
var ErrNotSupported = errors.New("seccomp filter not supported")

// Action is what the filter does with a system call a rule matches.
type Action uint8

// The actions a rule can take. The errno actions make the call fail with
// that error without reaching the kernel's implementation.
const (
	// Allow lets the call through. Use it in a conditional rule ahead of a
	// broader rule for the same call to carve out an exception.
	Allow Action = iota
	// EPERM fails the call with EPERM ("operation not permitted").
	EPERM
	// ENOSYS fails the call with ENOSYS, as if the kernel did not have it;
	// C libraries then fall back to an older call the filter can inspect.
	ENOSYS
	// EAFNOSUPPORT fails the call with EAFNOSUPPORT ("address family not
	// supported"), what programs expect when a socket family is missing.
	EAFNOSUPPORT
	// KillProcess kills the whole process as if by an uncatchable SIGSYS.
	KillProcess
	// EOPNOTSUPP fails the call with EOPNOTSUPP ("operation not
	// supported"), what a filesystem without the feature answers: tools
	// then carry on without it.
	EOPNOTSUPP
	// Notify stops the calling thread and hands the call to the filter's
	// supervisor (see [Supervisor]), whose answer becomes the call's
	// result; the call itself never runs. A filter with a Notify
	// rule is installed with a listener (see [Options.Listener]).
	Notify
)

var actionNames = [...]string{
	Allow:        "allow",
	EPERM:        "EPERM",
	ENOSYS:       "ENOSYS",
	EAFNOSUPPORT: "EAFNOSUPPORT",
	KillProcess:  "kill process",
	EOPNOTSUPP:   "EOPNOTSUPP",
	Notify:       "notify",
}

// String returns the action's name, such as "EPERM".
func (a Action) String() string {
	if int(a) < len(actionNames) {
		return actionNames[a]
	}
	return fmt.Sprintf("Action(%d)", uint8(a))
}

// Width says how much of a 64-bit syscall argument a condition compares.
type Width uint8

const (
	// Low32 compares only the low 32 bits of the argument. It is right for
	// arguments the kernel reads as int or unsigned int, and for flags it
	// truncates to 32 bits, because the high word is under the caller's
	// control and ignored by the kernel. It is the zero value.
	Low32 Width = iota
	// Full64 compares all 64 bits, the high and the low word.
	Full64
)

// Op is the comparison a condition makes.
type Op uint8

const (
	// Equal holds when arg&Mask == Value. It is the zero value.
	Equal Op = iota
	// AnyBits holds when arg&Mask != 0, that is, when any of the bits in
	// Mask is set. Value must be zero.
	AnyBits
)

// Cond is a condition on one argument of a system call.
type Cond struct {
	// Arg is the argument's index, 0 to 5.
	Arg int
	// Width is how much of the argument is compared; see [Low32].
	Width Width
	// Op is the comparison.
	Op Op
	// Mask selects the bits compared. Zero means every bit of Width.
	Mask uint64
	// Value is what the masked argument must equal for [Equal].
	Value uint64
}

// mask returns c's mask with zero expanded to every bit of its width.
func (c Cond) mask() uint64 {
	if c.Mask != 0 {
		return c.Mask
	}
	if c.Width == Full64 {
		return ^uint64(0)
	}
	return 0xffffffff
}

// String renders the condition for people, such as
// "low32(arg1) == 0x5412" or "arg0 & 0x7e020080 != 0".
func (c Cond) String() string {
	arg := fmt.Sprintf("arg%d", c.Arg)
	full := uint64(0xffffffff)
	if c.Width == Low32 {
		arg = "low32(" + arg + ")"
	} else {
		full = ^uint64(0)
	}
	m := c.mask()
	switch c.Op {
	case Equal:
		if m == full {
			return fmt.Sprintf("%s == %#x", arg, c.Value)
		}
		return fmt.Sprintf("%s & %#x == %#x", arg, m, c.Value)
	case AnyBits:
		return fmt.Sprintf("%s & %#x != 0", arg, m)
	}
	return fmt.Sprintf("%s Op(%d) %#x", arg, uint8(c.Op), c.Value)
}

// Rule is one entry of the filter table.
type Rule struct {
	// Name is the system call's name as in the kernel's syscall tables,
	// such as "ptrace" or "_sysctl".
	Name string
	// Action is taken when the call is made and every condition holds.
	Action Action
	// When lists conditions that must all hold; none means always.
	When []Cond
	// Why says, for people, what the rule prevents.
	Why string
}

// String renders the rule for people, such as
// "ioctl: EPERM when low32(arg1) == 0x5412".
func (r Rule) String() string {
	var b strings.Builder
	b.WriteString(r.Name)
	b.WriteString(": ")
	b.WriteString(r.Action.String())
	for i, c := range r.When {
		if i == 0 {
			b.WriteString(" when ")
		} else {
			b.WriteString(" && ")
		}
		b.WriteString(c.String())
	}
	return b.String()
}
