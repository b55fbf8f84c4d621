package changes

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/hutch-sandbox/hutch/internal/approve"
	"github.com/hutch-sandbox/hutch/internal/hostperm"
	"github.com/hutch-sandbox/hutch/internal/policy"
)

// ApplyOptions choose what Apply writes.
type ApplyOptions struct {
	// Paths limits the apply to these paths and what is below them (all
	// when empty), relative to the workspace.
	Paths []string
	// Allow names paths (or their parents) that are applied although they
	// need the user's word: protected names, anything in a .git
	// directory, symbolic links out of the workspace, setuid and setgid
	// bits.
	Allow []string
	// SkipRefused applies the rest when some changes need the user's word,
	// leaving those out.
	SkipRefused bool
	// Files are approvals.files rules for this apply, besides those the
	// set records (Meta.FileRules). The paths the applied changes touch
	// (both names of a rename) are matched against them
	// (approve.DecideFiles): a deny rule refuses the apply; an ask rule
	// asks Gate, and a refusal refuses the apply. Either way nothing is
	// written, and the *ApplyError names the paths and the rule.
	Files []approve.FileRule
	// Gate asks where a file rule says ask (Gate.Files), with the front
	// end's Asker; nil, or a gate without an Asker, refuses.
	Gate *approve.Gate
	// Context bounds the question; nil is context.Background().
	Context context.Context
}

// Problem is one path apply will not write, and why.
type Problem struct {
	Path, Why string
}

// ApplyError is apply's refusal: nothing was written.
type ApplyError struct {
	Conflicts []Problem // the workspace is no longer as the set's base
	Refused   []Problem // these need --allow (or --skip-refused)
	// Denied are paths a deny rule of approvals.files matches, and
	// NotApproved those an ask rule asked about, refused (Answer says
	// how); Rule names the rules.
	Denied, NotApproved []Problem
	Rule                string
	Answer              error
}

