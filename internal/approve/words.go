package approve

import (
	"strconv"
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// evalWord removes quotes from a word, as the shell would, and marks it
// dynamic when it holds an expansion (parameter, command, arithmetic,
// process substitution, brace expansion, extended globs) or a glob in
// the command name's place would change it.
func evalWord(wd *syntax.Word, src string) word {
	out := word{src: src[wd.Pos().Offset():wd.End().Offset()]}
	var b strings.Builder
	for _, p := range wd.Parts {
		switch p := p.(type) {
		case *syntax.Lit:
			v := p.Value
			if strings.Contains(v, "{") && (strings.Contains(v, ",") || strings.Contains(v, "..")) {
				out.dyn = true // brace expansion: {rm,-rf,/}
			}
			if hasGlob(v) {
				out.glob = true
			}
			b.WriteString(unescape(v, false))
		case *syntax.SglQuoted:
			if p.Dollar {
				v, ok := ansiC(p.Value)
				if !ok {
					out.dyn = true
				}
				b.WriteString(v)
			} else {
				b.WriteString(p.Value)
			}
		case *syntax.DblQuoted:
			if p.Dollar {
				out.dyn = true // $"…": translated
			}
			for _, q := range p.Parts {
				if l, ok := q.(*syntax.Lit); ok {
					b.WriteString(unescape(l.Value, true))
				} else {
					out.dyn = true
				}
			}
		default:
			out.dyn = true
		}
	}
	out.text = b.String()
	return out
}

// hasGlob reports whether unquoted text holds an unescaped * or ?, or a
// [ closed later.
func hasGlob(s string) bool {
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '*', '?':
			return true
		case '[':
			if strings.IndexByte(s[i+1:], ']') >= 0 {
				return true
			}
		}
	}
	return false
}

// unescape removes backslashes: outside quotes each escapes the next
// byte; inside double quotes only before $ ` " \ and newline. A
// backslash-newline is removed.
func unescape(s string, dq bool) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' || i+1 == len(s) {
			b.WriteByte(c)
			continue
		}
		n := s[i+1]
		if dq && !strings.ContainsRune("$`\"\\\n", rune(n)) {
			b.WriteByte(c)
			continue
		}
		i++
		if n != '\n' {
			b.WriteByte(n)
		}
	}
	return b.String()
}

// ansiC decodes the inside of $'…'; false for escapes it does not know.
func ansiC(s string) (string, bool) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' || i+1 == len(s) {
			b.WriteByte(c)
			continue
		}
		i++
		switch n := s[i]; n {
		case 'a':
			b.WriteByte('\a')
		case 'b':
			b.WriteByte('\b')
		case 'e', 'E':
			b.WriteByte(0x1b)
		case 'f':
			b.WriteByte('\f')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		case 'v':
			b.WriteByte('\v')
		case '\\', '\'', '"', '?':
			b.WriteByte(n)
		case 'x':
			j := i + 1
			for j < len(s) && j < i+3 && isHex(s[j]) {
				j++
			}
			if j == i+1 {
				return b.String(), false
			}
			v, _ := strconv.ParseUint(s[i+1:j], 16, 8)
			b.WriteByte(byte(v))
			i = j - 1
		case '0', '1', '2', '3', '4', '5', '6', '7':
			j := i
			for j < len(s) && j < i+3 && s[j] >= '0' && s[j] <= '7' {
				j++
			}
			v, _ := strconv.ParseUint(s[i:j], 8, 16)
			b.WriteByte(byte(v))
			i = j - 1
		default:
			return b.String(), false // \u, \c…: not decoded
		}
	}
	return b.String(), true
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// skipOptions skips the options at the start of args: short options in
// valueShort take a value (attached or the next word), long options in
// valueLong take the next word unless written --opt=value. It returns the
// words after the options; false when an option is not known before the
// command runs.
func skipOptions(args []word, valueShort string, valueLong []string) ([]word, bool) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a.dyn {
			return nil, false
		}
		t := a.text
		switch {
		case t == "--":
			return args[i+1:], true
		case !strings.HasPrefix(t, "-") || t == "-":
			return args[i:], true
		case strings.HasPrefix(t, "--"):
			if !strings.Contains(t, "=") {
				for _, l := range valueLong {
					if t == l {
						i++
						break
					}
				}
			}
		default:
			for j := 1; j < len(t); j++ {
				if strings.IndexByte(valueShort, t[j]) >= 0 {
					if j == len(t)-1 {
						i++
					}
					break
				}
			}
		}
	}
	return nil, true
}

