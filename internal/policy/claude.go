package policy

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/hutch-sandbox/hutch/internal/approve"
	"gopkg.in/yaml.v3"
)

// claudeFields lists the settings of a Claude Code settings file
// (settings.json) that LoadClaude reads, and what it does with each;
// docs/claude-settings.md gives the same table for users. The other
// top-level settings (model, hooks, env, …) configure Claude Code itself
// and are not read. The settings of sandbox not listed here are srt's
// (srtFields): Claude Code hands them to its sandbox runtime, and the
// import reads them as an srt settings file.
var claudeFields = []srtField{
	{"permissions", srtMapped, ""},
	{"permissions.allow", srtMapped, "rules, by tool"},
	{"permissions.ask", srtMapped, "rules, by tool"},
	{"permissions.deny", srtMapped, "rules, by tool"},
	{"permissions.defaultMode", srtMapped, "approvals.preset and approvals.default"},
	{"permissions.additionalDirectories", srtMapped, "filesystem.allow_write"},
	{"permissions.disableBypassPermissionsMode", srtCovered, "hutch has no mode to switch to while it runs"},
	{"permissions.disableAutoMode", srtCovered, "hutch has no mode to switch to while it runs"},
	{"sandbox", srtMapped, ""},
	{"sandbox.enabled", srtCovered, "hutch always runs the command in its sandbox"},
	{"sandbox.failIfUnavailable", srtCovered, "hutch fails closed unless best_effort says otherwise"},
	{"sandbox.allowUnsandboxedCommands", srtCovered, "no command runs outside the sandbox"},
	{"sandbox.enabledPlatforms", srtCovered, "hutch always runs the command in its sandbox"},
	{"sandbox.autoAllowBashIfSandboxed", srtIgnored, "the approval rules decide every command; approvals.default: allow runs every command no rule stops"},
	{"sandbox.excludedCommands", srtIgnored, "every command runs in the sandbox"},
	{"sandbox.filesystem.allowManagedReadPathsOnly", srtCovered, "managed settings only"},
	{"sandbox.network.allowManagedDomainsOnly", srtCovered, "managed settings only"},
}

// claudeModes maps permissions.defaultMode onto an approvals preset and
// default: the commands Claude Code runs without asking in that mode are
// the ones the preset allows, and the default is what it does with the
// rest.
var claudeModes = []struct {
	mode, preset, def, note string
}{
	{"default", approve.PresetReadOnly, "ask", ""},
	{"acceptEdits", approve.PresetWorkspaceWrite, "ask", ""},
	{"plan", approve.PresetReadOnly, "deny", ""},
	{"dontAsk", approve.PresetReadOnly, "deny", ""},
	{"bypassPermissions", approve.PresetFull, "allow", ""},
	{"auto", approve.PresetReadOnly, "ask", "auto mode's classifier has no counterpart in hutch; imported as \"default\": commands no rule allows are asked"},
}

// claudeAgentTools are tools of Claude Code that the agent uses itself,
// not commands it runs: their rules concern the agent, and hutch has
// nothing to enforce them with.
var claudeAgentTools = []string{
	"Glob", "Grep", "LS", "WebSearch", "Task", "Agent", "TodoWrite", "NotebookRead",
	"KillShell", "BashOutput", "TaskOutput", "TaskStop", "TaskCreate", "TaskGet", "TaskUpdate", "TaskList",
	"ExitPlanMode", "EnterPlanMode", "Skill", "SlashCommand", "ToolSearch", "AskUserQuestion", "LSP",
}

// LoadClaude imports the permissions and the sandbox of a Claude Code
// settings file (~/.claude/settings.json, .claude/settings.json,
// .claude/settings.local.json) as a Spec: Bash rules become approval
// rules, Read and Edit denies filesystem denies, WebFetch domains and the
// sandbox's network hosts, defaultMode an approvals preset and default;
// docs/claude-settings.md has the whole table. The returned warnings, each
// "file:line:column: message", say what was dropped or changed. Nothing is
// widened: an allow rule hutch cannot match exactly is dropped, and a deny
// or ask rule it cannot match exactly is kept as a rule that matches more.
// A malformed file, or a deny hutch cannot enforce at all, is an error.
// Call Normalize and Validate on the result, as for Load.
func LoadClaude(path string) (Spec, []string, error) {
	data, err := readFile(path)
	if err != nil {
		return Spec{}, nil, err
	}
	return ParseClaude(path, data)
}

