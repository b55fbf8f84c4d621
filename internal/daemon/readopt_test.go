package daemon

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/agent"
	"github.com/hutch-sandbox/hutch/internal/sandbox"
)

// TestAgentAuthNames: package sandbox, which does not import the agent,
// gives the agent its token and authenticates to it with the agent's own
// names.
func TestAgentAuthNames(t *testing.T) {
	if sandbox.AgentTokenEnv != agent.TokenEnv || sandbox.AgentAuthPrefix != agent.AuthPrefix {
		t.Errorf("sandbox's %q, %q; the agent's %q, %q", sandbox.AgentTokenEnv, sandbox.AgentAuthPrefix, agent.TokenEnv, agent.AuthPrefix)
	}
}

// TestLastingFile: what a sandbox keeps for the next daemon is read back
// (mode 0600), an update of its operator flag kept, and a sandbox without
// one is none of updateLasting's business; a file without a token is
// refused.
func TestLastingFile(t *testing.T) {
	dir := t.TempDir()
	if isLasting(dir) {
		t.Fatal("an empty directory is lasting")
	}
	setOperator := func(ls *lasting) { ls.Operator = true }
	if err := updateLasting(dir, setOperator); err != nil {
		t.Errorf("updateLasting without a lasting file: %v", err)
	}
	want := lasting{Token: "t0k", ExecUser: &agent.Credential{UID: 7, GID: 8}, BootEnv: []string{"A=b"}}
	if err := writeLasting(dir, want); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(filepath.Join(dir, lastingFile)); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("lasting file: %v, %v; want mode 0600", st, err)
	}
	if err := updateLasting(dir, setOperator); err != nil {
		t.Fatal(err)
	}
	got, err := readLasting(dir)
	if err != nil || !isLasting(dir) {
		t.Fatalf("readLasting: %v (lasting %v)", err, isLasting(dir))
	}
	if got.Token != want.Token || !got.Operator || got.ExecUser == nil || *got.ExecUser != *want.ExecUser || len(got.BootEnv) != 1 {
		t.Errorf("read back %+v, want %+v with operator", got, want)
	}
	if err := os.WriteFile(filepath.Join(dir, lastingFile), []byte(`{}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := readLasting(dir); err == nil {
		t.Error("a lasting file without a token was read")
	}
}
