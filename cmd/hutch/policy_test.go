package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// shownPolicy is what `hutch policy show` prints, as a user reads it.
type shownPolicy struct {
	Root       string `yaml:"root"`
	Tier       string `yaml:"tier"`
	Filesystem struct {
		Workspace       string   `yaml:"workspace"`
		AllowWrite      []string `yaml:"allow_write"`
		DenyRead        []string `yaml:"deny_read"`
		AllowRead       []string `yaml:"allow_read"`
		DenyWrite       []string `yaml:"deny_write"`
		NoDefaultDenies bool     `yaml:"no_default_denies"`
		Home            string   `yaml:"home"`
	} `yaml:"filesystem"`
	Network struct {
		Mode           string   `yaml:"mode"`
		AllowedDomains []string `yaml:"allowed_domains"`
		DeniedDomains  []string `yaml:"denied_domains"`
		AllowedCIDRs   []string `yaml:"allowed_cidrs"`
		AllowPrivate   []string `yaml:"allow_private"`
		PrivateNames   []string `yaml:"private_names"`
		Hosts          []string `yaml:"hosts"`
		AllowHost      *bool    `yaml:"allow_host"`
	} `yaml:"network"`
	Secrets []struct {
		Name              string   `yaml:"name"`
		Hosts             []string `yaml:"hosts"`
		From              string   `yaml:"from"`
		PlaceholderPrefix string   `yaml:"placeholder_prefix"`
		InQuery           bool     `yaml:"in_query"`
		InBody            bool     `yaml:"in_body"`
		AllowPlainHTTP    bool     `yaml:"allow_plain_http"`
	} `yaml:"secrets"`
	Env struct {
		Pass []string          `yaml:"pass"`
		Set  map[string]string `yaml:"set"`
	} `yaml:"env"`
	Resources struct {
		Memory  string  `yaml:"memory"`
		CPUs    float64 `yaml:"cpus"`
		Pids    int64   `yaml:"pids"`
		Timeout string  `yaml:"timeout"`
		TmpSize string  `yaml:"tmp_size"`
	} `yaml:"resources"`
	Approvals struct {
		Preset   string           `yaml:"preset"`
		Default  string           `yaml:"default"`
		Commands []map[string]any `yaml:"commands"`
		Approved []string         `yaml:"approved"`
	} `yaml:"approvals"`
	BestEffort bool `yaml:"best_effort"`
}

// policyDirs is a user's working directory and home for policy tests.
type policyDirs struct{ ws, home string }

func newPolicyDirs(t *testing.T) policyDirs {
	t.Helper()
	return policyDirs{ws: t.TempDir(), home: t.TempDir()}
}

// show runs `hutch policy show ARGS` in d.ws with d.home as HOME.
func (d policyDirs) show(t *testing.T, args ...string) result {
	t.Helper()
	return hutch(t, invocation{args: append([]string{"policy", "show"}, args...), dir: d.ws, env: baseEnv(d.home)})
}

// parse decodes the output of `hutch policy show`, refusing fields the
// policy format does not have.
func parsePolicy(t *testing.T, out string) shownPolicy {
	t.Helper()
	var p shownPolicy
	dec := yaml.NewDecoder(strings.NewReader(out))
	dec.KnownFields(true)
	if err := dec.Decode(&p); err != nil {
		t.Fatalf("policy show printed no valid policy: %v\n%s", err, out)
	}
	return p
}

func TestPolicyShowDefaults(t *testing.T) {
	t.Parallel()
	d := newPolicyDirs(t)
	r := d.show(t)
	wantOK(t, r)
	if r.stderr != "" {
		t.Errorf("stderr: %q", r.stderr)
	}
	p := parsePolicy(t, r.stdout)
	if p.Root != "host" {
		t.Errorf("root: got %q, want host", p.Root)
	}
	if p.Tier != "namespace" {
		t.Errorf("tier: got %q, want namespace", p.Tier)
	}
	if p.Filesystem.Workspace != d.ws {
		t.Errorf("workspace: got %q, want the current directory %q", p.Filesystem.Workspace, d.ws)
	}
	for _, want := range []string{
		filepath.Join(d.home, ".ssh"), filepath.Join(d.home, ".aws"), filepath.Join(d.home, ".npmrc"),
		"/etc/shadow", "/run/user",
	} {
		if !slices.Contains(p.Filesystem.DenyRead, want) {
			t.Errorf("deny_read lacks %s: %q", want, p.Filesystem.DenyRead)
		}
	}
	if len(p.Filesystem.AllowWrite) != 0 || len(p.Filesystem.AllowRead) != 0 || len(p.Filesystem.DenyWrite) != 0 {
		t.Errorf("default lists should be empty: %+v", p.Filesystem)
	}
	if p.Filesystem.NoDefaultDenies || p.BestEffort {
		t.Errorf("defaults must fail closed: no_default_denies %v, best_effort %v", p.Filesystem.NoDefaultDenies, p.BestEffort)
	}
	if p.Network.Mode != "none" {
		t.Errorf("network.mode: got %q, want none", p.Network.Mode)
	}
	if p.Resources.Pids != 4096 || p.Resources.TmpSize != "256m" || p.Resources.Timeout != "" || p.Resources.CPUs != 0 {
		t.Errorf("resources: %+v", p.Resources)
	}
	if len(p.Env.Pass) != 0 || len(p.Env.Set) != 0 {
		t.Errorf("env: %+v", p.Env)
	}
}

