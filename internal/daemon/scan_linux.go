package daemon

import (
	"path"
	"slices"

	"golang.org/x/sys/unix"
)

// scanClosed walks the filesystem of root (not the ones mounted below it)
// for directories that other users may not list or enter (not descended
// into) and files they may not read, skipping the directories in skip.
// What cannot be examined is taken as closed.
//
// It reads each directory through a descriptor and examines its entries
// relative to it (getdents64, then fstatat), so no path is resolved from
// the root again: a daemon scans the host's root (some hundreds of
// thousands of entries) at its start, and a walk by path took four times
// its CPU time.
func scanClosed(root string, skip []string) (dirs, files []string) {
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return []string{root}, nil
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return []string{root}, nil
	}
	s := &closedScan{dev: st.Dev, skip: skip, buf: make([]byte, 64<<10)}
	s.walk(fd, root)
	slices.Sort(s.dirs)
	slices.Sort(s.files)
	return s.dirs, s.files
}

// closedScan is the state of one scanClosed.
type closedScan struct {
	dev         uint64   // the root's filesystem
	skip        []string // directories not scanned
	buf         []byte   // getdents64's buffer, shared down the walk
	dirs, files []string // what is closed
}

// walk scans the directory open as fd, whose path is dir.
func (s *closedScan) walk(fd int, dir string) {
	var subdirs []string // opened once the listing is read, as buf is shared
	for {
		n, err := unix.Getdents(fd, s.buf)
		if err != nil {
			s.dirs = append(s.dirs, dir) // cannot be listed: closed
			return
		}
		if n <= 0 {
			break
		}
		for b := s.buf[:n]; len(b) >= 19; {
			reclen := int(b[16]) | int(b[17])<<8
			if reclen < 19 || reclen > len(b) {
				break
			}
			typ, name := b[18], b[19:reclen]
			b = b[reclen:]
			if i := slices.Index(name, 0); i >= 0 {
				name = name[:i]
			}
			if string(name) == "." || string(name) == ".." {
				continue
			}
			if typ != unix.DT_DIR && typ != unix.DT_REG && typ != unix.DT_UNKNOWN {
				continue // links, devices, sockets, fifos: nothing to read
			}
			n := string(name)
			if typ != unix.DT_REG && slices.Contains(s.skip, path.Join(dir, n)) {
				continue
			}
			var st unix.Stat_t
			if unix.Fstatat(fd, n, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
				continue
			}
			perm := st.Mode & 0o777
			switch st.Mode & unix.S_IFMT {
			case unix.S_IFDIR:
				if st.Dev != s.dev {
					continue // another filesystem: not in the layer
				}
				if perm&0o005 != 0o005 {
					s.dirs = append(s.dirs, path.Join(dir, n))
					continue
				}
				subdirs = append(subdirs, n)
			case unix.S_IFREG:
				if perm&0o004 == 0 {
					s.files = append(s.files, path.Join(dir, n))
				}
			}
		}
	}
	for _, name := range subdirs {
		p := path.Join(dir, name)
		sub, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			s.dirs = append(s.dirs, p) // cannot be listed: closed
			continue
		}
		s.walk(sub, p)
		unix.Close(sub)
	}
}