func (e *ApplyError) Error() string {
	var b strings.Builder
	e.filesError(&b)
	if len(e.Conflicts) > 0 {
		fmt.Fprintf(&b, "%d conflict%s, nothing applied:\n", len(e.Conflicts), plural(len(e.Conflicts)))
		for _, p := range e.Conflicts {
			fmt.Fprintf(&b, "  %s: %s\n", p.Path, p.Why)
		}
	}
	if len(e.Refused) > 0 {
		fmt.Fprintf(&b, "%d path%s need%s your word, nothing applied:\n", len(e.Refused), plural(len(e.Refused)), map[bool]string{true: "s"}[len(e.Refused) == 1])
		// What is in one .git directory is one line: a commit the
		// sandbox made is a dozen paths of the same kind.
		type group struct {
			key, why string
			n        int
		}
		var groups []*group
		at := map[[2]string]*group{}
		for _, p := range e.Refused {
			key := p.Path
			if i := strings.Index("/"+p.Path+"/", "/.git/"); i >= 0 {
				key = p.Path[:i+len(".git")]
			}
			g := at[[2]string{key, p.Why}]
			if g == nil {
				g = &group{key: key, why: p.Why}
				at[[2]string{key, p.Why}] = g
				groups = append(groups, g)
			}
			g.n++
		}
		for _, g := range groups {
			if g.n == 1 || g.key == "" {
				fmt.Fprintf(&b, "  %s: %s\n", g.key, g.why)
				continue
			}
			fmt.Fprintf(&b, "  %s/ (%d paths): %s\n", g.key, g.n, g.why)
		}
		b.WriteString("apply them too with --allow PATH (each, or a parent); apply the rest with --skip-refused, or name the paths to apply")
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// Result is what Apply did.
type Result struct {
	Applied []string  // paths written or removed
	Skipped []Problem // left out under SkipRefused, or never applicable
}

// tempMark is in the name of apply's temporary files: .NAME.hutch-apply-XXXXXXXX.
const tempMark = ".hutch-apply-"

// Apply writes changes into the workspace. Every path it would change,
// create or delete must still be as the set's base recorded (or already
// as the set has it); otherwise, and when a change needs the user's word
// (see ApplyOptions.Allow), it writes nothing and returns an *ApplyError.
// Each file is replaced atomically; deletions come last. An apply of the
// whole set marks it applied.
func (s *Set) Apply(changes []Change, opt ApplyOptions) (*Result, error) {
	all := len(opt.Paths) == 0
	changes, err := Filter(changes, opt.Paths)
	if err != nil {
		return nil, err
	}
	root, err := os.OpenRoot(s.meta.Workspace)
	if err != nil {
		return nil, fmt.Errorf("workspace: %w", err)
	}
	defer root.Close()
	todo, res, aerr := s.sortOut(root, changes, opt)
	aerr.Conflicts = s.conflicts(todo)
	if len(aerr.Conflicts) > 0 || len(aerr.Refused) > 0 {
		return nil, aerr
	}
	if err := s.checkFiles(todo, opt); err != nil {
		return nil, err
	}
	s.cleanTemps(changes)
	if err := s.write(root, todo, res); err != nil {
		return res, err
	}
	if all && len(res.Skipped) == 0 {
		s.meta.Applied = time.Now()
		if err := s.save(); err != nil {
			return res, err
		}
	}
	return res, nil
}

// sortOut sorts changes into those to apply, those left out (in res) and
// those that need the user's word (in the error's Refused).
func (s *Set) sortOut(root *os.Root, changes []Change, opt ApplyOptions) (todo []Change, res *Result, aerr *ApplyError) {
	res, aerr = &Result{}, &ApplyError{}
	for _, c := range changes {
		why := s.needsWord(root, c)
		switch {
		case why == "":
			todo = append(todo, c)
		case c.Kind == Refused && (opt.SkipRefused || allowed(c, opt.Allow)):
			res.Skipped = append(res.Skipped, Problem{c.Path, why + " (never applied)"})
		case allowed(c, opt.Allow):
			todo = append(todo, c)
		case opt.SkipRefused:
			res.Skipped = append(res.Skipped, Problem{c.Path, why})
		default:
			aerr.Refused = append(aerr.Refused, Problem{c.Path, why})
		}
	}
	return todo, res, aerr
}

// allowed reports whether every path of c is at or below a path of allow.
func allowed(c Change, allow []string) bool {
	for _, p := range c.paths() {
		if !slices.ContainsFunc(allow, func(a string) bool { return under(p, a) }) {
			return false
		}
	}
	return true
}

// protectedNames are the default deny-write names that hold in every
// writable area (not only the home directory).
var protectedNames = func() []string {
	var names []string
	for _, n := range policy.DefaultDenyWrite() {
		if !n.HomeOnly {
			names = append(names, n.Name)
		}
	}
	return names
}()

// Protected reports why p (relative to the workspace) is protected: a
// default deny-write name or below one, or in a .git directory at any
// depth; "" when it is not.
func Protected(p string) string {
	if slices.Contains(strings.Split(p, "/"), policy.GitDirName) {
		return "in a .git directory (protected)"
	}
	for _, n := range protectedNames {
		if under(p, n) {
			return "protected name " + n
		}
	}
	return ""
}

// needsWord says why c needs the user's word to be applied, "" if not.
func (s *Set) needsWord(root *os.Root, c Change) string {
	if c.Kind == Refused {
		return "a " + string(c.New.Type) + " from the sandbox"
	}
	for _, p := range c.paths() {
		if why := Protected(p); why != "" {
			return why
		}
	}
	if c.New.Type == Symlink && s.linkOutside(root, c.Path, c.New.Link) {
		return "symbolic link to " + c.New.Link + ", outside the workspace"
	}
	if c.New.Type == File && c.New.Mode&0o6000 != 0 {
		return fmt.Sprintf("setuid or setgid bit (mode %04o)", c.New.Mode)
	}
	return ""
}

// linkOutside reports whether a link at p to target leads out of the
// workspace, by its name or through the workspace's own links.
func (s *Set) linkOutside(root *os.Root, p, target string) bool {
	var rel string
	if path.IsAbs(target) {
		if target != s.meta.Workspace && !strings.HasPrefix(target, s.meta.Workspace+"/") {
			return true
		}
		rel = strings.TrimPrefix(strings.TrimPrefix(target, s.meta.Workspace), "/")
	} else {
		rel = path.Dir(p) + "/" + target
	}
	if c := path.Clean(rel); c == ".." || strings.HasPrefix(c, "../") {
		return true
	}
	if rel == "" {
		return false
	}
	// os.Root resolves rel as the kernel would, links and ".." after them
	// included, and fails when that leaves the workspace.
	_, err := root.Stat(rel)
	return err != nil && !errors.Is(err, fs.ErrNotExist)
}

// conflicts checks that every path of changes is as the base recorded, or
// already as the set has it, and not edited while the sandbox ran.
func (s *Set) conflicts(changes []Change) []Problem {
	var out []Problem
	deleting := map[string]bool{}
	for _, c := range changes {
		if c.Kind == Deleted || c.Kind == TypeChanged && c.Old.Type == Dir {
			deleting[c.Path] = true
		}
		if c.From != "" {
			deleting[c.From] = true
		}
	}
	for _, c := range changes {
		for _, p := range c.paths() {
			want, base := c.New, c.Old
			if p == c.From {
				want, base = Entry{}, c.FromOld
			}
			if b, ok := s.meta.Base[p]; ok {
				base = b
			}
			if c.Edited {
				out = append(out, Problem{p, "edited in the workspace while the sandbox ran"})
				continue
			}
			cur, err := s.current(p)
			if err != nil {
				out = append(out, Problem{p, err.Error()})
				continue
			}
			if !same(cur, base) && !same(cur, want) {
				out = append(out, Problem{p, fmt.Sprintf("changed since the sandbox ran: was %s, now %s", describe(base), describe(cur))})
				continue
			}
			if base.Type == Dir && want.Type != Dir && cur.Type == Dir {
				if extra := s.extraIn(p, deleting); extra != "" {
					out = append(out, Problem{p, "the set removes this directory, but it now holds " + extra})
				}
			}
		}
	}
	return out
}

// extraIn names an entry of the workspace's directory p that the set does
// not delete, "" if there is none.
func (s *Set) extraIn(p string, deleting map[string]bool) string {
	d, err := openDirBeneath(s.meta.Workspace, p)
	if err != nil {
		return ""
	}
	defer d.Close()
	names, _ := d.Readdirnames(-1)
	for _, n := range names {
		if !deleting[path.Join(p, n)] && !strings.Contains(n, tempMark) {
			return n
		}
	}
	return ""
}

// current is the workspace's entry at p now, its content hashed.
func (s *Set) current(p string) (Entry, error) {
	d, err := openDirBeneath(s.meta.Workspace, path.Dir(p))
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, errNotDir) {
		return Entry{}, nil
	}
	if err != nil {
		return Entry{}, fmt.Errorf("its directory cannot be opened without following a link: %v", err)
	}
	defer d.Close()
	e, err := lstatAt(int(d.Fd()), path.Base(p))
	if err == nil {
		err = fill(int(d.Fd()), path.Base(p), &e)
	}
	return e, err
}

// same reports whether entries a and b have the same type, mode and
// content.
func same(a, b Entry) bool {
	if a.Type != b.Type {
		return false
	}
	switch a.Type {
	case Absent:
		return true
	case File:
		return a.Mode == b.Mode && a.SHA256 == b.SHA256
	case Symlink:
		return a.Link == b.Link
	}
	return a.Mode == b.Mode
}

// describe says what an entry is, for a conflict.
func describe(e Entry) string {
	switch e.Type {
	case Absent:
		return "absent"
	case File:
		return fmt.Sprintf("a file of %s, mode %04o, sha256 %.12s", Size(e.Size), e.Mode, e.SHA256)
	case Symlink:
		return "a link to " + e.Link
	}
	return fmt.Sprintf("a %s, mode %04o", e.Type, e.Mode)
}

// applyMode is the mode apply gives c's path: the set's, without the write
// permissions package hostperm withholds from what comes from a sandbox
// (others', and the group's when the user's umask withholds it) unless
// the workspace's entry had them already: apply never widens who may
// write a file of the user's. Set-id bits come only with --allow
// (needsWord).
func applyMode(c Change) fs.FileMode {
	var had fs.FileMode
	if c.Old.Type == c.New.Type {
		had = hostperm.FileMode(c.Old.Mode)
	}
	return hostperm.FileMode(c.New.Mode) &^ (hostperm.Withheld(hostperm.Umask()) &^ had)
}

// write applies changes, checked, in root: directories first, then each
// file and link replaced atomically, deletions last, then directories'
// modes, deepest first.
func (s *Set) write(root *os.Root, changes []Change, res *Result) error {
	done := func(p string) { res.Applied = append(res.Applied, p) }
	var dirs, deletes []Change
	for _, c := range changes {
		fi, err := root.Lstat(c.Path)
		isDir := err == nil && fi.IsDir()
		if c.Kind == TypeChanged && c.Old.Type == Dir && isDir {
			// The directory the set replaced: what it held is deleted by
			// the set, so it goes now, before its replacement.
			if err := root.RemoveAll(c.Path); err != nil {
				return err
			}
		}
		if c.Kind == TypeChanged && c.New.Type == Dir && err == nil && !isDir {
			if err := root.Remove(c.Path); err != nil {
				return err
			}
		}
		if c.New.Type == Dir {
			if err := mkdirAll(root, c.Path, 0o700); err != nil {
				return err
			}
			dirs = append(dirs, c)
		}
		if c.Kind == Deleted || c.Kind == Renamed {
			deletes = append(deletes, c)
		}
	}
	linked := map[string]bool{}
	for _, c := range changes {
		if c.New.Type != File && c.New.Type != Symlink {
			continue
		}
		if err := s.replace(root, c, linked[c.HardLink]); err != nil {
			return fmt.Errorf("%s: %w (the files before it are applied; apply the set again once the cause is fixed)", c.Path, err)
		}
		linked[c.Path] = true
		done(c.Path)
	}
	// Deletions last, what is below a directory before it.
	slices.SortFunc(deletes, func(a, b Change) int { return strings.Compare(b.deleted(), a.deleted()) })
	for _, c := range deletes {
		// Gone already when below a directory the set made a file.
		if err := root.Remove(c.deleted()); err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, errNotDir) {
			return fmt.Errorf("%s: %w", c.deleted(), err)
		}
		done(c.deleted())
	}
	slices.SortFunc(dirs, func(a, b Change) int { return strings.Compare(b.Path, a.Path) })
	for _, c := range dirs {
		if err := root.Chmod(c.Path, applyMode(c)); err != nil {
			return err
		}
		done(c.Path)
	}
	syncDirs(root, res.Applied)
	return nil
}