// ParseClaude is LoadClaude on the content of the file called name.
func ParseClaude(name string, data []byte) (Spec, []string, error) {
	root, err := parseDocument(name, data)
	if err != nil {
		return Spec{}, nil, err
	}
	d := &claudeDecoder{srtDecoder: srtDecoder{decoder: decoder{file: name}}, root: claudeRoot(name)}
	s, err := d.spec(root)
	if err != nil {
		return Spec{}, nil, err
	}
	return s, d.warnings, nil
}

// claudeRoot is the directory a settings file's "/path" is relative to:
// the project of PROJECT/.claude/settings.json, else (~/.claude/settings.json
// included) the file's own directory.
func claudeRoot(name string) string {
	dir, err := filepath.Abs(filepath.Dir(name))
	if err != nil {
		dir = filepath.Dir(name)
	}
	home, _ := os.UserHomeDir()
	if filepath.Base(dir) == ".claude" && filepath.Dir(dir) != home {
		return filepath.Dir(dir)
	}
	return dir
}

type claudeDecoder struct {
	srtDecoder
	root    string
	agent   []string   // the agent's own tools that rules name
	agentAt *yaml.Node // where the first of them is
	exact   []claudeExact
	dontAsk bool
}

// claudeExact is an allow rule for one exact command, which becomes an
// approved command if it can.
type claudeExact struct {
	line, field, rule string
	node              *yaml.Node
}

// entries returns the entries of an object whose keys are not checked
// (unknown ones are warned about by the caller).
func (d *claudeDecoder) entries(n *yaml.Node, where string) ([]entry, error) {
	n = resolve(n)
	if isNull(n) {
		return nil, nil
	}
	if n.Kind != yaml.MappingNode {
		if where == "" {
			return nil, d.errorf(n, "expected a JSON object of settings at the top level, got %s", describe(n))
		}
		return nil, d.errorf(n, "%s: expected an object, got %s", where, describe(n))
	}
	var keys []string
	for i := 0; i+1 < len(n.Content); i += 2 {
		keys = append(keys, resolve(n.Content[i]).Value)
	}
	return d.mapping(n, where, keys, nil)
}

func (d *claudeDecoder) spec(root *yaml.Node) (Spec, error) {
	var s Spec
	entries, err := d.entries(root, "")
	if err != nil {
		return Spec{}, err
	}
	for _, e := range entries {
		switch e.key.Value {
		case "permissions":
			err = d.permissions(e, &s)
		case "sandbox":
			err = d.sandbox(e, &s)
		}
		if err != nil {
			return Spec{}, err
		}
	}
	if len(d.agent) > 0 {
		d.warnf(d.agentAt, "rules for Claude Code's own tools (%s) concern the agent, not the commands it runs, and were not imported", strings.Join(d.agent, ", "))
	}
	return s, d.approveExact(&s)
}

func (d *claudeDecoder) permissions(pe entry, s *Spec) error {
	entries, err := d.entries(pe.val, "permissions")
	if err != nil {
		return err
	}
	// defaultMode first: in dontAsk mode an ask rule is a deny.
	for _, e := range entries {
		if e.key.Value == "defaultMode" {
			if err := d.defaultMode(e, s); err != nil {
				return err
			}
		}
	}
	for _, e := range entries {
		field := "permissions." + e.key.Value
		switch e.key.Value {
		case "allow", "ask", "deny":
			rules, err := d.list(e.val, field, "permission rules", nil)
			if err != nil {
				return err
			}
			for i, r := range rules {
				item := resolve(resolve(e.val).Content[i])
				if err := d.rule(e.key.Value, r, item, fmt.Sprintf("%s[%d]", field, i), s); err != nil {
					return err
				}
			}
		case "additionalDirectories":
			dirs, err := d.list(e.val, field, "directories", nil)
			if err != nil {
				return err
			}
			for i, dir := range dirs {
				if err := checkPath(dir); err != nil {
					return d.errorf(resolve(e.val).Content[i], "%s[%d]: %v", field, i, err)
				}
				s.Filesystem.AllowWrite = append(s.Filesystem.AllowWrite, dir)
			}
		case "defaultMode", "disableBypassPermissionsMode", "disableAutoMode":
		default:
			d.warnf(e.key, "%s is not a permissions setting hutch knows, and was ignored", field)
		}
	}
	return nil
}

