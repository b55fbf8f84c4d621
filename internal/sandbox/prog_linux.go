package sandbox

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A prog is what the sandbox's first process runs between the clone and the
// command's exec: a straight list of system calls that hutch prepares in
// full before the clone. The child is a fork of hutch that never returns to
// the Go runtime — it may not allocate, grow its stack, take a lock or
// schedule — so it only walks this list with raw system calls. That spares
// the sandbox a second Go process (an exec and a runtime start on the
// critical path, about 2 ms), and keeps every decision in hutch, where it
// can be tested.
//
// An op is one system call. Its arguments are constants (numbers, pointers
// to memory hutch prepared) or slots: results of earlier ops, such as the
// descriptor open_tree returned. An op may name errnos that are not
// failures but skip ahead (a deny-read path that does not exist needs no
// mask). Any other error stops the list; the child reports which op failed
// and why, and hutch turns that into a message from the op's description.

// maxSlots bounds the slots of a prog; a power of two, so a slot index is
// masked rather than bounds-checked in the child.
const maxSlots = 64

// pseudo system call numbers the child handles itself.
const (
	// opLoad sets the slot to the int32 at addr.
	opLoad = ^uintptr(0)
	// opStore writes the int32 value of args[0] (usually a slot) to addr.
	opStore = ^uintptr(0) - 1
	// opJump goes on at op skipTo.
	opJump = ^uintptr(0) - 2
	// opExpect fails with EPIPE unless args[0] (usually a slot) equals
	// args[1].
	opExpect = ^uintptr(0) - 3
)

type op struct {
	nr     uintptr
	args   [6]uintptr
	from   [6]int8 // >= 0: the argument is that slot's value
	to     int8    // >= 0: the result goes to that slot
	skipOn [4]unix.Errno
	skipTo int32          // with an errno of skipOn, go on at this op
	addr   unsafe.Pointer // the int32 of opLoad and opStore
}

// arg is an argument of an op: a constant, or a slot.
type arg struct {
	v    uintptr
	slot int8
}

func k(v uintptr) arg     { return arg{v: v, slot: -1} }
func s(slot int8) arg     { return arg{slot: slot} }
func ci(v int) arg        { return k(uintptr(v)) }
func ptr[T any](v *T) arg { return k(uintptr(unsafe.Pointer(v))) }

// prog is being built by hutch, then run by the child.
type prog struct {
	ops   []op
	descs []string
	keep  []any // memory the ops point to, kept reachable until the clone
	slots int8
	free  []int8 // slots whose descriptor was closed, for reuse
}

// slot allocates a slot.
func (p *prog) slot() int8 {
	if n := len(p.free); n > 0 {
		sl := p.free[n-1]
		p.free = p.free[:n-1]
		return sl
	}
	if p.slots == maxSlots-1 {
		panic("sandbox: prog needs more slots")
	}
	p.slots++
	return p.slots
}

// str returns a pointer to a NUL-terminated copy of v.
func (p *prog) str(v string) arg {
	b := append([]byte(v), 0)
	p.keep = append(p.keep, b)
	return k(uintptr(unsafe.Pointer(&b[0])))
}

// keepPtr keeps v reachable and returns a pointer argument to it.
func keepPtr[T any](p *prog, v *T) arg {
	p.keep = append(p.keep, v)
	return ptr(v)
}

// call appends a system call; to is the slot for its result, or -1.
func (p *prog) call(desc string, to int8, nr uintptr, args ...arg) int {
	o := op{nr: nr, to: to, skipTo: -1}
	for i := range o.from {
		o.from[i] = -1
	}
	for i, a := range args {
		o.args[i], o.from[i] = a.v, a.slot
	}
	p.ops = append(p.ops, o)
	p.descs = append(p.descs, desc)
	return len(p.ops) - 1
}

// load appends an op that sets slot to the int32 at addr.
func (p *prog) load(slot int8, addr *int32) {
	i := p.call("", slot, opLoad)
	p.ops[i].addr = unsafe.Pointer(addr)
}

// store appends an op that writes the slot's value to the int32 at addr.
func (p *prog) store(addr *int32, slot int8) {
	i := p.call("", -1, opStore, s(slot))
	p.ops[i].addr = unsafe.Pointer(addr)
}

// skip makes op i go on at the current end of the prog when it fails with
// one of errnos (at most four).
func (p *prog) skip(i int, errnos ...unix.Errno) {
	if len(errnos) > len(p.ops[i].skipOn) {
		panic("sandbox: too many errnos to skip on")
	}
	copy(p.ops[i].skipOn[:], errnos)
	p.ops[i].skipTo = int32(len(p.ops))
}

// jump appends an unconditional jump; patch its target with land.
func (p *prog) jump() int {
	return p.call("", -1, opJump)
}

// land makes the jump (or skipping op) i go on at the current end.
func (p *prog) land(i int) { p.ops[i].skipTo = int32(len(p.ops)) }

// expect appends a check that the slot holds want.
func (p *prog) expect(desc string, slot int8, want uintptr) {
	p.call(desc, -1, opExpect, s(slot), k(want))
}

// closeKeep appends a close of the slot's descriptor but keeps the slot
// (another branch of the prog closes it for good).
func (p *prog) closeKeep(slot int8) {
	p.call("close", -1, unix.SYS_CLOSE, s(slot))
}

// close appends a close of the slot's descriptor; the slot is free again.
func (p *prog) close(slot int8) {
	p.call("close", -1, unix.SYS_CLOSE, s(slot))
	p.free = append(p.free, slot)
}

// run executes ops in the child. It returns the index of the op that
// failed and its errno, or -1. It must not allocate, grow the stack or call
// into the runtime.
//
//go:nosplit
//go:norace
//go:nocheckptr
func run(ops []op, slots *[maxSlots]uintptr) (int, unix.Errno) {
	for i := 0; i < len(ops); {
		o := &ops[i]
		var a [6]uintptr
		for j := 0; j < 6; j++ {
			a[j] = o.args[j]
			if f := o.from[j]; f >= 0 {
				a[j] = slots[uint8(f)&(maxSlots-1)]
			}
		}
		switch o.nr {
		case opLoad:
			if o.to >= 0 {
				slots[uint8(o.to)&(maxSlots-1)] = uintptr(*(*int32)(o.addr))
			}
			i++
			continue
		case opStore:
			*(*int32)(o.addr) = int32(a[0])
			i++
			continue
		case opJump:
			i = int(o.skipTo)
			continue
		case opExpect:
			if a[0] != a[1] {
				return i, unix.EPIPE
			}
			i++
			continue
		}
		r, _, e := syscall.RawSyscall6(o.nr, a[0], a[1], a[2], a[3], a[4], a[5])
		if e != 0 {
			if o.skipTo >= 0 && (e == o.skipOn[0] || e == o.skipOn[1] || e == o.skipOn[2] || e == o.skipOn[3]) {
				i = int(o.skipTo)
				continue
			}
			return i, e
		}
		if o.to >= 0 {
			slots[uint8(o.to)&(maxSlots-1)] = r
		}
		i++
	}
	return -1, 0
}