// deleted is the path a deletion or rename removes.
func (c Change) deleted() string {
	if c.From != "" {
		return c.From
	}
	return c.Path
}

// replace puts the set's file or link at c.Path atomically: a temporary
// file next to it, its content (checked against the set's hash), mode and
// fsync, then a rename over it. A change of mode alone is a chmod. A hard
// link whose first name was written is made a link to it again.
func (s *Set) replace(root *os.Root, c Change, linkFirst bool) error {
	if c.Kind == Modified && c.Old.Type == File && c.New.Type == File && c.Old.SHA256 == c.New.SHA256 {
		return root.Chmod(c.Path, applyMode(c))
	}
	if dir := path.Dir(c.Path); dir != "." {
		if err := mkdirAll(root, dir, 0o777); err != nil {
			return err
		}
	}
	tmp := tempName(c.Path)
	switch {
	case c.New.Type == Symlink:
		if err := root.Symlink(c.New.Link, tmp); err != nil {
			return err
		}
	case linkFirst:
		if err := root.Link(c.HardLink, tmp); err != nil {
			return err
		}
	default:
		if err := s.copyFile(root, c, tmp); err != nil {
			root.Remove(tmp)
			return err
		}
	}
	like := c.Path
	if _, err := root.Lstat(like); err != nil {
		like = path.Dir(c.Path)
	}
	if err := ownLike(root, tmp, like); err != nil {
		root.Remove(tmp)
		return err
	}
	if err := root.Rename(tmp, c.Path); err != nil {
		root.Remove(tmp)
		return err
	}
	return nil
}

