package landlock

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Plan computes the rules Restrict adds for c on a kernel with Landlock ABI
// abi, and what that ABI cannot enforce. It makes no Landlock system call;
// it resolves symbolic links and lists the directories on the way to each
// DenyRead path. Rules are sorted by path, one per path, their access masked
// to what abi handles. A rule on a path that does not exist is kept (Restrict
// skips it), and a rule's access may include directory rights for a path
// that turns out to be a file (Restrict masks them).
//
// A directory on the way to a DenyRead path that cannot be listed
// (permission denied) gets no rules inside: all of it stays unreadable.
func Plan(c Config, abi int) ([]Rule, []string, error) {
	if abi < 1 {
		return nil, nil, fmt.Errorf("landlock plan: %w", ErrNotSupported)
	}
	if err := c.Validate(); err != nil {
		return nil, nil, err
	}
	dropped := lostFeatures(min(abi, maxABI), c.Scope)

	r := resolver{}
	deny := &denyNode{}
	denied := make([]string, 0, len(c.DenyRead))
	for _, p := range c.DenyRead {
		p = r.resolve(p)
		deny.insert(p)
		denied = append(denied, p)
	}

	access := map[string]uint64{}
	grant := func(p string, a uint64) { access[p] |= a }

	grantors := []struct {
		paths  []string
		access uint64
		what   string
	}{
		{c.ReadWrite, writeTreeAccess, "writable"},
		{c.Devices, deviceAccess, "device path"},
	}
	for _, g := range grantors {
		for _, p := range g.paths {
			p = r.resolve(p)
			grant(p, g.access)
			for _, d := range denied {
				if within(d, p) {
					dropped = append(dropped, fmt.Sprintf("deny-read %s: inside %s %s, not enforced by landlock", d, g.what, p))
				}
			}
		}
	}

	for _, root := range c.ReadOnly {
		root = r.resolve(root)
		n := deny.find(root)
		switch {
		case n == nil:
			grant(root, readTreeAccess)
		case n.deny:
			// The root itself is denied.
		default:
			// Only carve a directory: listing opens it, and opening a
			// FIFO would block. A file cannot contain a denied path.
			if fi, err := os.Stat(root); err == nil && !fi.IsDir() {
				grant(root, readFileAccess)
				continue
			}
			if err := carve(root, n, grant); err != nil {
				return nil, dropped, err
			}
		}
	}

	fsAccess, _ := handled(min(abi, maxABI))
	rules := make([]Rule, 0, len(access))
	for p, a := range access {
		if a &= fsAccess; a != 0 {
			rules = append(rules, Rule{Path: p, Access: a})
		}
	}
	slices.SortFunc(rules, func(a, b Rule) int { return strings.Compare(a.Path, b.Path) })
	return rules, dropped, nil
}

// carve grants read access to everything in directory dir except the
// DenyRead paths below n, which stands for dir in the deny trie: dir itself
// gets only READ_DIR, entries on the way to a denied path are carved in turn,
// denied entries get nothing, all others the full read rights.
func carve(dir string, n *denyNode, grant func(string, uint64)) error {
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, fs.ErrPermission):
		return nil
	case err != nil:
		return fmt.Errorf("landlock plan: list %q: %w", dir, err)
	}
	grant(dir, AccessReadDir)
	for _, e := range entries {
		p := join(dir, e.Name())
		kid := n.kids[e.Name()]
		switch {
		case kid != nil && kid.deny:
		case e.Type()&fs.ModeSymlink != 0:
			// A rule would follow the link and grant its target.
		case !e.IsDir():
			grant(p, readFileAccess)
		case kid != nil:
			if err := carve(p, kid, grant); err != nil {
				return err
			}
		default:
			grant(p, readTreeAccess)
		}
	}
	return nil
}

// denyNode is a node of the trie of DenyRead paths, keyed by path component;
// the root stands for "/". deny marks a denied path; a denied node keeps its
// children, which matter for a ReadOnly root inside it.
type denyNode struct {
	deny bool
	kids map[string]*denyNode
}

// insert adds the absolute, clean path p.
func (n *denyNode) insert(p string) {
	for _, c := range split(p) {
		next := n.kids[c]
		if next == nil {
			if n.kids == nil {
				n.kids = map[string]*denyNode{}
			}
			next = &denyNode{}
			n.kids[c] = next
		}
		n = next
	}
	n.deny = true
}

// find returns the node of p, or nil when no DenyRead path is at or below p.
func (n *denyNode) find(p string) *denyNode {
	for _, c := range split(p) {
		if n = n.kids[c]; n == nil {
			return nil
		}
	}
	return n
}

// split returns the components of the absolute, clean path p.
func split(p string) []string {
	if p == "/" {
		return nil
	}
	return strings.Split(p[1:], "/")
}

// join appends name to the absolute directory dir.
func join(dir, name string) string {
	if dir == "/" {
		return "/" + name
	}
	return dir + "/" + name
}

// within reports whether p is root or below it.
func within(p, root string) bool {
	return root == "/" || p == root || strings.HasPrefix(p, root+"/")
}

// resolver resolves symbolic links in paths like filepath.EvalSymlinks, but
// carries on past a component that does not exist (the rest is taken as is)
// and remembers what it found at each location: the paths of one Config
// share most of their directories, so each is looked at once.
type resolver map[string]location

// location is what a resolver found at a path whose directory is resolved.
type location struct {
	missing bool   // nothing there, or nothing we may look at
	link    string // the target, when it is a symbolic link
}

// maxLinks bounds the symbolic links followed for one path (as the kernel's
// ELOOP does); past it the rest of the path is taken as is.
const maxLinks = 40

// resolve returns the absolute path p with symbolic links resolved as far
// as it exists.
func (r resolver) resolve(p string) string {
	// Not filepath.Clean: "link/.." is the parent of the link's target.
	out, rest := "/", strings.Split(p, "/")
	missing, links := false, 0
	for len(rest) > 0 {
		c := rest[0]
		rest = rest[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			out, missing = filepath.Dir(out), false
			continue
		}
		next := join(out, c)
		if missing {
			out = next
			continue
		}
		loc, ok := r[next]
		if !ok {
			fi, err := os.Lstat(next)
			switch {
			case err != nil:
				loc.missing = true
			case fi.Mode()&fs.ModeSymlink != 0:
				loc.link, err = os.Readlink(next)
				loc.missing = err != nil || loc.link == ""
			}
			r[next] = loc
		}
		switch {
		case loc.link == "" || loc.missing || links == maxLinks:
			out, missing = next, loc.missing || loc.link != ""
		default:
			links++
			if filepath.IsAbs(loc.link) {
				out = "/"
			}
			rest = append(strings.Split(loc.link, "/"), rest...)
		}
	}
	return out
}