func (d *claudeDecoder) defaultMode(e entry, s *Spec) error {
	mode, err := d.str(e.val, "permissions.defaultMode")
	if err != nil {
		return err
	}
	for _, m := range claudeModes {
		if m.mode == mode {
			s.Approvals.Preset, s.Approvals.Default = m.preset, m.def
			d.dontAsk = mode == "dontAsk"
			if m.note != "" {
				d.warnf(e.val, "permissions.defaultMode: %s", m.note)
			}
			return nil
		}
	}
	d.warnf(e.val, "permissions.defaultMode: unknown mode %q, ignored (hutch's default: the read-only preset, commands no rule allows asked)", mode)
	return nil
}

// parseClaudeRule splits a permission rule, "Tool" or "Tool(specifier)";
// in the specifier "\(" and "\)" stand for parentheses.
func parseClaudeRule(r string) (tool, spec string, has bool, err error) {
	open := strings.IndexByte(r, '(')
	if open < 0 {
		if strings.ContainsAny(r, ") \t") {
			return "", "", false, fmt.Errorf("%q is not a rule (Tool or Tool(specifier))", r)
		}
		return r, "", false, nil
	}
	if !strings.HasSuffix(r, ")") || open == 0 {
		return "", "", false, fmt.Errorf("%q is not a rule (Tool or Tool(specifier))", r)
	}
	spec = r[open+1 : len(r)-1]
	spec = strings.NewReplacer(`\(`, "(", `\)`, ")").Replace(spec)
	return r[:open], spec, true, nil
}

// rule imports one permission rule.
func (d *claudeDecoder) rule(action, r string, n *yaml.Node, field string, s *Spec) error {
	tool, spec, has, err := parseClaudeRule(r)
	if err != nil && action == "allow" {
		d.warnf(n, "%s: %v, and was not imported", field, err)
		return nil
	}
	if err != nil {
		return d.errorf(n, "%s: %v", field, err)
	}
	if action == "ask" && d.dontAsk {
		action = "deny" // dontAsk denies what it would ask
	}
	switch {
	case tool == "Bash":
		if !has {
			spec = "*"
		}
		return d.bash(action, spec, r, n, field, s)
	case tool == "Read":
		d.fileRule(action, spec, has, r, n, field, &s.Filesystem.DenyRead)
	case tool == "Edit" || tool == "Write" || tool == "MultiEdit" || tool == "NotebookEdit":
		d.fileRule(action, spec, has, r, n, field, &s.Filesystem.DenyWrite)
	case tool == "WebFetch":
		d.webFetch(action, spec, has, r, n, field, s)
	case slices.Contains(claudeAgentTools, tool) || strings.HasPrefix(tool, "mcp__"):
		if !slices.Contains(d.agent, tool) {
			d.agent = append(d.agent, tool)
		}
		if d.agentAt == nil {
			d.agentAt = n
		}
	default:
		d.warnf(n, "%s: %q names a tool hutch does not know, and was ignored", field, r)
	}
	return nil
}

// bash imports a Bash rule as an approval rule.
func (d *claudeDecoder) bash(action, spec, r string, n *yaml.Node, field string, s *Spec) error {
	m := mapBash(spec)
	add := func(pat []string) {
		s.Approvals.Commands = append(s.Approvals.Commands, CommandRule{Action: action, Args: pat, File: d.file, Line: n.Line})
	}
	show := func(pat []string) string { return approve.Rule{Pattern: pat}.String()[len("allow: "):] }
	if action == "allow" {
		switch {
		case m.exact:
			add(m.pattern)
		case m.command != "":
			d.exact = append(d.exact, claudeExact{line: m.command, field: field, rule: r, node: n})
		default:
			d.warnf(n, "%s: %q was not imported: hutch's rules cannot match exactly the commands it allows (%s), and an allow rule is never widened", field, r, m.why)
		}
		return nil
	}
	switch {
	case m.exact:
		add(m.pattern)
	case m.pattern != nil:
		add(m.pattern)
		d.warnf(n, "%s: %q is imported as %s: %s, which matches more commands (%s)", field, r, action, show(m.pattern), m.why)
	default:
		return d.errorf(n, "%s: %q cannot be enforced: hutch's rules cannot match the commands it %ss without matching every command (%s); write it as a command and its first arguments", field, r, action, m.why)
	}
	return nil
}

