package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"unicode/utf8"

	"gopkg.in/yaml.v3"
)

// maxFileSize bounds the size of a policy or srt settings file.
const maxFileSize = 1 << 20

// maxDepth bounds the nesting of a JSON document; no policy nests deeper
// than a handful of levels.
const maxDepth = 64

// readFile reads a policy file, refusing directories and oversized files.
func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read policy %q: %w", path, unwrapPath(err))
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.IsDir() {
		return nil, fmt.Errorf("read policy %q: is a directory", path)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("read policy %q: %w", path, unwrapPath(err))
	}
	if len(data) > maxFileSize {
		return nil, fmt.Errorf("read policy %q: larger than %s", path, FormatSize(maxFileSize))
	}
	return data, nil
}

// unwrapPath drops the *fs.PathError wrapper, whose message repeats the path.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// parseDocument parses data, YAML or JSON, into a node tree. It returns nil
// for a document that is empty, only comments, or null. JSON is read by a
// JSON parser when the file is named *.json or its content is valid JSON
// (YAML is not quite a superset of JSON: it refuses the "\/" escape).
func parseDocument(name string, data []byte) (*yaml.Node, error) {
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf")) // a UTF-8 byte order mark
	if !utf8.Valid(data) {
		off := 0
		for off < len(data) {
			r, size := utf8.DecodeRune(data[off:])
			if r == utf8.RuneError && size <= 1 {
				break
			}
			off += size
		}
		line, col := position(data, off)
		return nil, &Error{File: name, Line: line, Column: col, Msg: "file is not valid UTF-8"}
	}
	trimmed := bytes.TrimSpace(data)
	if strings.EqualFold(filepath.Ext(name), ".json") ||
		(len(trimmed) > 0 && (trimmed[0] == '{' || trimmed[0] == '[') && json.Valid(trimmed)) {
		if len(trimmed) == 0 {
			return nil, nil
		}
		return parseJSON(name, data)
	}
	return parseYAML(name, data)
}

// parseYAML parses a single-document YAML file.
func parseYAML(name string, data []byte) (*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		return nil, yamlSyntaxError(name, data, err)
	}
	var next yaml.Node
	switch err := dec.Decode(&next); {
	case err == nil:
		return nil, &Error{File: name, Line: next.Line, Column: next.Column,
			Msg: "a policy file holds one YAML document, found a second one"}
	case !errors.Is(err, io.EOF):
		return nil, yamlSyntaxError(name, data, err)
	}
	if len(doc.Content) == 0 {
		return nil, nil
	}
	root := doc.Content[0]
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return nil, nil
	}
	return root, nil
}

// splitYAMLError splits an error message of the YAML parser, "yaml: line
// N: MSG" or "yaml: MSG" on one line, into N ("" when absent) and MSG. (No
// regular expression: compiling one at package initialization cost every
// start of hutch.)
func splitYAMLError(s string) (line, msg string, ok bool) {
	rest, ok := strings.CutPrefix(s, "yaml: ")
	if !ok || strings.Contains(s, "\n") {
		return "", "", false
	}
	if r, ok := strings.CutPrefix(rest, "line "); ok {
		n := len(r) - len(strings.TrimLeft(r, "0123456789"))
		if after, ok := strings.CutPrefix(r[n:], ": "); ok && n > 0 {
			return r[:n], after, true
		}
	}
	return "", rest, true
}

// unknownAnchor returns the name in the parser's "unknown anchor 'NAME'
// referenced".
func unknownAnchor(msg string) (string, bool) {
	rest, ok := strings.CutPrefix(msg, "unknown anchor '")
	if !ok {
		return "", false
	}
	return strings.CutSuffix(rest, "' referenced")
}

// yamlSyntaxError turns an error of the YAML parser into an *Error. The
// parser reports only a line, and counts it differently for scanner and
// parser errors; this recovers the 1-based line and points at the first
// non-blank character on it.
func yamlSyntaxError(name string, data []byte, err error) error {
	n, msg, ok := splitYAMLError(err.Error())
	if !ok {
		return &Error{File: name, Line: 1, Column: 1, Msg: "syntax error: " + err.Error()}
	}
	line, _ := strconv.Atoi(n)
	if isYAMLParserError(msg) {
		line++ // parser errors report the 0-based line of their mark
	} else if line == 0 {
		line = 1 // scanner errors on the first line report no line at all
	}
	if anchor, ok := unknownAnchor(msg); ok {
		if i := bytes.Index(data, []byte("*"+anchor)); i >= 0 {
			l, c := position(data, i)
			return &Error{File: name, Line: l, Column: c, Msg: fmt.Sprintf("unknown anchor %q", anchor)}
		}
	}
	lines := bytes.Split(data, []byte("\n"))
	line = min(line, len(lines))
	text := lines[line-1]
	indent := text[:len(text)-len(bytes.TrimLeft(text, " \t"))]
	if bytes.ContainsRune(indent, '\t') {
		msg += " (indent with spaces, not tabs)"
	}
	col := utf8.RuneCount(indent) + 1
	return &Error{File: name, Line: line, Column: col, Msg: "syntax error: " + msg}
}

