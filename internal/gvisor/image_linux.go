package gvisor

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/sandbox"
)

// checkImage checks the image root of a hutch run (nil: the host's root):
// layers, a size for what the sandbox writes to its root, and the image
// user's ids within those the view maps.
func checkImage(img *sandbox.ImageRoot) error {
	if img == nil {
		return nil
	}
	switch {
	case len(img.Layers) == 0:
		return errors.New("an image without layers")
	case img.SizeBytes <= 0:
		return errors.New("a sandbox from an image needs a size for what it writes to its root")
	}
	for _, id := range append([]int{img.UID, img.GID}, img.Groups...) {
		if id < 0 || id >= sandbox.LayerIDs {
			return fmt.Errorf("tier %q: the image's user: id %d: hutch maps the image's ids 0–%d only", policy.TierGVisor, id, sandbox.LayerIDs-1)
		}
	}
	return nil
}

// imageRoot makes the root of a hutch run from an image at v.rootfs: the
// image's layers, read-only and idmapped (an image file of id N is N's
// inside), under a tmpfs of the image's size that takes what the sandbox
// writes to its root, in memory, until it ends (the namespace tier's
// image root: sandbox.MountLayerRoot). The workspace and the writable
// areas are bound in (buildSpec), at mount points gVisor's gofer makes in
// that tmpfs, never on the host.
func imageRoot(v *view, img *sandbox.ImageRoot) error {
	if err := os.Mkdir(v.rootfs, 0o755); err != nil {
		return fmt.Errorf("root: %w", err)
	}
	if err := sandbox.MountLayerRoot(v.rootfs, "", nil, img, ""); err != nil {
		return err
	}
	v.groups = img.Groups
	if img.Dir != "" {
		v.dir = img.Dir
	}
	return nil
}

// lookRoot is the root the command is looked up in: the image's ("" for
// the host's, whose view lookPath's hide describes).
func (v *view) lookRoot() string {
	if v.image == nil {
		return ""
	}
	return v.rootfs
}

// inView is where host path p (of a writable area) shows in the view: the
// workspace and what is below it at workspace_at, everything else at its
// host path.
func (v *view) inView(p string) string {
	ws := v.prot.Spec.Filesystem.Workspace
	if v.workspaceAt == "" || v.workspaceAt == ws || !within(p, ws) {
		return p
	}
	return filepath.Join(v.workspaceAt, p[len(ws):])
}

// statIn stats p in the tree at root as a process whose root it is would
// (symbolic links resolved inside it, never out of it).
func statIn(root, p string, st *unix.Stat_t) error {
	rfd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(rfd)
	fd, err := unix.Openat2(rfd, p, &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS})
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Fstat(fd, st)
}