// approveExact makes the exact commands of allow rules approved commands
// (approvals.approved): allowed where they would be asked, never where a
// rule denies them. One that a rule asks about stays asked, as in Claude
// Code, where ask wins over allow.
func (d *claudeDecoder) approveExact(s *Spec) error {
	if len(d.exact) == 0 {
		return nil
	}
	set, err := s.Approvals.ApprovalSet()
	if err != nil {
		return err
	}
	for _, x := range d.exact {
		if _, err := approve.Build(approve.Config{Preset: approve.PresetNone, NoDefaultRules: true, Approved: []string{x.line}}); err != nil {
			d.warnf(x.node, "%s: %q was not imported: hutch can approve one simple command without expansions, not this", x.field, x.rule)
			continue
		}
		dec := set.Decide(x.line)
		switch {
		case dec.Action == approve.Allow:
		case dec.Action == approve.Deny && dec.Rule < 0:
			d.warnf(x.node, "%s: %q was not imported: commands no rule allows are denied (permissions.defaultMode), and hutch's rules cannot allow one exact command", x.field, x.rule)
		case dec.Action == approve.Deny:
			d.warnf(x.node, "%s: %q was not imported: rule %s denies it", x.field, x.rule, dec.RuleText)
		case dec.Rule >= 0:
			d.warnf(x.node, "%s: %q was not imported: rule %s (%s) asks about it, and ask wins over allow", x.field, x.rule, dec.RuleText, dec.Source)
		default:
			s.Approvals.Approved = append(s.Approvals.Approved, x.line)
		}
	}
	return nil
}

// fileRule imports a Read, Edit or Write rule: a deny of a literal path (or
// of everything in a directory, "dir/**") is a filesystem deny.
func (d *claudeDecoder) fileRule(action, spec string, has bool, r string, n *yaml.Node, field string, deny *[]string) {
	switch {
	case action == "allow" && strings.HasPrefix(r, "Read"):
		return // the sandbox reads everything it does not deny
	case action == "allow":
		d.warnf(n, "%s: %q was not imported: the sandbox writes only its workspace and filesystem.allow_write, whatever an approval says", field, r)
		return
	case action == "ask":
		d.warnf(n, "%s: %q was not imported: hutch asks about commands and hosts, not about reading or writing a path (in review mode, approvals.files asks about the paths of a change set)", field, r)
		return
	}
	if !has || spec == "" {
		d.warnf(n, "%s: %q was not imported: hutch denies paths, not a whole tool", field, r)
		return
	}
	anyDepth := !strings.HasPrefix(spec, "/") && !strings.HasPrefix(spec, "~") && !strings.HasPrefix(spec, "./") &&
		!strings.Contains(strings.TrimSuffix(spec, "/"), "/")
	p := strings.TrimSuffix(strings.TrimSuffix(d.path(spec), "/**"), "/")
	if p == "" {
		p = "/"
	}
	if strings.ContainsAny(p, "*?[") {
		d.warnf(n, "%s: %q is NOT enforced: hutch denies literal paths (and \"dir/**\", a whole directory), not patterns", field, r)
		return
	}
	if err := checkPath(p); err != nil {
		d.warnf(n, "%s: %q is NOT enforced: %v", field, r, err)
		return
	}
	*deny = append(*deny, p)
	if anyDepth {
		d.warnf(n, "%s: %q is imported as the path %q only; Claude Code's pattern also matches %q in every directory below", field, r, p, spec)
	}
}

// path resolves a path of a Read or Edit rule: "//x" is /x, "/x" is
// relative to the settings' root, "~/x" and relative paths stay as they
// are (Normalize resolves them against the home and the current
// directory).
func (d *claudeDecoder) path(p string) string {
	switch {
	case strings.HasPrefix(p, "//"):
		return p[1:]
	case strings.HasPrefix(p, "/"):
		return filepath.Join(d.root, p)
	}
	return p
}

