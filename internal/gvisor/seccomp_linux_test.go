package gvisor

import (
	"reflect"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/seccomp"
)

func TestOCIFilter(t *testing.T) {
	eperm := uint(1)
	f, err := ociFilter([]seccomp.Rule{
		{Name: "fchmodat", Action: seccomp.EPERM, When: []seccomp.Cond{{Arg: 2, Op: seccomp.AnyBits, Mask: 0o4002}}},
		{Name: "umask", Action: seccomp.Notify},
		{Name: "ioctl", Action: seccomp.EPERM, When: []seccomp.Cond{{Arg: 1, Value: 0x5412}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	masked := func(i uint, mask, value uint64) ociSecArg {
		return ociSecArg{Index: i, Value: mask, ValueTwo: value, Op: "SCMP_CMP_MASKED_EQ"}
	}
	want := []ociSyscall{
		{Names: []string{"fchmodat"}, Action: "SCMP_ACT_ERRNO", ErrnoRet: &eperm, Args: []ociSecArg{masked(2, 0o2, 0o2)}},
		{Names: []string{"fchmodat"}, Action: "SCMP_ACT_ERRNO", ErrnoRet: &eperm, Args: []ociSecArg{masked(2, 0o4000, 0o4000)}},
		{Names: []string{"ioctl"}, Action: "SCMP_ACT_ERRNO", ErrnoRet: &eperm, Args: []ociSecArg{masked(1, 0xffffffff, 0x5412)}},
	}
	if f.DefaultAction != "SCMP_ACT_ALLOW" || !reflect.DeepEqual(f.Syscalls, want) {
		t.Errorf("ociFilter =\n%+v\nwant\n%+v", f.Syscalls, want)
	}
	// An exception carved out of a later rule has no OCI form.
	if _, err := ociFilter([]seccomp.Rule{{Name: "socket", Action: seccomp.Allow}}); err == nil {
		t.Error("ociFilter accepted an exception")
	}
	// The table of host writes converts.
	if _, err := ociFilter(seccomp.HostWriteRules(0o022)); err != nil {
		t.Errorf("host write rules: %v", err)
	}
}
