package sandbox

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// MountIdmapped mounts at targets[i] a clone of paths[i] (with the mounts
// below it), nosuid and nodev, idmapped with a user namespace of uidMap
// and gidMap (lines "ON-DISK SHOWN COUNT" as in /proc/PID/uid_map): a file
// of on-disk id N shows as the host id the map gives N, and one of an id
// the maps leave out as nobody (read-only). For a tier whose sandbox runs
// its command as host ids of no one's (a user namespace that maps the
// command's ids there), mapping the writable areas' owner onto those ids
// makes what the command writes land on the host as the owner's, as in
// the namespace tier. The targets must exist; unmounting them is the
// caller's.
func MountIdmapped(paths, targets []string, uidMap, gidMap string) error {
	return mountIdmapped(paths, targets, uidMap, gidMap, false)
}

// MountIdmappedAlone is MountIdmapped of path's mount alone, without the
// mounts below it.
func MountIdmappedAlone(path, target, uidMap, gidMap string) error {
	return mountIdmapped([]string{path}, []string{target}, uidMap, gidMap, true)
}

func mountIdmapped(paths, targets []string, uidMap, gidMap string, alone bool) error {
	if len(paths) != len(targets) {
		return fmt.Errorf("idmapped mounts: %d paths for %d targets", len(paths), len(targets))
	}
	if len(paths) == 0 {
		return nil
	}
	userns, err := idmapUsernsMaps(uidMap, gidMap)
	if err != nil {
		return err
	}
	defer unix.Close(userns)
	areas := make([]bindSrc, len(paths))
	for i, p := range paths {
		areas[i] = bindSrc{Path: p, FD: -1, Alone: alone}
	}
	fds, err := idmapWith(userns, areas)
	if err != nil {
		return err
	}
	defer closeAll(fds)
	for i, fd := range fds {
		attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}
		if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|uint(recursiveUnless(alone)), &attr); err != nil {
			return fmt.Errorf("idmapped mount of %q: attributes: %w", paths[i], err)
		}
		if err := unix.MoveMount(fd, "", unix.AT_FDCWD, targets[i], unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			return fmt.Errorf("idmapped mount of %q at %s: %w", paths[i], targets[i], err)
		}
	}
	return nil
}

// recursiveUnless is AT_RECURSIVE, or 0 for a mount alone.
func recursiveUnless(alone bool) int {
	if alone {
		return 0
	}
	return unix.AT_RECURSIVE
}
