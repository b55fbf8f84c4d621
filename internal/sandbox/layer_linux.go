package sandbox

import (
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// layerIDs is how many host ids (from 0) a sandbox with a writable root
// layer maps: its user namespace maps ids 0–layerIDs-1 onto RootMappedID
// and up, and the read-only root appears through an idmapped mount with
// that mapping, so that a file of host uid N is owned by uid N inside.
const layerIDs = 65536

// rootCapNumbers are the numbers of RootCapabilities.
func rootCapNumbers() []int {
	numbers := map[string]int{
		"chown": unix.CAP_CHOWN, "dac_override": unix.CAP_DAC_OVERRIDE, "fowner": unix.CAP_FOWNER,
		"fsetid": unix.CAP_FSETID, "kill": unix.CAP_KILL, "setgid": unix.CAP_SETGID,
		"setuid": unix.CAP_SETUID, "net_bind_service": unix.CAP_NET_BIND_SERVICE,
	}
	out := make([]int, 0, len(RootCapabilities))
	for _, name := range RootCapabilities {
		out = append(out, numbers[name])
	}
	return out
}

// layerInodeBytes is how many bytes of the layer's size buy one inode: a
// sandbox cannot exhaust the host's memory with empty files either.
const layerInodeBytes = 4096

// rootLayer makes the writable root of a sandbox whose user namespace is
// userns (ids 0–layerIDs-1 onto RootMappedID and up), as a detached
// overlay mount for it to attach as its root:
//
//   - lower: a clone of the host's root (that mount only), idmapped with
//     the sandbox's user namespace and read-only;
//   - upper and work: directories on a fresh tmpfs of l.SizeBytes, made by
//     hutch (the overlay's mounter, whose copy-ups keep the owners the
//     lower layer shows);
//   - in the upper layer beforehand: the workspace, owned by the sandbox's
//     root, every l.Hide directory, opaque, so that the host's contents
//     stay out of the view, and a whiteout for every l.Remove file.
//
// Everything but the returned descriptor is released: the mount holds its
// layers, and it ends when the sandbox's mount namespace lets it go.
func rootLayer(userns int, root string, l RootLayer, workspace string) (int, error) {
	lower, err := idmappedLower(root, userns)
	if err != nil {
		return -1, fmt.Errorf("root layer: %w", err)
	}
	defer unix.Close(lower)
	save := layerSave{keep: l.Keep, from: l.From}
	if l.From == "" && l.FromSnapshot != "" {
		save.from, save.shift = l.FromSnapshot, true
	}
	ovl, err := tmpfsOverlay([]int{lower}, layerTmpfs(l.SizeBytes), 0o755, func(tmpfs int) error {
		restored, err := save.apply(tmpfs)
		if err != nil {
			return err
		}
		// The workspace is made as the view shows the host's root:
		// nothing of what the layer hides is looked at (S5: a tenant's
		// path tells nothing of the host beyond the view).
		// A saved layer has it already, as the sandbox left it.
		if !restored {
			if err := layerDir(tmpfs, root, workspace, false, newLayerView(root, l)); err != nil {
				return fmt.Errorf("workspace %s: %w", workspace, err)
			}
		}
		for _, h := range l.Hide {
			if restored && inUpper(tmpfs, h) {
				continue // the sandbox's own now, or hidden already
			}
			if err := layerDir(tmpfs, root, h, true, nil); err != nil {
				return fmt.Errorf("hide %s: %w", h, err)
			}
		}
		for _, r := range l.Remove {
			if err := layerWhiteout(tmpfs, root, r); err != nil {
				return fmt.Errorf("remove %s: %w", r, err)
			}
		}
		return nil
	})
	if err != nil {
		return -1, fmt.Errorf("root layer: %w", err)
	}
	return ovl, nil
}

// sandboxUserns opens the user namespace of the sandbox whose PID 1 is
// pid, to idmap mounts with.
func sandboxUserns(pid int) (int, error) {
	fd, err := unix.Open(fmt.Sprintf("/proc/%d/ns/user", pid), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open sandbox user namespace: %w", err)
	}
	return fd, nil
}

// idmappedLower clones the tree at path (that mount only), idmapped with
// the user namespace userns and read-only: a lower layer whose files show
// the sandbox the ids they have on the host.
func idmappedLower(path string, userns int) (int, error) {
	l, err := unix.OpenTree(unix.AT_FDCWD, path, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("clone %s: %w", path, err)
	}
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP | unix.MOUNT_ATTR_RDONLY, Userns_fd: uint64(userns)}
	if err := unix.MountSetattr(l, "", unix.AT_EMPTY_PATH, &attr); err != nil {
		unix.Close(l)
		return -1, fmt.Errorf("idmapped mount of %s (filesystem without idmap support?): %w: %w", path, ErrKernelFeature, err)
	}
	return l, nil
}

