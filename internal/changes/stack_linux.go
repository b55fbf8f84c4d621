package changes

import (
	"errors"
	"fmt"
	"os"
	"path"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// Stack is a read-only view of a root made of layers, as overlayfs would
// show it, read without mounting anything: Layers are directories in
// overlayfs's upper-directory form (whiteouts, opaque directories), top
// first, over Base ("" for none), a directory of which the Hide
// directories show empty and the Remove paths not at all. A layer may be
// written meanwhile by whoever owns it (a sandbox's own): nothing in it
// is followed, and what changes under a read is read as it is then.
type Stack struct {
	Layers []string
	Base   string
	// Hide and Remove are absolute paths of the base, or relative to it.
	Hide, Remove []string
}

// ErrUnrelated is the error of Compare for stacks with different bases.
var ErrUnrelated = errors.New("the two roots do not share a base")

// MaxCompare is the most changes Compare returns: past it, it fails with
// ErrTooMany (a sandbox that deletes /usr makes a change of every file
// there).
const MaxCompare = 200_000

// ErrTooMany is the error of Compare past MaxCompare changes.
var ErrTooMany = fmt.Errorf("more than %d changes, too many to compare", MaxCompare)

// layerRef is one layer of a stack (or its base).
type layerRef struct {
	dir  string
	base bool
}

// refs returns s's layers, top first, and its base.
func (s *Stack) refs() []layerRef {
	out := make([]layerRef, 0, len(s.Layers)+1)
	for _, l := range s.Layers {
		out = append(out, layerRef{dir: l})
	}
	if s.Base != "" {
		out = append(out, layerRef{dir: s.Base, base: true})
	}
	return out
}

// relOf is p relative to a stack's root, slash-separated, "." for the
// root itself.
func relOf(p string) string {
	p = strings.Trim(path.Clean("/"+p), "/")
	if p == "" {
		return "."
	}
	return p
}

// baseShows reports whether the base shows rel's entry (its content, for
// a hidden directory, aside): not at or below a removed path, and not
// below a hidden directory unless it is a hidden directory itself or on
// the way to one (which the layer makes, as the base has them).
func (s *Stack) baseShows(rel string) bool {
	for _, r := range s.Remove {
		if r = relOf(r); under(rel, r) && r != "." {
			return false
		}
	}
	shows := true
	for _, h := range s.Hide {
		h = relOf(h)
		if rel == h || strings.HasPrefix(h, rel+"/") {
			return true
		}
		if h == "." || strings.HasPrefix(rel, h+"/") {
			shows = false
		}
	}
	return shows
}

// baseLists reports whether the base lists directory rel's entries: it is
// not hidden.
func (s *Stack) baseLists(rel string) bool {
	if !s.baseShows(rel) {
		return false
	}
	for _, h := range s.Hide {
		if relOf(h) == rel {
			return false
		}
	}
	return true
}

// look is rel's entry in layer l: whether it is there, whether it is a
// whiteout, and its stat.
func look(l layerRef, rel string, s *Stack) (st unix.Stat_t, found, wh bool, err error) {
	if l.base && !s.baseShows(rel) {
		return st, false, false, nil
	}
	if rel == "." {
		err = unix.Lstat(l.dir, &st)
		return st, err == nil, false, err
	}
	d, err := openPathBeneath(l.dir, path.Dir(rel))
	if err != nil {
		if missing(err) {
			return st, false, false, nil
		}
		return st, false, false, err
	}
	defer unix.Close(d)
	name := path.Base(rel)
	switch err := unix.Fstatat(d, name, &st, unix.AT_SYMLINK_NOFOLLOW); {
	case missing(err):
		return st, false, false, nil
	case err != nil:
		return st, false, false, err
	}
	return st, true, !l.base && whiteout(d, name, &st), nil
}

// missing reports whether err says a path is not there (or, through
// something that is not a directory, cannot be).
func missing(err error) bool {
	return errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) || errors.Is(err, unix.EXDEV)
}

// openPathBeneath opens directory rel below root as an O_PATH descriptor,
// following no symbolic link and never leaving root.
func openPathBeneath(root, rel string) (int, error) {
	how := unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV,
	}
	for {
		fd, err := unix.Openat2(unix.AT_FDCWD, root, &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC})
		if err != nil {
			return -1, err
		}
		if rel == "." || rel == "" {
			return fd, nil
		}
		sub, err := unix.Openat2(fd, rel, &how)
		unix.Close(fd)
		if err == unix.EAGAIN || err == unix.EINTR {
			continue // a rename meanwhile: look again
		}
		return sub, err
	}
}

