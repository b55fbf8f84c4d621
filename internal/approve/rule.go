// Package approve decides whether a command line may run: allow, ask or
// deny, before it runs. It is hutch's approval layer, separate from the
// sandbox (which limits what a command can reach once it runs).
//
// A rule is an action and a pattern matched as a prefix of a simple
// command's argument vector, after shell quote removal. Input is parsed
// with a real shell parser (mvdan.cc/sh), and every simple command in it
// is decided: through ";", "&&", "||", pipes, subshells, command and
// process substitution, "bash -c STRING" (parsed in turn), and wrappers
// such as env, sudo, nohup, timeout, xargs and find -exec. For each simple
// command a matching deny wins, then ask, then allow, else the default;
// the whole input gets the most severe decision of its commands. What
// cannot be known statically (a command name that is an expansion, eval,
// functions and aliases defined in the input, $IFS, input that does not
// parse) is ask.
//
// Pattern language, one pattern per argument: "*" matches any run of
// characters, "?" any one character, "[abc]", "[a-z]", "[!abc]" one
// character of (or not of) a set ("\*", "\?" and "\[" match themselves,
// "\\" a backslash); a pattern that is exactly "**" matches any number of
// arguments, none included. A rule matches when its patterns match the
// first arguments of the command (a prefix: [git, push] matches
// "git push --force origin"). A first pattern without "/" is matched
// against the command name's basename, so [git] matches /usr/bin/git.
package approve

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Action is what a rule or a decision says: Allow, Ask or Deny, in
// increasing severity.
type Action int

// The actions, least severe first.
const (
	Allow Action = iota
	Ask
	Deny
)

// String returns "allow", "ask" or "deny".
func (a Action) String() string {
	switch a {
	case Allow:
		return "allow"
	case Ask:
		return "ask"
	case Deny:
		return "deny"
	}
	return "action(" + strconv.Itoa(int(a)) + ")"
}

// ParseAction reads "allow", "ask" or "deny".
func ParseAction(s string) (Action, error) {
	switch s {
	case "allow":
		return Allow, nil
	case "ask":
		return Ask, nil
	case "deny":
		return Deny, nil
	}
	return 0, fmt.Errorf("unknown action %q: want allow, ask or deny", s)
}

// Rule is one command rule.
type Rule struct {
	Action Action
	// Pattern is the argument patterns, matched as a prefix.
	Pattern []string
	// Source says where the rule comes from: "FILE:LINE" for a rule of a
	// file, "default rules" or "preset NAME" for shipped ones.
	Source string
}

// String prints the rule as a file would hold it: `deny: [rm, "**", /]`.
func (r Rule) String() string {
	parts := make([]string, len(r.Pattern))
	for i, p := range r.Pattern {
		parts[i] = quotePattern(p)
	}
	return r.Action.String() + ": [" + strings.Join(parts, ", ") + "]"
}

// quotePattern quotes a pattern for YAML's flow style when it needs it.
func quotePattern(p string) string {
	if p == "" || strings.ContainsAny(p, "*?[]{},:#&!|>'\"%@`\\ \t") || strings.HasPrefix(p, "-") || strings.HasPrefix(p, "~") {
		return strconv.Quote(p)
	}
	return p
}

// Limits of a rule's pattern.
const (
	maxPatternArgs = 64
	maxPatternLen  = 1024
	maxStars       = 2
)

// CheckPattern reports what is wrong with a rule's pattern, if anything.
func CheckPattern(pattern []string) error {
	if len(pattern) == 0 {
		return errors.New("a rule needs at least one argument pattern")
	}
	if len(pattern) > maxPatternArgs {
		return fmt.Errorf("a rule has at most %d argument patterns, this one %d", maxPatternArgs, len(pattern))
	}
	if pattern[0] == "**" {
		return errors.New(`the first argument pattern (the command name) cannot be "**"`)
	}
	stars := 0
	for i, p := range pattern {
		if p == "**" {
			stars++
		}
		if p == "" {
			return fmt.Errorf("argument pattern %d is empty", i)
		}
		if len(p) > maxPatternLen {
			return fmt.Errorf("argument pattern %d is longer than %d bytes", i, maxPatternLen)
		}
		if strings.HasSuffix(p, `\`) && !strings.HasSuffix(p, `\\`) {
			return fmt.Errorf("argument pattern %d (%q) ends in a lone backslash", i, p)
		}
		if p != "**" && strings.Contains(p, "**") && !strings.Contains(p, `\*`) {
			return fmt.Errorf(`argument pattern %d (%q): "**" is a whole pattern of its own (any number of arguments); "*" matches within one`, i, p)
		}
	}
	if stars > maxStars {
		return fmt.Errorf(`a rule has at most %d "**" patterns, this one %d`, maxStars, stars)
	}
	return nil
}

// glob matches s against one argument pattern: "*" any run, "?" any one
// byte, "[abc]", "[a-z]" and "[!abc]" one byte of (or not of) a set,
// backslash escapes the next byte.
func glob(p, s string) bool {
	// Iterative matching with one backtrack point for the last "*".
	var pi, si int
	star, match := -1, 0
	for si < len(s) {
		if pi < len(p) {
			switch c := p[pi]; c {
			case '*':
				star, match = pi, si
				pi++
				continue
			case '?':
				pi++
				si++
				continue
			case '[':
				if ok, n := class(p[pi:], s[si]); n > 0 {
					if ok {
						pi += n
						si++
						continue
					}
					break
				}
				if s[si] == '[' {
					pi++
					si++
					continue
				}
			case '\\':
				if pi+1 < len(p) && p[pi+1] == s[si] {
					pi += 2
					si++
					continue
				}
			default:
				if c == s[si] {
					pi++
					si++
					continue
				}
			}
		}
		if star < 0 {
			return false
		}
		pi = star + 1
		match++
		si = match
	}
	for pi < len(p) && p[pi] == '*' {
		pi++
	}
	return pi == len(p)
}

// class matches b against the bracket expression at the start of p and
// returns the expression's length, 0 when p holds no closed one.
func class(p string, b byte) (bool, int) {
	i := 1
	negate := i < len(p) && (p[i] == '!' || p[i] == '^')
	if negate {
		i++
	}
	in := false
	for first := true; i < len(p); first = false {
		c := p[i]
		if c == ']' && !first {
			return in != negate, i + 1
		}
		if c == '\\' && i+1 < len(p) {
			i++
			c = p[i]
		}
		if i+2 < len(p) && p[i+1] == '-' && p[i+2] != ']' {
			if c <= b && b <= p[i+2] {
				in = true
			}
			i += 3
			continue
		}
		if c == b {
			in = true
		}
		i++
	}
	return false, 0
}

// literal reports whether a pattern has no wildcard, and its text.
func literal(p string) (string, bool) {
	if !strings.ContainsAny(p, `*?[\`) {
		return p, true
	}
	return "", false
}
