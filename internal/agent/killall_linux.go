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

// killAllReport bounds how long killAll waits for the exits of the
// commands it killed to be sent: a command whose output waits for credit
// the daemon does not give sends its exit later.
const killAllReport = 5 * time.Second

// killAll kills every process of the sandbox but the agent itself and
// returns once none is left, not even a zombie, and the exits of the
// commands it killed are sent (within killAllReport): the daemon may
// freeze the agent once it has the answer, and a command's stream ends
// first. Only PID 1 of a pid namespace may: kill(-1, SIGKILL) from it
// reaches every other process of the namespace (and of the namespaces
// below it) and nothing outside, and the kernel answers ESRCH once there is
// no process left to signal. A process forked while a round runs is reached
// by the next one (a fork bomb only makes it loop), until ctx ends.
func (s *server) killAll(ctx context.Context) error {
	if os.Getpid() != 1 {
		return errorf(CodeInvalid, "kill all: the agent is not PID 1 of a sandbox")
	}
	for rounds := 1; ; rounds++ {
		err := unix.Kill(-1, unix.SIGKILL)
		if err == unix.ESRCH {
			s.log.Debug("killed every process but the agent", "rounds", rounds)
			s.awaitReports(ctx)
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

// awaitReports waits until every command started by an exec request has
// sent its exit, for at most killAllReport (and as long as ctx allows).
func (s *server) awaitReports(ctx context.Context) {
	var waits []chan struct{}
	s.mu.Lock()
	for _, r := range s.reqs {
		if r.proc != nil {
			waits = append(waits, r.proc.reported)
		}
	}
	s.mu.Unlock()
	bound := time.NewTimer(killAllReport)
	defer bound.Stop()
	for _, w := range waits {
		select {
		case <-w:
		case <-bound.C:
			s.log.Debug("kill all: a killed command's exit is not sent yet")
			return
		case <-ctx.Done():
			return
		}
	}
}
