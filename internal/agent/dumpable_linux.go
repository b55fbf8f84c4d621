package agent

import (
	"fmt"
	"os"

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
