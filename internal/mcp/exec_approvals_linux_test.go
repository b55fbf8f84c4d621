package mcp_test

import (
	"strings"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/daemon"
	"github.com/hutch-sandbox/hutch/internal/policy"
)

// TestExecNotApproved: on hutch serve's /mcp, the exec tool goes through
// the sandbox's approvals as every front end does: a command a deny rule
// refuses is a tool error naming the rule, and it never ran; what the
// rules allow runs.
func TestExecNotApproved(t *testing.T) {
	h := newHarness(t)
	info, err := h.m.Create(testCtx(t), "alice", daemon.CreateRequest{Policy: policy.Spec{Approvals: policy.Approvals{
		Preset: "full", Commands: []policy.CommandRule{{Action: "deny", Args: []string{"rm"}}},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	msg := callErr(t, h.cs, "exec", map[string]any{"sandbox_id": info.ID, "command": "touch ran; rm -f x"})
	if !strings.Contains(msg, "not approved") || !strings.Contains(msg, "deny: [rm]") {
		t.Errorf("a denied command: %q, want not approved by deny: [rm]", msg)
	}
	var out struct {
		Output string `json:"output"`
	}
	call(t, h.cs, "exec", map[string]any{"sandbox_id": info.ID, "command": "test -e ran && echo ran || echo never"}, &out)
	if strings.TrimSpace(out.Output) != "never" {
		t.Errorf("the denied command ran: %q", out.Output)
	}
}