// opaqueAt reports whether directory rel of layer l is opaque.
func opaqueAt(l layerRef, rel string) bool {
	if l.base {
		return false
	}
	d, err := openPathBeneath(l.dir, rel)
	if err != nil {
		return false
	}
	defer unix.Close(d)
	buf := make([]byte, 8)
	for _, attr := range []string{"user.overlay.opaque", "trusted.overlay.opaque"} {
		if n, err := unix.Lgetxattr(procPath(d, "."), attr, buf); err == nil && n == 1 && buf[0] == 'y' {
			return true
		}
	}
	return false
}

// dirs returns the layers that make directory rel of the view, top first:
// none when rel is not a directory there.
func (s *Stack) dirs(rel string) ([]layerRef, error) {
	active := s.refs()
	if rel == "." {
		return active, nil
	}
	parts := strings.Split(rel, "/")
	if len(parts) > maxDepth {
		return nil, fmt.Errorf("%s: deeper than %d directories", rel, maxDepth)
	}
	for i := range parts {
		p := strings.Join(parts[:i+1], "/")
		var next []layerRef
		for _, l := range active {
			st, found, wh, err := look(l, p, s)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", p, err)
			}
			if !found {
				continue
			}
			if wh || st.Mode&unix.S_IFMT != unix.S_IFDIR {
				break // hides the lower layers' entry
			}
			next = append(next, l)
			if opaqueAt(l, p) {
				break
			}
		}
		if len(next) == 0 {
			return nil, nil
		}
		active = next
	}
	return active, nil
}

// find returns the layer that holds rel's entry and the entry; ok is
// false when the view has none.
func (s *Stack) find(rel string) (layerRef, unix.Stat_t, bool, error) {
	if rel == "." {
		refs := s.refs()
		if len(refs) == 0 {
			return layerRef{}, unix.Stat_t{}, false, nil
		}
		st, found, _, err := look(refs[0], ".", s)
		return refs[0], st, found, err
	}
	parents, err := s.dirs(path.Dir(rel))
	if err != nil {
		return layerRef{}, unix.Stat_t{}, false, err
	}
	for _, l := range parents {
		st, found, wh, err := look(l, rel, s)
		if err != nil {
			return layerRef{}, st, false, fmt.Errorf("%s: %w", rel, err)
		}
		if !found {
			continue
		}
		return l, st, !wh, nil
	}
	return layerRef{}, unix.Stat_t{}, false, nil
}

// Lstat returns rel's entry in the view (Absent when it has none), with
// its content's digest for a file and its target for a symbolic link.
func (s *Stack) Lstat(rel string) (Entry, error) {
	rel = relOf(rel)
	l, st, ok, err := s.find(rel)
	if err != nil || !ok {
		return Entry{}, err
	}
	e := entryOf(&st)
	if e.Type != File && e.Type != Symlink {
		return e, nil
	}
	d, err := openPathBeneath(l.dir, path.Dir(rel))
	if err != nil {
		return e, fmt.Errorf("%s: %w", rel, err)
	}
	defer unix.Close(d)
	if err := fill(d, path.Base(rel), &e); err != nil {
		return e, fmt.Errorf("%s: %w", rel, err)
	}
	return e, nil
}

// Open opens regular file rel of the view.
func (s *Stack) Open(rel string) (*os.File, error) {
	rel = relOf(rel)
	l, _, ok, err := s.find(rel)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, &os.PathError{Op: "open", Path: rel, Err: unix.ENOENT}
	}
	d, err := openPathBeneath(l.dir, path.Dir(rel))
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: rel, Err: err}
	}
	defer unix.Close(d)
	return openFile(d, path.Base(rel))
}

// ReadDir returns the names in directory rel of the view, sorted (none
// when it is not a directory there).
func (s *Stack) ReadDir(rel string) ([]string, error) {
	rel = relOf(rel)
	layers, err := s.dirs(rel)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []string
	for _, l := range layers {
		if l.base && !s.baseLists(rel) {
			continue
		}
		names, err := listBeneath(l.dir, rel)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", rel, err)
		}
		for _, n := range names {
			if seen[n] {
				continue
			}
			seen[n] = true
			p := path.Join(rel, n)
			_, found, wh, err := look(l, p, s)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", p, err)
			}
			if found && !wh {
				out = append(out, n)
			}
		}
	}
	slices.Sort(out)
	return out, nil
}

