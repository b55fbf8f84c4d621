package policy

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/hutch-sandbox/hutch/internal/approve"
	"gopkg.in/yaml.v3"
)

// Approvals are the rules that decide whether a command may run at all
// (allow, ask or deny), before the sandbox limits what it reaches: a
// layer of their own, package approve. The file format:
//
//	approvals:
//	  preset: read-only       # read-only | workspace-write | full | none
//	  default: ask            # commands no rule matches: allow | ask | deny
//	  no_default_rules: false # true drops the shipped rules for the classic dangers
//	  commands:               # any matching deny wins, then any ask, then any allow, else default
//	    - allow: [git, status]
//	    - deny: [rm, "**", /]
//	      match: ["rm -rf /"]          # examples checked when the file loads
//	      not_match: ["rm -rf ./build"]
//	  approved:               # answered "allow always" at a prompt
//	    - git push origin main
//	  files:                  # applying a change set of hutch run --review
//	    - ask: [".github/**", "**/*.pem", Makefile]
//	    - deny: [".git/hooks/**"]
//	    - allow: [".github/CODEOWNERS"]   # exempt from ask rules, not deny ones
//
// The file rules (FileRule) decide the apply of change sets only; the
// other fields decide commands (HasCommandRules).
type Approvals struct {
	// Default is the action for commands no rule matches: "allow", "ask"
	// or "deny"; empty for the preset's ("ask" but for full's "allow").
	Default string `json:"default,omitempty" yaml:"default,omitempty"`
	// Preset selects shipped rules (approve.Presets); empty is read-only.
	Preset string `json:"preset,omitempty" yaml:"preset,omitempty"`
	// NoDefaultRules drops approve.DefaultRules.
	NoDefaultRules bool `json:"no_default_rules,omitempty" yaml:"no_default_rules,omitempty"`
	// Commands are the file's rules, in order, before the preset's.
	Commands []CommandRule `json:"commands,omitempty" yaml:"commands,omitempty"`
	// Approved are simple commands, exactly as hutch shows them
	// ("git push origin main"), that a person allowed for always: they
	// run without asking where a rule says ask, never where one says
	// deny. "Allow always" at a prompt appends here.
	Approved []string `json:"approved,omitempty" yaml:"approved,omitempty"`
	// Files are the rules on the paths a change set touches, matched when
	// it is applied (hutch changes apply, hutch serve's apply): any deny
	// refuses the apply, any ask asks (FileRule).
	Files []FileRule `json:"files,omitempty" yaml:"files,omitempty"`
}

// CommandRule is one rule of Approvals.Commands, written in a file as one
// key, its action, whose value is the list of argument patterns:
// "- allow: [git, status]".
type CommandRule struct {
	Action string
	Args   []string
	// Match and NotMatch are example command lines the rule must match
	// (decide with its own action) and must not match; Load checks them.
	Match, NotMatch []string
	// File and Line say where the rule is written, when it was loaded.
	File string
	Line int
}

// Source is "FILE:LINE", or "" for a rule not loaded from a file.
func (r CommandRule) Source() string {
	if r.File == "" {
		return ""
	}
	return fmt.Sprintf("%s:%d", r.File, r.Line)
}

func (r CommandRule) fields() map[string]any {
	m := map[string]any{r.Action: r.Args}
	if len(r.Match) > 0 {
		m["match"] = r.Match
	}
	if len(r.NotMatch) > 0 {
		m["not_match"] = r.NotMatch
	}
	return m
}

// MarshalYAML writes the rule as a file holds it.
func (r CommandRule) MarshalYAML() (any, error) {
	n := &yaml.Node{Kind: yaml.MappingNode}
	add := func(k string, v []string) {
		seq := &yaml.Node{Kind: yaml.SequenceNode, Style: yaml.FlowStyle}
		for _, s := range v {
			seq.Content = append(seq.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: s})
		}
		n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: k}, seq)
	}
	add(r.Action, r.Args)
	if len(r.Match) > 0 {
		add("match", r.Match)
	}
	if len(r.NotMatch) > 0 {
		add("not_match", r.NotMatch)
	}
	return n, nil
}

// MarshalJSON writes the rule as a file holds it.
func (r CommandRule) MarshalJSON() ([]byte, error) { return json.Marshal(r.fields()) }

// UnmarshalJSON reads the rule as a file holds it.
func (r *CommandRule) UnmarshalJSON(data []byte) error {
	var m map[string][]string
	if err := json.Unmarshal(data, &m); err != nil {
		return err
	}
	*r = CommandRule{Match: m["match"], NotMatch: m["not_match"]}
	for _, a := range []string{"allow", "ask", "deny"} {
		if v, ok := m[a]; ok {
			if r.Action != "" {
				return fmt.Errorf("a rule has one action, this one %s and %s", r.Action, a)
			}
			r.Action, r.Args = a, v
		}
	}
	if r.Action == "" {
		return fmt.Errorf("a rule needs one of allow, ask or deny")
	}
	return nil
}

// approvalRuleKeys are the keys of a rule besides its action.
var approvalRuleKeys = []string{"allow", "ask", "deny", "match", "not_match"}

// OnUnknownValues are the values of network.on_unknown.
var OnUnknownValues = []string{"ask", "deny"}

// CheckOnUnknown checks network.on_unknown's value ("" is unset).
func CheckOnUnknown(v string) error {
	if v == "" || slices.Contains(OnUnknownValues, v) {
		return nil
	}
	return fmt.Errorf("unknown value %q: want ask or deny", v)
}

