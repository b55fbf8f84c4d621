package guest

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// The initramfs's directories where the root is assembled before the init
// switches into it.
const (
	lowerDir  = "/root-lower"
	layerDir  = "/root-layer"
	mergedDir = "/root-merged"
)

// switchRoot mounts the virtiofs share tagged tag read-only (or, for
// RootBlock, the EROFS filesystem of /dev/vda), an overlay
// of it under a tmpfs (of layerSize bytes, 0 for no bound but the
// guest's memory), the share "workspace" at workspace in it (or, with
// local, a directory made there in the layer, owned by owner), moves
// /proc, /sys and /dev there, gives it a /tmp, and makes it the root (the
// initramfs's way: move it onto / and chroot, as the initramfs cannot be
// pivoted away). The init stays PID 1 and goes on in the new root. It
// returns a descriptor of the layer's tmpfs (O_PATH), which the new root
// does not show, for exportLayer.
func switchRoot(tag, workspace string, layerSize int64, local bool, owner [2]int) (layer int, err error) {
	layer = -1
	defer func() {
		if err != nil && layer >= 0 {
			unix.Close(layer)
			layer = -1
		}
	}()
	for _, d := range []string{lowerDir, layerDir, mergedDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return layer, err
		}
	}
	if dev, ok := strings.CutPrefix(tag, "block:"); ok {
		if err := mountBlock("/dev/"+dev, lowerDir); err != nil {
			return layer, err
		}
	} else if err := mountVirtiofs(tag, lowerDir, unix.MS_RDONLY|unix.MS_NODEV); err != nil {
		return layer, err
	}
	layerOpts := "mode=0755"
	if layerSize > 0 {
		layerOpts += ",size=" + strconv.FormatInt(layerSize, 10)
	}
	if err := unix.Mount("tmpfs", layerDir, "tmpfs", unix.MS_NODEV, layerOpts); err != nil {
		return layer, fmt.Errorf("mount the root's layer: %w", err)
	}
	if layer, err = unix.Open(layerDir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
		return layer, fmt.Errorf("open the root's layer: %w", err)
	}
	upper, work := filepath.Join(layerDir, "upper"), filepath.Join(layerDir, "work")
	for _, d := range []string{upper, work} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return layer, err
		}
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", lowerDir, upper, work)
	if err := unix.Mount("overlay", mergedDir, "overlay", unix.MS_NODEV, opts); err != nil {
		return layer, fmt.Errorf("mount the root's overlay: %w", err)
	}
	for _, d := range []string{"proc", "sys", "dev", "tmp", "root", "home", "var/tmp", "run"} {
		if err := os.MkdirAll(filepath.Join(mergedDir, d), 0o755); err != nil {
			return layer, err
		}
	}
	for _, d := range []string{"tmp", "var/tmp", "run"} {
		mode := "mode=1777"
		if d == "run" {
			mode = "mode=0755"
		}
		if err := unix.Mount("tmpfs", filepath.Join(mergedDir, d), "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, mode); err != nil {
			return layer, fmt.Errorf("mount /%s: %w", d, err)
		}
	}
	// The workspace last: it may be under /tmp.
	ws := filepath.Join(mergedDir, workspace)
	if err := os.MkdirAll(ws, 0o755); err != nil {
		return layer, err
	}
	if !local {
		if err := mountVirtiofs("workspace", ws, unix.MS_NODEV); err != nil {
			return layer, err
		}
	} else if err := os.Lchown(ws, owner[0], owner[1]); err != nil {
		return layer, fmt.Errorf("the workspace's owner: %w", err)
	}
	for _, d := range []string{"/proc", "/sys", "/dev"} {
		if err := unix.Mount(d, filepath.Join(mergedDir, d), "", unix.MS_MOVE, ""); err != nil {
			return layer, fmt.Errorf("move %s into the root: %w", d, err)
		}
	}
	if err := unix.Chdir(mergedDir); err != nil {
		return layer, err
	}
	if err := unix.Mount(".", "/", "", unix.MS_MOVE, ""); err != nil {
		return layer, fmt.Errorf("move the root onto /: %w", err)
	}
	if err := unix.Chroot("."); err != nil {
		return layer, fmt.Errorf("chroot: %w", err)
	}
	return layer, unix.Chdir("/")
}

// mountVirtiofs mounts the virtiofs share tagged tag on dir, waiting up to
// portWait for its device to be probed.
func mountVirtiofs(tag, dir string, flags uintptr) error {
	return mountProbed(fmt.Sprintf("the virtiofs share %q on %s", tag, dir), func() error {
		return unix.Mount(tag, dir, "virtiofs", flags, "")
	})
}

// mountBlock mounts the EROFS filesystem of the block device dev on dir,
// read-only, waiting up to portWait for the device to be probed.
func mountBlock(dev, dir string) error {
	return mountProbed("the EROFS root "+dev+" on "+dir, func() error {
		return unix.Mount(dev, dir, "erofs", unix.MS_RDONLY|unix.MS_NODEV, "")
	})
}

// mountProbed tries mount until it succeeds or portWait has passed: a
// device the kernel has not probed yet fails it until then.
func mountProbed(what string, mount func() error) error {
	deadline := time.Now().Add(portWait)
	for {
		err := mount()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("mount %s: %w", what, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
