package gitmeta

import (
	"bytes"
	"fmt"
	"strings"
)

// MaxConfigSize bounds the configuration files Parse reads: a file a
// sandbox may have written is untrusted (S7).
const MaxConfigSize = 1 << 20

// Var is one variable of a git configuration file.
type Var struct {
	Section    string // lower case, e.g. "core"
	Subsection string // as written (case matters), e.g. the "origin" of remote "origin"
	Name       string // lower case, e.g. "hookspath"
	Value      string // unquoted and unescaped; "" for a variable without "="
	NoValue    bool   // written without "=" (a boolean true)
	Line       int    // 1-based line of the variable's name
}

// Key is the variable's full name as git prints it: section, subsection
// and name joined by dots ("remote.origin.url").
func (v Var) Key() string {
	if v.Subsection != "" {
		return v.Section + "." + v.Subsection + "." + v.Name
	}
	return v.Section + "." + v.Name
}

// Parse reads a git configuration file the way git does: sections
// ("[core]", `[remote "origin"]`, the older "[branch.main]"), variables
// ("name = value", or a bare "name" for true), double quotes, the escapes
// \n \t \b \" \\, a backslash that continues a value on the next line, and
// comments from "#" or ";" outside quotes. A file git would refuse (a
// malformed line, a variable before any section, a file over
// MaxConfigSize) is an error naming the line; git runs nothing from such a
// file, but a caller that needs to trust a file should treat it as unsafe.
func Parse(data []byte) ([]Var, error) {
	if len(data) > MaxConfigSize {
		return nil, fmt.Errorf("git config: %d bytes, more than %d", len(data), MaxConfigSize)
	}
	p := parser{data: bytes.TrimPrefix(data, []byte("\xef\xbb\xbf")), line: 1}
	var out []Var
	section, sub := "", ""
	for {
		p.skipSpace()
		c, ok := p.peek()
		if !ok {
			return out, nil
		}
		switch {
		case c == '\n':
			p.next()
		case c == '#' || c == ';':
			p.skipLine()
		case c == '[':
			var err error
			if section, sub, err = p.header(); err != nil {
				return nil, err
			}
		case isAlpha(c):
			if section == "" {
				return nil, p.errorf("variable outside a section")
			}
			v, err := p.variable()
			if err != nil {
				return nil, err
			}
			v.Section, v.Subsection = section, sub
			out = append(out, v)
		default:
			return nil, p.errorf("unexpected %q", c)
		}
	}
}

type parser struct {
	data []byte
	pos  int
	line int
}

func (p *parser) peek() (byte, bool) {
	if p.pos >= len(p.data) {
		return 0, false
	}
	return p.data[p.pos], true
}

func (p *parser) next() byte {
	c := p.data[p.pos]
	p.pos++
	if c == '\n' {
		p.line++
	}
	return c
}

func (p *parser) skipSpace() {
	for p.pos < len(p.data) && (p.data[p.pos] == ' ' || p.data[p.pos] == '\t' || p.data[p.pos] == '\r') {
		p.pos++
	}
}

func (p *parser) skipLine() {
	for p.pos < len(p.data) && p.data[p.pos] != '\n' {
		p.pos++
	}
}

func (p *parser) errorf(format string, args ...any) error {
	return fmt.Errorf("git config line %d: %s", p.line, fmt.Sprintf(format, args...))
}

