package changes

import (
	"bytes"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"unicode/utf8"

	// go-udiff is the Myers diff of gopls (golang.org/x/tools/internal/diff)
	// made importable, kept in step with it: the diff the Go team maintains
	// for its own editor, with no dependencies. go-difflib, the other
	// candidate, is a port of Python's difflib, unmaintained since 2016.
	"github.com/aymanbagabas/go-udiff"
)

// ShowLimit is the largest file show diffs; a larger one is "too large to
// show" (export still writes it whole).
const ShowLimit = 4 << 20

// exportLimit is the largest file export writes.
const exportLimit = 1 << 30

// Filter keeps the changes at or below any of paths (all when none); a path
// that matches no change is an error.
func Filter(changes []Change, paths []string) ([]Change, error) {
	if len(paths) == 0 {
		return changes, nil
	}
	var out []Change
	used := make([]bool, len(paths))
	for _, c := range changes {
		keep := false
		for i, p := range paths {
			for _, q := range c.paths() {
				if under(q, p) {
					keep, used[i] = true, true
				}
			}
		}
		if keep {
			out = append(out, c)
		}
	}
	for i, p := range paths {
		if !used[i] {
			return nil, fmt.Errorf("%s: not changed by the set", p)
		}
	}
	return out, nil
}

// Clean makes a path given by the user relative to the workspace and
// slash-separated, or fails when it leaves the workspace.
func Clean(p string) (string, error) {
	q := path.Clean(strings.TrimPrefix(p, "./"))
	if path.IsAbs(q) || q == ".." || strings.HasPrefix(q, "../") {
		return "", fmt.Errorf("%s: not a path in the workspace (give it relative to the workspace's root)", p)
	}
	return q, nil
}

// under reports whether p is dir or below it.
func under(p, dir string) bool {
	return dir == "." || p == dir || strings.HasPrefix(p, dir+"/")
}

// side is one side of a changed file for the renderers.
type side struct {
	path     string // "" for /dev/null
	e        Entry
	data     []byte
	tooLarge bool
}

// read loads what e at rel of o holds, up to limit bytes.
func read(o Opener, rel string, e Entry, limit int64) (side, error) {
	s := side{path: rel, e: e}
	switch e.Type {
	case File:
		if e.Size > limit {
			s.tooLarge = true
			return s, nil
		}
		f, err := o.Open(rel)
		if err != nil {
			return s, err
		}
		defer f.Close()
		s.data, err = io.ReadAll(io.LimitReader(f, limit+1))
		if err != nil {
			return s, err
		}
		if int64(len(s.data)) > limit {
			s.data, s.tooLarge = nil, true
		}
	case Symlink:
		s.data = []byte(e.Link)
	}
	return s, nil
}

// binary reports whether data is not text: a NUL in its first 8 KiB, or
// not UTF-8.
func binary(data []byte) bool {
	return bytes.IndexByte(data[:min(len(data), 8<<10)], 0) >= 0 || !utf8.Valid(data)
}

// Opener opens the regular file at rel (slash-separated, relative to its
// root) for reading, following no symbolic link on the way.
type Opener interface {
	Open(rel string) (*os.File, error)
}

// Tree is the Opener of the files below a directory.
type Tree string

// Open opens rel below d.
func (d Tree) Open(rel string) (*os.File, error) { return openBeneath(string(d), rel) }

// Sides are the two sides of a list of changes, for the renderers: the
// old (a workspace, a sandbox's base) and the new (a change set's upper
// directory, a sandbox's layers).
type Sides struct {
	Old, New Opener
}

// pair is a file's two sides for one diff section: old is the
// workspace's (path "" when there is none), new the set's.
type pair struct {
	old, new side
	rename   bool
	hardLink string
}