func TestPolicyShowFlags(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		args  func(t *testing.T, d policyDirs) []string
		check func(t *testing.T, d policyDirs, p shownPolicy)
	}{
		{
			name: "relative workspace",
			args: func(t *testing.T, d policyDirs) []string {
				mkdir(t, d.ws, "sub")
				return []string{"--workspace", "sub"}
			},
			check: func(t *testing.T, d policyDirs, p shownPolicy) {
				eq(t, "workspace", p.Filesystem.Workspace, filepath.Join(d.ws, "sub"))
			},
		},
		{
			name: "workspace under home",
			args: func(t *testing.T, d policyDirs) []string {
				mkdir(t, d.home, "proj")
				return []string{"--workspace", "~/proj"}
			},
			check: func(t *testing.T, d policyDirs, p shownPolicy) {
				eq(t, "workspace", p.Filesystem.Workspace, filepath.Join(d.home, "proj"))
			},
		},
		{
			name: "filesystem lists",
			args: func(t *testing.T, d policyDirs) []string {
				return []string{
					"--allow-write", "out", "--allow-write", "/var/tmp/x/../y", "--allow-write", ".",
					"--deny-read", "secret", "--allow-read", "~/.npmrc", "--deny-write", "config.json",
				}
			},
			check: func(t *testing.T, d policyDirs, p shownPolicy) {
				eq(t, "allow_write", p.Filesystem.AllowWrite, []string{filepath.Join(d.ws, "out"), "/var/tmp/y"})
				eq(t, "last deny_read", p.Filesystem.DenyRead[len(p.Filesystem.DenyRead)-1], filepath.Join(d.ws, "secret"))
				if !slices.Contains(p.Filesystem.DenyRead, filepath.Join(d.home, ".ssh")) {
					t.Errorf("--deny-read replaced the defaults: %q", p.Filesystem.DenyRead)
				}
				eq(t, "allow_read", p.Filesystem.AllowRead, []string{filepath.Join(d.home, ".npmrc")})
				eq(t, "deny_write", p.Filesystem.DenyWrite, []string{filepath.Join(d.ws, "config.json")})
			},
		},
		{
			name: "no default denies",
			args: func(t *testing.T, d policyDirs) []string {
				return []string{"--no-default-denies", "--deny-read", "/etc/hostname"}
			},
			check: func(t *testing.T, d policyDirs, p shownPolicy) {
				eq(t, "no_default_denies", p.Filesystem.NoDefaultDenies, true)
				eq(t, "deny_read", p.Filesystem.DenyRead, []string{"/etc/hostname"})
			},
		},
		{
			name: "env",
			args: func(t *testing.T, d policyDirs) []string {
				return []string{"--env", "A=B", "--env", "C=", "--pass-env", "FOO", "--pass-env", "MY_*", "--pass-env", "FOO"}
			},
			check: func(t *testing.T, d policyDirs, p shownPolicy) {
				eq(t, "env.set", p.Env.Set, map[string]string{"A": "B", "C": ""})
				eq(t, "env.pass", p.Env.Pass, []string{"FOO", "MY_*"})
			},
		},
		{
			name: "resources",
			args: func(t *testing.T, d policyDirs) []string {
				return []string{"--memory", "1g", "--cpus", "1.5", "--pids", "100", "--timeout", "90", "--tmp-size", "64m"}
			},
			check: func(t *testing.T, d policyDirs, p shownPolicy) {
				eq(t, "memory", p.Resources.Memory, "1g")
				eq(t, "cpus", p.Resources.CPUs, 1.5)
				eq(t, "pids", p.Resources.Pids, int64(100))
				eq(t, "timeout", p.Resources.Timeout, "1m30s")
				eq(t, "tmp_size", p.Resources.TmpSize, "64m")
			},
		},
		{
			name: "root and best effort",
			args: func(t *testing.T, d policyDirs) []string { return []string{"--root", "/", "--best-effort"} },
			check: func(t *testing.T, d policyDirs, p shownPolicy) {
				eq(t, "root", p.Root, "/")
				eq(t, "best_effort", p.BestEffort, true)
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := newPolicyDirs(t)
			r := d.show(t, tc.args(t, d)...)
			wantOK(t, r)
			tc.check(t, d, parsePolicy(t, r.stdout))
		})
	}
}