// header reads "[section]", `[section "subsection"]` or "[section.sub]",
// and what follows it on the line (a comment, or a variable, which git
// allows after a header).
func (p *parser) header() (section, sub string, err error) {
	p.next() // [
	start := p.pos
	for {
		c, ok := p.peek()
		if !ok || c == '\n' {
			return "", "", p.errorf("unterminated section header")
		}
		if c == ']' || c == ' ' || c == '\t' {
			break
		}
		if !isAlnum(c) && c != '-' && c != '.' {
			return "", "", p.errorf("bad character %q in a section name", c)
		}
		p.next()
	}
	name := string(p.data[start:p.pos])
	if name == "" {
		return "", "", p.errorf("empty section name")
	}
	p.skipSpace()
	if c, _ := p.peek(); c == '"' {
		if strings.Contains(name, ".") {
			return "", "", p.errorf("a section name with a dot and a subsection")
		}
		p.next()
		var b strings.Builder
		for {
			c, ok := p.peek()
			if !ok || c == '\n' {
				return "", "", p.errorf("unterminated subsection")
			}
			p.next()
			if c == '"' {
				break
			}
			if c == '\\' {
				e, ok := p.peek()
				if !ok || e == '\n' {
					return "", "", p.errorf("unterminated subsection")
				}
				c = p.next()
			}
			b.WriteByte(c)
		}
		sub = b.String()
		p.skipSpace()
	} else if sec, rest, ok := strings.Cut(name, "."); ok {
		// The older form: the subsection is lower-cased like the name.
		name, sub = sec, strings.ToLower(rest)
	}
	if c, _ := p.peek(); c != ']' {
		return "", "", p.errorf("malformed section header")
	}
	p.next()
	return strings.ToLower(name), sub, nil
}

// variable reads "name", "name = value" up to the end of the value's last
// line.
func (p *parser) variable() (Var, error) {
	v := Var{Line: p.line}
	start := p.pos
	for {
		c, ok := p.peek()
		if !ok || !(isAlnum(c) || c == '-') {
			break
		}
		p.next()
	}
	v.Name = strings.ToLower(string(p.data[start:p.pos]))
	p.skipSpace()
	c, ok := p.peek()
	switch {
	case !ok || c == '\n':
		v.NoValue = true
		return v, nil
	case c == '#' || c == ';':
		v.NoValue = true
		p.skipLine()
		return v, nil
	case c != '=':
		return Var{}, p.errorf("bad character %q after the name %q", c, v.Name)
	}
	p.next() // =
	p.skipSpace()
	var b strings.Builder
	quoted := false
	space := 0 // unquoted spaces seen but not yet written (trailing ones are dropped)
	for {
		c, ok := p.peek()
		if !ok || (c == '\n' && !quoted) {
			break
		}
		if c == '\n' {
			return Var{}, p.errorf("newline inside quotes")
		}
		p.next()
		if !quoted && (c == '#' || c == ';') {
			p.skipLine()
			break
		}
		if !quoted && (c == ' ' || c == '\t' || c == '\r') {
			space++
			continue
		}
		if space > 0 {
			b.WriteString(strings.Repeat(" ", space))
			space = 0
		}
		switch c {
		case '"':
			quoted = !quoted
		case '\\':
			e, ok := p.peek()
			if !ok {
				return Var{}, p.errorf("backslash at the end of the file")
			}
			p.next()
			switch e {
			case '\n':
				// A continued line.
			case 'n':
				b.WriteByte('\n')
			case 't':
				b.WriteByte('\t')
			case 'b':
				b.WriteByte('\b')
			case '\\', '"':
				b.WriteByte(e)
			default:
				return Var{}, p.errorf("bad escape \\%c", e)
			}
		default:
			b.WriteByte(c)
		}
	}
	if quoted {
		return Var{}, p.errorf("unterminated quote")
	}
	v.Value = b.String()
	return v, nil
}

func isAlpha(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
func isAlnum(c byte) bool { return isAlpha(c) || c >= '0' && c <= '9' }

// ParseGitFile reads a gitlink, the file a linked worktree or a submodule
// has in place of a .git directory: "gitdir: PATH". It returns PATH as
// written (relative paths are relative to the file's directory).
func ParseGitFile(data []byte) (string, error) {
	if len(data) > 64<<10 {
		return "", fmt.Errorf("gitlink: %d bytes, too large", len(data))
	}
	line, _, _ := bytes.Cut(data, []byte("\n"))
	dir, ok := bytes.CutPrefix(bytes.TrimRight(line, "\r"), []byte("gitdir: "))
	if !ok || len(dir) == 0 {
		return "", fmt.Errorf("gitlink: not a \"gitdir: PATH\" line")
	}
	return string(dir), nil
}
