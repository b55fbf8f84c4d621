package sandbox

import (
	"errors"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// dirNames answers "may this path exist?" for many paths at the cost of
// one directory listing per parent instead of a lookup per path: the
// default deny lists name some 200 paths, most of which a given machine
// does not have.
type dirNames struct {
	buf     []byte
	listing map[string]map[string]bool // directory → its names; nil when it does not exist
	unknown map[string]bool            // directories that cannot be listed
}

func newDirNames() *dirNames {
	return &dirNames{buf: make([]byte, 16<<10), listing: map[string]map[string]bool{}, unknown: map[string]bool{}}
}

// mayExist reports whether p (absolute, clean) may exist: false only when
// a directory on its way was listed and lacks the next name.
func (d *dirNames) mayExist(p string) bool {
	if p == "/" {
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
func presentOrOwn(paths, own []string) []string {
	d := newDirNames()
	var out []string
	for _, p := range paths {
		if under(p, own) || d.mayExist(filepath.Clean(p)) {
			out = append(out, p)
		}
	}
	return out
}
