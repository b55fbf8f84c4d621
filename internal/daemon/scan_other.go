//go:build !linux

package daemon

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
)

// scanClosed walks the filesystem of root (not the ones mounted below it)
// for directories that other users may not list or enter (not descended
// into) and files they may not read, skipping the directories in skip.
// What cannot be examined is taken as closed.
func scanClosed(root string, skip []string) (dirs, files []string) {
	var rootDev uint64
	if fi, err := os.Lstat(root); err == nil {
		rootDev = devOf(fi)
	}
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if p == root {
			return nil
		}
		if slices.Contains(skip, p) {
			return filepath.SkipDir
		}
		if err != nil {
			if d != nil && d.IsDir() {
				dirs = append(dirs, p)
				return filepath.SkipDir
			}
			return nil
		}
		if !d.IsDir() && !d.Type().IsRegular() {
			return nil // links, devices, sockets, fifos: nothing to read
		}
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		perm := fi.Mode().Perm()
		if d.IsDir() {
			if devOf(fi) != rootDev {
				return filepath.SkipDir // another filesystem: not in the layer
			}
			if perm&0o005 != 0o005 {
				dirs = append(dirs, p)
				return filepath.SkipDir
			}
			return nil
		}
		if perm&0o004 == 0 {
			files = append(files, p)
		}
		return nil
	})
	return dirs, files
}
