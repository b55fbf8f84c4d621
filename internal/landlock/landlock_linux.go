package landlock

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// fileAccess is every right that applies to a file that is not a directory;
// the kernel refuses (EINVAL) a rule on a file with more.
const fileAccess = AccessExecute | AccessWriteFile | AccessReadFile | AccessTruncate | AccessIoctlDev

// ABI returns the running kernel's Landlock ABI version, or 0 when Landlock
// is not built in or not enabled.
func ABI() int {
	v, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if errno != 0 {
		return 0
	}
	return int(v)
}

// Restrict confines the calling thread, and every process it starts from
// now on, to c. It locks the calling goroutine to its OS thread for good
// (the restriction belongs to that thread alone), so the caller must start
// the command from the same goroutine.
//
// The caller must have set no_new_privs (prctl PR_SET_NO_NEW_PRIVS) or hold
// CAP_SYS_ADMIN in its user namespace; the kernel refuses otherwise.
//
// Without Landlock the error wraps ErrNotSupported. The Status lists what
// the running ABI could not enforce; the caller decides whether that is
// acceptable.
func Restrict(c Config) (Status, error) {
	rs, st, err := Prepare(c)
	if err != nil {
		return st, err
	}
	defer rs.Close()
	return st, rs.RestrictSelf()
}

// Ruleset is a Landlock ruleset being filled. Rules bind to the inodes the
// paths name when they are added, so a ruleset can be prepared by one
// process (hutch, while the sandbox starts) and enforced by another (the
// sandbox's init, which receives the descriptor).
type Ruleset struct {
	fd  int
	abi int
}

// Prepare creates a ruleset handling every right the kernel's ABI knows and
// adds the rules c plans.
func Prepare(c Config) (*Ruleset, Status, error) {
	abi := ABI()
	st := Status{ABI: abi}
	if abi < 1 {
		st.Dropped = []string{"landlock: not supported by this kernel"}
		return nil, st, fmt.Errorf("landlock: %w", ErrNotSupported)
	}
	fd, err := createRuleset(min(abi, maxABI), c.Scope)
	if err != nil {
		return nil, st, err
	}
	rs := &Ruleset{fd: fd, abi: abi}
	st.Dropped, err = rs.Add(c)
	if err != nil {
		rs.Close()
		return nil, st, err
	}
	return rs, st, nil
}

// FromFD adopts a ruleset descriptor made by Prepare in another process.
func FromFD(fd int) *Ruleset { return &Ruleset{fd: fd, abi: ABI()} }

// FD is the ruleset's descriptor, to pass to another process.
func (r *Ruleset) FD() int { return r.fd }

// Add plans c and adds its rules; it returns what the ABI cannot enforce.
func (r *Ruleset) Add(c Config) ([]string, error) {
	rules, dropped, err := Plan(c, r.abi)
	if err != nil {
		return dropped, err
	}
	for _, rule := range rules {
		if err := addRule(r.fd, rule); err != nil {
			return dropped, err
		}
	}
	return dropped, nil
}

// AddWritableTree grants every right but device ioctls on the hierarchy
// open at fd, which need not be reachable by a path: the root of a
// detached mount (a sandbox's writable root layer) works.
func (r *Ruleset) AddWritableTree(fd int) error {
	fsAccess, _ := handled(min(r.abi, maxABI))
	if err := addPathBeneath(r.fd, fd, writeTreeAccess&fsAccess); err != nil {
		return fmt.Errorf("landlock rule for the writable root: %w", err)
	}
	return nil
}

// WritableTreeAccess is the access AddWritableTree grants, for a rule
// another process adds to the ruleset (the sandbox's first process, for a
// tree that exists only in its own mount namespace).
func (r *Ruleset) WritableTreeAccess() uint64 {
	fsAccess, _ := handled(min(r.abi, maxABI))
	return writeTreeAccess & fsAccess
}

// RestrictSelf enforces the ruleset on the calling thread and locks the
// calling goroutine to it for good.
func (r *Ruleset) RestrictSelf() error {
	runtime.LockOSThread()
	if _, _, errno := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, uintptr(r.fd), 0, 0); errno != 0 {
		if errno == unix.EPERM {
			return fmt.Errorf("landlock restrict self (no_new_privs not set?): %w", errno)
		}
		return fmt.Errorf("landlock restrict self: %w", errno)
	}
	return nil
}

// Close releases the descriptor.
func (r *Ruleset) Close() error { return unix.Close(r.fd) }

// createRuleset returns a ruleset handling every filesystem right of abi,
// and the scopes when scope is set.
func createRuleset(abi int, scope bool) (int, error) {
	fsAccess, scoped := handled(abi)
	attr := unix.LandlockRulesetAttr{Handled_access_fs: fsAccess}
	if scope {
		attr.Scoped = scoped
	}
	// The struct may be larger than the running kernel's; the kernel
	// accepts that as long as the fields it does not know are zero.
	fd, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET,
		uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr), 0)
	if errno != 0 {
		return -1, fmt.Errorf("landlock create ruleset: %w", errno)
	}
	return int(fd), nil
}

// addRule adds r to the ruleset. A path that does not exist is skipped. On
// a file that is not a directory, directory rights are dropped from the
// rule; that is found out from the kernel's refusal, to save a stat on
// every rule.
func addRule(ruleset int, r Rule) error {
	fd, err := unix.Open(r.Path, unix.O_PATH|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("landlock rule for %q: open: %w", r.Path, err)
	}
	defer unix.Close(fd)
	err = addPathBeneath(ruleset, fd, r.Access)
	if errors.Is(err, unix.EINVAL) && r.Access&^fileAccess != 0 {
		var st unix.Stat_t
		if serr := unix.Fstat(fd, &st); serr == nil && st.Mode&unix.S_IFMT != unix.S_IFDIR {
			if r.Access&fileAccess == 0 {
				return nil
			}
			err = addPathBeneath(ruleset, fd, r.Access&fileAccess)
		}
	}
	if err != nil {
		return fmt.Errorf("landlock rule for %q: %w", r.Path, err)
	}
	return nil
}

// addPathBeneath grants access on the file or hierarchy open at fd.
func addPathBeneath(ruleset, fd int, access uint64) error {
	attr := unix.LandlockPathBeneathAttr{Allowed_access: access, Parent_fd: int32(fd)}
	_, _, errno := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, uintptr(ruleset),
		unix.LANDLOCK_RULE_PATH_BENEATH, uintptr(unsafe.Pointer(&attr)), 0, 0, 0)
	if errno != 0 {
		return errno
	}
	return nil
}
