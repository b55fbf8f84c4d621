package policy

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// decoder walks a node tree of a policy or srt settings file, reporting
// every problem with the file's name and the node's line and column.
type decoder struct {
	file string
}

// errorf returns an *Error positioned at n.
func (d *decoder) errorf(n *yaml.Node, format string, args ...any) error {
	e := &Error{File: d.file, Msg: fmt.Sprintf(format, args...)}
	if n != nil {
		e.Line, e.Column = n.Line, n.Column
	}
	return e
}

// entry is one key and value of a mapping.
type entry struct {
	key, val *yaml.Node
}

// resolve follows YAML aliases to the node they name.
func resolve(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	return n
}

// isNull reports whether n is absent or an explicit null; null fields count
// as not given.
func isNull(n *yaml.Node) bool {
	n = resolve(n)
	return n == nil || (n.Kind == yaml.ScalarNode && n.Tag == "!!null")
}

// describe names the kind of a node for type errors.
func describe(n *yaml.Node) string {
	n = resolve(n)
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	switch n.Tag {
	case "!!str":
		return fmt.Sprintf("the string %q", n.Value)
	case "!!int", "!!float":
		return "the number " + n.Value
	case "!!bool":
		return "the boolean " + n.Value
	case "!!null":
		return "null"
	}
	return fmt.Sprintf("%s %q", n.Tag, n.Value)
}

// mapping returns the entries of the mapping n in order, after checking
// that every key is a known field and appears once. where names the
// mapping in messages ("filesystem", "network.tlsTerminate"), empty for the
// top level. suggest proposes a correction for an unknown key, or "".
func (d *decoder) mapping(n *yaml.Node, where string, known []string, suggest func(string) string) ([]entry, error) {
	n = resolve(n)
	if isNull(n) {
		return nil, nil
	}
	if n.Kind != yaml.MappingNode {
		if where == "" {
			return nil, d.errorf(n, "expected a mapping of fields at the top level, got %s", describe(n))
		}
		return nil, d.errorf(n, "%s: expected a mapping, got %s", where, describe(n))
	}
	in := "at the top level"
	if where != "" {
		in = "in " + where
	}
	seen := make(map[string]*yaml.Node)
	var out []entry
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := resolve(n.Content[i]), n.Content[i+1]
		if k.Kind != yaml.ScalarNode || k.Tag == "!!merge" {
			if k.Tag == "!!merge" {
				return nil, d.errorf(k, "merge keys (<<) are not supported")
			}
			return nil, d.errorf(k, "field names must be plain strings, got %s", describe(k))
		}
		if prev, dup := seen[k.Value]; dup {
			return nil, d.errorf(k, "duplicate field %q %s (first given at line %d)", k.Value, in, prev.Line)
		}
		seen[k.Value] = k
		if !contains(known, k.Value) {
			msg := fmt.Sprintf("unknown field %q %s", k.Value, in)
			if s := suggest(k.Value); s != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", s)
			}
			return nil, d.errorf(k, "%s", msg)
		}
		out = append(out, entry{key: k, val: resolve(v)})
	}
	return out, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// str decodes a string field.
func (d *decoder) str(n *yaml.Node, field string) (string, error) {
	n = resolve(n)
	if isNull(n) {
		return "", nil
	}
	if n.Kind != yaml.ScalarNode || n.Tag != "!!str" {
		return "", d.errorf(n, "%s: expected a string, got %s", field, describe(n))
	}
	return n.Value, nil
}

// checkedStr decodes a string field and validates it with check, which
// returns the problem without the field name.
func (d *decoder) checkedStr(n *yaml.Node, field string, check func(string) error) (string, error) {
	v, err := d.str(n, field)
	if err != nil {
		return "", err
	}
	if cerr := check(v); cerr != nil {
		return "", d.errorf(n, "%s: %v", field, cerr)
	}
	return v, nil
}

// boolean decodes a boolean field.
func (d *decoder) boolean(n *yaml.Node, field string) (bool, error) {
	n = resolve(n)
	if isNull(n) {
		return false, nil
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!bool" {
		if b, err := strconv.ParseBool(n.Value); err == nil {
			return b, nil
		}
	}
	return false, d.errorf(n, "%s: expected true or false, got %s", field, describe(n))
}

