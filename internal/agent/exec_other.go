//go:build !linux

package agent

import (
	"context"
	"fmt"
	"log/slog"
)

// process is a command the agent started; off Linux there are none.
type process struct{}

// procTable waits for the agent's children; off Linux it has none.
type procTable struct{}

func newProcTable(pid1 bool, _ *slog.Logger) (*procTable, error) {
	if pid1 {
		return nil, fmt.Errorf("agent as PID 1: %w", ErrNotSupported)
	}
	return &procTable{}, nil
}

func (t *procTable) close() {}

func (s *server) exec(r *areq, _ *request) {
	s.replyErr(r.id, errorf(CodeInternal, "exec: %v", ErrNotSupported))
}

func (s *server) signal(uint32, int) error {
	return errorf(CodeInternal, "signal: %v", ErrNotSupported)
}

func (s *server) resize(uint32, uint16, uint16) error {
	return errorf(CodeInternal, "resize: %v", ErrNotSupported)
}

func (s *server) ps() []wireProc { return nil }

func (s *server) killAll(context.Context) error {
	return errorf(CodeInternal, "kill all: %v", ErrNotSupported)
}
