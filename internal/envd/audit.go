package envd

import (
	"context"
	"time"
)

// Event is a call that changed something in a sandbox, or a command that
// ran there, for the daemon's audit log: Sandbox.Audit receives it.
type Event struct {
	// Time is when the call was made (or the command started).
	Time time.Time
	// Action is what it did, in the words of hutch's audit log: "exec",
	// "stdin", "close_stdin", "resize", "signal", "write_file", "mkdir",
	// "rename", "remove", "watch" or "unwatch".
	Action string
	// Command is the arguments of an exec, as run (the command and its
	// args).
	Command []string
	// Paths are the paths a file call acted on: the file written, the
	// directory made, the path removed, or the source and destination of
	// a move.
	Paths []string
	// ExitCode is how an exec's command ended; nil if it did not run to
	// its end (it could not be followed, or its sandbox ended first).
	ExitCode *int
	// Duration is how long an exec's command ran.
	Duration time.Duration
	// BytesIn is how many bytes of input an exec's command was sent.
	BytesIn int64
	// BytesOut is how many bytes of output (stdout and stderr, or its
	// terminal's) an exec's command produced.
	BytesOut int64
	// Error is the Connect code of a call that failed (such as
	// "not_found"); empty if it succeeded.
	Error string
}

// auditCommand records the command (its arguments as run) and the input
// a call acted on in its event, if it is audited.
func auditCommand(ctx context.Context, args []string, in int64) {
	if ev := callOf(ctx).ev; ev != nil {
		ev.Command, ev.BytesIn = args, in
	}
}

// auditPaths records the paths a call acted on in its event, if it is
// audited.
func auditPaths(ctx context.Context, paths ...string) {
	if ev := callOf(ctx).ev; ev != nil {
		ev.Paths = paths
	}
}

// record hands ev to the sandbox's audit hook, if it has one.
func (b *box) record(ev Event) {
	if b.audit != nil {
		b.audit(ev)
	}
}
