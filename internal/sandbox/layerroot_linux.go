package sandbox

import (
	"errors"
	"fmt"
	"strings"

	"golang.org/x/sys/unix"
)

// LayerIDs is how many ids a root layer maps (0–LayerIDs-1 inside, onto
// RootMappedID and up on the host).
const LayerIDs = layerIDs

// MountLayerRoot attaches at target, for a tier that runs its own kernel
// (gVisor), the writable root the namespace tier gives a served sandbox
// (RootLayer: the host's root at root, or l.Lowers, under a tmpfs of
// l.SizeBytes holding the workspace, the hidden directories and the
// removed files), or with img, the root of a sandbox from an image (the
// image's layers under a tmpfs of img.SizeBytes; l is then nil). The
// lower layers are idmapped so that a host (or image) file of id N is
// owned by host id RootMappedID+N: a runtime whose user namespace maps ids
// 0–LayerIDs-1 onto RootMappedID and up shows them as their own ids, and
// what the sandbox writes lands on the tmpfs, never on the host. target's
// mount is unmounted (with MNT_DETACH) to release it.
func MountLayerRoot(target, root string, l *RootLayer, img *ImageRoot, workspace string) error {
	m := fmt.Sprintf("0 %d %d\n", RootMappedID, layerIDs)
	userns, err := idmapUsernsMaps(m, m)
	if err != nil {
		return err
	}
	defer unix.Close(userns)
	var fd int
	switch {
	case l != nil && len(l.Lowers) > 0:
		fd, err = imageLayer(userns, ImageRoot{Layers: l.Lowers, SizeBytes: l.SizeBytes, UID: l.UID, GID: l.GID, save: layerSave{keep: l.Keep, from: l.From}}, workspace)
	case l != nil:
		if l.SizeBytes <= 0 {
			return fmt.Errorf("a writable root layer needs a size")
		}
		fd, err = rootLayer(userns, root, *l, workspace)
	case img != nil:
		if len(img.Layers) == 0 || img.SizeBytes <= 0 {
			return fmt.Errorf("an image root needs layers and a size")
		}
		fd, err = imageLayer(userns, *img, workspace)
	default:
		return fmt.Errorf("no root layer to mount")
	}
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.MoveMount(fd, "", unix.AT_FDCWD, target, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("root layer: attach at %s: %w", target, err)
	}
	return nil
}

// MountVolume attaches at target, an existing directory of the host, for
// a tier that runs its own kernel (gVisor), a clone of the host directory
// dir (and of the mounts below it) idmapped as MountLayerRoot's lower
// layers are: a file of host id N is owned by host id RootMappedID+N, so
// that the runtime's user namespace (0–LayerIDs-1 onto RootMappedID and
// up) shows it as N's, and what the sandbox writes as N lands in dir as
// N's. The mount is nosuid and nodev; target's mount is unmounted (with
// MNT_DETACH) to release it.
func MountVolume(target, dir string) error {
	m := fmt.Sprintf("0 %d %d\n", RootMappedID, layerIDs)
	userns, err := idmapUsernsMaps(m, m)
	if err != nil {
		return err
	}
	defer unix.Close(userns)
	fds, err := idmapWith(userns, []bindSrc{{Path: dir, FD: -1}})
	if err != nil {
		return err
	}
	defer closeAll(fds)
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}
	if err := unix.MountSetattr(fds[0], "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &attr); err != nil {
		return fmt.Errorf("volume %s: attributes: %w", dir, err)
	}
	if err := unix.MoveMount(fds[0], "", unix.AT_FDCWD, target, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("volume %s: attach at %s: %w", dir, target, err)
	}
	return nil
}

// MakeMountPoint makes the directory at (absolute, clean, in the view)
// in the sandbox's root attached at rootfs (MountLayerRoot), with the
// directories on its way that are missing, each owned by the sandbox's
// root (host id RootMappedID), mode 0755; ones that exist are kept. Every
// component is resolved inside rootfs with no symbolic link allowed
// (openat2's RESOLVE_IN_ROOT and RESOLVE_NO_SYMLINKS): a link on the way
// (an image's /mnt -> /etc) is refused, with an error wrapping
// ErrVolumePath, rather than followed elsewhere in the view or out of it.
func MakeMountPoint(rootfs, at string) error {
	rel, err := layerRel(at)
	if err != nil {
		return err
	}
	root, err := unix.Open(rootfs, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("mount point %s: the root: %w", at, err)
	}
	defer unix.Close(root)
	how := unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
	parts := strings.Split(rel, "/")
	parent, err := unix.Dup(root)
	if err != nil {
		return err
	}
	defer func() { unix.Close(parent) }()
	for i, part := range parts {
		sub := strings.Join(parts[:i+1], "/")
		made := false
		switch err := unix.Mkdirat(parent, part, 0o755); {
		case err == nil:
			made = true
		case !errors.Is(err, unix.EEXIST):
			return fmt.Errorf("mount point %s: make /%s: %w", at, sub, err)
		}
		fd, err := unix.Openat2(root, sub, &how)
		switch {
		case errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.EXDEV):
			return fmt.Errorf("mount point %s: /%s: %w", at, sub, ErrVolumePath)
		case err != nil:
			return fmt.Errorf("mount point %s: /%s: %w", at, sub, err)
		}
		unix.Close(parent)
		parent = fd
		if made {
			if err := unix.Fchownat(fd, "", RootMappedID, RootMappedID, unix.AT_EMPTY_PATH); err != nil {
				return fmt.Errorf("mount point %s: /%s: %w", at, sub, err)
			}
		}
	}
	return nil
}
