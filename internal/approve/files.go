package approve

import (
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
)

// FileRule is one rule of approvals.files: what applying a change set
// gets when it touches a path that one of Globs matches.
type FileRule struct {
	Action Action
	// Globs are workspace-relative slash-separated path patterns (see
	// MatchGlob).
	Globs []string
	// Source says where the rule is written ("FILE:LINE"), or "".
	Source string
}

// String is the rule as a policy file spells it, and where:
// `ask: [".github/**", "Makefile"] (policy.yaml:12)`.
func (r FileRule) String() string {
	q := make([]string, len(r.Globs))
	for i, g := range r.Globs {
		q[i] = fmt.Sprintf("%q", g)
	}
	s := fmt.Sprintf("%s: [%s]", r.Action, strings.Join(q, ", "))
	if r.Source != "" {
		s += " (" + r.Source + ")"
	}
	return s
}

// maxGlobSegments bounds a glob's segments, so that matching stays cheap.
const maxGlobSegments = 64

// CheckGlob checks a glob of a file rule: workspace-relative (no leading
// "/", no "." or ".." segment, no empty segment), "**" only as a whole
// segment, and every other segment a valid path.Match pattern.
func CheckGlob(g string) error {
	switch {
	case g == "":
		return errors.New("empty pattern")
	case strings.HasPrefix(g, "/"):
		return fmt.Errorf("pattern %q: paths are relative to the workspace (no leading /)", g)
	}
	segs := strings.Split(strings.TrimSuffix(g, "/"), "/")
	if len(segs) > maxGlobSegments {
		return fmt.Errorf("pattern %q: more than %d segments", g, maxGlobSegments)
	}
	for _, s := range segs {
		switch {
		case s == "":
			return fmt.Errorf("pattern %q: empty path segment", g)
		case s == "." || s == "..":
			return fmt.Errorf("pattern %q: %q segments are not allowed", g, s)
		case s == "**":
			continue
		case strings.Contains(s, "**"):
			return fmt.Errorf("pattern %q: ** must be a whole path segment (a/**/b), not part of %q", g, s)
		}
		if _, err := path.Match(s, ""); err != nil {
			return fmt.Errorf("pattern %q: bad pattern in %q", g, s)
		}
	}
	return nil
}

// MatchGlob reports whether the glob g (checked by CheckGlob) matches the
// workspace-relative path p or one of the directories above it, so that
// a rule for a directory covers what is below it. In a segment, "*" is
// any run of characters but "/", "?" one character, "[a-z]" a class (as
// path.Match); a segment "**" is any number of segments, none included:
// "**/*.pem" is every .pem file, ".git/hooks/**" the hooks directory and
// all below it. A glob without "/" is anchored at the workspace's root:
// "Makefile" is the root's Makefile, "**/Makefile" any.
func MatchGlob(g, p string) bool {
	gs := strings.Split(strings.TrimSuffix(g, "/"), "/")
	ps := strings.Split(p, "/")
	return matchSegs(gs, ps)
}

// matchSegs matches glob segments against a prefix of path segments (a
// path below what the glob names matches too).
func matchSegs(gs, ps []string) bool {
	for len(gs) > 0 {
		if gs[0] == "**" {
			for len(gs) > 0 && gs[0] == "**" {
				gs = gs[1:]
			}
			if len(gs) == 0 {
				return true
			}
			for i := range ps {
				if matchSegs(gs, ps[i:]) {
					return true
				}
			}
			return false
		}
		if len(ps) == 0 {
			return false
		}
		if ok, _ := path.Match(gs[0], ps[0]); !ok {
			return false
		}
		gs, ps = gs[1:], ps[1:]
	}
	return true
}

// FileDecision is what file rules say of the paths a change set touches.
type FileDecision struct {
	// Action is Deny when a deny rule matches a path, else Ask when an
	// ask rule matches a path that no allow rule matches, else Allow.
	Action Action
	// Paths are the paths that decided: those denied, or those asked
	// about; none for Allow.
	Paths []string
	// Rules are the rules that matched them, each once, in order.
	Rules []FileRule
}

// Rule is the decision's rules as one line, for a question or an error.
func (d FileDecision) Rule() string {
	s := make([]string, len(d.Rules))
	for i, r := range d.Rules {
		s[i] = "approvals.files " + r.String()
	}
	return strings.Join(s, "; ")
}

// DecideFiles decides the paths a change set touches: a path that a deny
// rule matches refuses the whole apply; one that an ask rule matches
// asks, unless an allow rule matches it too (allow exempts a path from
// ask rules, never from deny rules); every other path is allowed.
func DecideFiles(rules []FileRule, paths []string) FileDecision {
	var denied, asked FileDecision
	denied.Action, asked.Action = Deny, Ask
	for _, p := range paths {
		var deny, ask *FileRule
		allow := false
		for i := range rules {
			r := &rules[i]
			if !slices.ContainsFunc(r.Globs, func(g string) bool { return MatchGlob(g, p) }) {
				continue
			}
			switch r.Action {
			case Deny:
				if deny == nil {
					deny = r
				}
			case Ask:
				if ask == nil {
					ask = r
				}
			default:
				allow = true
			}
		}
		switch {
		case deny != nil:
			denied.add(p, *deny)
		case ask != nil && !allow:
			asked.add(p, *ask)
		}
	}
	switch {
	case len(denied.Paths) > 0:
		return denied
	case len(asked.Paths) > 0:
		return asked
	}
	return FileDecision{Action: Allow}
}

func (d *FileDecision) add(p string, r FileRule) {
	if !slices.Contains(d.Paths, p) {
		d.Paths = append(d.Paths, p)
	}
	if !slices.ContainsFunc(d.Rules, func(x FileRule) bool {
		return x.Source == r.Source && x.Action == r.Action && slices.Equal(x.Globs, r.Globs)
	}) {
		d.Rules = append(d.Rules, r)
	}
}

// fileRuleJSON is a FileRule in JSON: its action by name.
type fileRuleJSON struct {
	Action string   `json:"action"`
	Globs  []string `json:"globs"`
	Source string   `json:"source,omitempty"`
}

// MarshalJSON writes the rule with its action by name.
func (r FileRule) MarshalJSON() ([]byte, error) {
	return json.Marshal(fileRuleJSON{Action: r.Action.String(), Globs: r.Globs, Source: r.Source})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (r *FileRule) UnmarshalJSON(data []byte) error {
	var j fileRuleJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return err
	}
	a, err := ParseAction(j.Action)
	if err != nil {
		return err
	}
	*r = FileRule{Action: a, Globs: j.Globs, Source: j.Source}
	return nil
}
