package sandbox

import (
	"fmt"
	"strings"

	"golang.org/x/sys/unix"
)

// MountOver mounts the protected paths of p over the writable areas,
// each p.Roots[i] being reachable at areas[i] (gVisor's idmapped trees of
// them, or the roots themselves in a mount namespace of the caller's, as
// the microVM tier's virtiofsd serves them), as the namespace tier mounts
// them in its view: each pinned directory bound over itself, each
// protected path and placeholder bound read-only over itself, each
// info/exclude copy bound read-only at its target. A tier that serves an
// area with what is mounted in it (an rbind, virtiofsd's view) then needs
// one mount per area, and what the sandbox may not change is read-only
// where its files are written on the host. A path is looked up in its
// area without following a symbolic link or leaving it; one that cannot
// be is not mounted: the caller decides (MountOver returns the paths it
// mounted).
func (p *Protection) MountOver(areas []string) (onHost map[string]bool, err error) {
	onHost = map[string]bool{}
	fds := make([]int, len(areas))
	for i := range fds {
		fds[i] = -1
	}
	defer func() {
		for _, fd := range fds {
			if fd >= 0 {
				unix.Close(fd)
			}
		}
	}()
	// target opens path in its innermost area; -1 when it cannot be.
	target := func(path string) int {
		i := innermost(path, p.Roots)
		if i < 0 || i >= len(areas) || path == p.Roots[i] {
			return -1
		}
		if fds[i] < 0 {
			fd, err := unix.Open(areas[i], unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
			if err != nil {
				return -1
			}
			fds[i] = fd
		}
		rel := strings.TrimPrefix(path, strings.TrimSuffix(p.Roots[i], "/")+"/")
		fd, err := unix.Openat2(fds[i], rel, &unix.OpenHow{
			Flags:   unix.O_PATH | unix.O_CLOEXEC | unix.O_NOFOLLOW,
			Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
		})
		if err != nil {
			return -1
		}
		var st unix.Stat_t
		if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT == unix.S_IFLNK {
			unix.Close(fd)
			return -1
		}
		return fd
	}
	// attach moves the detached mount m onto t, read-only (ro).
	attach := func(desc string, m, t int, ro bool) error {
		defer unix.Close(m)
		if ro {
			attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}
			if err := unix.MountSetattr(m, "", unix.AT_EMPTY_PATH, &attr); err != nil {
				return fmt.Errorf("%s: read-only: %w", desc, err)
			}
		}
		if err := unix.MoveMount(m, "", t, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
			return fmt.Errorf("%s: %w", desc, err)
		}
		return nil
	}
	over := func(desc, path string, ro bool) error {
		t := target(path)
		if t < 0 {
			return nil
		}
		defer unix.Close(t)
		m, err := unix.OpenTree(t, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE|unix.AT_EMPTY_PATH)
		if err != nil {
			return fmt.Errorf("%s %s: %w", desc, path, err)
		}
		if err := attach(desc+" "+path, m, t, ro); err != nil {
			return err
		}
		onHost[path] = true
		return nil
	}
	for _, path := range p.Pin {
		if err := over("pin", path, false); err != nil {
			return nil, err
		}
	}
	for _, path := range p.ReadOnly {
		if err := over("protect", path, true); err != nil {
			return nil, err
		}
	}
	for _, f := range p.Files {
		t := target(f.Target)
		if t < 0 {
			continue
		}
		m, err := unix.OpenTree(unix.AT_FDCWD, f.Source, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
		if err == nil {
			err = attach("bind "+f.Target, m, t, true)
		}
		unix.Close(t)
		if err != nil {
			return nil, fmt.Errorf("bind %s: %w", f.Target, err)
		}
		onHost[f.Target] = true
	}
	return onHost, nil
}

// innermost returns the index of the innermost of roots that holds p, -1
// when none does.
func innermost(p string, roots []string) int {
	best := -1
	for i, r := range roots {
		if pathUnder(p, r) && (best < 0 || len(r) > len(roots[best])) {
			best = i
		}
	}
	return best
}
