package agent

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// undumpable makes the agent's process not dumpable. execve made it
// dumpable again (the first process that exec'd it was not), and a
// dumpable PID 1 is open to every process of the sandbox with its uid: its
// memory (/proc/1/mem, for writing too), environment, descriptors and
// mapped files. Not dumpable, its /proc files belong to the host's root and
// need CAP_SYS_PTRACE, which no sandbox keeps.
func undumpable() error {
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("make the agent not dumpable: %w", err)
	}
	return nil
}
