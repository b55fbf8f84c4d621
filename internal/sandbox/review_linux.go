package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// Review mode (Config.ReviewDir): the workspace is the lower layer of an
// overlay whose upper layer and work directory are the change set's
// directories on the host, so that the user's files do not change and
// what the sandbox wrote stays there, for a person to look at and apply
// (package changes). The overlay is mounted with userxattr: opaque
// directories are marked with user.overlay.opaque and whiteouts are the
// 0:0 character devices, whoever mounts it; redirect_dir and metacopy are
// off, so that every change is a whole file (or a whiteout) in the upper
// layer. Submounts of the workspace are not part of the overlay (overlayfs
// does not cross mounts): in review mode they show as their mount points.
//
//   - Root's hutch builds the overlay (reviewLayer): the workspace below,
//     idmapped with the sandbox's user namespace and read-only, the change
//     set's directories above, as they are; the Landlock rule that lets
//     the sandbox write it is added to the ruleset on the overlay's own
//     mount.
//   - An ordinary user's first process builds it in its own user
//     namespace (builder.reviewOverlay), from the same paths, and adds the
//     same rule.
//
// Every other protection of the workspace (deny-write binds, placeholders'
// covers, git directories, deny-read masks) is made on the view's paths,
// so it applies to the overlay as it does to the workspace.
//
// Under a root layer (a served sandbox's root over the host's or an
// image's), root's hutch builds the same overlay with the sandbox's user
// namespace, which maps ids 0–65535: a host file of id N shows as N, and
// what the sandbox writes keeps the host ids it has (RootMappedID+N). The
// layer holds the directory the overlay is attached over (at
// workspace_at), and the workspace's protections are computed on the
// host directory as for a host's root (roots are the workspace alone) and
// made at workspace_at. The sandbox keeps every mode in its own root (no
// host-write seccomp rules, which would refuse a package manager's setuid
// files): the change set reaches the workspace only through package
// changes, which applies package hostperm's rule.

// reviewDirs checks dir, a change set's directory, before the overlay is
// built: dir/upper and dir/work must be directories of one filesystem,
// reached without a symbolic link.
func reviewDirs(dir string) error {
	if !filepath.IsAbs(dir) {
		return fmt.Errorf("review directory %q: not an absolute path", dir)
	}
	var dev uint64
	for i, name := range []string{"upper", "work"} {
		var st unix.Stat_t
		p := filepath.Join(dir, name)
		if err := unix.Lstat(p, &st); err != nil {
			return fmt.Errorf("review directory: %w", &os.PathError{Op: "lstat", Path: p, Err: err})
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			return fmt.Errorf("review directory: %s is not a directory", p)
		}
		if i > 0 && st.Dev != dev {
			return fmt.Errorf("review directory: %s/upper and %s/work are on different filesystems", dir, dir)
		}
		dev = st.Dev
	}
	return nil
}

