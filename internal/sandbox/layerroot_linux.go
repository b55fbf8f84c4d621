package sandbox

import (
	"fmt"

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