// ownLike gives p, which root's hutch just made in the workspace, the
// owner of like (the file it replaces, or its directory): what apply
// writes is the workspace owner's, as what the sandbox wrote there in
// direct mode would be, not root's. An ordinary user's files are theirs
// already.
func ownLike(root *os.Root, p, like string) error {
	if os.Geteuid() != 0 {
		return nil
	}
	fi, err := root.Lstat(like)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	return root.Lchown(p, int(st.Uid), int(st.Gid))
}

// mkdirAll makes dir and its missing parents in root, each (as root) its
// parent's owner's.
func mkdirAll(root *os.Root, dir string, perm fs.FileMode) error {
	if dir == "." || dir == "" {
		return nil
	}
	if fi, err := root.Lstat(dir); err == nil {
		if !fi.IsDir() {
			return &fs.PathError{Op: "mkdir", Path: dir, Err: syscall.ENOTDIR}
		}
		return nil
	}
	parent := path.Dir(dir)
	if err := mkdirAll(root, parent, perm); err != nil {
		return err
	}
	if err := root.Mkdir(dir, perm); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return ownLike(root, dir, parent)
}

// copyFile writes the set's file c.Path to tmp in root, with its mode,
// synced.
func (s *Set) copyFile(root *os.Root, c Change, tmp string) error {
	src, err := openBeneath(s.Upper(), c.Path)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer dst.Close()
	h := sha256.New()
	if _, err := io.Copy(io.MultiWriter(dst, h), src); err != nil {
		return err
	}
	if hex.EncodeToString(h.Sum(nil)) != c.New.SHA256 {
		return errors.New("the set's file changed since it was read; nothing of it written")
	}
	if err := dst.Chmod(applyMode(c)); err != nil {
		return err
	}
	if err := dst.Sync(); err != nil {
		return err
	}
	return dst.Close()
}

