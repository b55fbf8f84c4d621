package policy

import (
	"encoding/json"
	"fmt"

	"github.com/hutch-sandbox/hutch/internal/approve"
	"gopkg.in/yaml.v3"
)

// FileRule is one rule of Approvals.Files, written in a file as one key,
// its action, whose value is the list of path globs: `- ask: [".github/**",
// "**/*.pem", Makefile]`. The globs are workspace-relative; "*" and "?"
// stay within a path segment, a segment "**" is any number of them, and a
// glob that names a directory covers what is below it
// (approve.MatchGlob). When a change set of hutch run --review is
// applied, the paths it touches are matched (approve.DecideFiles): a deny
// rule refuses the apply, an ask rule asks (an allow rule exempts a path
// from ask rules, not from deny rules).
type FileRule struct {
	Action string
	Globs  []string
	// File and Line say where the rule is written, when it was loaded.
	File string
	Line int
}

// Source is "FILE:LINE", or "" for a rule not loaded from a file.
func (r FileRule) Source() string {
	if r.File == "" {
		return ""
	}
	return fmt.Sprintf("%s:%d", r.File, r.Line)
}

// Rule compiles the rule for package approve, checking its action and
// globs.
func (r FileRule) Rule() (approve.FileRule, error) {
	act, err := approve.ParseAction(r.Action)
	if err != nil {
		return approve.FileRule{}, err
	}
	if len(r.Globs) == 0 {
		return approve.FileRule{}, fmt.Errorf("%s: a rule needs at least one path glob", r.Action)
	}
	for _, g := range r.Globs {
		if err := approve.CheckGlob(g); err != nil {
			return approve.FileRule{}, err
		}
	}
	return approve.FileRule{Action: act, Globs: r.Globs, Source: r.Source()}, nil
}

// FileRules compiles approvals.files, in order.
func (a Approvals) FileRules() ([]approve.FileRule, error) {
	var out []approve.FileRule
	for i, r := range a.Files {
		rule, err := r.Rule()
		if err != nil {
			return nil, fmt.Errorf("approvals.files[%d]: %w", i, err)
		}
		out = append(out, rule)
	}
	return out, nil
}

// HasCommandRules says whether the approvals decide commands: anything
// set but approvals.files, which only decide the apply of change sets.
func (a Approvals) HasCommandRules() bool {
	return len(a.Commands) > 0 || a.Default != "" || a.Preset != "" || a.NoDefaultRules || len(a.Approved) > 0
}

// MarshalYAML writes the rule as a file holds it.
func (r FileRule) MarshalYAML() (any, error) {
	seq := &yaml.Node{Kind: yaml.SequenceNode, Style: yaml.FlowStyle}
	for _, g := range r.Globs {
		seq.Content = append(seq.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: g, Style: yaml.DoubleQuotedStyle})
	}
	return &yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{{Kind: yaml.ScalarNode, Value: r.Action}, seq}}, nil
}

// MarshalJSON writes the rule as a file holds it.
func (r FileRule) MarshalJSON() ([]byte, error) {
	return json.Marshal(map[string][]string{r.Action: r.Globs})
}

// UnmarshalJSON reads the rule as a file holds it.
func (r *FileRule) UnmarshalJSON(data []byte) error {
	var m map[string][]string
	if err := json.Unmarshal(data, &m); err != nil {
		return err
	}
	*r = FileRule{}
	for k, v := range m {
		if _, err := approve.ParseAction(k); err != nil {
			return fmt.Errorf("unknown key %q in a file rule: want one of allow, ask or deny", k)
		}
		if r.Action != "" {
			return fmt.Errorf("a rule has one action, this one %s and %s", r.Action, k)
		}
		r.Action, r.Globs = k, v
	}
	if r.Action == "" {
		return fmt.Errorf("a file rule needs one of allow, ask or deny")
	}
	return nil
}

// fileRuleKeys are the keys of a file rule: its action.
var fileRuleKeys = []string{"allow", "ask", "deny"}

// fileRules decodes approvals.files.
func (d *decoder) fileRules(n *yaml.Node) ([]FileRule, error) {
	n = resolve(n)
	if isNull(n) {
		return nil, nil
	}
	if n.Kind != yaml.SequenceNode {
		return nil, d.errorf(n, "approvals.files: expected a list of rules (- ask: [GLOB, ...]), got %s", describe(n))
	}
	var out []FileRule
	for i, item := range n.Content {
		where := fmt.Sprintf("approvals.files[%d]", i)
		item = resolve(item)
		if item.Kind != yaml.MappingNode {
			return nil, d.errorf(item, "%s: expected a rule (allow:, ask: or deny: with a list of path globs), got %s", where, describe(item))
		}
		entries, err := d.mapping(item, where, fileRuleKeys, func(s string) string { return suggestField(s, fileRuleKeys) })
		if err != nil {
			return nil, err
		}
		r := FileRule{File: d.file, Line: item.Line}
		for _, e := range entries {
			if r.Action != "" {
				return nil, d.errorf(e.key, "%s: a rule has one action, this one %s and %s", where, r.Action, e.key.Value)
			}
			r.Action = e.key.Value
			if r.Globs, err = d.list(e.val, where+"."+r.Action, "path globs", approve.CheckGlob); err != nil {
				return nil, err
			}
			if len(r.Globs) == 0 {
				return nil, d.errorf(e.val, "%s.%s: needs at least one path glob", where, r.Action)
			}
		}
		if r.Action == "" {
			return nil, d.errorf(item, "%s: a rule needs one of allow:, ask: or deny: with its path globs", where)
		}
		out = append(out, r)
	}
	return out, nil
}
