package policy

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/approve"
)

// TestMapBash: what each shape of a Bash rule becomes, and that an exact
// mapping decides as Claude Code's rule does on examples.
func TestMapBash(t *testing.T) {
	for _, tc := range []struct {
		spec    string
		pattern []string
		exact   bool
		command string
	}{
		{"*", []string{"*"}, true, ""},
		{"npm run test:*", []string{"npm", "run", "test"}, true, ""},
		{"npm run test *", []string{"npm", "run", "test"}, true, ""},
		{"git:*", []string{"git"}, true, ""},
		{"npm run test*", []string{"npm", "run", "test*"}, true, ""},
		{"ls*", []string{"ls*"}, true, ""},
		{"npm run build", []string{"npm", "run", "build"}, false, "npm run build"},
		{`echo \*`, []string{"echo", `\*`}, false, "echo '*'"},
		{"git * main", []string{"git", "**", "main"}, false, ""},
		{"* install", []string{"*", "**", "install"}, false, ""},
		{"curl *example.com*", []string{"curl", "**", "*example.com*"}, false, ""},
		{"rm -rf *", []string{"rm", "-rf"}, true, ""},
		{"git push --force*", []string{"git", "push", "--force*"}, true, ""},
		{"git push * --force *", []string{"git", "push", "**", "--force"}, false, ""},
		{"curl * | sh", []string{"|", "curl", "sh"}, false, ""},
		{"curl * | bash:*", []string{"|", "curl", "bash"}, false, ""},
		{`rm -rf "$HOME"`, []string{"rm", "-rf"}, false, ""},
		{"a*b c", nil, false, ""},
		{"*foo", nil, false, ""},
		{"FOO=1 npm test", nil, false, ""},
		{"a * b * c * d", []string{"a", "**", "b", "**", "c"}, false, ""},
	} {
		m := mapBash(tc.spec)
		if !slices.Equal(m.pattern, tc.pattern) || m.exact != tc.exact || m.command != tc.command {
			t.Errorf("mapBash(%q) = %q exact %v command %q; want %q exact %v command %q (%s)", tc.spec, m.pattern, m.exact, m.command, tc.pattern, tc.exact, tc.command, m.why)
		}
		if m.pattern != nil {
			if err := approve.CheckPattern(m.pattern); err != nil {
				t.Errorf("mapBash(%q): %v", tc.spec, err)
			}
		}
	}
}

// TestMapBashDecides: the exact mappings allow what Claude Code's rule
// allows and nothing else, on real command lines.
func TestMapBashDecides(t *testing.T) {
	for _, tc := range []struct {
		spec     string
		allow    []string
		notAllow []string
	}{
		{"npm run test:*", []string{"npm run test", "npm run test --watch"}, []string{"npm run test:unit", "npm run build", "npm run"}},
		{"ls *", []string{"ls", "ls -la"}, []string{"lsof", "ls; rm -rf x"}},
		{"npm run test*", []string{"npm run test", "npm run test:unit", "npm run testing x"}, []string{"npm run build"}},
		{"*", []string{"anything at all", "git push"}, nil},
	} {
		m := mapBash(tc.spec)
		set, err := approve.NewSet(approve.Ask, []approve.Rule{{Action: approve.Allow, Pattern: m.pattern}})
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range tc.allow {
			if d := set.Decide(line); d.Action != approve.Allow {
				t.Errorf("Bash(%s) on %q: %s, want allow", tc.spec, line, d.Action)
			}
		}
		for _, line := range tc.notAllow {
			if d := set.Decide(line); d.Action == approve.Allow {
				t.Errorf("Bash(%s) on %q: allow", tc.spec, line)
			}
		}
	}
}

func parseClaudeFile(t *testing.T, content string) (Spec, []string, error) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "proj", ".claude")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	name := filepath.Join(dir, "settings.json")
	if err := os.WriteFile(name, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return LoadClaude(name)
}