// TestPolicyShowFileAndFlags checks that flags override a policy file's
// values and add to its lists, and that relative paths in the file are
// taken against the current directory.
func TestPolicyShowFileAndFlags(t *testing.T) {
	t.Parallel()
	d := newPolicyDirs(t)
	file, err := filepath.Abs("testdata/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}

	r := d.show(t, "--policy", file)
	wantOK(t, r)
	p := parsePolicy(t, r.stdout)
	eq(t, "allow_write", p.Filesystem.AllowWrite, []string{filepath.Join(d.ws, "build")})
	eq(t, "memory", p.Resources.Memory, "256m")
	eq(t, "pids", p.Resources.Pids, int64(50))
	eq(t, "timeout", p.Resources.Timeout, "10m")
	eq(t, "env.set", p.Env.Set, map[string]string{"ORIGIN": "file"})
	if !slices.Contains(p.Filesystem.DenyRead, "/etc/hutch-test-secret") || !slices.Contains(p.Filesystem.DenyRead, filepath.Join(d.home, ".ssh")) {
		t.Errorf("deny_read should hold the file's entry and the defaults: %q", p.Filesystem.DenyRead)
	}

	r = d.show(t, "--policy", file, "--memory", "1g", "--allow-write", "/var/tmp", "--env", "ORIGIN=flag", "--pass-env", "FROM_FLAG", "--timeout", "5s")
	wantOK(t, r)
	p = parsePolicy(t, r.stdout)
	eq(t, "allow_write", p.Filesystem.AllowWrite, []string{filepath.Join(d.ws, "build"), "/var/tmp"})
	eq(t, "memory", p.Resources.Memory, "1g")
	eq(t, "pids", p.Resources.Pids, int64(50))
	eq(t, "timeout", p.Resources.Timeout, "5s")
	eq(t, "env.set", p.Env.Set, map[string]string{"ORIGIN": "flag"})
	eq(t, "env.pass", p.Env.Pass, []string{"FROM_FILE", "FROM_FLAG"})
}

// TestPolicyShowRoundTrip checks that what policy show prints is a policy
// file that gives back the same policy.
func TestPolicyShowRoundTrip(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
	}{
		{name: "defaults"},
		{name: "no default denies", args: []string{"--no-default-denies"}},
		{name: "every flag", args: []string{
			"--allow-write", "out", "--deny-read", "/etc/hostname", "--allow-read", "~/.npmrc", "--deny-write", "x.json",
			"--env", "A=B", "--pass-env", "FOO", "--memory", "1536m", "--cpus", "0.25", "--pids", "64",
			"--timeout", "1500ms", "--tmp-size", "1g", "--best-effort", "--root", "/",
		}},
		{name: "awkward values", args: []string{
			"--env", "EMPTY=", "--env", "NUM=123", "--env", "BOOL=true", "--env", "NULL=null", "--env", "TILDE=~",
			"--env", "COLON=a: b", "--env", "SPACE= x ", "--env", "HASH=x #y", "--env", "LINES=a\nb", "--env", "QUOTE='\"",
			"--allow-write", "/var/tmp/a: b", "--deny-read", "/var/tmp/#x", "--pass-env", "X_*",
		}},
		{name: "policy file", args: []string{"--policy", "testdata/policy.yaml"}},
		{name: "srt settings", args: []string{"--srt-settings", "testdata/srt-settings.json"}},
		{name: "claude settings", args: []string{"--claude-settings", "testdata/claude-settings.json"}},
		{name: "policy and claude settings", args: []string{"--policy", "testdata/policy.yaml", "--claude-settings", "testdata/claude-settings.json"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := newPolicyDirs(t)
			args := slices.Clone(tc.args)
			for i, a := range args {
				if strings.HasPrefix(a, "testdata/") {
					abs, err := filepath.Abs(a)
					if err != nil {
						t.Fatal(err)
					}
					args[i] = abs
				}
			}
			first := d.show(t, args...)
			wantOK(t, first)
			file := filepath.Join(d.ws, "shown.yaml")
			writeFile(t, file, first.stdout, 0o644)
			second := d.show(t, "--policy", file)
			wantOK(t, second)
			if second.stdout != first.stdout {
				t.Errorf("policy show of its own output differs.\nfirst:\n%s\nsecond:\n%s", first.stdout, second.stdout)
			}
			// (Approvals are said to be not enforced where they are not.)
			if rest := regexp.MustCompile("(?m)^hutch: warning: approvals .* not enforced yet.*\n").ReplaceAllString(second.stderr, ""); rest != "" {
				t.Errorf("stderr: %q", second.stderr)
			}
		})
	}
}

