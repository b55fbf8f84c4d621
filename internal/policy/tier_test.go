package policy

import (
	"strings"
	"testing"
)

func TestTierParse(t *testing.T) {
	s, err := Parse("policy.yaml", []byte("tier: gvisor\n"))
	if err != nil || s.Tier != TierGVisor {
		t.Fatalf("Parse = %+v, %v; want tier gvisor", s.Tier, err)
	}
	_, err = Parse("policy.yaml", []byte("network:\n  mode: none\ntier: kvm\n"))
	want := `policy.yaml:3:7: tier: unknown tier "kvm" (allowed: "namespace", "gvisor", "microvm")`
	if err == nil || err.Error() != want {
		t.Fatalf("Parse(tier: kvm) = %v, want %s", err, want)
	}
}

func TestTierDefaultAndFormat(t *testing.T) {
	var s Spec
	if err := s.Normalize("/work", "/home/u"); err != nil {
		t.Fatal(err)
	}
	if s.Tier != TierNamespace {
		t.Fatalf("default tier = %q, want %q", s.Tier, TierNamespace)
	}
	out, err := s.Format()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "tier: namespace\n") {
		t.Errorf("Format does not name the tier:\n%s", out)
	}
	back, err := Parse("policy.yaml", out)
	if err != nil || back.Tier != TierNamespace {
		t.Errorf("Parse(Format) tier = %q, %v", back.Tier, err)
	}
}

func TestTierRefusals(t *testing.T) {
	tests := []struct {
		name   string
		change func(*Spec)
		want   string // in Validate's error; "" for none
	}{
		{"namespace honours proxy", func(s *Spec) { s.Network.Mode = "proxy" }, ""},
		{"gvisor none", func(s *Spec) { s.Tier = TierGVisor }, ""},
		{"gvisor proxy", func(s *Spec) { s.Tier, s.Network.Mode = TierGVisor, "proxy" }, ""},
		{"gvisor host", func(s *Spec) { s.Tier, s.Network.Mode = TierGVisor, "host" },
			`network.mode: "host" is not supported under tier "gvisor"`},
		{"gvisor image", func(s *Spec) { s.Tier, s.Root = TierGVisor, ImagePrefix+"alpine" }, ""},
		{"gvisor root dir", func(s *Spec) { s.Tier, s.Root = TierGVisor, "/srv/root" },
			`root: a root directory is not yet supported under tier "gvisor"`},
		{"gvisor persist", func(s *Spec) { s.Tier, s.Filesystem.Home = TierGVisor, "persist" },
			`filesystem.home: "persist" is not yet supported under tier "gvisor"`},
		{"unknown", func(s *Spec) { s.Tier = "vm" }, `tier: unknown tier "vm"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s Spec
			tt.change(&s)
			if err := s.Normalize("/work", "/home/u"); err != nil {
				t.Fatal(err)
			}
			err := s.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Validate: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("Validate = %v, want %q", err, tt.want)
			}
		})
	}
}