// layerTmpfs are the options of the tmpfs a writable layer of size bytes
// lies on.
func layerTmpfs(size int64) [][2]string {
	return [][2]string{
		{"size", strconv.FormatInt(size, 10)},
		{"nr_inodes", strconv.FormatInt(max(size/layerInodeBytes, 1024), 10)},
		{"mode", "0755"},
	}
}

// tmpfsOverlay makes a detached overlay mount (nosuid, nodev) of lowers
// (descriptors, the top first) under an upper and a work directory on a
// fresh tmpfs of opts, made by hutch (the overlay's mounter, whose
// copy-ups keep the owners the lower layers show). The upper directory
// has mode upperMode and belongs to the sandbox's root; fill, if set,
// makes entries below it (tmpfs is the tmpfs, its paths "upper/...")
// before the overlay is made. The caller keeps lowers.
func tmpfsOverlay(lowers []int, opts [][2]string, upperMode uint32, fill func(tmpfs int) error) (int, error) {
	var fds []int
	defer func() { closeAll(fds) }()
	tmpfs, err := newFS("tmpfs", opts, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)
	if err != nil {
		return -1, err
	}
	fds = append(fds, tmpfs)
	if err := unix.Mkdirat(tmpfs, "work", 0o700); err != nil {
		return -1, err
	}
	if err := unix.Mkdirat(tmpfs, "upper", upperMode); err != nil {
		return -1, err
	}
	if err := unix.Fchownat(tmpfs, "upper", RootMappedID, RootMappedID, 0); err != nil {
		return -1, err
	}
	if fill != nil {
		if err := fill(tmpfs); err != nil {
			return -1, err
		}
	}
	var dirs [2]int
	for i, name := range []string{"upper", "work"} {
		fd, err := unix.Openat(tmpfs, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return -1, err
		}
		fds = append(fds, fd)
		dirs[i] = fd
	}
	return newFSWith("overlay", func(fs int) error {
		for _, l := range lowers {
			if err := unix.FsconfigSetFd(fs, "lowerdir+", l); err != nil {
				return fmt.Errorf("lowerdir+: %w", err)
			}
		}
		if err := unix.FsconfigSetFd(fs, "upperdir", dirs[0]); err != nil {
			return fmt.Errorf("upperdir: %w", err)
		}
		if err := unix.FsconfigSetFd(fs, "workdir", dirs[1]); err != nil {
			return fmt.Errorf("workdir: %w", err)
		}
		return nil
	}, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)
}