// reviewLayer builds (as root) the overlay of a workspace in review mode:
// ws below, idmapped with userns and read-only, and dir/upper (with
// dir/work) above. The upper layer is not idmapped: the overlay's mounter
// (hutch, root) must reach its work directory with its own ids, which an
// idmapping would not show. What the sandbox writes there keeps the ids
// the sandbox has on the host (uid:gid, RootMappedID), in root's change
// set store; package changes gives applied files the workspace owner's.
func reviewLayer(userns int, ws, dir string, uid, gid int) (int, error) {
	var st unix.Stat_t
	if err := unix.Stat(ws, &st); err != nil {
		return -1, fmt.Errorf("review: %w", err)
	}
	up := filepath.Join(dir, "upper")
	// The workspace's root as the sandbox sees it is the upper
	// directory's: the sandbox's own, with the workspace's mode.
	if err := unix.Lchown(up, uid, gid); err != nil {
		return -1, fmt.Errorf("review: %w", err)
	}
	if err := unix.Fchmodat(unix.AT_FDCWD, up, st.Mode&0o7777&^(unix.S_ISUID|unix.S_ISGID), 0); err != nil {
		return -1, fmt.Errorf("review: %w", err)
	}
	lower, err := idmappedLower(ws, userns)
	if err != nil {
		return -1, fmt.Errorf("review: %w", err)
	}
	defer unix.Close(lower)
	var dirs [2]int
	for i, name := range []string{"upper", "work"} {
		fd, err := unix.Open(filepath.Join(dir, name), unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			closeAll(dirs[:i])
			return -1, fmt.Errorf("review: %s/%s: %w", dir, name, err)
		}
		dirs[i] = fd
	}
	defer closeAll(dirs[:])
	mnt, err := newFSWith("overlay", func(fs int) error {
		if err := unix.FsconfigSetFlag(fs, "userxattr"); err != nil {
			return fmt.Errorf("userxattr: %w", err)
		}
		if err := unix.FsconfigSetFd(fs, "lowerdir+", lower); err != nil {
			return fmt.Errorf("lowerdir+: %w", err)
		}
		if err := unix.FsconfigSetFd(fs, "upperdir", dirs[0]); err != nil {
			return fmt.Errorf("upperdir: %w", err)
		}
		if err := unix.FsconfigSetFd(fs, "workdir", dirs[1]); err != nil {
			return fmt.Errorf("workdir: %w", err)
		}
		return nil
	}, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)
	if err != nil {
		return -1, fmt.Errorf("review: the workspace's overlay (the change set's directory %s must be on a filesystem that overlayfs takes as an upper layer, with user extended attributes, such as ext4, xfs, btrfs or tmpfs; not an overlay): %w", dir, err)
	}
	return mnt, nil
}

// reviewOverlay appends the making, by an ordinary user's first process in
// its own user namespace, of the overlay of a workspace in review mode:
// ws below, read-only, dir/upper and dir/work above, with userxattr; with
// access, the Landlock rule that lets the sandbox write it. It returns
// the mount's slot.
func (b *builder) reviewOverlay(ws, dir string, access uint64) int8 {
	p := &b.p
	const desc = "review"
	at := k(uintptr(unix.AT_FDCWD & 0xffffffff))
	low, up, wk := p.slot(), p.slot(), p.slot()
	p.call(desc+": workspace "+ws, low, unix.SYS_OPENAT, at, p.str(ws), k(unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC), k(0))
	p.call(desc+": upper", up, unix.SYS_OPENAT, at, p.str(filepath.Join(dir, "upper")), k(unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC), k(0))
	p.call(desc+": work", wk, unix.SYS_OPENAT, at, p.str(filepath.Join(dir, "work")), k(unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC), k(0))
	fs, mnt := p.slot(), p.slot()
	p.call(desc+": overlay", fs, unix.SYS_FSOPEN, p.str("overlay"), k(unix.FSOPEN_CLOEXEC))
	p.call(desc+": overlay userxattr", -1, unix.SYS_FSCONFIG, s(fs), k(unix.FSCONFIG_SET_FLAG), p.str("userxattr"), k(0), k(0))
	b.lowerdir(desc, fs, low)
	p.call(desc+": overlay upperdir", -1, unix.SYS_FSCONFIG, s(fs), k(unix.FSCONFIG_SET_FD), p.str("upperdir"), k(0), s(up))
	p.call(desc+": overlay workdir", -1, unix.SYS_FSCONFIG, s(fs), k(unix.FSCONFIG_SET_FD), p.str("workdir"), k(0), s(wk))
	p.call(desc+": overlay create", -1, unix.SYS_FSCONFIG, s(fs), k(unix.FSCONFIG_CMD_CREATE), k(0), k(0), k(0))
	p.call(desc+": overlay mount", mnt, unix.SYS_FSMOUNT, s(fs), k(unix.FSMOUNT_CLOEXEC), k(unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV))
	p.close(fs)
	p.close(low)
	p.close(up)
	p.close(wk)
	if access != 0 && b.ruleset >= 0 {
		attr := &unix.LandlockPathBeneathAttr{Allowed_access: access}
		p.keep = append(p.keep, attr)
		p.store(&attr.Parent_fd, mnt)
		p.call(desc+": landlock rule", -1, unix.SYS_LANDLOCK_ADD_RULE, ci(b.ruleset), k(unix.LANDLOCK_RULE_PATH_BENEATH), ptr(attr), k(0))
	}
	return mnt
}