// TestPolicyFileErrors checks that a bad policy file is reported as
// "file:line:column: message" and hutch exits 125, for policy show and run.
func TestPolicyFileErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		file, content string
		pos           string // "line:column"
		msg           string
	}{
		{"unknown.yaml", "netwrok:\n  mode: none\n", "1:1", `unknown field "netwrok"`},
		{"nested.yaml", "resources:\n  memory: 64m\n  memroy: 1g\n", "3:3", `did you mean "memory"`},
		{"size.yaml", "resources:\n  memory: 12q\n", "2:11", `resources.memory`},
		{"type.yaml", "filesystem:\n  allow_write: /x\n", "2:16", "filesystem.allow_write"},
		{"syntax.yaml", "filesystem: {\n", "2:1", "syntax error"},
		{"tab.yaml", "filesystem:\n\tworkspace: /\n", "2:2", "tab"},
		{"duplicate.yaml", "root: host\nroot: /\n", "2:1", `duplicate field "root"`},
		{"mode.yaml", "network:\n  mode: internet\n", "2:9", "network.mode"},
		{"cidr.yaml", "network:\n  allowed_cidrs: [10.0.0]\n", "2:19", "network.allowed_cidrs[0]"},
		{"pids.yaml", "resources:\n  pids: 0\n", "2:9", "resources.pids"},
		{"timeout.yaml", "resources:\n  timeout: forever\n", "2:12", "resources.timeout"},
		{"list.yaml", "- a\n- b\n", "1:1", "mapping"},
		{"unknown.json", "{\n  \"resources\": {\"memroy\": \"1g\"}\n}\n", "2:17", `unknown field "memroy"`},
		{"syntax.json", "{\n  \"resources\": {\"memory\": \"1g\",}\n}\n", "2:32", "syntax error"},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			t.Parallel()
			d := newPolicyDirs(t)
			file := filepath.Join(d.ws, tc.file)
			writeFile(t, file, tc.content, 0o644)
			r := d.show(t, "--policy", file)
			wantCode(t, r, 125)
			prefix := "hutch: " + file + ":" + tc.pos + ": "
			if !strings.HasPrefix(r.stderr, prefix) || !strings.Contains(r.stderr, tc.msg) {
				t.Errorf("stderr: got %q, want %q…%q", r.stderr, prefix, tc.msg)
			}
			if r.stdout != "" {
				t.Errorf("a policy was printed despite the error:\n%s", r.stdout)
			}
		})
	}
}

// TestPolicyShowErrors checks hutch's own errors without a policy file.
func TestPolicyShowErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		msg  string
	}{
		{"missing file", []string{"--policy", "/nonexistent-hutch.yaml"}, "/nonexistent-hutch.yaml"},
		{"policy and srt", []string{"--policy", "testdata/policy.yaml", "--srt-settings", "testdata/srt-settings.json"}, "cannot be combined"},
		{"bad size", []string{"--memory", "12q"}, `--memory: invalid size "12q"`},
		{"missing workspace", []string{"--workspace", "/nonexistent-hutch-ws"}, "filesystem.workspace"},
		{"pass every variable", []string{"--pass-env", "*"}, "every variable"},
		{"tiny tmp", []string{"--tmp-size", "4k"}, "tmp_size"},
		{"tiny pids", []string{"--pids", "2"}, "pids"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := newPolicyDirs(t)
			args := slices.Clone(tc.args)
			for i, a := range args {
				if strings.HasPrefix(a, "testdata/") {
					args[i], _ = filepath.Abs(a)
				}
			}
			r := d.show(t, args...)
			wantCode(t, r, 125)
			if !strings.HasPrefix(r.stderr, "hutch: ") || !strings.Contains(r.stderr, tc.msg) {
				t.Errorf("stderr: got %q, want hutch: …%q", r.stderr, tc.msg)
			}
		})
	}
}