// imageLayer makes the root of a sandbox whose user namespace is userns
// from an image, as a detached overlay mount for it to attach as its root: the
// image's layers, each a clone of its directory in hutch's image store
// idmapped with the sandbox's user namespace (a file of the image's uid N
// is owned by uid N inside) and read-only, as the lower layers; upper and
// work on a fresh tmpfs of img.SizeBytes, owned by the sandbox's root, so
// that the sandbox may write its root (and make the mount points of what
// hutch binds in), in memory, until it ends.
func imageLayer(userns int, img ImageRoot, workspace string) (int, error) {
	var lowers []int
	defer func() { closeAll(lowers) }()
	for i := len(img.Layers) - 1; i >= 0; i-- { // overlayfs takes the top layer first
		l, err := idmappedLower(img.Layers[i], userns)
		if err != nil {
			return -1, fmt.Errorf("image root: layer %s: %w", filepath.Base(img.Layers[i]), err)
		}
		lowers = append(lowers, l)
	}
	var fill func(int) error
	if workspace != "" {
		// A served sandbox's workspace is made in its root, the
		// sandbox's own, with whatever directories lead to it (unless
		// the layer is one saved, which has it).
		fill = func(tmpfs int) error {
			if restored, err := img.save.apply(tmpfs); err != nil || restored {
				return err
			}
			rel, err := layerRel(workspace)
			if err != nil {
				return fmt.Errorf("workspace %s: %w", workspace, err)
			}
			cur := "upper"
			parts := strings.Split(rel, "/")
			for i, c := range parts {
				cur += "/" + c
				if err := unix.Mkdirat(tmpfs, cur, 0o755); err != nil && err != unix.EEXIST {
					return fmt.Errorf("workspace %s: %w", workspace, err)
				}
				uid, gid := RootMappedID, RootMappedID // the way there: the sandbox's root
				if i == len(parts)-1 {
					uid, gid = RootMappedID+img.UID, RootMappedID+img.GID // the image's user
				}
				if err := unix.Fchownat(tmpfs, cur, uid, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
					return fmt.Errorf("workspace %s: %w", workspace, err)
				}
			}
			return nil
		}
	}
	ovl, err := tmpfsOverlay(lowers, layerTmpfs(img.SizeBytes), 0o755, fill)
	if err != nil {
		return -1, fmt.Errorf("image root: %w", err)
	}
	return ovl, nil
}

// newFS makes a detached mount of a new filesystem of type typ with the
// string options opts.
func newFS(typ string, opts [][2]string, attrs int) (int, error) {
	return newFSWith(typ, func(fs int) error {
		for _, o := range opts {
			if err := unix.FsconfigSetString(fs, o[0], o[1]); err != nil {
				return fmt.Errorf("%s=%s: %w", o[0], o[1], err)
			}
		}
		return nil
	}, attrs)
}

// newFSWith makes a detached mount of a new filesystem of type typ, whose
// options config sets. A refusal carries the kernel's own words on it.
func newFSWith(typ string, config func(fs int) error, attrs int) (int, error) {
	fs, err := unix.Fsopen(typ, unix.FSOPEN_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("%s: %w", typ, err)
	}
	defer unix.Close(fs)
	fail := func(err error) (int, error) {
		if msg := fsLog(fs); msg != "" {
			return -1, fmt.Errorf("%s: %w (%s)", typ, err, msg)
		}
		return -1, fmt.Errorf("%s: %w", typ, err)
	}
	if err := config(fs); err != nil {
		return fail(err)
	}
	if err := unix.FsconfigCreate(fs); err != nil {
		return fail(err)
	}
	mnt, err := unix.Fsmount(fs, unix.FSMOUNT_CLOEXEC, attrs)
	if err != nil {
		return fail(err)
	}
	return mnt, nil
}

// fsLog drains the messages a filesystem context logged.
func fsLog(fs int) string {
	var msgs []string
	buf := make([]byte, 1024)
	for range 8 {
		n, err := unix.Read(fs, buf)
		if err != nil || n <= 0 {
			break
		}
		// Each message starts with its level: "e ", "w " or "i ".
		msg := strings.TrimSpace(string(buf[:n]))
		if len(msg) > 2 && msg[1] == ' ' && strings.ContainsRune("ewi", rune(msg[0])) {
			msg = msg[2:]
		}
		msgs = append(msgs, msg)
	}
	return strings.Join(msgs, "; ")
}