// webFetch imports a WebFetch rule: an allowed domain, a denied one.
func (d *claudeDecoder) webFetch(action, spec string, has bool, r string, n *yaml.Node, field string, s *Spec) {
	nw := &s.Network
	if !has && action == "deny" {
		nw.DeniedDomains = append(nw.DeniedDomains, "*")
		return
	}
	dom, ok := strings.CutPrefix(spec, "domain:")
	switch {
	case !has && action == "allow":
		d.warnf(n, "%s: %q was not imported: hutch allows hosts one by one, never every host", field, r)
	case !ok || dom == "":
		d.warnf(n, "%s: %q was not imported: hutch knows WebFetch(domain:HOST) only", field, r)
	case action == "ask":
		d.warnf(n, "%s: %q was not imported: hutch allows or refuses hosts (network.on_unknown: ask asks about every host no rule allows)", field, r)
	case action == "allow":
		if err := checkDomain(dom, false); err != nil {
			d.warnf(n, "%s: %q was not imported: %v", field, r, err)
			return
		}
		nw.AllowedDomains = append(nw.AllowedDomains, dom)
	default:
		if err := checkDomain(dom, true); err != nil {
			d.warnf(n, "%s: %q is NOT enforced: %v", field, r, err)
			return
		}
		nw.DeniedDomains = append(nw.DeniedDomains, dom)
	}
}

// sandbox imports the sandbox section: Claude Code's own settings here,
// the rest as srt's settings.
func (d *claudeDecoder) sandbox(se entry, s *Spec) error {
	entries, err := d.entries(se.val, "sandbox")
	if err != nil {
		return err
	}
	rest := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Line: se.val.Line, Column: se.val.Column}
	enabled, autoAllow := false, true
	var autoNode *yaml.Node
	for _, e := range entries {
		field := "sandbox." + e.key.Value
		switch e.key.Value {
		case "enabled":
			if enabled, err = d.boolean(e.val, field); err != nil {
				return err
			}
		case "autoAllowBashIfSandboxed":
			autoNode = e.key
			if autoAllow, err = d.boolean(e.val, field); err != nil {
				return err
			}
			if isNull(e.val) {
				autoAllow = true
			}
		case "excludedCommands":
			if _, err := d.list(e.val, field, "commands", nil); err != nil {
				return err
			}
			if isSet(e.val) {
				d.warnf(e.key, "%s is not supported by hutch and was ignored (every command runs in the sandbox)", field)
			}
		case "failIfUnavailable", "allowUnsandboxedCommands", "enabledPlatforms":
		case "filesystem", "network", "credentials":
			val, err := d.srtPart(e)
			if err != nil {
				return err
			}
			rest.Content = append(rest.Content, e.key, val)
		default:
			rest.Content = append(rest.Content, e.key, e.val)
		}
	}
	sd := &srtDecoder{decoder: d.decoder, at: "sandbox"}
	sub, err := sd.spec(rest)
	d.warnings = append(d.warnings, sd.warnings...)
	if err != nil {
		return err
	}
	s.Add(sub)
	if enabled && autoAllow {
		at := autoNode
		if at == nil {
			at = se.key
		}
		d.warnf(at, "sandbox.autoAllowBashIfSandboxed: Claude Code runs every sandboxed command without asking; hutch decides each by the approval rules (approvals.default: allow runs every command no rule stops)")
	}
	return nil
}

// srtPart prepares sandbox.filesystem, .network or .credentials for the
// srt decoder: without the settings of managed deployments, with Claude
// Code's paths resolved.
func (d *claudeDecoder) srtPart(e entry) (*yaml.Node, error) {
	where := "sandbox." + e.key.Value
	entries, err := d.entries(e.val, where)
	if err != nil || entries == nil {
		return e.val, err
	}
	out := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Line: e.val.Line, Column: e.val.Column}
	for _, x := range entries {
		switch k := x.key.Value; {
		case k == "allowManagedReadPathsOnly" || k == "allowManagedDomainsOnly":
			continue
		case e.key.Value == "filesystem" && (k == "allowWrite" || k == "denyWrite" || k == "denyRead" || k == "allowRead"):
			d.rewrite(x.val, d.sandboxPath)
		case e.key.Value == "credentials" && k == "files":
			if list := resolve(x.val); list.Kind == yaml.SequenceNode {
				for _, f := range list.Content {
					if f = resolve(f); f.Kind != yaml.MappingNode {
						continue
					}
					for i := 0; i+1 < len(f.Content); i += 2 {
						if f.Content[i].Value == "path" {
							d.rewrite(f.Content[i+1], d.credentialPath)
						}
					}
				}
			}
		}
		out.Content = append(out.Content, x.key, x.val)
	}
	return out, nil
}

// sandboxPath resolves a path of sandbox.filesystem: "//x" is /x, "~/x"
// is in the home, any other relative to the settings' root (the project,
// or ~/.claude for the user's settings).
func (d *claudeDecoder) sandboxPath(p string) string {
	switch {
	case strings.HasPrefix(p, "//"):
		return p[1:]
	case strings.HasPrefix(p, "~"):
		return p
	}
	return filepath.Join(d.root, p)
}

