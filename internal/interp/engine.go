package interp

import (
	"context"

	"github.com/hutch-sandbox/hutch/internal/kernel"
)

// Engine runs the code of one context and keeps its state between
// executions: a Jupyter kernel (*kernel.Kernel: Python), or one of
// hutch's own (JavaScript and TypeScript on node). Its outputs are the
// kernel package's: *kernel.Stream, *kernel.Result, *kernel.Error,
// *kernel.Input (the execution's count), *kernel.Dropped.
//
// Execute runs one execution at a time (a second waits), calls fn with
// each output in order, and returns once the execution is over; an
// exception in the code is an *kernel.Error output and Reply.Error, not
// an error of Execute. When ctx ends first, the execution is interrupted
// and Execute returns ctx.Err(). kernel.ErrDied (wrapped) means the
// engine's process is gone: the context is restarted before its next
// execution.
type Engine interface {
	Execute(ctx context.Context, code string, opts kernel.ExecuteOptions, fn func(kernel.Output)) (kernel.Reply, error)
	// Interrupt stops the running execution, if any; the engine stays.
	Interrupt() error
	// Restart starts the engine afresh: its state is gone.
	Restart(ctx context.Context) error
	// Close ends the engine and every process it started.
	Close() error
}

var _ Engine = (*kernel.Kernel)(nil)
