package main

import (
	"context"
	"sync/atomic"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/hutch-sandbox/hutch/internal/approve"
	"github.com/hutch-sandbox/hutch/internal/mcp"
)

// hutch mcp's approvals: each sandbox of the session has the gate hutch
// run would make of the policy (runner.Sandbox.Gate: its report lines,
// "allow always" written back to the policy file, --approval-timeout,
// network.on_unknown), whose asker is the MCP client. A command exec runs
// is decided before it starts, the question put to the client through the
// tool call's elicitation (approve.WithAsker); a host the proxy holds is
// asked about through the session's. A client that did not declare
// elicitation cannot be asked: the command or host is refused at once,
// with a message saying which rule asked and how to allow it.

var _ mcp.Approver = (*mcpBackend)(nil)

// noElicitation explains a refusal no one was asked about.
const noElicitation = "the MCP client cannot be asked: it did not declare the elicitation capability"

// mcpAsker asks the MCP client of a hutch mcp session.
type mcpAsker struct {
	session atomic.Pointer[sdk.ServerSession]
}

// Ask implements approve.Asker: the tool call's elicitation when the
// question comes from one, else the session's; no one when the client
// cannot be asked.
func (a *mcpAsker) Ask(ctx context.Context, r approve.Request) approve.Reply {
	if ask, ok := approve.AskerFrom(ctx); ok {
		return ask.Ask(ctx, r)
	}
	if ask, ok := mcp.ElicitAsker(a.session.Load()); ok {
		return ask.Ask(ctx, r)
	}
	return approve.Reply{Answer: approve.AnswerDeny, By: "nobody"}
}

// ApproveCommand decides whether line may run in sandbox id (mcp.Approver).
func (b *mcpBackend) ApproveCommand(ctx context.Context, id, line string) error {
	box, err := b.lookup(id)
	if err != nil {
		return err
	}
	return box.gate.Command(ctx, line)
}