// pairs turns a change into the diff sections git would write for it: a
// type change is a deletion and an addition; directories and refused
// entries have none (note says what to write instead).
func (s Sides) pairs(c Change, limit int64) (ps []pair, note string, err error) {
	isLeaf := func(e Entry) bool { return e.Type == File || e.Type == Symlink }
	oldSide := func(rel string, e Entry) (side, error) { return read(s.Old, rel, e, limit) }
	newSide := func() (side, error) { return read(s.New, c.Path, c.New, limit) }
	switch {
	case c.Kind == Refused:
		return nil, fmt.Sprintf("refused %s %%s: never applied", c.New.Type), nil
	case c.New.Type == Dir && c.Old.Type == Dir:
		return nil, fmt.Sprintf("directory %%s: mode %04o → %04o", c.Old.Mode, c.New.Mode), nil
	case c.Kind == Renamed:
		o, err := oldSide(c.From, c.FromOld)
		if err != nil {
			return nil, "", err
		}
		n, err := newSide()
		return []pair{{old: o, new: n, rename: true}}, "", err
	}
	if isLeaf(c.Old) {
		o, err := oldSide(c.Path, c.Old)
		if err != nil {
			return nil, "", err
		}
		p := pair{old: o}
		if c.Kind == Modified {
			if p.new, err = newSide(); err != nil {
				return nil, "", err
			}
			p.hardLink = c.HardLink
			return []pair{p}, "", nil
		}
		ps = append(ps, p)
	}
	if isLeaf(c.New) {
		n, err := newSide()
		if err != nil {
			return nil, "", err
		}
		ps = append(ps, pair{new: n, hardLink: c.HardLink})
	}
	switch {
	case c.New.Type == Dir:
		note = "new directory %s"
	case c.Old.Type == Dir:
		note = "deleted directory %s"
	}
	return ps, note, nil
}

// gitMode is the mode git records for e: 100644, 100755 or 120000.
func gitMode(e Entry) string {
	switch {
	case e.Type == Symlink:
		return "120000"
	case e.Mode&0o100 != 0:
		return "100755"
	default:
		return "100644"
	}
}

// fullMode is e's mode the way git writes modes, with every bit kept
// (setuid, group and other bits): what show writes.
func fullMode(e Entry) string {
	switch e.Type {
	case Symlink:
		return "120000"
	case Dir:
		return fmt.Sprintf("40%04o", e.Mode)
	}
	return fmt.Sprintf("10%04o", e.Mode)
}

// blobID is git's SHA-1 object ID of data as a blob.
func blobID(data []byte) string {
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", len(data))
	h.Write(data)
	return hex.EncodeToString(h.Sum(nil))
}

// zeroID is git's ID of no object.
const zeroID = "0000000000000000000000000000000000000000"