// isYAMLParserError reports whether msg comes from the YAML parser (as
// opposed to its scanner), whose line numbers are 0-based.
func isYAMLParserError(msg string) bool {
	for _, p := range []string{"did not find expected", "found duplicate %", "found incompatible YAML", "found undefined tag handle"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

// position converts a byte offset in data into a 1-based line and column,
// counting columns in characters as the YAML parser does.
func position(data []byte, off int) (line, col int) {
	off = min(max(off, 0), len(data))
	before := data[:off]
	line = bytes.Count(before, []byte("\n")) + 1
	start := bytes.LastIndexByte(before, '\n') + 1
	return line, utf8.RuneCount(before[start:]) + 1
}

// jsonParser builds a yaml.Node tree from JSON so that JSON and YAML files
// share one decoder and every node has a line and column.
type jsonParser struct {
	name string
	data []byte
	dec  *json.Decoder
}

func parseJSON(name string, data []byte) (*yaml.Node, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	p := &jsonParser{name: name, data: data, dec: dec}
	root, err := p.value(0)
	if err != nil {
		return nil, err
	}
	if _, off, err := p.next(); !errors.Is(err, io.EOF) {
		line, col := position(data, off)
		return nil, &Error{File: name, Line: line, Column: col, Msg: "syntax error: unexpected data after the top-level value"}
	}
	if root.Tag == "!!null" {
		return nil, nil
	}
	return root, nil
}

// next returns the next token and the byte offset where it starts.
func (p *jsonParser) next() (json.Token, int, error) {
	off := int(p.dec.InputOffset())
	tok, err := p.dec.Token()
	for off < len(p.data) && strings.IndexByte(" \t\r\n,:", p.data[off]) >= 0 {
		off++
	}
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, off, p.syntaxError(err)
	}
	return tok, off, err
}

func (p *jsonParser) syntaxError(err error) error {
	off := len(p.data)
	msg := err.Error()
	var se *json.SyntaxError
	if errors.As(err, &se) {
		// The offset is sometimes that of the bad character, sometimes the
		// one after or before it; the message names the character.
		off = int(se.Offset) - 1
		for _, o := range []int{int(se.Offset), int(se.Offset) - 1, int(se.Offset) + 1} {
			if o >= 0 && o < len(p.data) && strings.Contains(msg, "'"+string(p.data[o])+"'") {
				off = o
				break
			}
		}
	}
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		msg = "unexpected end of file"
	}
	line, col := position(p.data, off)
	return &Error{File: p.name, Line: line, Column: col, Msg: "syntax error: " + msg}
}

func (p *jsonParser) value(depth int) (*yaml.Node, error) {
	tok, off, err := p.next()
	if errors.Is(err, io.EOF) {
		err = p.syntaxError(io.ErrUnexpectedEOF)
	}
	if err != nil {
		return nil, err
	}
	line, col := position(p.data, off)
	n := &yaml.Node{Line: line, Column: col}
	if depth > maxDepth {
		return nil, &Error{File: p.name, Line: line, Column: col, Msg: "syntax error: nested too deeply"}
	}
	switch t := tok.(type) {
	case json.Delim:
		n.Kind, n.Tag = yaml.SequenceNode, "!!seq"
		if t == '{' {
			n.Kind, n.Tag = yaml.MappingNode, "!!map"
		}
		for p.dec.More() {
			if n.Kind == yaml.MappingNode {
				key, err := p.value(depth + 1) // always a string: the decoder checks
				if err != nil {
					return nil, err
				}
				n.Content = append(n.Content, key)
			}
			v, err := p.value(depth + 1)
			if err != nil {
				return nil, err
			}
			n.Content = append(n.Content, v)
		}
		if _, _, err := p.next(); err != nil { // the closing delimiter
			if errors.Is(err, io.EOF) {
				err = p.syntaxError(io.ErrUnexpectedEOF)
			}
			return nil, err
		}
	case string:
		n.Kind, n.Tag, n.Value = yaml.ScalarNode, "!!str", t
	case json.Number:
		n.Kind, n.Tag, n.Value = yaml.ScalarNode, "!!int", string(t)
		if strings.ContainsAny(string(t), ".eE") {
			n.Tag = "!!float"
		}
	case bool:
		n.Kind, n.Tag, n.Value = yaml.ScalarNode, "!!bool", strconv.FormatBool(t)
	case nil:
		n.Kind, n.Tag, n.Value = yaml.ScalarNode, "!!null", "null"
	}
	return n, nil
}
