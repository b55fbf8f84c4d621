package sandbox

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/policy"
)

// dirNames answers "may this path exist?" for many paths at the cost of
// one directory listing per parent instead of a lookup per path: the
// default deny lists name some 200 paths, most of which a given machine
// does not have.
type dirNames struct {
	buf     []byte
	listing map[string]map[string]bool // directory → its names; nil when it does not exist
	unknown map[string]bool            // directories that cannot be listed
	known   map[string]bool            // directories known to exist, whose parents need no listing
}

// newDirNames returns a dirNames that takes the directories exist for
// existing (their parents are not listed to find them).
func newDirNames(exist ...string) *dirNames {
	d := &dirNames{buf: make([]byte, 16<<10), listing: map[string]map[string]bool{}, unknown: map[string]bool{}, known: map[string]bool{}}
	for _, e := range exist {
		d.known[e] = true
	}
	return d
}

// mayExist reports whether p (absolute, clean) may exist: false only when
// a directory on its way was listed and lacks the next name.
func (d *dirNames) mayExist(p string) bool {
	if p == "/" || d.known[p] {
		return true
	}
	parent := filepath.Dir(p)
	if d.unknown[parent] {
		return true
	}
	names, listed := d.listing[parent]
	if !listed {
		if !d.mayExist(parent) {
			d.listing[parent] = nil
			return false
		}
		fd, err := unix.Open(parent, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
				d.listing[parent] = nil
				return false
			}
			d.unknown[parent] = true
			return true
		}
		names = map[string]bool{}
		readDir(fd, d.buf, func(name string, _ byte) { names[name] = true })
		unix.Close(fd)
		d.listing[parent] = names
	}
	return names[filepath.Base(p)]
}

// presentOrOwn keeps the paths that may exist, and every path under one of
// own (filesystems of the sandbox's own, and writable areas, where a path
// may appear after hutch looked).
func presentOrOwn(paths, own []string, exist ...string) []string {
	d := newDirNames(exist...)
	var out []string
	for _, p := range paths {
		if under(p, own) || d.mayExist(filepath.Clean(p)) {
			out = append(out, p)
		}
	}
	return out
}

// realPaths replaces, in s, the workspace and the allow_write paths by
// their real paths (symbolic links resolved), and every deny and allow
// path below one of them accordingly. The paths are the user's own choice,
// resolved before the sandbox exists; everything hutch does on the host
// below them afterwards follows no symbolic link.
func realPaths(s *policy.Spec) error {
	f := &s.Filesystem
	type move struct{ from, to string }
	var moves []move
	real := func(p string) (string, error) {
		r, err := filepath.EvalSymlinks(p)
		if err == nil && r != p {
			moves = append(moves, move{p, r})
		}
		return r, err
	}
	ws, err := real(f.Workspace)
	if err != nil {
		return fmt.Errorf("workspace %q: %w", f.Workspace, err)
	}
	f.Workspace = ws
	allow := make([]string, 0, len(f.AllowWrite))
	for _, p := range f.AllowWrite {
		if r, err := real(p); err == nil {
			p = r
		}
		allow = append(allow, p)
	}
	f.AllowWrite = allow
	if len(moves) == 0 {
		return nil
	}
	// The longest prefix first: an allow_write path inside the workspace.
	slices.SortFunc(moves, func(a, b move) int { return len(b.from) - len(a.from) })
	rewrite := func(paths []string) []string {
		out := make([]string, len(paths))
		for i, p := range paths {
			out[i] = p
			for _, m := range moves {
				if rest, ok := strings.CutPrefix(p, m.from); ok && (rest == "" || rest[0] == '/') {
					out[i] = m.to + rest
					break
				}
			}
		}
		return out
	}
	f.DenyWrite, f.DenyRead, f.AllowRead = rewrite(f.DenyWrite), rewrite(f.DenyRead), rewrite(f.AllowRead)
	return nil
}