// credentialPath resolves the path of sandbox.credentials.files: absolute,
// "~/…", or relative to the settings' root.
func (d *claudeDecoder) credentialPath(p string) string {
	if filepath.IsAbs(p) || strings.HasPrefix(p, "~") {
		return p
	}
	return filepath.Join(d.root, p)
}

// rewrite applies f to the strings of n, a string or a list of them.
func (d *claudeDecoder) rewrite(n *yaml.Node, f func(string) string) {
	n = resolve(n)
	switch {
	case n.Kind == yaml.ScalarNode && n.Tag == "!!str" && n.Value != "":
		n.Value = f(n.Value)
	case n.Kind == yaml.SequenceNode:
		for _, item := range n.Content {
			d.rewrite(item, f)
		}
	}
}

// bashMapping is what a Bash rule's specifier becomes in hutch's rules.
type bashMapping struct {
	// pattern are argument patterns that match the commands the rule
	// matches: exactly when exact, else more of them; nil when none do.
	pattern []string
	exact   bool
	// command is the command of a rule without a wildcard, as a shell
	// line, when its words are plain.
	command string
	// why says how pattern differs from the rule, when it is not exact.
	why string
}

// bchar is a character of a Bash rule; wild for an unescaped "*".
type bchar struct {
	c    byte
	wild bool
}

// bword is a word of a Bash rule; plain when it is literal text and
// wildcards, nothing the shell would read differently (quotes,
// expansions, operators).
type bword struct {
	chars []bchar
	plain bool
}

// bashWords splits a Bash rule's specifier into words at blanks. "\*" is
// a literal star; literal says every star is. A first word holding "="
// is an assignment, which is not an argument in hutch's parsed commands.
func bashWords(spec string, literal bool) []bword {
	var words []bword
	var w *bword
	for i := 0; i < len(spec); i++ {
		c := spec[i]
		if c == ' ' || c == '\t' {
			w = nil
			continue
		}
		if w == nil {
			words = append(words, bword{plain: c != '#'})
			w = &words[len(words)-1]
		}
		switch {
		case c == '\\' && i+1 < len(spec) && (spec[i+1] == '*' || spec[i+1] == '\\'):
			i++
			w.chars = append(w.chars, bchar{c: spec[i]})
		case c == '*':
			w.chars = append(w.chars, bchar{c: '*', wild: !literal})
		default:
			if strings.IndexByte("\\\"'$`|&;<>(){}\n", c) >= 0 {
				w.plain = false
			}
			w.chars = append(w.chars, bchar{c: c})
		}
	}
	if len(words) > 0 && strings.Contains(words[0].text(), "=") {
		words[0].plain = false
	}
	return words
}

