package policy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWriteBack(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "policy.yaml")
	orig := "# my policy\nnetwork:\n  # hosts the agent needs\n  allowed_domains: [example.com]\napprovals:\n  default: ask\n"
	if err := os.WriteFile(file, []byte(orig), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := AddApproved(file, "git push origin main"); err != nil {
		t.Fatal(err)
	}
	if err := AddAllowedDomain(file, "api.test:443"); err != nil {
		t.Fatal(err)
	}
	if err := AddApproved(file, "git push origin main"); err != nil { // twice: once in the file
		t.Fatal(err)
	}
	data, _ := os.ReadFile(file)
	for _, want := range []string{"# my policy", "# hosts the agent needs"} {
		if !strings.Contains(string(data), want) {
			t.Errorf("comment %q lost:\n%s", want, data)
		}
	}
	if n := strings.Count(string(data), "git push origin main"); n != 1 {
		t.Errorf("approved entry %d times:\n%s", n, data)
	}
	s, err := Load(file)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Approvals.Approved; len(got) != 1 || got[0] != "git push origin main" {
		t.Errorf("approved = %q", got)
	}
	if got := s.Network.AllowedDomains; len(got) != 2 || got[1] != "api.test:443" {
		t.Errorf("allowed_domains = %q", got)
	}
	if s.Approvals.Default != "ask" {
		t.Errorf("default lost: %q", s.Approvals.Default)
	}
	if info, _ := os.Stat(file); info.Mode().Perm() != 0o640 {
		t.Errorf("mode %v", info.Mode())
	}
	set, err := s.Approvals.ApprovalSet()
	if err != nil {
		t.Fatal(err)
	}
	if d := set.Decide("git push origin main"); d.Action.String() != "allow" {
		t.Errorf("approved command decided %v", d)
	}
	if d := set.Decide("git push origin other"); d.Action.String() == "allow" {
		t.Errorf("other push decided %v", d)
	}

	// A file that does not load is left alone.
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("network:\n  alowed_domains: [x]\n"), 0o600)
	if err := AddApproved(bad, "ls"); err == nil {
		t.Error("write-back to a broken file succeeded")
	}
	if data, _ := os.ReadFile(bad); string(data) != "network:\n  alowed_domains: [x]\n" {
		t.Errorf("broken file changed: %q", data)
	}
	// An empty file gets its sections.
	empty := filepath.Join(dir, "empty.yaml")
	os.WriteFile(empty, nil, 0o600)
	if err := AddAllowedDomain(empty, "x.test"); err != nil {
		t.Fatal(err)
	}
	if s, err := Load(empty); err != nil || len(s.Network.AllowedDomains) != 1 {
		t.Errorf("empty file: %v %v", s.Network.AllowedDomains, err)
	}
	// Approved entries must be one plain simple command.
	for _, e := range []string{"a && b", "rm $x", "ls | sh"} {
		if _, err := (Approvals{Approved: []string{e}}).ApprovalSet(); err == nil {
			t.Errorf("approved %q accepted", e)
		}
	}
}
