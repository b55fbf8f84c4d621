package policy

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/approve"
)

// TestApprovalsParse: the minimal format loads, compiles and
// decides; Format and JSON give it back.
func TestApprovalsParse(t *testing.T) {
	src := `approvals:
  default: ask
  commands:
    - allow: [git, status]
    - allow: [ls]
    - ask:   [git, push]
    - deny:  [rm, "-rf", "/"]
      match: ["rm -rf /", "sudo rm -rf / --x"]
      not_match: ["rm -rf ./build"]
network:
  on_unknown: ask
`
	s, err := Parse("p.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	a := s.Approvals
	if a.Default != "ask" || len(a.Commands) != 4 || s.Network.OnUnknown != "ask" {
		t.Fatalf("got %+v, on_unknown %q", a, s.Network.OnUnknown)
	}
	if r := a.Commands[3]; r.Action != "deny" || r.Source() != "p.yaml:7" || len(r.Match) != 2 {
		t.Errorf("rule 3: %+v", r)
	}
	set, err := a.ApprovalSet()
	if err != nil {
		t.Fatal(err)
	}
	for line, want := range map[string]approve.Action{"git status": approve.Allow, "git push": approve.Ask, "rm -rf /": approve.Deny, "ls | wc": approve.Allow, "make": approve.Ask} {
		if d := set.Decide(line); d.Action != want {
			t.Errorf("%q: %s (%s), want %s", line, d.Action, d.Reason, want)
		}
	}
	if d := set.Decide("rm -rf /"); d.Source != "p.yaml:7" {
		t.Errorf("decision names %q", d.Source)
	}
	back, fromJSON := approvalsRoundTrip(t, s)
	if len(back.Approvals.Commands) != 4 || back.Approvals.Commands[3].Args[1] != "-rf" || back.Network.OnUnknown != "ask" || back.Approvals.Commands[3].NotMatch[0] != "rm -rf ./build" {
		t.Errorf("Format round trip: %+v", back.Approvals)
	}
	if len(fromJSON.Commands) != 4 || fromJSON.Commands[2].Action != "ask" {
		t.Errorf("JSON round trip: %+v", fromJSON)
	}
	// A spec without approvals prints none.
	var empty Spec
	if out, _ := empty.Format(); strings.Contains(string(out), "approvals") {
		t.Errorf("empty spec prints approvals:\n%s", out)
	}
}

// TestApprovalsErrors: each problem is reported at its file:line.
func TestApprovalsErrors(t *testing.T) {
	for _, tt := range []struct{ src, want string }{
		{"approvals:\n  default: maybe\n", `p.yaml:2:12: approvals.default: unknown action "maybe": want allow, ask or deny`},
		{"approvals:\n  preset: ro\n", `p.yaml:2:11: approvals.preset: unknown preset "ro"`},
		{"approvals:\n  defualt: ask\n", `p.yaml:2:3: unknown field "defualt" in approvals (did you mean "default"?)`},
		{"approvals:\n  commands: [ls]\n", `p.yaml:2:14: approvals.commands[0]: expected a rule`},
		{"approvals:\n  commands:\n    - allow: git\n", `p.yaml:3:14: approvals.commands[0].allow: expected a list of argument patterns`},
		{"approvals:\n  commands:\n    - allow: []\n", `p.yaml:3:14: approvals.commands[0].allow: a rule needs at least one argument pattern`},
		{"approvals:\n  commands:\n    - allow: [ls]\n      deny: [rm]\n", `p.yaml:4:7: approvals.commands[0]: a rule has one action, this one allow and deny`},
		{"approvals:\n  commands:\n    - match: [ls]\n", `p.yaml:3:7: approvals.commands[0]: a rule needs one of allow:, ask: or deny:`},
		{"approvals:\n  commands:\n    - alow: [ls]\n", `p.yaml:3:7: unknown field "alow" in approvals.commands[0] (did you mean "allow"?)`},
		{"approvals:\n  commands:\n    - ask: [\"**\"]\n", `approvals.commands[0].ask: the first argument pattern (the command name) cannot be "**"`},
		// Examples that fail name the rule's line.
		{"approvals:\n  commands:\n    - allow: [ls]\n    - deny: [rm, \"-rf\", /]\n      match: [\"rm -fr /\"]\n", `p.yaml:4:7: approvals.commands[1] (deny: [rm, "-rf", /]): example "rm -fr /" does not match the rule`},
		{"approvals:\n  commands:\n    - ask: [git, push]\n      not_match: [\"ls && git push -f\"]\n", `p.yaml:3:7: approvals.commands[0] (ask: [git, push]): example "ls && git push -f" matches the rule (on "git push -f") but is listed in not_match`},
		{"approvals:\n  commands:\n    - allow: [git, status]\n      match: [\"git status; rm x\"]\n", `p.yaml:3:7: approvals.commands[0] (allow: [git, status]): example "git status; rm x" does not match the rule (deny for "rm x"`},
		{"network:\n  on_unknown: prompt\n", `p.yaml:2:15: network.on_unknown: unknown value "prompt": want ask or deny`},
	} {
		_, err := Parse("p.yaml", []byte(tt.src))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Parse(%q):\n got %v\nwant %s", tt.src, err, tt.want)
		}
	}
}