// glob writes w as one of hutch's argument patterns: its stars as "*",
// its other characters literal.
func (w bword) glob() string {
	var b strings.Builder
	for _, c := range w.chars {
		if !c.wild && strings.IndexByte(`*?[\`, c.c) >= 0 {
			b.WriteByte('\\')
		}
		b.WriteByte(c.c)
	}
	return b.String()
}

func (w bword) text() string {
	b := make([]byte, len(w.chars))
	for i, c := range w.chars {
		b[i] = c.c
	}
	return string(b)
}

func (w bword) stars() (n int, lead, trail, mid bool) {
	for i, c := range w.chars {
		if !c.wild {
			continue
		}
		n++
		switch {
		case i == 0:
			lead = true
		case i == len(w.chars)-1:
			trail = true
		default:
			mid = true
		}
	}
	return
}

// mapBash maps the specifier of a Bash rule. Claude Code matches the
// rule against the command's text: without a wildcard the whole command,
// "PREFIX:*" and "PREFIX *" the command PREFIX and PREFIX followed by
// anything, and "*" any run of characters, blanks too, the whole text
// matched. hutch matches argument patterns against the first words of a
// parsed command, so it matches exactly a prefix of words, and a last
// word that starts with some text ("test*"); any other wildcard, and an
// exact command, it can only match together with more commands.
func mapBash(spec string) bashMapping {
	spec = strings.TrimSpace(spec)
	if spec == "*" || spec == "" {
		return bashMapping{pattern: []string{"*"}, exact: true}
	}
	if prefix, ok := strings.CutSuffix(spec, ":*"); ok {
		words := bashWords(prefix, true)
		if pat, n := literalPrefix(words); n == len(words) && n > 0 {
			return bashMapping{pattern: pat, exact: true}
		}
		return superset(spec, bashWords(prefix, true), "it holds shell syntax")
	}
	words := bashWords(spec, false)
	total := 0
	for _, w := range words {
		n, _, _, _ := w.stars()
		total += n
	}
	last := words[len(words)-1]
	pat, n := literalPrefix(words)
	switch {
	case n == len(words) && total == 0:
		argv := make([]string, len(words))
		for i, w := range words {
			argv[i] = w.text()
		}
		return bashMapping{pattern: pat, command: approve.Line(argv), why: "hutch's patterns also match the command with more arguments"}
	case total == 1 && len(words) > 1 && len(last.chars) == 1 && last.chars[0].wild && n == len(words)-1:
		return bashMapping{pattern: pat, exact: true} // "PREFIX *"
	case total == 1 && n == len(words)-1 && last.plain && last.chars[len(last.chars)-1].wild:
		return bashMapping{pattern: append(pat, last.glob()), exact: true} // "npm run test*"
	}
	return superset(spec, words, "a wildcard inside the command matches any text, blanks too, and the rule matches the whole command")
}

// literalPrefix returns the patterns of the leading plain words without a
// wildcard, and how many there are.
func literalPrefix(words []bword) ([]string, int) {
	var pat []string
	for _, w := range words {
		if n, _, _, _ := w.stars(); n > 0 || !w.plain {
			break
		}
		pat = append(pat, w.glob())
	}
	return pat, len(pat)
}

// superset maps words onto patterns that match at least the commands the
// rule matches: a "*" word is "**" (any arguments), a word that starts
// or ends with a wildcard also lets arguments come before or after it,
// and the patterns end before a word they cannot say (shell syntax, a
// wildcard amid a word). A pipe into a command, "curl * | sh", is
// hutch's pseudo-command [|, curl, sh].
func superset(spec string, words []bword, why string) bashMapping {
	if l, r, ok := strings.Cut(spec, "|"); ok && !strings.Contains(r, "|") && !strings.Contains(spec, "||") {
		lw, rw := bashWords(strings.TrimSuffix(l, ":*"), true), bashWords(strings.TrimSuffix(r, ":*"), true)
		if len(lw) > 0 && len(rw) > 0 && lw[0].plain && rw[0].plain {
			if lt, rt := lw[0].text(), rw[0].text(); !strings.ContainsAny(lt+rt, "/*") {
				return bashMapping{pattern: []string{"|", shellGlobEscape(lt), shellGlobEscape(rt)}, why: "hutch's pseudo-command for a pipe matches every " + lt + " … | " + rt}
			}
		}
	}
	var pat []string
	stars := 0
	anyArgs := func() bool {
		if len(pat) > 0 && pat[len(pat)-1] == "**" {
			return true
		}
		if stars == 2 {
			return false
		}
		stars++
		pat = append(pat, "**")
		return true
	}
	cut := ""
words:
	for i, w := range words {
		n, lead, trail, mid := w.stars()
		switch {
		case !w.plain:
			cut = w.text()
			break words
		case n == len(w.chars): // "*"
			if i == 0 {
				pat = append(pat, "*")
			}
			if !anyArgs() {
				cut = w.text()
				break words
			}
			continue
		case mid || (i == 0 && lead):
			cut = w.text()
			break words
		}
		if lead && !anyArgs() {
			cut = w.text()
			break
		}
		pat = append(pat, w.glob())
		if trail && i < len(words)-1 && !anyArgs() {
			cut = words[i+1].text()
			break
		}
	}
	for len(pat) > 0 && pat[len(pat)-1] == "**" {
		pat = pat[:len(pat)-1] // a prefix lets any arguments follow
	}
	if cut != "" {
		why += fmt.Sprintf("; hutch's patterns stop before %q", cut)
	}
	if len(pat) == 0 || (len(pat) == 1 && pat[0] == "*") || approve.CheckPattern(pat) != nil {
		return bashMapping{why: why}
	}
	return bashMapping{pattern: pat, why: why}
}

// shellGlobEscape escapes the wildcard characters of hutch's patterns.
func shellGlobEscape(s string) string {
	var w bword
	for i := range len(s) {
		w.chars = append(w.chars, bchar{c: s[i]})
	}
	return w.glob()
}