// TestPolicyShowSRT checks the import of srt settings: what maps, and a
// warning with the setting's position for everything that does not.
func TestPolicyShowSRT(t *testing.T) {
	t.Parallel()
	d := newPolicyDirs(t)
	file, err := filepath.Abs("testdata/srt-settings.json")
	if err != nil {
		t.Fatal(err)
	}
	r := d.show(t, "--srt-settings", file, "--memory", "1g")
	wantOK(t, r)
	p := parsePolicy(t, r.stdout)
	eq(t, "workspace", p.Filesystem.Workspace, d.ws)
	eq(t, "allow_write", p.Filesystem.AllowWrite, []string{filepath.Join(d.ws, "out")})
	eq(t, "allow_read", p.Filesystem.AllowRead, []string{filepath.Join(d.home, ".config/secret-tool/public.txt")})
	eq(t, "deny_write", p.Filesystem.DenyWrite, []string{filepath.Join(d.ws, "deploy.key")})
	for _, want := range []string{
		filepath.Join(d.home, ".config/secret-tool"), "/etc/hutch-test-secret", filepath.Join(d.home, ".hutch-test-token"),
		filepath.Join(d.home, ".ssh"),
	} {
		if !slices.Contains(p.Filesystem.DenyRead, want) {
			t.Errorf("deny_read lacks %s: %q", want, p.Filesystem.DenyRead)
		}
	}
	// srt matches an entry without a port on every port.
	eq(t, "allowed_domains", p.Network.AllowedDomains, []string{"example.com:*", "*.example.org:*"})
	if !slices.Contains(p.Network.PrivateNames, "10.0.0.0/8") || !slices.Contains(p.Network.PrivateNames, "fc00::/7") {
		t.Errorf("private_names lacks srt's private-use ranges: %q", p.Network.PrivateNames)
	}
	eq(t, "denied_domains", p.Network.DeniedDomains, []string{"bad.example.com"})
	eq(t, "mode (srt allows domains through its proxy)", p.Network.Mode, "proxy")
	eq(t, "memory", p.Resources.Memory, "1g")

	// One warning per unsupported setting, each at its place in the file.
	for _, w := range []struct{ pos, what string }{
		{"4:55", `"docs/**/*.md" is a pattern`},
		{"7:5", "filesystem.allowGitConfig"},
		{"12:5", "network.allowUnixSockets"},
		{"13:5", "network.socksProxyPort"},
		{"17:47", "credentials.files[0].mode"},
		{"23:3", "enableWeakerNestedSandbox"},
	} {
		re := regexp.MustCompile(`(?m)^hutch: warning: ` + regexp.QuoteMeta(file+":"+w.pos+": ") + `.*` + regexp.QuoteMeta(w.what))
		if !re.MatchString(r.stderr) {
			t.Errorf("no warning at %s about %s in:\n%s", w.pos, w.what, r.stderr)
		}
	}
	if n := strings.Count(r.stderr, "hutch: warning: "); n != 6 {
		t.Errorf("got %d warnings, want 6:\n%s", n, r.stderr)
	}
	if strings.Contains(r.stderr, "HUTCH_TEST_TOKEN") {
		t.Errorf("a denied variable needs no warning: hutch withholds it anyway:\n%s", r.stderr)
	}
}

// TestSRTErrors checks srt settings hutch refuses.
func TestSRTErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, content, pos, msg string
	}{
		{"unknown setting", "{\n  \"netwrok\": {}\n}\n", "2:3", "netwrok"},
		{"deny pattern", "{\"filesystem\": {\"denyRead\": [\"**/*.pem\"]}}", "1:30", "pattern"},
		{"safe variable", "{\"credentials\": {\"envVars\": [{\"name\": \"PATH\", \"mode\": \"deny\"}]}}", "1:39", "PATH"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := newPolicyDirs(t)
			file := filepath.Join(d.ws, "srt.json")
			writeFile(t, file, tc.content, 0o644)
			r := d.show(t, "--srt-settings", file)
			wantCode(t, r, 125)
			prefix := "hutch: " + file + ":" + tc.pos + ": "
			if !strings.HasPrefix(r.stderr, prefix) || !strings.Contains(r.stderr, tc.msg) {
				t.Errorf("stderr: got %q, want %q…%q", r.stderr, prefix, tc.msg)
			}
		})
	}
}

