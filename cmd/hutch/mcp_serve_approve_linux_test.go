package main

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/hutch-sandbox/hutch/client"
)

// TestMCPServeApprovals runs test/mcp/serve-approve.test.mjs: MCP's
// TypeScript SDK calls exec through /mcp on hutch serve in a sandbox whose
// policy asks about touch. A client that declared elicitation is asked,
// and its answer decides (once runs the command; deny and decline refuse
// it); the same question waits in the API, whose answer, given first,
// decides while the client's user has not answered; a client without
// elicitation is refused once the question expires (a daemon whose
// questions wait 300 ms), the tool error saying so.
func TestMCPServeApprovals(t *testing.T) {
	node := mcpServeNode(t)
	const policy = `{"approvals": {"default": "allow", "commands": [{"ask": ["touch"]}]}}`
	// daemon starts a daemon whose questions wait timeout, and a sandbox
	// of the policy there; its /mcp, a token and the sandbox.
	daemon := func(timeout string) (string, string, string) {
		d := startDaemonWith(t, nil, "--approval-timeout", timeout)
		tok := d.token(t, "alice", false)
		c, err := client.New(d.tcp, tok)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), guard)
		defer cancel()
		sb, err := c.Create(ctx, client.CreateOptions{Policy: json.RawMessage(policy)})
		if err != nil {
			t.Fatalf("create a sandbox with approvals: %v", err)
		}
		return d.tcp + "/mcp", tok, sb.ID
	}
	url, tok, sb := daemon("10m")
	urlShort, tokShort, sbShort := daemon("300ms")

	runNodeTest(t, node, "serve-approve.test.mjs", mcpServeEnv(node, "HUTCH_MCP_URL="+url, "HUTCH_MCP_TOKEN="+tok, "HUTCH_SANDBOX="+sb,
		"HUTCH_MCP_URL_SHORT="+urlShort, "HUTCH_MCP_TOKEN_SHORT="+tokShort, "HUTCH_SANDBOX_SHORT="+sbShort)...)
}