// review marks the workspace's writable area of cfg (ws) for review mode
// with the change set's directory dir, after checking that it can be;
// owner is the host uid and gid of the workspace's root in the view
// (root's hutch: the overlay's upper directory).
func review(cfg *initConfig, dir, ws string, owner [2]int, asRoot bool) error {
	if err := reviewDirs(dir); err != nil {
		return err
	}
	if !asRoot && !overlayFDs() {
		return fmt.Errorf("review mode: %w: this kernel cannot layer the workspace for an ordinary user (Linux 6.8 or later can)", ErrKernelFeature)
	}
	var wsStat unix.Stat_t
	if err := unix.Stat(ws, &wsStat); err != nil {
		return fmt.Errorf("review mode: workspace: %w", err)
	}
	if wsStat.Mode&unix.S_IFMT != unix.S_IFDIR {
		return fmt.Errorf("review mode: the workspace %s is not a directory", ws)
	}
	found := false
	for i, w := range cfg.Writable {
		if w.Path == ws {
			cfg.Writable[i].Review, cfg.Writable[i].ReviewOwner = dir, owner
			found = true
			continue
		}
		// Every write under the workspace goes to the change set: another
		// writable area inside it, or the workspace under another name,
		// would take writes around it.
		var st unix.Stat_t
		if under(w.Path, []string{ws}) || (unix.Stat(w.Path, &st) == nil && st.Dev == wsStat.Dev && st.Ino == wsStat.Ino) {
			return fmt.Errorf("review mode: the writable path %s is the workspace or inside it, and the sandbox would write it around the change set; leave it out (its writes are in the change set anyway)", w.Path)
		}
	}
	if !found {
		return fmt.Errorf("review mode: the workspace %s is not a writable area", ws)
	}
	return nil
}

// reviewLayerRoot is l, the root layer of a sandbox whose workspace ws (a
// host directory) is in review mode and shown at at, made fit for it. The
// overlay of review mode is attached over at, a directory made in the
// layer as a served sandbox's workspace is. Over the host's root (root;
// not an image's layers, where nothing of the host's is in the view):
//
//   - the host's ws, where the view shows it elsewhere than at at, is
//     hidden (an empty directory): a copy-on-write copy of the workspace
//     without its protections (deny-read masks are made at at);
//   - the change set's directory dir must be out of the view (below a
//     directory the layer hides, or a removed path, or denied to read,
//     deny): the sandbox would read the change sets there, its own and
//     others', as the host's root has them.
func reviewLayerRoot(l RootLayer, root, ws, at, dir string, deny []string) (RootLayer, error) {
	if len(l.Lowers) > 0 {
		return l, nil
	}
	v := newLayerView(root, l)
	shown := func(p string) bool {
		rel, err := filepath.Rel(root, p)
		if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
			return false // not below the root the view shows
		}
		if under(p, privateWritable) {
			return false // the sandbox's own tmpfs covers it
		}
		var st unix.Stat_t
		return rel == "." || v.lstat(rel, &st) == nil
	}
	if shown(dir) && !under(dir, deny) {
		return l, fmt.Errorf("review mode: the change set's directory %s is in the sandbox's root (the host's, as a layer shows it): hide a directory above it (RootLayer.Hide) or deny reading it", dir)
	}
	if at != ws && shown(ws) {
		l.Hide = append(slices.Clip(l.Hide), ws)
	}
	return l, nil
}
