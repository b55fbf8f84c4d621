package seccomp

import (
	"errors"
	"fmt"
)

// instruction is a classic BPF instruction, laid out as struct sock_filter.
// It is kept platform-neutral so the assembler and its tests build
// everywhere; Build converts it to unix.SockFilter.
type instruction struct {
	Code uint16
	Jt   uint8
	Jf   uint8
	K    uint32
}

// Classic BPF opcode parts (linux/bpf_common.h), only the ones the filter
// uses, and the instructions they make.
const (
	bpfLD   = 0x00
	bpfALU  = 0x04
	bpfJMP  = 0x05
	bpfRET  = 0x06
	bpfW    = 0x00
	bpfABS  = 0x20
	bpfK    = 0x00
	bpfAND  = 0x50
	bpfJA   = 0x00
	bpfJEQ  = 0x10
	bpfJGT  = 0x20
	bpfJGE  = 0x30
	bpfJSET = 0x40

	opLdAbsW = bpfLD | bpfW | bpfABS
	opAndK   = bpfALU | bpfAND | bpfK
	opJa     = bpfJMP | bpfJA
	opJeqK   = bpfJMP | bpfJEQ | bpfK
	opJgeK   = bpfJMP | bpfJGE | bpfK
	opJsetK  = bpfJMP | bpfJSET | bpfK
	opRetK   = bpfRET | bpfK

	maxInsns  = 4096 // BPF_MAXINSNS
	maxJumpTo = 255  // conditional jump offsets are 8 bits
)

// Offsets into struct seccomp_data { int nr; u32 arch; u64
// instruction_pointer; u64 args[6]; }. Both supported architectures are
// little-endian, so an argument's low word comes first.
const (
	offNr   = 0
	offArch = 4
	offArgs = 16
)

// argLow and argHigh are the offsets of the low and high words of args[i].
func argLow(i int) uint32  { return uint32(offArgs + 8*i) }
func argHigh(i int) uint32 { return uint32(offArgs + 8*i + 4) }

// Return values (linux/seccomp.h) and the Linux errno values the actions
// use, which are the same on x86_64 and aarch64.
const (
	retKillProcess = 0x80000000
	retErrno       = 0x00050000
	retUserNotif   = 0x7fc00000
	retAllow       = 0x7fff0000

	errnoEPERM        = 1
	errnoENOSYS       = 38
	errnoEOPNOTSUPP   = 95
	errnoEAFNOSUPPORT = 97
)

// ret returns the SECCOMP_RET_* value for a.
func (a Action) ret() (uint32, error) {
	switch a {
	case Allow:
		return retAllow, nil
	case EPERM:
		return retErrno | errnoEPERM, nil
	case ENOSYS:
		return retErrno | errnoENOSYS, nil
	case EAFNOSUPPORT:
		return retErrno | errnoEAFNOSUPPORT, nil
	case KillProcess:
		return retKillProcess, nil
	case EOPNOTSUPP:
		return retErrno | errnoEOPNOTSUPP, nil
	case Notify:
		return retUserNotif, nil
	}
	return 0, fmt.Errorf("unknown action %d", uint8(a))
}

// label names a position in a fragment. next is the instruction after the
// jump (offset 0).
type label int

const next label = -1

// fragment assembles a short run of instructions with forward jumps to
// labels bound later in the same run.
type fragment struct {
	ins    []instruction
	jt, jf []label // per instruction, for conditional jumps
	at     []int   // label -> bound position, -1 until bound
}

func (f *fragment) label() label {
	f.at = append(f.at, -1)
	return label(len(f.at) - 1)
}

// bind places l at the next instruction to be emitted.
func (f *fragment) bind(l label) { f.at[l] = len(f.ins) }

func (f *fragment) emit(code uint16, k uint32, jt, jf label) {
	f.ins = append(f.ins, instruction{Code: code, K: k})
	f.jt = append(f.jt, jt)
	f.jf = append(f.jf, jf)
}

func (f *fragment) load(off uint32)                        { f.emit(opLdAbsW, off, next, next) }
func (f *fragment) and(k uint32)                           { f.emit(opAndK, k, next, next) }
func (f *fragment) ret(k uint32)                           { f.emit(opRetK, k, next, next) }
func (f *fragment) jump(op uint16, k uint32, jt, jf label) { f.emit(op, k, jt, jf) }

// resolve fills in the jump offsets. A label may be bound at the end of the
// fragment, meaning whatever follows it.
func (f *fragment) resolve() ([]instruction, error) {
	for i := range f.ins {
		for _, j := range []struct {
			l   label
			off *uint8
		}{{f.jt[i], &f.ins[i].Jt}, {f.jf[i], &f.ins[i].Jf}} {
			if j.l == next {
				continue
			}
			pos := f.at[j.l]
			if pos < 0 {
				return nil, errors.New("jump to an unbound label")
			}
			d := pos - (i + 1)
			if d < 0 || d > maxJumpTo {
				return nil, fmt.Errorf("jump of %d instructions does not fit classic BPF", d)
			}
			*j.off = uint8(d)
		}
	}
	return f.ins, nil
}

