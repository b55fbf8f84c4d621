package mcp

import (
	"context"
	"fmt"
	"strings"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/hutch-sandbox/hutch/internal/approve"
)

// Approver is a Backend whose commands may wait for a person's approval
// (the policy's approvals: rules) and that does not decide them itself
// in its agent clients (as hutch serve's sandboxes do): exec asks it
// before a command starts.
type Approver interface {
	// ApproveCommand decides whether line may run in sandbox id, asking
	// where a rule says ask: nil, or the refusal (a *approve.Denied,
	// whose text says which rule and how to allow it). ctx carries the
	// MCP client's own way of asking when it has one (approve.WithAsker):
	// the first answer, the client's or another's (the API, the web
	// pages), decides.
	ApproveCommand(ctx context.Context, id, line string) error
}

// withElicitation returns ctx carrying the client's elicitation as an
// asker of the approval layer (approve.WithAsker) when the client of req
// declared it: the first answer, the client's or another's (the API, the
// web pages), decides.
func (t *tools) withElicitation(ctx context.Context, req *sdk.CallToolRequest) context.Context {
	if req != nil && canElicit(req.Session) {
		return approve.WithAsker(ctx, elicitAsker{ss: req.Session})
	}
	return ctx
}

// approveCommand asks the backend, if it is an Approver, whether line may
// run in sandbox id.
func (t *tools) approveCommand(ctx context.Context, id, line string) error {
	if ap, ok := t.o.Backend.(Approver); ok {
		return ap.ApproveCommand(ctx, id, line)
	}
	return nil
}

// elicitProtocolCutoff is the protocol version from which a server may
// no longer send a request of its own while it serves one (SEP-2322: the
// question travels in the tool's result instead, which hutch does not
// do): a client speaking it is not asked.
const elicitProtocolCutoff = "2026-07-28"

// canElicit reports whether the client of ss can be asked a question
// through elicitation: it declared the capability (form mode, or no mode,
// which means form), on a protocol version that lets a server ask while
// it serves a tool call.
func canElicit(ss *sdk.ServerSession) bool {
	if ss == nil {
		return false
	}
	p := ss.InitializeParams()
	if p == nil || p.Capabilities == nil || p.Capabilities.Elicitation == nil || p.ProtocolVersion >= elicitProtocolCutoff {
		return false
	}
	e := p.Capabilities.Elicitation
	return e.Form != nil || e.URL == nil
}

// ElicitAsker is an approve.Asker that asks the user of ss's client
// through elicitation, when the client can be asked (false otherwise):
// for a question no tool call is waiting on (a host the sandbox's proxy
// holds), on a transport that lets the server ask at any time (stdio).
func ElicitAsker(ss *sdk.ServerSession) (approve.Asker, bool) {
	if !canElicit(ss) {
		return nil, false
	}
	return elicitAsker{ss: ss}, true
}

// elicitAsker asks the MCP client's user (elicitation/create): a message
// naming what is asked about, the rule and the reason, and a form of one
// field, answer, of once, run, always or deny. A decline, a cancel, an
// error or an answer it cannot read is a refusal by "mcp".
type elicitAsker struct {
	ss *sdk.ServerSession
}

// answerSchema is the elicitation's requested schema.
var answerSchema = map[string]any{
	"type": "object",
	"properties": map[string]any{
		"answer": map[string]any{
			"type":        "string",
			"title":       "Answer",
			"description": "once: allow this one time; run: allow this command for the sandbox's life; always: allow it from now on; deny: refuse",
			"enum":        []string{string(approve.AnswerOnce), string(approve.AnswerRun), string(approve.AnswerAlways), string(approve.AnswerDeny)},
		},
	},
	"required": []string{"answer"},
}

// Ask implements approve.Asker.
func (e elicitAsker) Ask(ctx context.Context, r approve.Request) approve.Reply {
	res, err := e.ss.Elicit(ctx, &sdk.ElicitParams{Mode: "form", Message: elicitMessage(r), RequestedSchema: answerSchema})
	switch {
	case err != nil:
		return approve.Reply{Answer: approve.AnswerDeny, By: "mcp", Note: "the MCP client's answer failed: " + err.Error()}
	case res.Action != "accept":
		return approve.Reply{Answer: approve.AnswerDeny, By: "mcp", Note: "the MCP client's user chose " + res.Action}
	}
	s, _ := res.Content["answer"].(string)
	a, err := approve.ParseAnswer(s)
	if err != nil {
		return approve.Reply{Answer: approve.AnswerDeny, By: "mcp", Note: "the MCP client answered " + err.Error()}
	}
	return approve.Reply{Answer: a, By: "mcp"}
}

// elicitMessage is the question put to an MCP client's user.
func elicitMessage(r approve.Request) string {
	var b strings.Builder
	in := ""
	if r.Sandbox != "" {
		in = " in sandbox " + r.Sandbox
	}
	switch r.Kind {
	case approve.KindCommand:
		fmt.Fprintf(&b, "Run this command%s?", in)
	case approve.KindNetwork:
		who := "the sandbox"
		if r.Sandbox != "" {
			who = "sandbox " + r.Sandbox
		}
		fmt.Fprintf(&b, "Let %s connect to %s?", who, r.Subject)
	case approve.KindFile:
		fmt.Fprintf(&b, "Apply changes to these paths%s?", in)
	default:
		fmt.Fprintf(&b, "Allow this %s%s?", r.Kind, in)
	}
	if r.Kind != approve.KindNetwork {
		fmt.Fprintf(&b, "\n\n%s", r.Subject)
	}
	if r.Command != "" && r.Command != r.Subject {
		fmt.Fprintf(&b, "\n\nasked about: %s", r.Command)
	}
	if r.Rule != "" {
		fmt.Fprintf(&b, "\nrule: %s", r.Rule)
	}
	if r.Reason != "" {
		fmt.Fprintf(&b, "\nreason: %s", r.Reason)
	}
	return b.String()
}