// ApprovalSet compiles the approvals into the rules package approve
// decides with: the file's rules, the preset's, then the default rules.
func (a Approvals) ApprovalSet() (*approve.Set, error) {
	c := approve.Config{Preset: a.Preset, Default: a.Default, NoDefaultRules: a.NoDefaultRules, Approved: a.Approved}
	for i, r := range a.Commands {
		rule, err := r.rule()
		if err != nil {
			return nil, fmt.Errorf("approvals.commands[%d]: %w", i, err)
		}
		c.Rules = append(c.Rules, rule)
	}
	return approve.Build(c)
}

func (r CommandRule) rule() (approve.Rule, error) {
	act, err := approve.ParseAction(r.Action)
	if err != nil {
		return approve.Rule{}, err
	}
	if err := approve.CheckPattern(r.Args); err != nil {
		return approve.Rule{}, err
	}
	return approve.Rule{Action: act, Pattern: r.Args, Source: r.Source()}, nil
}

// CheckExamples checks a rule's examples against the rule alone: each
// Match line decides with the rule's action, by this rule, and no NotMatch
// line is decided by it.
func (r CommandRule) CheckExamples() error {
	rule, err := r.rule()
	if err != nil || len(r.Match)+len(r.NotMatch) == 0 {
		return err
	}
	// The rule alone, against a default that tells it apart.
	def := approve.Allow
	if rule.Action == approve.Allow {
		def = approve.Deny
	}
	set, err := approve.NewSet(def, []approve.Rule{rule})
	if err != nil {
		return err
	}
	for _, ex := range r.Match {
		if d := set.Decide(ex); d.Rule != 0 || d.Action != rule.Action {
			return fmt.Errorf("example %q does not match the rule (%s)", ex, describeDecision(d))
		}
	}
	for _, ex := range r.NotMatch {
		if d := set.Decide(ex); d.Rule == 0 {
			return fmt.Errorf("example %q matches the rule (on %q) but is listed in not_match", ex, d.Command)
		}
	}
	return nil
}

func describeDecision(d approve.Decision) string {
	if d.Command == "" {
		return d.Reason
	}
	return fmt.Sprintf("%s for %q: %s", d.Action, d.Command, d.Reason)
}

// approvals decodes the approvals: section.
func (d *decoder) approvals(n *yaml.Node, a *Approvals) error {
	entries, err := d.mapping(n, "approvals", policyFields("approvals"), suggestIn("approvals"))
	if err != nil {
		return err
	}
	for _, e := range entries {
		name := "approvals." + e.key.Value
		switch e.key.Value {
		case "default":
			a.Default, err = d.checkedStr(e.val, name, func(s string) error { _, err := approve.ParseAction(s); return err })
		case "preset":
			a.Preset, err = d.checkedStr(e.val, name, func(s string) error { _, _, err := approve.PresetRules(s); return err })
		case "no_default_rules":
			a.NoDefaultRules, err = d.boolean(e.val, name)
		case "commands":
			a.Commands, err = d.commandRules(e.val)
		case "approved":
			a.Approved, err = d.list(e.val, name, "command lines", nil)
		case "files":
			a.Files, err = d.fileRules(e.val)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// commandRules decodes approvals.commands, checking each rule's examples.
func (d *decoder) commandRules(n *yaml.Node) ([]CommandRule, error) {
	n = resolve(n)
	if isNull(n) {
		return nil, nil
	}
	if n.Kind != yaml.SequenceNode {
		return nil, d.errorf(n, "approvals.commands: expected a list of rules, got %s", describe(n))
	}
	var out []CommandRule
	for i, item := range n.Content {
		where := fmt.Sprintf("approvals.commands[%d]", i)
		item = resolve(item)
		if item.Kind != yaml.MappingNode {
			return nil, d.errorf(item, "%s: expected a rule (allow:, ask: or deny: with a list of argument patterns), got %s", where, describe(item))
		}
		entries, err := d.mapping(item, where, approvalRuleKeys, func(s string) string { return suggestField(s, approvalRuleKeys) })
		if err != nil {
			return nil, err
		}
		r := CommandRule{File: d.file, Line: item.Line}
		for _, e := range entries {
			switch k := e.key.Value; k {
			case "allow", "ask", "deny":
				if r.Action != "" {
					return nil, d.errorf(e.key, "%s: a rule has one action, this one %s and %s", where, r.Action, k)
				}
				r.Action = k
				r.Args, err = d.list(e.val, where+"."+k, "argument patterns", nil)
				if err == nil {
					if cerr := approve.CheckPattern(r.Args); cerr != nil {
						err = d.errorf(e.val, "%s.%s: %v", where, k, cerr)
					}
				}
			case "match":
				r.Match, err = d.list(e.val, where+".match", "example command lines", nil)
			case "not_match":
				r.NotMatch, err = d.list(e.val, where+".not_match", "example command lines", nil)
			}
			if err != nil {
				return nil, err
			}
		}
		if r.Action == "" {
			return nil, d.errorf(item, "%s: a rule needs one of allow:, ask: or deny: with its argument patterns", where)
		}
		if err := r.CheckExamples(); err != nil {
			return nil, d.errorf(item, "%s (%s): %v", where, ruleText(r), err)
		}
		out = append(out, r)
	}
	return out, nil
}

func ruleText(r CommandRule) string {
	rule, err := r.rule()
	if err != nil {
		return r.Action
	}
	return rule.String()
}
