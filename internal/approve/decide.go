package approve

import (
	"fmt"
	"path"
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// Bounds on what Decide looks at; beyond them the input is ask.
const (
	// MaxInput is the longest command line Decide parses.
	MaxInput = 64 << 10
	// MaxDepth bounds nested shells ("bash -c 'sh -c …'").
	MaxDepth = 8
	// MaxCommands bounds the simple commands of one input.
	MaxCommands = 4096
	// MaxArgs bounds the arguments of one simple command.
	MaxArgs = 512
)

// Set is a compiled list of rules and the default for commands none
// matches. A Set is safe for concurrent use.
type Set struct {
	def   Action
	rules []Rule
	root  *trie // rules by the literal patterns they start with
	other []int // rules whose command name pattern has a wildcard
	// approved are simple commands (as Decision.Command shows them) a
	// person allowed for always: Allow where a rule says Ask.
	approved map[string]bool
}

// addApproved adds a command line that must be one simple command
// without expansions to the approved commands.
func (s *Set) addApproved(line string) error {
	probe := &Set{def: Ask, root: &trie{}}
	w := &walker{set: probe}
	w.parse(line, 0)
	if !w.have || w.count != 1 || w.dyn || w.best.Rule != -1 || w.best.Reason != "no rule matches: the default" {
		return fmt.Errorf("%q: an approved entry is one simple command with no expansions", line)
	}
	if s.approved == nil {
		s.approved = map[string]bool{}
	}
	s.approved[w.best.Command] = true
	return nil
}

// trie indexes rules by their leading literal patterns; a rule sits at
// the node its literal prefix leads to.
type trie struct {
	kids map[string]*trie
	here []int
}

func (t *trie) kid(name string) *trie {
	if t.kids == nil {
		t.kids = map[string]*trie{}
	}
	k := t.kids[name]
	if k == nil {
		k = &trie{}
		t.kids[name] = k
	}
	return k
}

// NewSet compiles rules, in order, with def for commands no rule matches.
func NewSet(def Action, rules []Rule) (*Set, error) {
	s := &Set{def: def, rules: rules, root: &trie{}}
	for i, r := range rules {
		if err := CheckPattern(r.Pattern); err != nil {
			return nil, fmt.Errorf("rule %d (%s): %w", i, r, err)
		}
		if _, ok := literal(r.Pattern[0]); !ok {
			s.other = append(s.other, i)
			continue
		}
		n := s.root
		for _, p := range r.Pattern {
			lit, ok := literal(p)
			if !ok {
				break
			}
			n = n.kid(lit)
		}
		n.here = append(n.here, i)
	}
	return s, nil
}

// Default is the action for commands no rule matches.
func (s *Set) Default() Action { return s.def }

// Rules are the set's rules, in order; Decision.Rule indexes them.
func (s *Set) Rules() []Rule { return s.rules }

// Decision is what Decide says about a command line.
type Decision struct {
	Action Action
	// Rule is the index (in Set.Rules) of the rule that decided, -1 when
	// the default did or when the command could not be known.
	Rule int
	// RuleText and Source describe that rule (empty for -1).
	RuleText, Source string
	// Command is the simple command the decision is about, as a shell
	// line ("" for empty input).
	Command string
	// Reason says why, in words.
	Reason string
}

// word is one argument after quote removal; dyn when it holds an
// expansion that cannot be resolved before the command runs.
type word struct {
	text string
	dyn  bool
	glob bool   // holds a pattern the shell expands to file names
	src  string // as written, for messages
}

// Decide decides a shell command line: the most severe decision of its
// simple commands (the first one at that severity), Allow for input
// without any command.
func (s *Set) Decide(line string) Decision { return s.DecideGranted(line, nil) }

// DecideGranted is Decide where a simple command that would be Ask is
// Allow when granted says so of its Decision.Command (a person allowed it
// for this run) or the set's approved commands hold it. Deny stays deny.
func (s *Set) DecideGranted(line string, granted func(command string) bool) Decision {
	w := &walker{set: s, granted: granted}
	if len(line) > MaxInput {
		w.unknown(truncate(line), fmt.Sprintf("the input is longer than %d bytes", MaxInput))
	} else {
		w.parse(line, 0)
	}
	if !w.have {
		return Decision{Action: Allow, Rule: -1, Reason: "no command"}
	}
	return w.best
}

// Decide is s.Decide(line).
func Decide(s *Set, line string) Decision { return s.Decide(line) }

type walker struct {
	set     *Set
	granted func(string) bool
	count   int
	dyn     bool // a word of a simple command is not known before it runs
	best    Decision
	have    bool
}

func (w *walker) consider(d Decision) {
	if d.Action == Ask && d.Command != "" && (w.set.approved[d.Command] || (w.granted != nil && w.granted(d.Command))) {
		d.Action, d.Reason = Allow, "approved by a person ("+d.Reason+")"
	}
	if !w.have || d.Action > w.best.Action {
		w.best, w.have = d, true
	}
}

func (w *walker) unknown(cmd, reason string) {
	w.consider(Decision{Action: Ask, Rule: -1, Command: cmd, Reason: reason})
}

func truncate(s string) string {
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}

// parse decides every simple command of src.
func (w *walker) parse(src string, depth int) {
	if depth > MaxDepth {
		w.unknown(truncate(src), fmt.Sprintf("shells nested deeper than %d", MaxDepth))
		return
	}
	f, err := syntax.NewParser(syntax.Variant(syntax.LangBash)).Parse(strings.NewReader(src), "")
	if err != nil {
		w.unknown(truncate(src), "the input does not parse as a shell command line: "+err.Error())
		return
	}
	syntax.Walk(f, func(n syntax.Node) bool {
		switch n := n.(type) {
		case *syntax.FuncDecl:
			w.unknown(truncate(src[n.Pos().Offset():n.End().Offset()]), "it defines a function, whose commands run under a name no rule knows")
		case *syntax.ParamExp:
			if n.Param != nil && n.Param.Value == "IFS" {
				w.unknown("$IFS", "it expands $IFS, which changes how words split")
			}
		case *syntax.Assign:
			if n.Name != nil && riskyVar(n.Name.Value) {
				w.unknown(n.Name.Value+"=…", "it sets "+n.Name.Value+", which changes what later commands run")
			}
		case *syntax.BinaryCmd:
			if n.Op == syntax.Pipe || n.Op == syntax.PipeAll {
				w.pipe(n, src)
			}
		case *syntax.Stmt:
			w.stmt(n, src, depth)
		}
		return true
	})
}

// riskyVar names variables whose assignment changes which program a
// later command name runs or what a shell does at start.
func riskyVar(name string) bool {
	switch name {
	case "PATH", "IFS", "LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "BASH_ENV", "ENV", "PROMPT_COMMAND", "SHELLOPTS", "BASHOPTS", "CDPATH":
		return true
	}
	return strings.HasPrefix(name, "BASH_FUNC_")
}

// stmt decides a statement's output redirections and its simple command.
func (w *walker) stmt(st *syntax.Stmt, src string, depth int) {
	for _, r := range st.Redirs {
		switch r.Op {
		case syntax.RdrOut, syntax.AppOut, syntax.RdrAll, syntax.AppAll, syntax.RdrClob, syntax.RdrInOut, syntax.RdrAllClob, syntax.AppAllClob, syntax.DplOut:
			t := evalWord(r.Word, src)
			if t.dyn || (r.Op == syntax.DplOut && (t.text == "-" || isDigits(t.text))) {
				continue
			}
			w.explicit([]word{{text: ">", src: ">"}, t})
		}
	}
	call, ok := st.Cmd.(*syntax.CallExpr)
	if !ok || len(call.Args) == 0 {
		return
	}
	argv := make([]word, len(call.Args))
	for i, a := range call.Args {
		argv[i] = evalWord(a, src)
	}
	w.simple(argv, depth)
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// pipe decides the pseudo-command "| LEFT TARGET" for each command name
// on the left of a pipe into an interpreter: [|, curl, sh].
func (w *walker) pipe(b *syntax.BinaryCmd, src string) {
	y := b.Y
	for {
		if inner, ok := y.Cmd.(*syntax.BinaryCmd); ok && (inner.Op == syntax.Pipe || inner.Op == syntax.PipeAll) {
			y = inner.X
			continue
		}
		break
	}
	call, ok := y.Cmd.(*syntax.CallExpr)
	if !ok || len(call.Args) == 0 {
		return
	}
	argv := make([]word, len(call.Args))
	for i, a := range call.Args {
		argv[i] = evalWord(a, src)
	}
	argv = unwrapAll(argv)
	if len(argv) == 0 || argv[0].dyn {
		return
	}
	target := path.Base(argv[0].text)
	syntax.Walk(b.X, func(n syntax.Node) bool {
		if c, ok := n.(*syntax.CallExpr); ok && len(c.Args) > 0 {
			left := make([]word, len(c.Args))
			for i, a := range c.Args {
				left[i] = evalWord(a, src)
			}
			left = unwrapAll(left)
			if len(left) > 0 && !left[0].dyn {
				w.explicit([]word{{text: "|", src: "|"}, {text: path.Base(left[0].text), src: left[0].src}, {text: target, src: argv[0].src}})
			}
		}
		return true
	})
}

// unwrapAll strips wrappers (sudo, env, …) off argv, as far as it can.
func unwrapAll(argv []word) []word {
	for range MaxDepth {
		if len(argv) == 0 || argv[0].dyn {
			return argv
		}
		inner, ok := unwrap(argv)
		if !ok || len(inner) == 0 {
			return argv
		}
		argv = inner
	}
	return argv
}

// simple decides one simple command.
func (w *walker) simple(argv []word, depth int) {
	w.count++
	for _, a := range argv {
		w.dyn = w.dyn || a.dyn || a.glob
	}
	if w.count > MaxCommands {
		if w.count == MaxCommands+1 {
			w.unknown(show(argv), fmt.Sprintf("more than %d commands", MaxCommands))
		}
		return
	}
	if argv[0].dyn || argv[0].glob {
		w.unknown(show(argv), "the command name ("+argv[0].src+") is not known before it runs")
		return
	}
	if len(argv) > MaxArgs {
		w.unknown(truncate(show(argv)), fmt.Sprintf("more than %d arguments", MaxArgs))
		return
	}
	name := path.Base(argv[0].text)
	switch name {
	case "eval":
		w.unknown(show(argv), "eval runs a string as commands")
		return
	case "alias", "unalias":
		w.unknown(show(argv), "it defines aliases, which change what names run")
		return
	case "trap":
		if len(argv) >= 3 && !strings.HasPrefix(argv[1].text, "-") {
			w.explicit(argv)
			w.code(argv, argv[1], depth)
			return
		}
	case "sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "fish", "busybox":
		if name == "busybox" {
			if len(argv) < 2 || argv[1].dyn {
				break
			}
			if b := path.Base(argv[1].text); b == "sh" || b == "ash" {
				w.explicit(argv)
				w.simple(argv[1:], depth)
				return
			}
			break
		}
		w.shell(argv, depth)
		return
	case "su":
		for i := 1; i < len(argv); i++ {
			if a := argv[i]; a.text == "-c" || a.text == "--command" {
				w.explicit(argv)
				if i+1 < len(argv) {
					w.code(argv, argv[i+1], depth)
				} else {
					w.unknown(show(argv), "su -c without its command")
				}
				return
			}
		}
	case "watch":
		rest, ok := skipOptions(argv[1:], "ndqg", nil)
		if !ok {
			w.unknown(show(argv), "its options are not known before it runs")
			return
		}
		if len(rest) > 0 {
			w.explicit(argv)
			w.code(argv, joinWords(rest), depth)
			return
		}
	case "find":
		w.find(argv, depth)
		return
	}
	if inner, ok := unwrap(argv); ok || inner != nil {
		if !ok {
			w.unknown(show(argv), "the command "+name+" runs is not known before it runs")
			return
		}
		if len(inner) == 0 {
			w.decide(argv, false)
			return
		}
		w.explicit(argv)
		w.simple(inner, depth)
		return
	}
	w.decide(argv, false)
}

// code parses a string argument that a command runs as shell code.
func (w *walker) code(argv []word, c word, depth int) {
	if c.dyn {
		w.unknown(show(argv), "the shell code it runs ("+c.src+") is not known before it runs")
		return
	}
	w.parse(c.text, depth+1)
}

// joinWords joins words with spaces, as watch and ssh do.
func joinWords(ws []word) word {
	var j word
	for i, x := range ws {
		if i > 0 {
			j.text += " "
			j.src += " "
		}
		j.text += x.text
		j.src += x.src
		j.dyn = j.dyn || x.dyn
	}
	return j
}

// shell decides a shell's invocation: with -c its code is parsed, with a
// script the rules decide, reading its program from stdin is ask.
func (w *walker) shell(argv []word, depth int) {
	hasC := false
	var operands []word
	for i := 1; i < len(argv); i++ {
		a := argv[i]
		if a.dyn {
			w.unknown(show(argv), "its options are not known before it runs")
			return
		}
		if a.text == "--" || a.text == "-" {
			operands = argv[i+1:]
			break
		}
		if (strings.HasPrefix(a.text, "-") || strings.HasPrefix(a.text, "+")) && len(a.text) > 1 {
			if strings.HasPrefix(a.text, "--") {
				if a.text == "--rcfile" || a.text == "--init-file" {
					i++
				}
				continue
			}
			if strings.ContainsRune(a.text[1:], 'c') && a.text[0] == '-' {
				hasC = true
			}
			if strings.ContainsAny(a.text[1:], "oO") {
				i++
			}
			if strings.ContainsRune(a.text[1:], 's') && a.text[0] == '-' {
				operands = nil
				break
			}
			continue
		}
		operands = argv[i:]
		break
	}
	if hasC {
		w.explicit(argv)
		if len(operands) == 0 {
			w.unknown(show(argv), "-c without its command")
			return
		}
		w.code(argv, operands[0], depth)
		return
	}
	if len(operands) == 0 {
		w.explicit(argv)
		w.unknown(show(argv), "a shell reading its commands from standard input (a here-document, a pipe or a terminal)")
		return
	}
	w.decide(argv, false)
}

// find decides find itself and each command of its -exec, -execdir, -ok
// and -okdir ("{}" stands for a path not known before it runs).
func (w *walker) find(argv []word, depth int) {
	w.decide(argv, false)
	for i := 1; i < len(argv); i++ {
		switch argv[i].text {
		case "-exec", "-execdir", "-ok", "-okdir":
		default:
			continue
		}
		var inner []word
		j := i + 1
		for ; j < len(argv); j++ {
			t := argv[j].text
			if !argv[j].dyn && (t == ";" || t == "+") {
				break
			}
			x := argv[j]
			if strings.Contains(x.text, "{}") {
				x.dyn = true
			}
			inner = append(inner, x)
		}
		if len(inner) == 0 {
			w.unknown(show(argv), "find "+argv[i].text+" without its command")
			return
		}
		w.simple(inner, depth)
		i = j
	}
}

// explicit decides a command only if a rule matches it: wrappers (sudo
// in "sudo rm") and pseudo-commands (redirections, pipes) get no default.
func (w *walker) explicit(argv []word) { w.decide(argv, true) }

// decide matches argv against the rules.
func (w *walker) decide(argv []word, explicitOnly bool) {
	s := w.set
	best, bestDyn := -1, false
	var bestAct Action
	try := func(i, depth int, viaDyn bool) {
		r := s.rules[i]
		if viaDyn && r.Action == Allow {
			return
		}
		ok, dyn := matchArgs(r.Pattern[depth:], argv[depth:], r.Action == Allow)
		if !ok {
			return
		}
		dyn = dyn || viaDyn
		act := r.Action
		if dyn && act == Deny {
			act = Ask
		}
		if best < 0 || act > bestAct || (act == bestAct && i < best) {
			best, bestAct, bestDyn = i, act, dyn
		}
	}
	var walk func(n *trie, depth int, viaDyn bool)
	walk = func(n *trie, depth int, viaDyn bool) {
		for _, i := range n.here {
			try(i, depth, viaDyn)
		}
		if depth >= len(argv) || n.kids == nil {
			return
		}
		if a := argv[depth]; a.dyn {
			for _, k := range n.kids {
				walk(k, depth+1, true)
			}
		} else if k := n.kids[a.text]; k != nil {
			walk(k, depth+1, viaDyn)
		}
	}
	if name := argv[0].text; !argv[0].dyn {
		base := path.Base(name)
		if k := s.root.kids[base]; k != nil {
			walk(k, 1, false)
		}
		if k := s.root.kids[name]; k != nil && base != name {
			walk(k, 1, false)
		}
		for _, i := range s.other {
			p0 := s.rules[i].Pattern[0]
			if strings.IndexByte(p0, '/') < 0 {
				if glob(p0, base) {
					try(i, 1, false)
				}
			} else if glob(p0, name) {
				try(i, 1, false)
			}
		}
	}
	cmd := show(argv)
	if best < 0 {
		if explicitOnly {
			return
		}
		w.consider(Decision{Action: s.def, Rule: -1, Command: cmd, Reason: "no rule matches: the default"})
		return
	}
	r := s.rules[best]
	d := Decision{Action: bestAct, Rule: best, RuleText: r.String(), Source: r.Source, Command: cmd, Reason: "rule " + r.String()}
	if bestDyn {
		d.Reason = "it may match rule " + r.String() + " (an argument is not known before it runs)"
	}
	w.consider(d)
}

// matchArgs matches patterns against a prefix of args. A dynamic word
// matches only "*" and "**" in an allow rule, anything in the others
// (reported as dyn). The command name is matched before.
func matchArgs(pat []string, args []word, allowRule bool) (ok, dyn bool) {
	if len(pat) == 0 {
		return true, false
	}
	if pat[0] == "**" {
		found, foundDyn := false, false
		for k := 0; k <= len(args); k++ {
			if ok, d := matchArgs(pat[1:], args[k:], allowRule); ok {
				if !d {
					return true, false
				}
				found, foundDyn = true, true
			}
		}
		return found, foundDyn
	}
	if len(args) == 0 {
		return false, false
	}
	a, d := args[0], false
	switch {
	case a.dyn && pat[0] == "*":
	case a.dyn:
		if allowRule {
			return false, false
		}
		d = true
	default:
		if !glob(pat[0], a.text) {
			return false, false
		}
	}
	ok, d2 := matchArgs(pat[1:], args[1:], allowRule)
	return ok, d || d2
}

// show prints argv as a shell line; a pseudo-command as what it stands
// for: "curl … | sh", "> /dev/sda".
func show(argv []word) string {
	if len(argv) > 0 && !argv[0].dyn {
		switch {
		case argv[0].text == "|" && len(argv) == 3:
			return shellQuote(argv[1].text) + " … | " + shellQuote(argv[2].text)
		case argv[0].text == ">" && len(argv) == 2:
			return "> " + shellQuote(argv[1].text)
		}
	}
	parts := make([]string, len(argv))
	for i, a := range argv {
		if a.dyn {
			parts[i] = a.src
		} else {
			parts[i] = shellQuote(a.text)
		}
	}
	return strings.Join(parts, " ")
}

// Line quotes an argument vector into the shell command line that runs
// it, for deciding a command given as argv (an exec, hutch run's
// command) as Decide decides lines.
func Line(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = shellQuote(a)
	}
	return strings.Join(q, " ")
}

func shellQuote(s string) string {
	if s == "" {
		return "''"
	}
	if !strings.ContainsAny(s, " \t\n'\"\\$`;&|<>()*?[]{}#~!") {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