// unwrap returns the command a wrapper runs: "sudo -u x rm" gives "rm".
// For a command that is not a wrapper it returns nil, false. For a
// wrapper whose inner command cannot be known it returns a non-nil empty
// slice and false; for one without an inner command, an empty slice and
// true.
func unwrap(argv []word) ([]word, bool) {
	var rest []word
	var ok bool
	switch lookName(argv[0].text) {
	case "sudo":
		rest, ok = skipOptions(argv[1:], "ugCDhprtUTR", []string{"--user", "--group", "--close-from", "--chdir", "--host", "--prompt", "--role", "--type", "--other-user", "--command-timeout", "--chroot"})
	case "doas":
		rest, ok = skipOptions(argv[1:], "uC", nil)
	case "env":
		for _, a := range argv[1:] {
			if !a.dyn && (a.text == "-S" || strings.HasPrefix(a.text, "--split-string") || (strings.HasPrefix(a.text, "-") && !strings.HasPrefix(a.text, "--") && strings.Contains(a.text, "S"))) {
				return []word{}, false
			}
		}
		rest, ok = skipOptions(argv[1:], "uCS", []string{"--unset", "--chdir"})
		for ok && len(rest) > 0 && !rest[0].dyn && strings.Contains(rest[0].text, "=") {
			name, _, _ := strings.Cut(rest[0].text, "=")
			if riskyVar(name) {
				return []word{}, false
			}
			rest = rest[1:]
		}
		if ok && len(rest) > 0 && rest[0].dyn {
			ok = false
		}
	case "nohup", "builtin", "setsid":
		rest, ok = skipOptions(argv[1:], "", nil)
	case "time":
		rest, ok = skipOptions(argv[1:], "f", []string{"--format", "--output"})
	case "nice":
		rest, ok = skipOptions(argv[1:], "n", []string{"--adjustment"})
	case "ionice":
		rest, ok = skipOptions(argv[1:], "cnp", []string{"--class", "--classdata", "--pid"})
	case "stdbuf":
		rest, ok = skipOptions(argv[1:], "ioe", []string{"--input", "--output", "--error"})
	case "timeout":
		rest, ok = skipOptions(argv[1:], "sk", []string{"--signal", "--kill-after"})
		if ok && len(rest) > 0 {
			rest = rest[1:] // the duration
		}
	case "chroot":
		rest, ok = skipOptions(argv[1:], "", []string{"--userspec", "--groups"})
		if ok && len(rest) > 0 {
			rest = rest[1:] // the new root
		}
	case "command":
		for _, a := range argv[1:] {
			if a.text == "-v" || a.text == "-V" {
				return []word{}, true // a lookup: runs nothing
			}
		}
		rest, ok = skipOptions(argv[1:], "", nil)
	case "exec":
		rest, ok = skipOptions(argv[1:], "a", nil)
	case "xargs":
		rest, ok = skipOptions(argv[1:], "adEILnPs", []string{"--arg-file", "--delimiter", "--max-lines", "--max-args", "--max-procs", "--max-chars", "--process-slot-var"})
		if ok && len(rest) == 0 {
			rest = []word{{text: "echo", src: "echo"}}
		}
		if ok {
			rest = append(append([]word(nil), rest...), word{dyn: true, src: "…"})
		}
	default:
		return nil, false
	}
	if !ok {
		return []word{}, false
	}
	if rest == nil {
		rest = []word{}
	}
	return rest, true
}

// lookName is the basename of a static command name.
func lookName(s string) string {
	if i := strings.LastIndexByte(s, '/'); i >= 0 {
		return s[i+1:]
	}
	return s
}
