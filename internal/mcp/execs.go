package mcp

import "sync"

// ExecTable holds the commands exec left running, by session id, with
// their owners.
type ExecTable struct {
	mu sync.Mutex
}

// NewExecTable returns an empty table.
func NewExecTable() *ExecTable { return &ExecTable{} }