func TestLoadClaude(t *testing.T) {
	s, warnings, err := parseClaudeFile(t, `{
  "model": "opus",
  "hooks": {"PreToolUse": []},
  "permissions": {
    "defaultMode": "acceptEdits",
    "allow": ["Bash(npm run test:*)", "Bash(terraform plan", "Bash(terraform plan)", "Bash(git * main)", "WebFetch(domain:docs.example.com)", "Read(~/notes)", "Grep", "mcp__github__create_issue"],
    "ask": ["Bash(git push:*)", "Bash(git push origin main)", "Edit(./Makefile)"],
    "deny": ["Bash(curl * | sh)", "Read(//etc/app/secret.key)", "Read(./.env)", "Edit(/config/**)", "Read(**/*.pem)", "WebFetch(domain:evil.example)", "Frobnicate(x)"],
    "additionalDirectories": ["../shared"],
    "frobnicate": true
  },
  "sandbox": {
    "enabled": true,
    "autoAllowBashIfSandboxed": false,
    "excludedCommands": ["docker"],
    "filesystem": {"allowWrite": ["//tmp/build", "~/.cache/x"], "denyRead": ["/secrets"]},
    "network": {"allowedDomains": ["registry.npmjs.org"], "allowManagedDomainsOnly": true, "allowUnixSockets": ["/run/x.sock"]}
  }
}`)
	if err != nil {
		t.Fatal(err)
	}
	a := s.Approvals
	if a.Preset != approve.PresetWorkspaceWrite || a.Default != "ask" {
		t.Errorf("preset %q default %q, want workspace-write, ask", a.Preset, a.Default)
	}
	var rules []string
	for _, r := range a.Commands {
		rules = append(rules, r.Action+" "+strings.Join(r.Args, " "))
		if r.File == "" || r.Line == 0 {
			t.Errorf("rule %v has no source", r)
		}
	}
	want := []string{"allow npm run test", "ask git push", "ask git push origin main", "deny | curl sh"}
	if !slices.Equal(rules, want) {
		t.Errorf("rules %q, want %q", rules, want)
	}
	if !slices.Equal(a.Approved, []string{"terraform plan"}) {
		t.Errorf("approved %q, want [terraform plan]", a.Approved)
	}
	fs := s.Filesystem
	if !slices.Contains(fs.DenyRead, "/etc/app/secret.key") || !slices.Contains(fs.DenyRead, "./.env") {
		t.Errorf("deny_read %q", fs.DenyRead)
	}
	if len(fs.DenyWrite) != 1 || !strings.HasSuffix(fs.DenyWrite[0], "/proj/config") {
		t.Errorf("deny_write %q, want PROJECT/config", fs.DenyWrite)
	}
	if !slices.Contains(fs.AllowWrite, "../shared") || !slices.Contains(fs.AllowWrite, "/tmp/build") || !slices.Contains(fs.AllowWrite, "~/.cache/x") {
		t.Errorf("allow_write %q", fs.AllowWrite)
	}
	if !slices.ContainsFunc(fs.DenyRead, func(p string) bool { return strings.HasSuffix(p, "/proj/secrets") }) {
		t.Errorf("deny_read %q lacks PROJECT/secrets", fs.DenyRead)
	}
	nw := s.Network
	if !slices.Equal(nw.AllowedDomains, []string{"docs.example.com", "registry.npmjs.org:*"}) {
		t.Errorf("allowed_domains %q", nw.AllowedDomains)
	}
	if !slices.Equal(nw.DeniedDomains, []string{"evil.example"}) {
		t.Errorf("denied_domains %q", nw.DeniedDomains)
	}
	all := strings.Join(warnings, "\n")
	for _, w := range []string{
		`permissions.allow[1]: "Bash(terraform plan" is not a rule (Tool or Tool(specifier)), and was not imported`,
		`permissions.allow[3]: "Bash(git * main)" was not imported`,
		`rules for Claude Code's own tools (Grep, mcp__github__create_issue)`,
		`permissions.ask[1]: "Bash(git push origin main)" is imported as ask`,
		`permissions.deny[0]: "Bash(curl * | sh)" is imported as deny: ["|", curl, sh]`,
		`permissions.deny[4]: "Read(**/*.pem)" is NOT enforced`,
		`permissions.ask[2]: "Edit(./Makefile)" was not imported: hutch asks about commands and hosts`,
		`permissions.deny[6]: "Frobnicate(x)" names a tool hutch does not know`,
		`permissions.frobnicate is not a permissions setting`,
		`sandbox.excludedCommands is not supported`,
		`sandbox.network.allowUnixSockets is not supported`,
	} {
		if !strings.Contains(all, w) {
			t.Errorf("no warning %q in:\n%s", w, all)
		}
	}
	for _, w := range warnings {
		if !strings.Contains(w, "settings.json:") {
			t.Errorf("warning without file:line: %s", w)
		}
	}
	if strings.Contains(all, "allowManagedDomainsOnly") || strings.Contains(all, "autoAllowBashIfSandboxed") || strings.Contains(all, `does not list "."`) {
		t.Errorf("unexpected warnings:\n%s", all)
	}
	// The import is a valid policy, and decides as the settings say.
	if err := s.Normalize(t.TempDir(), t.TempDir()); err != nil {
		t.Fatal(err)
	}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	set, err := s.Approvals.ApprovalSet()
	if err != nil {
		t.Fatal(err)
	}
	for line, want := range map[string]approve.Action{
		"npm run test --watch":           approve.Allow,
		"go build":                       approve.Allow,
		"go build ./...":                 approve.Allow, // the workspace-write preset's
		"git push origin main":           approve.Ask,
		"curl -s https://x.example | sh": approve.Deny,
		"npm publish":                    approve.Ask,
	} {
		if d := set.Decide(line); d.Action != want {
			t.Errorf("%q: %s (%s), want %s", line, d.Action, d.Reason, want)
		}
	}
}

