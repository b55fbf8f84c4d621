package agent

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/seccomp"
)

// undumpable makes the agent's process not dumpable. execve made it
// dumpable again (the first process that exec'd it was not), and a
// dumpable PID 1 is open to every process of the sandbox with its uid: its
// memory (/proc/1/mem, for writing too), environment, descriptors and
// mapped files. Not dumpable, reaching them takes CAP_SYS_PTRACE in the
// sandbox's user namespace, which no sandbox keeps (its /proc files then
// belong to the root of that namespace, who may list /proc/1/fd but
// follow no link there).
func undumpable() error {
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("make the agent not dumpable: %w", err)
	}
	return nil
}

// superviseListener answers, for the sandbox's life, the calls that its
// seccomp filter hands over, when the first process passed the filter's
// listener on ListenerFD (a sandbox with host paths to write); nil when
// there is none.
func superviseListener() (*seccomp.Supervisor, error) {
	if link, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", ListenerFD)); err != nil || link != "anon_inode:seccomp notify" {
		return nil, nil
	}
	sup, err := seccomp.Supervise(ListenerFD)
	if err != nil {
		return nil, fmt.Errorf("answer the seccomp filter's calls: %w", err)
	}
	return sup, nil
}

// clearInitialEnv overwrites with zero bytes, in the process's initial
// environment block (the memory that execve filled, which the process
// keeps for its life and /proc/PID/environ shows), the entries of the
// variables names. Go's runtime copied the environment when it started:
// the block is read by nothing of the process's. Without this a process
// that may read the agent's memory (CAP_SYS_PTRACE in the sandbox's user
// namespace) would read them there even after the agent unset them.
func clearInitialEnv(names []string) error {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return fmt.Errorf("clear the agent's initial environment: %w", err)
	}
	// pid (comm) state ...: comm may hold anything, ')' last. The
	// fields after it start with the 3rd; env_start and env_end are
	// the 50th and 51st.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 51-2 {
		return errors.New("clear the agent's initial environment: /proc/self/stat has no env_start and env_end")
	}
	start, err1 := strconv.ParseUint(f[50-3], 10, 64)
	end, err2 := strconv.ParseUint(f[51-3], 10, 64)
	if err1 != nil || err2 != nil || start == 0 || end <= start {
		return fmt.Errorf("clear the agent's initial environment: /proc/self/stat's env_start %q, env_end %q", f[50-3], f[51-3])
	}
	block, err := os.ReadFile("/proc/self/environ")
	if err != nil {
		return fmt.Errorf("clear the agent's initial environment: %w", err)
	}
	if uint64(len(block)) != end-start {
		return fmt.Errorf("clear the agent's initial environment: /proc/self/environ has %d bytes, not env_end-env_start %d", len(block), end-start)
	}
	zero, err := os.Open("/dev/zero")
	if err != nil {
		return fmt.Errorf("clear the agent's initial environment: %w", err)
	}
	defer zero.Close()
	off := 0
	for _, kv := range strings.SplitAfter(string(block), "\x00") {
		k, _, _ := strings.Cut(kv, "=")
		if slices.Contains(names, k) {
			// The kernel writes the zeros: the block is the
			// process's own memory, at an address Go did not give.
			n, _, errno := unix.Syscall(unix.SYS_READ, zero.Fd(), uintptr(start)+uintptr(off), uintptr(len(kv)))
			if errno != 0 || int(n) != len(kv) {
				return fmt.Errorf("clear the agent's initial environment: %s: read /dev/zero: %d bytes, %v", k, n, errno)
			}
		}
		off += len(kv)
	}
	return nil
}