// list decodes a list of non-empty strings; check, if not nil, validates
// each item and returns the problem without the field name.
func (d *decoder) list(n *yaml.Node, field, what string, check func(string) error) ([]string, error) {
	n = resolve(n)
	if isNull(n) {
		return nil, nil
	}
	if n.Kind != yaml.SequenceNode {
		return nil, d.errorf(n, "%s: expected a list of %s, got %s", field, what, describe(n))
	}
	var out []string // nil for an empty list
	for i, item := range n.Content {
		item = resolve(item)
		name := fmt.Sprintf("%s[%d]", field, i)
		if item.Kind != yaml.ScalarNode || item.Tag != "!!str" {
			return nil, d.errorf(item, "%s: expected a string, got %s", name, describe(item))
		}
		if item.Value == "" {
			return nil, d.errorf(item, "%s: must not be empty", name)
		}
		if check != nil {
			if err := check(item.Value); err != nil {
				return nil, d.errorf(item, "%s: %v", name, err)
			}
		}
		out = append(out, item.Value)
	}
	return out, nil
}

// size decodes a size field ("512m", or a plain number of bytes), which
// must be positive.
func (d *decoder) size(n *yaml.Node, field string) (int64, error) {
	n = resolve(n)
	if isNull(n) {
		return 0, nil
	}
	if n.Kind != yaml.ScalarNode || (n.Tag != "!!str" && n.Tag != "!!int" && n.Tag != "!!float") {
		return 0, d.errorf(n, "%s: expected a size like 512m or 2g, got %s", field, describe(n))
	}
	v, err := ParseSize(n.Value)
	if err != nil {
		return 0, d.errorf(n, "%s: %v", field, err)
	}
	if v == 0 {
		return 0, d.errorf(n, "%s: must be positive (omit the field for the default)", field)
	}
	return v, nil
}

// timeout decodes a duration ("30s", "2m") or an integer number of seconds.
func (d *decoder) timeout(n *yaml.Node, field string) (time.Duration, error) {
	n = resolve(n)
	if isNull(n) {
		return 0, nil
	}
	if n.Kind != yaml.ScalarNode || (n.Tag != "!!str" && n.Tag != "!!int") {
		return 0, d.errorf(n, "%s: expected a duration like 30s or 2m, got %s", field, describe(n))
	}
	v, err := ParseTimeout(n.Value)
	if err != nil {
		return 0, d.errorf(n, "%s: %v", field, err)
	}
	return v, nil
}

// number decodes a finite number.
func (d *decoder) number(n *yaml.Node, field string) (float64, error) {
	n = resolve(n)
	if isNull(n) {
		return 0, nil
	}
	var f float64
	if n.Kind != yaml.ScalarNode || (n.Tag != "!!int" && n.Tag != "!!float") || n.Decode(&f) != nil {
		return 0, d.errorf(n, "%s: expected a number, got %s", field, describe(n))
	}
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, d.errorf(n, "%s: must be a finite number, got %s", field, n.Value)
	}
	return f, nil
}

// integer decodes an integer.
func (d *decoder) integer(n *yaml.Node, field string) (int64, error) {
	n = resolve(n)
	if isNull(n) {
		return 0, nil
	}
	var i int64
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" || n.Decode(&i) != nil {
		return 0, d.errorf(n, "%s: expected an integer, got %s", field, describe(n))
	}
	return i, nil
}

// suggestField proposes the field of known closest to name: the same name
// spelled with other case, dashes or underscores ("allowWrite" for
// "allow_write"), or one at most two edits away.
func suggestField(name string, known []string) string {
	fold := func(s string) string {
		return strings.NewReplacer("_", "", "-", "").Replace(strings.ToLower(s))
	}
	best, bestDist := "", 3
	for _, k := range known {
		if fold(k) == fold(name) {
			return k
		}
		if dist := editDistance(strings.ToLower(name), k); dist < bestDist && dist < len(k) {
			best, bestDist = k, dist
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
