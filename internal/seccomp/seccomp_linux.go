package seccomp

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Build assembles the filter for o for the running architecture from the
// table [Rules] returns. It fails with [ErrNotSupported] on an
// architecture without a syscall table (only amd64 and arm64 have one).
func Build(o Options) ([]unix.SockFilter, error) {
	if native == nil {
		return nil, fmt.Errorf("seccomp: no syscall table for linux/%s: %w", runtime.GOARCH, ErrNotSupported)
	}
	if err := o.validate(); err != nil {
		return nil, fmt.Errorf("seccomp: %w", err)
	}
	prog, err := assemble(table(o), native)
	if err != nil {
		return nil, fmt.Errorf("seccomp: build filter for %s: %w", native.name, err)
	}
	out := make([]unix.SockFilter, len(prog))
	for i, in := range prog {
		out[i] = unix.SockFilter{Code: in.Code, Jt: in.Jt, Jf: in.Jf, K: in.K}
	}
	return out, nil
}

// Install builds the filter for o and installs it on the calling OS thread
// with seccomp(SECCOMP_SET_MODE_FILTER). It cannot be undone. The caller
// must have locked its goroutine to the thread and set no_new_privs on it
// (unless it has CAP_SYS_ADMIN); the filter then follows the thread into
// execve and into every child it starts. When o.Listener(), the filter is
// installed with a listener, whose descriptor (close-on-exec) is returned
// for a [Supervisor]; -1 otherwise. The error names the errno the kernel
// returned; it wraps [ErrNotSupported] when the kernel has no seccomp
// filter support.
func Install(o Options) (int, error) {
	filter, err := Build(o)
	if err != nil {
		return -1, err
	}
	var flags uintptr
	if o.Listener() {
		flags = unix.SECCOMP_FILTER_FLAG_NEW_LISTENER
	}
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	r, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, flags, uintptr(unsafe.Pointer(&prog)))
	runtime.KeepAlive(filter)
	switch errno {
	case 0:
		if flags == 0 {
			return -1, nil
		}
		return int(r), nil
	case unix.EACCES:
		return -1, fmt.Errorf("seccomp: install filter: %s (no_new_privs is not set on this thread): %w", unix.ErrnoName(errno), errno)
	case unix.ENOSYS, unix.EINVAL:
		// EINVAL is also what a kernel built without
		// CONFIG_SECCOMP_FILTER answers; tell that apart from a
		// program it rejects.
		if perr := Supported(); perr != nil {
			return -1, fmt.Errorf("seccomp: install filter: %s: %w (%w)", unix.ErrnoName(errno), errno, perr)
		}
	}
	return -1, fmt.Errorf("seccomp: install filter: %s: %w", unix.ErrnoName(errno), errno)
}

// Supported reports whether the kernel can install the filter: it has
// seccomp (prctl(PR_GET_SECCOMP) does not fail with EINVAL), the seccomp(2)
// system call, SECCOMP_RET_KILL_PROCESS (Linux 4.14) and
// SECCOMP_RET_USER_NOTIF (Linux 5.0). The error wraps [ErrNotSupported]
// and names what is missing.
func Supported() error {
	if _, err := unix.PrctlRetInt(unix.PR_GET_SECCOMP, 0, 0, 0, 0); err != nil {
		if errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("seccomp: kernel built without CONFIG_SECCOMP: %w", ErrNotSupported)
		}
		return fmt.Errorf("seccomp: probe prctl(PR_GET_SECCOMP): %w", err)
	}
	for _, a := range []struct {
		action uint32
		name   string
	}{
		{unix.SECCOMP_RET_KILL_PROCESS, "SECCOMP_RET_KILL_PROCESS (Linux 4.14+)"},
		{unix.SECCOMP_RET_USER_NOTIF, "SECCOMP_RET_USER_NOTIF (Linux 5.0+)"},
	} {
		action := a.action
		_, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_GET_ACTION_AVAIL, 0, uintptr(unsafe.Pointer(&action)))
		switch errno {
		case 0:
			continue
		case unix.ENOSYS:
			return fmt.Errorf("seccomp: kernel has no seccomp(2) system call (Linux 3.17+): %w", ErrNotSupported)
		case unix.EINVAL, unix.EOPNOTSUPP:
			return fmt.Errorf("seccomp: kernel lacks %s: %w", a.name, ErrNotSupported)
		}
		return fmt.Errorf("seccomp: probe seccomp(SECCOMP_GET_ACTION_AVAIL): %s: %w", unix.ErrnoName(errno), errno)
	}
	return nil
}

// InstallRules installs a filter of rules alone (every other call
// allowed) on the calling OS thread, as Install does: for a host process
// of hutch's that a filter of its own confines (the microVM tier's
// virtiofsd, which writes the workspace for its guest), the rules taken
// from [HostWriteRules] and adapted. A [Notify] rule is refused: there is
// no listener.
func InstallRules(rules []Rule) error {
	if native == nil {
		return fmt.Errorf("seccomp: no syscall table for linux/%s: %w", runtime.GOARCH, ErrNotSupported)
	}
	for _, r := range rules {
		if r.Action == Notify {
			return fmt.Errorf("seccomp: rule for %s hands calls to a supervisor, which a filter of rules alone has not", r.Name)
		}
	}
	prog, err := assemble(rules, native)
	if err != nil {
		return fmt.Errorf("seccomp: build filter for %s: %w", native.name, err)
	}
	filter := make([]unix.SockFilter, len(prog))
	for i, in := range prog {
		filter[i] = unix.SockFilter{Code: in.Code, Jt: in.Jt, Jf: in.Jf, K: in.K}
	}
	fp := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	_, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&fp)))
	runtime.KeepAlive(filter)
	if errno != 0 {
		return fmt.Errorf("seccomp: install filter: %s: %w", unix.ErrnoName(errno), errno)
	}
	return nil
}
