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
	"github.com/hutch-sandbox/hutch/internal/sandbox"
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

// protectAreas mounts the protected paths of p on the host, in the
// writable areas' idmapped trees (p.Roots[i] mounted at areas[i]), as the
// namespace tier mounts them in its view: each pinned directory bound
// over itself, each protected path and placeholder bound read-only over
// itself, each info/exclude copy bound read-only at its target. The spec
// binds an area with what is mounted in it (rbind), so gVisor sets up one
// mount per area rather than one per path (each a connection to its gofer
// and a mount of gVisor's, the bulk of its start-up in a repository); what
// the sandbox may not change is read-only on the host, where the gofer
// writes. A path is looked up in its area without following a symbolic
// link or leaving it; one that cannot be is left to the spec (it returns
// the paths it mounted).
func protectAreas(p *sandbox.Protection, areas []string) (onHost map[string]bool, err error) {
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
		if within(p, r) && (best < 0 || len(r) > len(roots[best])) {
			best = i
		}
	}
	return best
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
