package gvisor

import (
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/mountinfo"
)

// kernelFilesystems are the kinds of the host's kernel filesystems: what
// the host's processes, devices and kernel settings look like, not files
// of anyone's.
var kernelFilesystems = map[string]bool{
	"proc": true, "sysfs": true, "devtmpfs": true, "devpts": true, "mqueue": true,
	"cgroup": true, "cgroup2": true, "debugfs": true, "tracefs": true, "securityfs": true,
	"bpf": true, "configfs": true, "fusectl": true, "pstore": true, "efivarfs": true,
	"hugetlbfs": true, "nsfs": true, "binfmt_misc": true, "autofs": true, "rpc_pipefs": true,
	"selinuxfs": true, "binder": true,
}

// stateDirs are the mount points among mounts that are state directories
// of the tier: base, DefaultStateDir and its siblings named after it (a
// test's, a second daemon's).
func stateDirs(mounts []mountinfo.Mount, base string) []string {
	var out []string
	for _, m := range mounts {
		p := m.Point
		if p == base || p == DefaultStateDir || (strings.HasPrefix(p, DefaultStateDir+"-") && !strings.Contains(p[len(DefaultStateDir):], "/")) {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// trimHostRoot makes the copy of the host's mount tree at rootfs the
// root gVisor's gofer may serve:
//
//   - The tier's state directories (stateDirs) become empty read-only
//     tmpfs. Their copies hold the roots and layers of the sandboxes
//     running now (roots would nest, each in the next), and the
//     directories under them are the same directories, with the other
//     sandboxes' bundles and proxy sockets; gVisor's gofer, whose host ids
//     are every sandbox's, could read and connect to them.
//   - The copies of the host's kernel filesystems (/proc, /sys, /dev and
//     the like, wherever mounted) are detached, leaving the directories
//     they were mounted on. gVisor shows the sandbox kernel filesystems of
//     its own; through the host's, a Sentry that escaped gVisor's kernel
//     could ask the gofer for (or, with direct file access, open itself)
//     the host's processes' command lines and, through /proc/PID/root,
//     the files of every process of its host id.
func trimHostRoot(rootfs, base string) error {
	mounts, err := mountinfo.Read("/proc/self/mountinfo")
	if err != nil {
		return fmt.Errorf("root: %w", err)
	}
	slices.SortStableFunc(mounts, func(a, b mountinfo.Mount) int { return strings.Compare(a.Point, b.Point) })
	var dropped []string
	for _, d := range stateDirs(mounts, base) {
		t := filepath.Join(rootfs, d)
		// Its copies, stacked or not, then the directory under them.
		for range 8 {
			if unix.Unmount(t, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW) != nil {
				break
			}
		}
		if err := unix.Mount("hutch-state", t, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=0755,size=4k"); err != nil {
			return fmt.Errorf("root: hide the state directory %s: %w", d, err)
		}
		dropped = append(dropped, d)
	}
	for _, m := range mounts {
		if !kernelFilesystems[m.FSType] || inAny(m.Point, dropped) {
			continue // not one, or gone with its parent
		}
		err := unix.Unmount(filepath.Join(rootfs, m.Point), unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
		switch {
		case err == nil:
			dropped = append(dropped, m.Point)
		case errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOENT):
			// Not in the copy: hidden under a mount made later.
		default:
			return fmt.Errorf("root: the copy of %s: %w", m.Point, err)
		}
	}
	return nil
}

// submounts lists the host's mounts strictly inside the writable areas
// roots, parents first.
func submounts(roots []string) ([]mountinfo.Mount, error) {
	mounts, err := mountinfo.Read("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("writable areas: %w", err)
	}
	top := map[string]mountinfo.Mount{} // of mounts stacked on a point, the last
	for _, m := range mounts {
		if inAny(m.Point, roots) && !slices.Contains(roots, m.Point) {
			top[m.Point] = m
		}
	}
	out := slices.Collect(maps.Values(top))
	slices.SortFunc(out, func(a, b mountinfo.Mount) int { return strings.Compare(a.Point, b.Point) })
	return out, nil
}