func mkdir(t *testing.T, parent, name string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(parent, name), 0o755); err != nil {
		t.Fatal(err)
	}
}

// eq fails the test when got and want differ, compared as YAML.
func eq[T any](t *testing.T, what string, got, want T) {
	t.Helper()
	g, err1 := yaml.Marshal(got)
	w, err2 := yaml.Marshal(want)
	if err1 != nil || err2 != nil || !bytes.Equal(g, w) {
		t.Errorf("%s: got %v, want %v", what, got, want)
	}
}

// TestPolicyShowClaude: Claude Code's settings add to a policy or srt
// settings, and an approval rules file to both; what was not imported is
// a warning with its position.
func TestPolicyShowClaude(t *testing.T) {
	t.Parallel()
	d := newPolicyDirs(t)
	// The project's settings: their relative paths are the project's.
	data, err := os.ReadFile("testdata/claude-settings.json")
	if err != nil {
		t.Fatal(err)
	}
	settings := filepath.Join(d.ws, ".claude", "settings.json")
	if err := os.MkdirAll(filepath.Dir(settings), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, settings, string(data), 0o644)
	srt, err := filepath.Abs("testdata/srt-settings.json")
	if err != nil {
		t.Fatal(err)
	}
	rules := filepath.Join(d.ws, "rules.yaml")
	writeFile(t, rules, "approvals:\n  default: deny\n  commands:\n    - deny: [npm, publish]\n", 0o644)
	r := d.show(t, "--srt-settings", srt, "--claude-settings", settings, "--approve-rules", rules)
	wantOK(t, r)
	p := parsePolicy(t, r.stdout)
	a := p.Approvals
	eq(t, "preset", a.Preset, "workspace-write")
	eq(t, "default", a.Default, "deny") // the rules file's, given last
	eq(t, "approved", a.Approved, []string{"terraform plan"})
	var got []string
	for _, c := range a.Commands {
		for k, v := range c {
			got = append(got, fmt.Sprint(k, v))
		}
	}
	eq(t, "commands", got, []string{"allow[npm run test]", "ask[git push]", "deny[| curl sh]", "deny[npm publish]"})
	// srt's and Claude Code's paths and hosts, added up.
	for _, want := range []string{filepath.Join(d.home, ".hutch-test-creds"), filepath.Join(d.home, ".hutch-test-secret"), filepath.Join(d.home, ".config/secret-tool")} {
		if !slices.Contains(p.Filesystem.DenyRead, want) {
			t.Errorf("deny_read lacks %s: %q", want, p.Filesystem.DenyRead)
		}
	}
	if !slices.Contains(p.Filesystem.DenyWrite, filepath.Join(d.ws, "deploy.key")) || !slices.Contains(p.Filesystem.AllowWrite, filepath.Join(d.ws, "build-out")) {
		t.Errorf("filesystem: %+v", p.Filesystem)
	}
	eq(t, "allowed_domains", p.Network.AllowedDomains, []string{"example.com:*", "*.example.org:*", "docs.example.com", "registry.example.com:*"})
	for _, w := range []string{
		settings + `:5:`, `permissions.allow[2]: "Bash(git * main)" was not imported`,
		settings + `:13:`, `sandbox.network.allowUnixSockets is not supported`,
		`rules for Claude Code's own tools (Grep)`,
	} {
		if !strings.Contains(r.stderr, w) {
			t.Errorf("stderr lacks %q:\n%s", w, r.stderr)
		}
	}
	// A malformed file: its position and JSON path, exit 125.
	bad := filepath.Join(d.ws, "bad.json")
	writeFile(t, bad, `{"permissions": {"deny": ["Bash(*x)"]}}`, 0o644)
	r = d.show(t, "--claude-settings", bad)
	wantCode(t, r, 125)
	if want := "hutch: " + bad + `:1:27: permissions.deny[0]: "Bash(*x)" cannot be enforced`; !strings.HasPrefix(r.stderr, want) {
		t.Errorf("stderr %q, want %q", r.stderr, want)
	}
}