// tempName is a fresh temporary name next to p.
func tempName(p string) string {
	var b [4]byte
	rand.Read(b[:])
	return path.Join(path.Dir(p), "."+path.Base(p)+tempMark+hex.EncodeToString(b[:]))
}

// syncDirs syncs the directories holding paths, so that the renames last.
func syncDirs(root *os.Root, paths []string) {
	seen := map[string]bool{}
	for _, p := range paths {
		d := path.Dir(p)
		if seen[d] {
			continue
		}
		seen[d] = true
		if f, err := root.Open(d); err == nil {
			f.Sync()
			f.Close()
		}
	}
}

// cleanTemps removes the temporary files an interrupted apply of changes
// left next to their paths.
func (s *Set) cleanTemps(changes []Change) {
	byDir := map[string][]string{}
	for _, c := range changes {
		byDir[path.Dir(c.Path)] = append(byDir[path.Dir(c.Path)], "."+path.Base(c.Path)+tempMark)
	}
	for dir, prefixes := range byDir {
		d, err := openDirBeneath(s.meta.Workspace, dir)
		if err != nil {
			continue
		}
		names, _ := d.Readdirnames(-1)
		for _, n := range names {
			for _, pre := range prefixes {
				if strings.HasPrefix(n, pre) && len(n) == len(pre)+8 {
					unlinkAt(d, n)
				}
			}
		}
		d.Close()
	}
}

// removeAll removes dir as the user can: directories made unreadable
// (overlayfs's work directory is mode 0) are opened up first. What stays
// (files of the sandbox's other ids) is named in the error.
func removeAll(dir string) error {
	if os.RemoveAll(dir) == nil {
		return nil
	}
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if d != nil && d.IsDir() {
			chmodDir(p)
		}
		return nil
	})
	if err := os.RemoveAll(dir); err == nil {
		return nil
	}
	var left []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if len(left) < 5 && p != dir {
			left = append(left, owner(p))
		}
		return nil
	})
	return fmt.Errorf("could not remove all of %s (%s …): remove it as root: sudo rm -rf %s", dir, strings.Join(left, ", "), dir)
}