// layerDir makes dir (absolute, in the view) in the upper layer on the
// tmpfs at layer, its parents as the host's root has them (layerParents).
// dir itself is owned by the sandbox's root, mode 0755 — or, when hide is
// set, has the host's mode and owner and is opaque (empty in the view), and
// is skipped if the host has no directory there. With a view, the host's
// root is looked at only where the view shows it.
func layerDir(layer int, root, dir string, hide bool, view *layerView) error {
	rel, err := layerRel(dir)
	if err != nil {
		return err
	}
	var st unix.Stat_t
	err = view.lstatOr(root, rel, &st)
	isDir := err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR
	switch {
	case hide && !isDir:
		return nil // nothing of the host's to hide there
	case err == nil && !isDir:
		return fmt.Errorf("/%s: %w", rel, ErrNotDirInRoot)
	case err != nil && !errors.Is(err, unix.ENOENT):
		return err
	}
	if parent := filepath.Dir(rel); parent != "." {
		if err := layerParents(layer, root, parent, view); err != nil {
			return err
		}
	}
	mode, uid, gid := uint32(0o755), RootMappedID, RootMappedID
	if hide {
		mode, uid, gid = st.Mode&0o7777, layerID(st.Uid), layerID(st.Gid)
	}
	path := "upper/" + rel
	if err := unix.Mkdirat(layer, path, 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
		return err
	}
	if err := unix.Fchownat(layer, path, uid, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return err
	}
	if err := fchmodat(layer, path, mode); err != nil {
		return err
	}
	if hide {
		return setOpaque(layer, path)
	}
	return nil
}

// layerWhiteout makes file (absolute, in the view) absent from the view:
// a whiteout (a 0/0 character device) in the upper layer on the tmpfs at
// layer, its parents made as the host's root has them. A path the host has
// no file at (or whose parent is not a directory) needs none.
func layerWhiteout(layer int, root, file string) error {
	rel, err := layerRel(file)
	if err != nil {
		return err
	}
	var st unix.Stat_t
	if err := unix.Lstat(filepath.Join(root, rel), &st); err != nil {
		return nil
	}
	if dir := filepath.Dir(rel); dir != "." {
		if err := layerParents(layer, root, dir, nil); err != nil {
			return err
		}
	}
	err = unix.Mknodat(layer, "upper/"+rel, unix.S_IFCHR, 0)
	if errors.Is(err, unix.EEXIST) || errors.Is(err, unix.ENOTDIR) {
		return nil // already hidden or removed by an entry above it
	}
	return err
}

// layerRel is p, an absolute path in the view other than "/", relative to
// the root.
func layerRel(p string) (string, error) {
	rel := strings.Trim(filepath.Clean(p), "/")
	if !filepath.IsAbs(p) || rel == "" {
		return "", fmt.Errorf("%q is not an absolute path below /", p)
	}
	return rel, nil
}

// layerParents makes the directory rel (relative to the root) and its
// parents in the upper layer, unless made, as the host's root has them
// (the overlay shows an upper directory's own attributes, so they must
// merge with the lower ones unchanged); one the host lacks (or, with a
// view, the view does not show) is made for the sandbox's root, mode 0755.
func layerParents(layer int, root, rel string, view *layerView) error {
	parts := strings.Split(rel, "/")
	for i := range parts {
		sub := strings.Join(parts[:i+1], "/")
		var st unix.Stat_t
		err := view.lstatOr(root, sub, &st)
		switch {
		case errors.Is(err, unix.ENOENT):
			st = unix.Stat_t{Mode: unix.S_IFDIR | 0o755}
		case err != nil:
			return err
		case st.Mode&unix.S_IFMT != unix.S_IFDIR:
			return fmt.Errorf("/%s: %w", sub, ErrNotDirInRoot)
		}
		path := "upper/" + sub
		if err := unix.Mkdirat(layer, path, 0o700); err != nil {
			if errors.Is(err, unix.EEXIST) {
				continue
			}
			return err
		}
		// A directory the host lacks (st zero but its mode) goes to the
		// sandbox's root: layerID(0).
		if err := unix.Fchownat(layer, path, layerID(st.Uid), layerID(st.Gid), unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return err
		}
		if err := fchmodat(layer, path, st.Mode&0o7777); err != nil {
			return err
		}
	}
	return nil
}