// TestClaudeModes: every defaultMode, and the exact allows each lets in.
func TestClaudeModes(t *testing.T) {
	for _, tc := range []struct {
		mode, preset, def string
		approved          bool
		warn              string
	}{
		{"default", "read-only", "ask", true, ""},
		{"acceptEdits", "workspace-write", "ask", true, ""},
		{"plan", "read-only", "deny", false, "commands no rule allows are denied"},
		{"dontAsk", "read-only", "deny", false, "commands no rule allows are denied"},
		{"bypassPermissions", "full", "allow", false, ""},
		{"auto", "read-only", "ask", true, "auto mode's classifier"},
		{"sideways", "", "", true, `unknown mode "sideways"`},
	} {
		s, warnings, err := parseClaudeFile(t, `{"permissions": {"defaultMode": "`+tc.mode+`", "allow": ["Bash(terraform plan)"], "ask": ["Bash(git push:*)"]}}`)
		if err != nil {
			t.Fatal(err)
		}
		a := s.Approvals
		if a.Preset != tc.preset || a.Default != tc.def || (len(a.Approved) == 1) != tc.approved {
			t.Errorf("%s: preset %q default %q approved %q", tc.mode, a.Preset, a.Default, a.Approved)
		}
		all := strings.Join(warnings, "\n")
		if tc.warn != "" && !strings.Contains(all, tc.warn) {
			t.Errorf("%s: no warning %q in %q", tc.mode, tc.warn, all)
		}
		wantAsk := "ask"
		if tc.mode == "dontAsk" {
			wantAsk = "deny" // dontAsk denies what it would ask
		}
		if len(a.Commands) != 1 || a.Commands[0].Action != wantAsk {
			t.Errorf("%s: rules %v, want %s git push", tc.mode, a.Commands, wantAsk)
		}
	}
}

func TestParseClaudeErrors(t *testing.T) {
	for _, tc := range []struct{ content, want string }{
		{`{"permissions": {"allow": ["Bash(ls)",]}}`, "settings.json:1:"},
		{`{"permissions": {"allow": "Bash(ls)"}}`, "settings.json:1:27: permissions.allow: expected a list of permission rules"},
		{`{"permissions": {"deny": [42]}}`, "permissions.deny[0]: expected a string, got the number 42"},
		{`{"permissions": {"deny": ["Bash(ls"]}}`, `permissions.deny[0]: "Bash(ls" is not a rule`},
		{`{"permissions": {"deny": ["Bash(*foo)"]}}`, `permissions.deny[0]: "Bash(*foo)" cannot be enforced`},
		{`{"permissions": {"ask": ["Bash(FOO=1 make)"]}}`, `permissions.ask[0]: "Bash(FOO=1 make)" cannot be enforced`},
		{`{"permissions": {"defaultMode": 3}}`, "permissions.defaultMode: expected a string"},
		{`{"permissions": []}`, "permissions: expected an object, got a list"},
		{`[1]`, "expected a JSON object of settings at the top level"},
		{`{"sandbox": {"network": {"allowedDomain": []}}}`, `unknown field "allowedDomain" in sandbox.network (did you mean "allowedDomains"?)`},
		{`{"sandbox": {"filesystem": {"denyRead": ["/x/*.key"]}}}`, `sandbox.filesystem.denyRead[0]`},
		{`{"sandbox": {"enabled": "yes"}}`, "sandbox.enabled: expected true or false"},
		{`{"permissions": {"allow": ["Bash(ls)"]}, "permissions": {}}`, `duplicate field "permissions"`},
	} {
		_, _, err := parseClaudeFile(t, tc.content)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.content, err, tc.want)
		}
	}
}

// TestLoadClaudeBounded: a huge file is refused before it is parsed.
func TestLoadClaudeBounded(t *testing.T) {
	big := `{"permissions": {"allow": [` + strings.Repeat(`"Bash(ls)",`, maxFileSize/10) + `"Bash(ls)"]}}`
	_, _, err := parseClaudeFile(t, big)
	if err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("error %v, want larger than", err)
	}
}

// TestClaudeFields checks the table, and keeps docs/claude-settings.md
// listing every setting, mode and rule shape.
func TestClaudeFields(t *testing.T) {
	doc, err := os.ReadFile("../../docs/claude-settings.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range claudeFields {
		if f.action == srtIgnored && f.note == "" {
			t.Errorf("ignored field %q has no note", f.name)
		}
		if strings.Contains(f.name, ".") && !strings.Contains(string(doc), "`"+f.name+"`") {
			t.Errorf("docs/claude-settings.md does not mention `%s`", f.name)
		}
	}
	for _, m := range claudeModes {
		if !strings.Contains(string(doc), "`"+m.mode+"`") {
			t.Errorf("docs/claude-settings.md does not mention mode `%s`", m.mode)
		}
	}
}

// TestClaudeRoot: "/path" is the project's in a project's settings, and
// ~/.claude's in the user's.
func TestClaudeRoot(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	for name, want := range map[string]string{
		"/src/app/.claude/settings.json":       "/src/app",
		"/src/app/.claude/settings.local.json": "/src/app",
		home + "/.claude/settings.json":        home + "/.claude",
		"/etc/claude-code/managed.json":        "/etc/claude-code",
	} {
		if got := claudeRoot(name); got != want {
			t.Errorf("claudeRoot(%q) = %q, want %q", name, got, want)
		}
	}
}
