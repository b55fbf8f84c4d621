package approve

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

func TestMatchGlob(t *testing.T) {
	for _, tt := range []struct {
		glob string
		yes  []string
		no   []string
	}{
		{"Makefile", []string{"Makefile"}, []string{"sub/Makefile", "Makefile.am", "makefile"}},
		{"**/Makefile", []string{"Makefile", "a/Makefile", "a/b/c/Makefile"}, []string{"a/Makefile.in"}},
		{".github/**", []string{".github", ".github/workflows/ci.yml", ".github/CODEOWNERS"}, []string{".githubx/a", "a/.github/x"}},
		{".github", []string{".github", ".github/workflows/ci.yml"}, []string{".githubx"}},
		{".github/", []string{".github/workflows/ci.yml"}, nil},
		{"**/*.pem", []string{"key.pem", "certs/a/server.pem", "x.pem/inner"}, []string{"key.pem.bak", "pem", "certs/pem"}},
		{".git/hooks/**", []string{".git/hooks", ".git/hooks/pre-commit", ".git/hooks/a/b"}, []string{".git/config", ".git/hooksx"}},
		{"src/*.go", []string{"src/a.go", "src/a.go/x"}, []string{"src/a/b.go", "a.go"}},
		{"src/**/*_test.go", []string{"src/a_test.go", "src/x/y/a_test.go"}, []string{"a_test.go", "src/a.go"}},
		{"**", []string{"anything", "a/b/c"}, nil},
		{"a/**/b/**/c", []string{"a/b/c", "a/x/b/y/z/c", "a/b/c/d"}, []string{"a/c", "a/b/x"}},
		{"[Mm]akefile", []string{"Makefile", "makefile"}, []string{"Rakefile"}},
		{"?.txt", []string{"a.txt"}, []string{"ab.txt", "/.txt"}},
	} {
		if err := CheckGlob(tt.glob); err != nil {
			t.Errorf("CheckGlob(%q): %v", tt.glob, err)
		}
		for _, p := range tt.yes {
			if !MatchGlob(tt.glob, p) {
				t.Errorf("%q does not match %q, want a match", tt.glob, p)
			}
		}
		for _, p := range tt.no {
			if MatchGlob(tt.glob, p) {
				t.Errorf("%q matches %q, want none", tt.glob, p)
			}
		}
	}
}

func TestCheckGlob(t *testing.T) {
	for glob, want := range map[string]string{
		"":                             "empty pattern",
		"/etc/x":                       "relative to the workspace",
		"a//b":                         "empty path segment",
		"../x":                         `".." segments`,
		"./x":                          `"." segments`,
		"a/**b":                        "** must be a whole path segment",
		"[a":                           "bad pattern",
		"x/\\":                         "bad pattern",
		strings.Repeat("a/", 70) + "b": "more than 64 segments",
	} {
		err := CheckGlob(glob)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("CheckGlob(%q) = %v, want %s", glob, err, want)
		}
	}
}

func TestDecideFiles(t *testing.T) {
	rules := []FileRule{
		{Action: Ask, Globs: []string{".github/**", "**/*.pem", "Makefile"}, Source: "p.yaml:3"},
		{Action: Deny, Globs: []string{".git/hooks/**"}, Source: "p.yaml:4"},
		{Action: Allow, Globs: []string{".github/CODEOWNERS"}, Source: "p.yaml:5"},
		{Action: Deny, Globs: []string{"secrets/**"}, Source: "p.yaml:6"},
	}
	for _, tt := range []struct {
		paths  []string
		action Action
		which  []string
		rules  []string
	}{
		{[]string{"main.go", "docs/x.md"}, Allow, nil, nil},
		{nil, Allow, nil, nil},
		{[]string{"main.go", "Makefile", "certs/a.pem"}, Ask, []string{"Makefile", "certs/a.pem"}, []string{"p.yaml:3"}},
		{[]string{".github/CODEOWNERS"}, Allow, nil, nil},
		{[]string{".github/CODEOWNERS", ".github/workflows/ci.yml"}, Ask, []string{".github/workflows/ci.yml"}, []string{"p.yaml:3"}},
		{[]string{"Makefile", ".git/hooks/pre-commit", "secrets/k"}, Deny, []string{".git/hooks/pre-commit", "secrets/k"}, []string{"p.yaml:4", "p.yaml:6"}},
		// Allow never exempts from deny.
		{[]string{"secrets/x"}, Deny, []string{"secrets/x"}, []string{"p.yaml:6"}},
	} {
		d := DecideFiles(rules, tt.paths)
		var srcs []string
		for _, r := range d.Rules {
			srcs = append(srcs, r.Source)
		}
		if d.Action != tt.action || !slices.Equal(d.Paths, tt.which) || !slices.Equal(srcs, tt.rules) {
			t.Errorf("DecideFiles(%q) = %s %q by %q, want %s %q by %q", tt.paths, d.Action, d.Paths, srcs, tt.action, tt.which, tt.rules)
		}
	}
	d := DecideFiles(rules, []string{"Makefile"})
	if want := `approvals.files ask: [".github/**", "**/*.pem", "Makefile"] (p.yaml:3)`; d.Rule() != want {
		t.Errorf("Rule() = %s, want %s", d.Rule(), want)
	}
}

func TestFileRuleJSON(t *testing.T) {
	r := FileRule{Action: Deny, Globs: []string{".git/hooks/**"}, Source: "p.yaml:4"}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var back FileRule
	if err := json.Unmarshal(b, &back); err != nil || back.Action != Deny || !slices.Equal(back.Globs, r.Globs) || back.Source != r.Source {
		t.Errorf("round trip of %s: %+v, %v", b, back, err)
	}
	if err := json.Unmarshal([]byte(`{"action":"maybe","globs":["x"]}`), &back); err == nil {
		t.Error("an unknown action was read")
	}
}