// cond emits c, falling through when it holds and jumping to fail when not.
func (f *fragment) cond(c Cond, fail label) error {
	if c.Arg < 0 || c.Arg > 5 {
		return fmt.Errorf("argument %d out of range 0-5", c.Arg)
	}
	m := c.mask()
	switch c.Width {
	case Low32:
		if m > 0xffffffff {
			return fmt.Errorf("mask %#x wider than 32 bits for a low32 condition", m)
		}
	case Full64:
	default:
		return fmt.Errorf("unknown width %d", uint8(c.Width))
	}
	switch c.Op {
	case Equal:
		if c.Value&^m != 0 {
			return fmt.Errorf("value %#x has bits outside mask %#x and can never match", c.Value, m)
		}
	case AnyBits:
		if c.Value != 0 {
			return fmt.Errorf("value %#x given for an any-bits condition", c.Value)
		}
	default:
		return fmt.Errorf("unknown op %d", uint8(c.Op))
	}

	// The words to test, high word first; a word the mask does not touch
	// is skipped.
	type word struct{ off, mask, value uint32 }
	var words []word
	if hm := uint32(m >> 32); hm != 0 {
		words = append(words, word{argHigh(c.Arg), hm, uint32(c.Value >> 32)})
	}
	if lm := uint32(m); lm != 0 {
		words = append(words, word{argLow(c.Arg), lm, uint32(c.Value)})
	}

	if c.Op == Equal {
		// Every word must match.
		for _, w := range words {
			f.load(w.off)
			if w.mask != 0xffffffff {
				f.and(w.mask)
			}
			f.jump(opJeqK, w.value, next, fail)
		}
		return nil
	}
	// AnyBits: some word must have a masked bit set.
	pass := f.label()
	for i, w := range words {
		f.load(w.off)
		if i < len(words)-1 {
			f.jump(opJsetK, w.mask, pass, next)
		} else {
			f.jump(opJsetK, w.mask, next, fail)
		}
	}
	f.bind(pass)
	return nil
}

// assembleRule assembles one rule: its conditions, then the return of its action.
// When a condition fails, control falls off the end of the fragment, into
// the next rule for the same syscall.
func assembleRule(r Rule) ([]instruction, error) {
	k, err := r.Action.ret()
	if err != nil {
		return nil, err
	}
	var f fragment
	fail := f.label()
	for i, c := range r.When {
		if err := f.cond(c, fail); err != nil {
			return nil, fmt.Errorf("condition %d: %w", i, err)
		}
	}
	f.ret(k)
	f.bind(fail)
	return f.resolve()
}

// syscallBlock is the code for one syscall number: its rules in order,
// ending in a return.
type syscallBlock struct {
	name string
	nr   int
	code []instruction
	done bool // ends in an unconditional rule
}

// assemble compiles rules into a seccomp program for a.
//
//	ld  [arch]
//	jeq #a.audit, 1, 0
//	ret KILL_PROCESS
//	ld  [nr]
//	(x86_64 only: nr >= 0x40000000 and not -1 -> ret KILL_PROCESS)
//	jeq #nr_1, 0, len(block_1)    ; or jeq #nr_1, 1, 0; ja len(block_1)
//	block_1                       ; conditions and returns, ends in ret
//	...
//	ret ALLOW
func assemble(rs []Rule, a *arch) ([]instruction, error) {
	var blocks []*syscallBlock
	byName := map[string]*syscallBlock{}
	for i, r := range rs {
		nr, ok := a.number(r.Name)
		if !ok {
			return nil, fmt.Errorf("rule %d: no syscall %q in the %s table", i, r.Name, a.name)
		}
		code, err := assembleRule(r)
		if err != nil {
			return nil, fmt.Errorf("rule %d (%s): %w", i, r.Name, err)
		}
		if nr == absent {
			continue
		}
		b := byName[r.Name]
		if b == nil {
			b = &syscallBlock{name: r.Name, nr: nr}
			byName[r.Name] = b
			blocks = append(blocks, b)
		}
		if b.done {
			return nil, fmt.Errorf("rule %d (%s): unreachable after an unconditional rule for the same syscall", i, r.Name)
		}
		b.code = append(b.code, code...)
		b.done = len(r.When) == 0
	}

	prog := []instruction{
		{Code: opLdAbsW, K: offArch},
		{Code: opJeqK, K: a.audit, Jt: 1},
		{Code: opRetK, K: retKillProcess},
		{Code: opLdAbsW, K: offNr},
	}
	if a.x32 {
		// x32 calls carry the native AUDIT_ARCH with bit 30 set in nr.
		// nr -1 is not a call: a tracer sets it to skip one, and the
		// kernel answers ENOSYS, so it goes on to the rules (and is
		// allowed by them) instead of killing a traced process.
		prog = append(prog,
			instruction{Code: opJgeK, K: x32SyscallBit, Jf: 2},
			instruction{Code: opJeqK, K: 0xffffffff, Jt: 1},
			instruction{Code: opRetK, K: retKillProcess},
		)
	}
	for _, b := range blocks {
		if !b.done {
			b.code = append(b.code, instruction{Code: opRetK, K: retAllow})
		}
		n := len(b.code)
		if n <= maxJumpTo {
			prog = append(prog, instruction{Code: opJeqK, K: uint32(b.nr), Jf: uint8(n)})
		} else {
			prog = append(prog,
				instruction{Code: opJeqK, K: uint32(b.nr), Jt: 1},
				instruction{Code: opJa, K: uint32(n)},
			)
		}
		prog = append(prog, b.code...)
	}
	prog = append(prog, instruction{Code: opRetK, K: retAllow})
	if len(prog) > maxInsns {
		return nil, fmt.Errorf("program of %d instructions exceeds the kernel's limit of %d", len(prog), maxInsns)
	}
	return prog, nil
}