// quote writes a path as git does: in double quotes with C escapes when it
// holds a quote, a backslash, a control or a non-ASCII byte.
func quote(p string) string {
	plain := true
	for i := 0; i < len(p); i++ {
		if c := p[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			plain = false
			break
		}
	}
	if plain {
		return p
	}
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(p); i++ {
		switch c := p[i]; {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c == '\n':
			b.WriteString(`\n`)
		case c == '\t':
			b.WriteString(`\t`)
		case c < 0x20 || c >= 0x7f:
			fmt.Fprintf(&b, `\%03o`, c)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// prefixed is "a/P" or "b/P", quoted as git does, or /dev/null.
func prefixed(prefix, p string) string {
	if p == "" {
		return "/dev/null"
	}
	return quote(prefix + p)
}

// colours of a diff on a terminal.
type palette struct{ meta, frag, old, new, reset string }

var (
	noColour = palette{}
	colour   = palette{meta: "\x1b[1m", frag: "\x1b[36m", old: "\x1b[31m", new: "\x1b[32m", reset: "\x1b[m"}
)

// hunks writes the unified diff of old and new (text) in git's form and
// returns the lines it inserted and deleted.
func hunks(w io.Writer, oldText, newText string, pal palette) (ins, del int) {
	edits := udiff.Lines(oldText, newText)
	u, err := udiff.ToUnifiedDiff("", "", oldText, edits, udiff.DefaultContextLines)
	if err != nil {
		// Cannot happen: the edits are of oldText.
		panic(err)
	}
	for _, h := range u.Hunks {
		nOld, nNew := 0, 0
		for _, l := range h.Lines {
			switch l.Kind {
			case udiff.Delete:
				nOld++
			case udiff.Insert:
				nNew++
			default:
				nOld++
				nNew++
			}
		}
		if w != nil {
			fmt.Fprintf(w, "%s@@ -%s +%s @@%s\n", pal.frag, rangeOf(h.FromLine, nOld), rangeOf(h.ToLine, nNew), pal.reset)
		}
		for _, l := range h.Lines {
			mark, col := " ", ""
			switch l.Kind {
			case udiff.Delete:
				mark, col = "-", pal.old
				del++
			case udiff.Insert:
				mark, col = "+", pal.new
				ins++
			}
			if w == nil {
				continue
			}
			fmt.Fprintf(w, "%s%s%s", col, mark, strings.TrimSuffix(l.Content, "\n"))
			if col != "" {
				io.WriteString(w, pal.reset)
			}
			io.WriteString(w, "\n")
			if !strings.HasSuffix(l.Content, "\n") {
				io.WriteString(w, "\\ No newline at end of file\n")
			}
		}
	}
	return ins, del
}

// rangeOf is a hunk's range in git's form: "3,4", "3" for one line, "2,0"
// (the line before) for none.
func rangeOf(start, n int) string {
	switch n {
	case 0:
		return fmt.Sprintf("%d,0", start-1)
	case 1:
		return fmt.Sprint(start)
	}
	return fmt.Sprintf("%d,%d", start, n)
}

// section writes one pair's diff section: for show (git's form, every mode
// bit, binary files summarised) or for export (what git apply takes). It
// returns the lines inserted and deleted, and whether it wrote anything.
func section(w io.Writer, p pair, export bool, pal palette) (ins, del int, wrote bool) {
	mode := fullMode
	if export {
		mode = gitMode
	}
	a, b := p.old.path, p.new.path
	if a == "" {
		a = b
	}
	if b == "" {
		b = a
	}
	var hdr strings.Builder
	switch {
	case p.old.path == "":
		fmt.Fprintf(&hdr, "new file mode %s\n", mode(p.new.e))
	case p.new.path == "":
		fmt.Fprintf(&hdr, "deleted file mode %s\n", mode(p.old.e))
	default:
		if mode(p.old.e) != mode(p.new.e) {
			fmt.Fprintf(&hdr, "old mode %s\nnew mode %s\n", mode(p.old.e), mode(p.new.e))
		}
		if p.rename {
			fmt.Fprintf(&hdr, "similarity index 100%%\nrename from %s\nrename to %s\n", quote(a), quote(b))
		}
	}
	if p.hardLink != "" && !export {
		fmt.Fprintf(&hdr, "hard link to %s\n", quote(p.hardLink))
	}
	tooLarge := p.old.tooLarge || p.new.tooLarge
	same := p.old.path != "" && p.new.path != "" && !tooLarge && bytes.Equal(p.old.data, p.new.data) &&
		p.old.e.Type == p.new.e.Type
	if same && hdr.Len() == 0 {
		return 0, 0, false
	}
	fmt.Fprintf(w, "%sdiff --git %s %s%s\n", pal.meta, prefixed("a/", a), prefixed("b/", b), pal.reset)
	io.WriteString(w, hdr.String())
	if same {
		return 0, 0, true
	}
	oldID, newID := zeroID, zeroID
	if p.old.path != "" {
		oldID = blobID(p.old.data)
	}
	if p.new.path != "" {
		newID = blobID(p.new.data)
	}
	if !export {
		oldID, newID = oldID[:7], newID[:7]
	}
	idx := fmt.Sprintf("index %s..%s", oldID, newID)
	if p.old.path != "" && p.new.path != "" && mode(p.old.e) == mode(p.new.e) {
		idx += " " + mode(p.new.e)
	}
	if tooLarge {
		fmt.Fprintf(w, "File too large to show (%s)\n", sizes(p))
		return 0, 0, true
	}
	fmt.Fprintln(w, idx)
	if binary(p.old.data) || binary(p.new.data) {
		if !export {
			fmt.Fprintf(w, "Binary files %s and %s differ (%s)\n", prefixed("a/", p.old.path), prefixed("b/", p.new.path), sizes(p))
			return 0, 0, true
		}
		io.WriteString(w, "GIT binary patch\n")
		writeLiteral(w, p.new.data)
		io.WriteString(w, "\n")
		return 0, 0, true
	}
	if len(p.old.data) == 0 && len(p.new.data) == 0 {
		return 0, 0, true
	}
	fmt.Fprintf(w, "%s--- %s%s\n%s+++ %s%s\n", pal.meta, prefixed("a/", p.old.path), pal.reset, pal.meta, prefixed("b/", p.new.path), pal.reset)
	ins, del = hunks(w, string(p.old.data), string(p.new.data), pal)
	return ins, del, true
}

// sizes says a pair's sizes: "12.3 KiB → 14.0 KiB", "new, 3 B".
func sizes(p pair) string {
	switch {
	case p.old.path == "":
		return "new, " + Size(p.new.e.Size)
	case p.new.path == "":
		return "deleted, " + Size(p.old.e.Size)
	}
	return Size(p.old.e.Size) + " → " + Size(p.new.e.Size)
}

// ShowOptions choose what WriteDiff writes.
type ShowOptions struct {
	Color bool
}

// WriteDiff writes changes as a unified diff with git's headers: modes
// (every bit), renames, symbolic links' targets, hard links, binary files
// and files over ShowLimit summarised with their sizes; directories and
// refused entries as one line each.
func (s Sides) WriteDiff(w io.Writer, changes []Change, opt ShowOptions) error {
	pal := noColour
	if opt.Color {
		pal = colour
	}
	for _, c := range changes {
		ps, note, err := s.pairs(c, ShowLimit)
		if err != nil {
			return fmt.Errorf("%s: %w", c.Path, err)
		}
		if note != "" {
			fmt.Fprintf(w, "%s%s%s\n", pal.meta, fmt.Sprintf(note, quote(c.Path)), pal.reset)
			if c.Kind == Refused || (c.New.Type == Dir && c.Old.Type == Dir) {
				continue
			}
		}
		for _, p := range ps {
			section(w, p, false, pal)
		}
		if c.Edited {
			fmt.Fprintf(w, "(%s was edited in the workspace while the sandbox ran)\n", quote(c.Path))
		}
	}
	return nil
}

// Export writes changes as a patch git apply takes (in the workspace's
// root): text diffs, binary files and files over ShowLimit as git's
// binary literals, symbolic links as mode 120000. What git cannot carry
// (directories as such, refused entries, mode bits other than the
// owner's execute bit) is left out and named in the notes returned.
func (s Sides) Export(w io.Writer, changes []Change) (notes []string, err error) {
	for _, c := range changes {
		ps, note, err := s.pairs(c, exportLimit)
		if err != nil {
			return notes, fmt.Errorf("%s: %w", c.Path, err)
		}
		for _, p := range ps {
			if p.old.tooLarge || p.new.tooLarge {
				return notes, fmt.Errorf("%s: larger than %s, too large to export", c.Path, Size(exportLimit))
			}
		}
		wrote := false
		for _, p := range ps {
			_, _, ok := section(w, p, true, noColour)
			wrote = wrote || ok
		}
		switch {
		case c.Kind == Refused:
			notes = append(notes, fmt.Sprintf("%s: left out, a %s (refused)", c.Path, c.New.Type))
		case c.New.Type == Dir && c.Old.Type == Dir:
			notes = append(notes, fmt.Sprintf("left out: "+note+", which git does not record", c.Path))
		case !wrote && len(ps) > 0:
			notes = append(notes, fmt.Sprintf("%s: left out, mode %04o → %04o, which git does not record", c.Path, c.Old.Mode, c.New.Mode))
		}
	}
	return notes, nil
}

// WriteNames writes the changed paths, one a line (a rename's new path).
func WriteNames(w io.Writer, changes []Change) {
	for _, c := range changes {
		if c.isDirAddOrDelete() {
			continue
		}
		fmt.Fprintln(w, quote(c.Path))
	}
}

// WriteStat writes git's --stat for changes: each file with the lines it
// gains and loses, binary and large files with their sizes, then totals.
func (s Sides) WriteStat(w io.Writer, changes []Change, color bool) error {
	pal := noColour
	if color {
		pal = colour
	}
	type row struct {
		name     string
		ins, del int
		bin      string
	}
	var rows []row
	width, most := 0, 0
	totIns, totDel := 0, 0
	for _, c := range changes {
		if c.isDirAddOrDelete() {
			continue
		}
		ps, note, err := s.pairs(c, ShowLimit)
		if err != nil {
			return fmt.Errorf("%s: %w", c.Path, err)
		}
		r := row{name: quote(c.Path)}
		if c.Kind == Renamed {
			r.name = quote(c.From) + " => " + quote(c.Path)
		}
		if note != "" && len(ps) == 0 {
			r.bin = strings.Replace(note, " %s", "", 1)
		}
		for _, p := range ps {
			if p.old.tooLarge || p.new.tooLarge || binary(p.old.data) || binary(p.new.data) {
				r.bin = fmt.Sprintf("Bin %d -> %d bytes", sideSize(p.old), sideSize(p.new))
				continue
			}
			i, d := hunks(nil, string(p.old.data), string(p.new.data), pal)
			r.ins, r.del = r.ins+i, r.del+d
		}
		totIns, totDel = totIns+r.ins, totDel+r.del
		width, most = max(width, len(r.name)), max(most, r.ins+r.del)
		rows = append(rows, r)
	}
	bar := max(10, 80-width-10)
	for _, r := range rows {
		if r.bin != "" {
			fmt.Fprintf(w, " %-*s | %s\n", width, r.name, r.bin)
			continue
		}
		ni, nd, gap := r.ins, r.del, " "
		if r.ins+r.del == 0 {
			gap = ""
		}
		if most > bar {
			ni, nd = scale(r.ins, most, bar), scale(r.del, most, bar)
		}
		fmt.Fprintf(w, " %-*s | %d%s%s%s%s%s%s%s\n", width, r.name, r.ins+r.del, gap,
			pal.new, strings.Repeat("+", ni), pal.reset, pal.old, strings.Repeat("-", nd), pal.reset)
	}
	fmt.Fprintf(w, " %d file%s changed, %d insertion%s(+), %d deletion%s(-)\n",
		len(rows), plural(len(rows)), totIns, plural(totIns), totDel, plural(totDel))
	return nil
}

// sideSize is the size of a side, 0 when absent.
func sideSize(s side) int64 {
	if s.path == "" {
		return 0
	}
	return s.e.Size
}

// scale scales n of most to width, keeping a change visible.
func scale(n, most, width int) int {
	if n == 0 {
		return 0
	}
	return max(1, n*width/most)
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// Colorize writes patch, a diff WriteDiff wrote, to w with the colours
// WriteDiff gives on a terminal: headers bold, hunk headers cyan, added
// lines green, deleted lines red.
func Colorize(w io.Writer, patch []byte) {
	pal := colour
	inHunk := false
	for len(patch) > 0 {
		line := patch
		if i := bytes.IndexByte(patch, '\n'); i >= 0 {
			line = patch[:i+1]
		}
		patch = patch[len(line):]
		text := bytes.TrimSuffix(line, []byte("\n"))
		var c string
		switch {
		case bytes.HasPrefix(text, []byte("diff --git ")):
			c, inHunk = pal.meta, false
		case bytes.HasPrefix(text, []byte("@@ ")):
			c, inHunk = pal.frag, true
		case inHunk && bytes.HasPrefix(text, []byte("+")):
			c = pal.new
		case inHunk && bytes.HasPrefix(text, []byte("-")):
			c = pal.old
		case !inHunk:
			c = pal.meta
		}
		if c == "" {
			w.Write(line)
			continue
		}
		fmt.Fprintf(w, "%s%s%s%s", c, text, pal.reset, line[len(text):])
	}
}