// TestApprovalsValidate: a Spec built in code (or decoded from JSON) gets
// the checks a file gets.
func TestApprovalsValidate(t *testing.T) {
	for _, tt := range []struct {
		a    Approvals
		on   string
		want string
	}{
		{Approvals{Default: "perhaps"}, "", `approvals: default: unknown action "perhaps"`},
		{Approvals{Preset: "yolo"}, "", `approvals: unknown preset "yolo"`},
		{Approvals{Commands: []CommandRule{{Action: "permit", Args: []string{"ls"}}}}, "", `approvals: approvals.commands[0]: unknown action "permit"`},
		{Approvals{Commands: []CommandRule{{Action: "deny", Args: []string{"rm"}, NotMatch: []string{"rm x"}}}}, "", `approvals.commands[0]: example "rm x" matches the rule`},
		{Approvals{}, "maybe", `network.on_unknown: unknown value "maybe"`},
	} {
		s := Spec{Approvals: tt.a, Network: Network{OnUnknown: tt.on}}
		err := s.Validate()
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Validate(%+v, on_unknown %q): %v, want %s", tt.a, tt.on, err, tt.want)
		}
	}
}

// TestApprovalsFiles: approvals.files loads with each rule's line, compiles
// and decides, round-trips through Format and JSON, and is no command
// rule.
func TestApprovalsFiles(t *testing.T) {
	src := `approvals:
  files:
    - ask: [".github/**", "**/*.pem", Makefile]
    - deny: [".git/hooks/**"]
    - allow: [".github/CODEOWNERS"]
`
	s, err := Parse("p.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	a := s.Approvals
	if len(a.Files) != 3 || a.Files[1].Action != "deny" || a.Files[1].Source() != "p.yaml:4" || a.HasCommandRules() {
		t.Fatalf("got %+v", a)
	}
	rules, err := a.FileRules()
	if err != nil {
		t.Fatal(err)
	}
	if d := approve.DecideFiles(rules, []string{"x.go", "Makefile", ".github/CODEOWNERS"}); d.Action != approve.Ask || len(d.Paths) != 1 || d.Rules[0].Source != "p.yaml:3" {
		t.Errorf("decision %+v", d)
	}
	back, fromJSON := approvalsRoundTrip(t, s)
	if len(back.Approvals.Files) != 3 || back.Approvals.Files[0].Globs[2] != "Makefile" {
		t.Errorf("Format round trip: %+v", back.Approvals)
	}
	if len(fromJSON.Files) != 3 || fromJSON.Files[2].Action != "allow" {
		t.Errorf("JSON round trip: %+v", fromJSON)
	}
	if err := json.Unmarshal([]byte(`{"files":[{"permit":["x"]}]}`), &fromJSON); err == nil || !strings.Contains(err.Error(), `unknown key "permit"`) {
		t.Errorf("JSON with an unknown action: %v", err)
	}
}

// TestApprovalsFilesErrors: each problem of approvals.files at its
// file:line; a Spec built in code gets the same checks.
func TestApprovalsFilesErrors(t *testing.T) {
	for _, tt := range []struct{ src, want string }{
		{"approvals:\n  files: [x]\n", `p.yaml:2:11: approvals.files[0]: expected a rule`},
		{"approvals:\n  files: x\n", `p.yaml:2:10: approvals.files: expected a list of rules`},
		{"approvals:\n  files:\n    - ask: x\n", `p.yaml:3:12: approvals.files[0].ask: expected a list of path globs`},
		{"approvals:\n  files:\n    - ask: []\n", `p.yaml:3:12: approvals.files[0].ask: needs at least one path glob`},
		{"approvals:\n  files:\n    - ask: [a]\n      deny: [b]\n", `p.yaml:4:7: approvals.files[0]: a rule has one action, this one ask and deny`},
		{"approvals:\n  files:\n    - aks: [a]\n", `p.yaml:3:7: unknown field "aks" in approvals.files[0] (did you mean "ask"?)`},
		{"approvals:\n  files:\n    - deny: [ok, /etc/passwd]\n", `p.yaml:3:18: approvals.files[0].deny[1]: pattern "/etc/passwd": paths are relative to the workspace`},
		{"approvals:\n  files:\n    - deny: [\"a/**b\"]\n", `p.yaml:3:14: approvals.files[0].deny[0]: pattern "a/**b": ** must be a whole path segment`},
		{"approvals:\n  files:\n    - deny: [\"../x\"]\n", `p.yaml:3:14: approvals.files[0].deny[0]: pattern "../x": ".." segments are not allowed`},
		{"approvals:\n  fils: []\n", `p.yaml:2:3: unknown field "fils" in approvals (did you mean "files"?)`},
	} {
		_, err := Parse("p.yaml", []byte(tt.src))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Parse(%q):\n got %v\nwant %s", tt.src, err, tt.want)
		}
	}
	for _, tt := range []struct {
		r    FileRule
		want string
	}{
		{FileRule{Action: "permit", Globs: []string{"x"}}, `approvals.files[0]: unknown action "permit"`},
		{FileRule{Action: "ask"}, `approvals.files[0]: ask: a rule needs at least one path glob`},
		{FileRule{Action: "deny", Globs: []string{"a/../b"}}, `approvals.files[0]: pattern "a/../b"`},
	} {
		s := Spec{Approvals: Approvals{Files: []FileRule{tt.r}}}
		if err := s.Validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Validate(%+v): %v, want %s", tt.r, err, tt.want)
		}
	}
}

// approvalsRoundTrip checks that s validates as to its approvals, and
// returns it written by Format and parsed back, and its approvals through
// JSON and back.
func approvalsRoundTrip(t *testing.T, s Spec) (Spec, Approvals) {
	t.Helper()
	if err := s.Validate(); err != nil && strings.Contains(err.Error(), "approvals") {
		t.Errorf("Validate: %v", err)
	}
	out, err := s.Format()
	if err != nil {
		t.Fatal(err)
	}
	back, err := Parse("f.yaml", out)
	if err != nil {
		t.Fatalf("%v in\n%s", err, out)
	}
	j, err := json.Marshal(s.Approvals)
	if err != nil {
		t.Fatal(err)
	}
	var fromJSON Approvals
	if err := json.Unmarshal(j, &fromJSON); err != nil {
		t.Fatalf("JSON round trip: %v (%s)", err, j)
	}
	return back, fromJSON
}