// listBeneath lists directory rel below root, following no link.
func listBeneath(root, rel string) ([]string, error) {
	d, err := openDirBeneath(root, rel)
	if err != nil {
		if missing(err) {
			return nil, nil
		}
		return nil, err
	}
	defer d.Close()
	return d.Readdirnames(-1)
}

// Compare returns the changes that turn view old into view new, sorted by
// path: it looks only at the paths their layers above a common bottom
// (the same base, the same lowest layers) hold, so the cost is that of
// what differs, not of the whole root. Stacks over different bases are
// ErrUnrelated. Both views are read as they are meanwhile.
func Compare(old, new *Stack) ([]Change, error) {
	if old.Base != new.Base {
		return nil, ErrUnrelated
	}
	// What either view keeps out of the base, both do: neither shows
	// what the other could not see.
	hide := append(slices.Clone(old.Hide), new.Hide...)
	remove := append(slices.Clone(old.Remove), new.Remove...)
	o := &Stack{Layers: old.Layers, Base: old.Base, Hide: hide, Remove: remove}
	n := &Stack{Layers: new.Layers, Base: new.Base, Hide: hide, Remove: remove}
	common := 0
	for common < len(o.Layers) && common < len(n.Layers) &&
		o.Layers[len(o.Layers)-1-common] == n.Layers[len(n.Layers)-1-common] {
		common++
	}
	cmp := &comparer{old: o, new: n, cands: map[string]bool{}, opaque: map[string]bool{}}
	for _, l := range o.Layers[:len(o.Layers)-common] {
		if err := cmp.collect(l, ".", 0); err != nil {
			return nil, err
		}
	}
	for _, l := range n.Layers[:len(n.Layers)-common] {
		if err := cmp.collect(l, ".", 0); err != nil {
			return nil, err
		}
	}
	paths := make([]string, 0, len(cmp.cands))
	for p := range cmp.cands {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	var done []string // paths whose whole subtree is recorded
	for i := 0; i < len(paths); i++ {
		p := paths[i]
		if len(done) > 0 && under(p, done[len(done)-1]) {
			continue
		}
		whole, err := cmp.path(p)
		if err != nil {
			return nil, err
		}
		if whole {
			done = append(done, p)
		}
	}
	sc := &scanner{out: cmp.out}
	sc.renames()
	slices.SortFunc(sc.out, func(a, b Change) int { return strings.Compare(a.Path, b.Path) })
	return sc.out, nil
}

// comparer is one Compare.
type comparer struct {
	old, new *Stack
	cands    map[string]bool // the paths the differing layers hold
	opaque   map[string]bool // the directories one of them makes opaque
	out      []Change
}

// collect adds every path of layer dir l at and below rel to the
// candidates.
func (c *comparer) collect(l, rel string, depth int) error {
	if depth > maxDepth {
		return fmt.Errorf("%s: deeper than %d directories", rel, maxDepth)
	}
	d, err := openDirBeneath(l, rel)
	if err != nil {
		if missing(err) {
			return nil
		}
		return fmt.Errorf("layer %s: %w", rel, err)
	}
	defer d.Close()
	if opaque(int(d.Fd())) {
		c.opaque[rel] = true
	}
	names, err := d.Readdirnames(-1)
	if err != nil {
		return fmt.Errorf("layer %s: %w", rel, err)
	}
	for _, name := range names {
		p := path.Join(rel, name)
		c.cands[p] = true
		var st unix.Stat_t
		if err := unix.Fstatat(int(d.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			continue // gone meanwhile
		}
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			if err := c.collect(l, p, depth+1); err != nil {
				return err
			}
		}
	}
	return nil
}

// path compares p in both views; whole reports that everything below p is
// recorded too (added, deleted or replaced as a whole).
func (c *comparer) path(p string) (whole bool, err error) {
	eo, err := c.old.Lstat(p)
	if err != nil {
		return false, fmt.Errorf("old %w", err)
	}
	en, err := c.new.Lstat(p)
	if err != nil {
		return false, fmt.Errorf("new %w", err)
	}
	switch {
	case eo.Type == Absent && en.Type == Absent:
		return false, nil
	case eo.Type == Absent:
		return true, c.added(p, en, 0)
	case en.Type == Absent:
		return true, c.deleted(p, eo, 0)
	case eo.Type != en.Type:
		if eo.Type == Dir {
			if err := c.below(c.old, p, 0, c.deleted); err != nil {
				return false, err
			}
		}
		if err := c.record(Change{Kind: c.kindOf(TypeChanged, en), Path: p, Old: eo, New: en}); err != nil {
			return false, err
		}
		if en.Type == Dir {
			if err := c.below(c.new, p, 0, c.added); err != nil {
				return false, err
			}
		}
		return true, nil
	case eo.Type == Dir:
		if eo.Mode != en.Mode {
			if err := c.record(Change{Kind: Modified, Path: p, Old: eo, New: en}); err != nil {
				return false, err
			}
		}
		if c.opaque[p] {
			// An opaque directory hides what the common layers
			// hold: each name only one side lists is a change.
			return false, c.listings(p)
		}
		return false, nil
	case eo.Mode != en.Mode || eo.Size != en.Size || eo.SHA256 != en.SHA256 || eo.Link != en.Link:
		return false, c.record(Change{Kind: c.kindOf(Modified, en), Path: p, Old: eo, New: en})
	}
	return false, nil
}

// kindOf is k, or Refused for a new entry never applied as it is.
func (c *comparer) kindOf(k Kind, en Entry) Kind {
	switch en.Type {
	case File, Dir, Symlink, Absent:
		return k
	}
	return Refused
}

// listings records the entries of directory p only one view lists, and
// adds those both list to the candidates already seen.
func (c *comparer) listings(p string) error {
	lo, err := c.old.ReadDir(p)
	if err != nil {
		return fmt.Errorf("old %w", err)
	}
	ln, err := c.new.ReadDir(p)
	if err != nil {
		return fmt.Errorf("new %w", err)
	}
	for _, name := range lo {
		q := path.Join(p, name)
		if _, found := slices.BinarySearch(ln, name); !found && !c.cands[q] {
			e, err := c.old.Lstat(q)
			if err != nil {
				return fmt.Errorf("old %w", err)
			}
			if err := c.deleted(q, e, 0); err != nil {
				return err
			}
		}
	}
	for _, name := range ln {
		q := path.Join(p, name)
		if _, found := slices.BinarySearch(lo, name); !found && !c.cands[q] {
			e, err := c.new.Lstat(q)
			if err != nil {
				return fmt.Errorf("new %w", err)
			}
			if err := c.added(q, e, 0); err != nil {
				return err
			}
		}
	}
	return nil
}

// record appends ch to the changes, at most MaxCompare.
func (c *comparer) record(ch Change) error {
	if len(c.out) >= MaxCompare {
		return ErrTooMany
	}
	c.out = append(c.out, ch)
	return nil
}

// added records p (entry e of the new view) as added, with all below it.
func (c *comparer) added(p string, e Entry, depth int) error {
	if err := c.record(Change{Kind: c.kindOf(Added, e), Path: p, New: e}); err != nil {
		return err
	}
	if e.Type == Dir {
		return c.below(c.new, p, depth, c.added)
	}
	return nil
}

// deleted records p (entry e of the old view) as deleted, with all below
// it.
func (c *comparer) deleted(p string, e Entry, depth int) error {
	if e.Type == Dir {
		if err := c.below(c.old, p, depth, c.deleted); err != nil {
			return err
		}
	}
	return c.record(Change{Kind: Deleted, Path: p, Old: e})
}

// below calls record for each entry of directory p of view s.
func (c *comparer) below(s *Stack, p string, depth int, record func(string, Entry, int) error) error {
	if depth >= maxDepth {
		return fmt.Errorf("%s: deeper than %d directories", p, maxDepth)
	}
	names, err := s.ReadDir(p)
	if err != nil {
		return err
	}
	for _, name := range names {
		q := path.Join(p, name)
		e, err := s.Lstat(q)
		if err != nil {
			return err
		}
		if e.Type == Absent {
			continue
		}
		if err := record(q, e, depth+1); err != nil {
			return err
		}
	}
	return nil
}
