package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// TestMCPStdioApprovals runs test/mcp/approve.test.mjs: MCP's TypeScript
// SDK spawns `hutch mcp --policy FILE` whose approvals ask about touch and
// deny rm. A client that declared elicitation is asked, and its answers
// decide (once runs it, deny, decline and cancel refuse it, run lets the
// same command run again unasked); a deny rule refuses without a
// question; a client without elicitation is refused at once, with a
// message naming the rule and how to allow it, and the report records
// the refusal. With network.on_unknown: ask, a host no rule allows is
// asked about through the session, and refused (403) on the client's
// deny.
func TestMCPStdioApprovals(t *testing.T) {
	testutil.RequireRoot(t)
	node := nodeForMCP(t)
	bin := testutil.Hutch(t)

	ws := t.TempDir()
	if err := os.WriteFile(filepath.Join(ws, "hello.txt"), []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policy, []byte("approvals:\n  default: allow\n  commands:\n    - ask: [touch]\n    - deny: [rm]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	policyNet := filepath.Join(t.TempDir(), "policy-net.yaml")
	if err := os.WriteFile(policyNet, []byte("network:\n  mode: proxy\n  allowed_domains: [example.com]\n  on_unknown: ask\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	report := filepath.Join(t.TempDir(), "report.jsonl")
	runNodeTest(t, node, "approve.test.mjs", "HUTCH_BIN="+bin, "HUTCH_POLICY="+policy, "HUTCH_WS="+ws, "HUTCH_REPORT="+report, "HUTCH_POLICY_NET="+policyNet)
}
