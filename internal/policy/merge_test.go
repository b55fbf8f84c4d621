package policy

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestAdd: lists add up, a setting the added spec gives wins, and nothing
// of the first is taken away.
func TestAdd(t *testing.T) {
	s := Spec{
		Filesystem: Filesystem{DenyRead: []string{"/a"}, AllowWrite: []string{"/w"}},
		Network:    Network{AllowedDomains: []string{"a.example"}, OnUnknown: "ask"},
		Approvals:  Approvals{Preset: "read-only", Default: "ask", Commands: []CommandRule{{Action: "deny", Args: []string{"rm"}}}, Approved: []string{"make"}},
	}
	s.Add(Spec{
		Filesystem: Filesystem{DenyRead: []string{"/b"}, DenyWrite: []string{"/c"}},
		Network:    Network{AllowedDomains: []string{"b.example"}, DeniedDomains: []string{"x.example"}},
		Approvals:  Approvals{Default: "deny", NoDefaultRules: true, Commands: []CommandRule{{Action: "allow", Args: []string{"ls"}}}, Approved: []string{"go build"}},
	})
	switch {
	case !slices.Equal(s.Filesystem.DenyRead, []string{"/a", "/b"}), !slices.Equal(s.Filesystem.AllowWrite, []string{"/w"}), !slices.Equal(s.Filesystem.DenyWrite, []string{"/c"}):
		t.Errorf("filesystem %+v", s.Filesystem)
	case !slices.Equal(s.Network.AllowedDomains, []string{"a.example", "b.example"}), !slices.Equal(s.Network.DeniedDomains, []string{"x.example"}), s.Network.OnUnknown != "ask":
		t.Errorf("network %+v", s.Network)
	case s.Approvals.Preset != "read-only", s.Approvals.Default != "deny", !s.Approvals.NoDefaultRules, len(s.Approvals.Commands) != 2, !slices.Equal(s.Approvals.Approved, []string{"make", "go build"}):
		t.Errorf("approvals %+v", s.Approvals)
	}
}

func TestLoadApprovalRules(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(good, []byte("approvals:\n  preset: none\n  commands:\n    - deny: [npm, publish]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	a, err := LoadApprovalRules(good)
	if err != nil || a.Preset != "none" || len(a.Commands) != 1 || a.Commands[0].Source() != good+":4" {
		t.Errorf("LoadApprovalRules = %+v, %v", a, err)
	}
	bad := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(bad, []byte("approvals:\n  default: ask\nnetwork:\n  mode: none\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadApprovalRules(bad); err == nil || !strings.Contains(err.Error(), "holds only an approvals: section") {
		t.Errorf("a policy with more than approvals: %v", err)
	}
}