// layerID is the host id the lower layer shows for host id id: itself
// moved to the sandbox's range, or the overflow id outside it.
func layerID(id uint32) int {
	if id < layerIDs {
		return RootMappedID + int(id)
	}
	return RootMappedID + 65534
}

// fchmodat sets the mode of path below dir (the tmpfs of a layer, where
// nothing can swap a directory for a link while hutch works).
func fchmodat(dir int, path string, mode uint32) error {
	fd, err := unix.Openat(dir, path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Fchmod(fd, mode)
}

// setOpaque marks the upper directory path opaque: the overlay shows none of
// the lower directory's entries below it.
func setOpaque(dir int, path string) error {
	fd, err := unix.Openat(dir, path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Fsetxattr(fd, "trusted.overlay.opaque", []byte("y"), 0)
}

// layerView is what a sandbox's view shows of the host's root under a root
// layer: the host's entries, but nothing below a hidden directory and no
// removed file (nor anything below one).
type layerView struct {
	root   string
	hide   []string        // relative to the root
	remove map[string]bool // relative to the root
}

// newLayerView is the view l gives of root.
func newLayerView(root string, l RootLayer) *layerView {
	v := &layerView{root: root, remove: make(map[string]bool, len(l.Remove))}
	for _, h := range l.Hide {
		if rel, err := layerRel(h); err == nil {
			v.hide = append(v.hide, rel)
		}
	}
	for _, r := range l.Remove {
		if rel, err := layerRel(r); err == nil {
			v.remove[rel] = true
		}
	}
	return v
}

// lstat is lstat(2) of rel (relative to the root) as the view shows it:
// ENOENT below a hidden directory or at or below a removed file, where the
// host is not looked at; the host's answer elsewhere.
func (v *layerView) lstat(rel string, st *unix.Stat_t) error {
	for _, h := range v.hide {
		if strings.HasPrefix(rel, h+"/") {
			return unix.ENOENT
		}
	}
	for p := rel; p != "." && p != "/" && p != ""; p = filepath.Dir(p) {
		if v.remove[p] {
			return unix.ENOENT
		}
	}
	return unix.Lstat(filepath.Join(v.root, rel), st)
}

// lstatOr is v.lstat, or the host's lstat of rel below root for a nil v.
func (v *layerView) lstatOr(root, rel string, st *unix.Stat_t) error {
	if v == nil {
		return unix.Lstat(filepath.Join(root, rel), st)
	}
	return v.lstat(rel, st)
}

// CheckWorkspace reports whether the workspace (absolute) can be made in a
// root layer l over root (the host's "/" when empty): an error wrapping
// ErrNotDirInRoot names the first component of its path that the view
// shows as something other than a directory (a file, a symbolic link).
// Like the layer itself, it looks at the host's root only where the view
// shows it, so that its answer tells nothing of what the layer hides.
func (l RootLayer) CheckWorkspace(root, workspace string) error {
	if root == "" {
		root = "/"
	}
	rel, err := layerRel(workspace)
	if err != nil {
		return err
	}
	if len(l.Lowers) > 0 {
		return nil // made in the image's root, whatever the image holds there
	}
	v := newLayerView(root, l)
	parts := strings.Split(rel, "/")
	for i := range parts {
		sub := strings.Join(parts[:i+1], "/")
		var st unix.Stat_t
		err := v.lstat(sub, &st)
		switch {
		case errors.Is(err, unix.ENOENT):
			return nil // made in the layer from here on
		case err != nil:
			return fmt.Errorf("/%s: %w", sub, err)
		case st.Mode&unix.S_IFMT != unix.S_IFDIR:
			return fmt.Errorf("/%s: %w", sub, ErrNotDirInRoot)
		}
	}
	return nil
}
