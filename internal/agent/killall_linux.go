package agent

import (
	"context"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// killAllRound is how long the agent waits between two rounds of kill(-1):
// time for its reaper to collect what the last round killed.
const killAllRound = 5 * time.Millisecond

// killAll kills every process of the sandbox but the agent itself and
// returns once none is left, not even a zombie. Only PID 1 of a pid
// namespace may: kill(-1, SIGKILL) from it reaches every other process of
// the namespace (and of the namespaces below it) and nothing outside, and
// the kernel answers ESRCH once there is no process left to signal. A
// process forked while a round runs is reached by the next one (a fork
// bomb only makes it loop), until ctx ends.
func (s *server) killAll(ctx context.Context) error {
	if os.Getpid() != 1 {
		return errorf(CodeInvalid, "kill all: the agent is not PID 1 of a sandbox")
	}
	for rounds := 1; ; rounds++ {
		err := unix.Kill(-1, unix.SIGKILL)
		if err == unix.ESRCH {
			s.log.Debug("killed every process but the agent", "rounds", rounds)
			return nil
		}
		if err != nil {
			return errorf(CodeInternal, "kill all: %v", err)
		}
		select {
		case <-ctx.Done():
			return errorf(CodeInternal, "kill all: processes were still left after %d rounds: %v", rounds, ctx.Err())
		case <-time.After(killAllRound):
		}
	}
}
