package gvisor

import (
	"fmt"
	"math/bits"

	"github.com/hutch-sandbox/hutch/internal/seccomp"
)

// The OCI spec's seccomp section, which gVisor's Sentry enforces on the
// sandbox's processes itself (facts of the OCI runtime specification).
type (
	ociSeccomp struct {
		DefaultAction string       `json:"defaultAction"`
		Syscalls      []ociSyscall `json:"syscalls"`
	}
	ociSyscall struct {
		Names    []string    `json:"names"`
		Action   string      `json:"action"`
		ErrnoRet *uint       `json:"errnoRet,omitempty"`
		Args     []ociSecArg `json:"args,omitempty"`
	}
	// ociSecArg with op SCMP_CMP_MASKED_EQ holds when
	// arg & Value == ValueTwo.
	ociSecArg struct {
		Index    uint   `json:"index"`
		Value    uint64 `json:"value"`
		ValueTwo uint64 `json:"valueTwo"`
		Op       string `json:"op"`
	}
)

// errnos are the errno values of seccomp's errno actions.
var errnos = map[seccomp.Action]uint{
	seccomp.EPERM:        1,
	seccomp.ENOSYS:       38,
	seccomp.EOPNOTSUPP:   95,
	seccomp.EAFNOSUPPORT: 97,
}

// ociFilter writes hutch's filter table as an OCI seccomp section. A
// condition "any of these bits" has no OCI operator: it becomes one entry
// per bit (entries for the same call are tried in turn, the conditions of
// one entry all hold): an entry may not carve an exception out of a later
// one, and ociFilter refuses a table that has one, but the umask's: gVisor's
// filter does not see umask, so its rules are left out (the sandbox's
// umask is set in the spec instead; see the documentation of the tier).
func ociFilter(rules []seccomp.Rule) (*ociSeccomp, error) {
	out := &ociSeccomp{DefaultAction: "SCMP_ACT_ALLOW"}
	for _, r := range rules {
		var action string
		var errno *uint
		switch r.Action {
		case seccomp.Allow, seccomp.Notify:
			if r.Name != "umask" {
				// An OCI filter has no order: a carve-out would not hold.
				return nil, fmt.Errorf("seccomp rule %s: an exception has no OCI form", r)
			}
			continue
		case seccomp.KillProcess:
			action = "SCMP_ACT_KILL_PROCESS"
		default:
			e, ok := errnos[r.Action]
			if !ok {
				return nil, fmt.Errorf("seccomp rule %s: no OCI action for %s", r, r.Action)
			}
			action, errno = "SCMP_ACT_ERRNO", &e
		}
		// Each condition is one or more alternatives; an entry takes one
		// alternative of every condition.
		alts := [][]ociSecArg{nil}
		for _, c := range r.When {
			mask := c.Mask
			if mask == 0 {
				mask = 0xffffffff
				if c.Width == seccomp.Full64 {
					mask = ^uint64(0)
				}
			}
			var choices []ociSecArg
			switch c.Op {
			case seccomp.Equal:
				choices = []ociSecArg{{Index: uint(c.Arg), Value: mask, ValueTwo: c.Value, Op: "SCMP_CMP_MASKED_EQ"}}
			case seccomp.AnyBits:
				for m := mask; m != 0; m &= m - 1 {
					bit := uint64(1) << bits.TrailingZeros64(m)
					choices = append(choices, ociSecArg{Index: uint(c.Arg), Value: bit, ValueTwo: bit, Op: "SCMP_CMP_MASKED_EQ"})
				}
			default:
				return nil, fmt.Errorf("seccomp rule %s: no OCI operator", r)
			}
			var next [][]ociSecArg
			for _, a := range alts {
				for _, ch := range choices {
					next = append(next, append(append([]ociSecArg(nil), a...), ch))
				}
			}
			alts = next
		}
		for _, a := range alts {
			out.Syscalls = append(out.Syscalls, ociSyscall{Names: []string{r.Name}, Action: action, ErrnoRet: errno, Args: a})
		}
	}
	return out, nil
}
