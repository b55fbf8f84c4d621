package microvm

import (
	"fmt"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/sandbox"
)

// protectWorkspace runs on the thread whose mount namespace the virtiofsd
// processes copy (Share.Mount), before they start: it mounts prot's
// protected paths over the workspace as the other tiers do
// (sandbox.Protection.MountOver: each pinned directory bound over
// itself, each protected path and placeholder bound read-only over
// itself, each info/exclude copy read-only at its target), and covers
// the deny-read paths in the workspace with emptyFile or emptyDir. The
// guest is served that view: a write, rename or removal there fails on
// the host, in virtiofsd, whatever the guest's kernel or its root does.
//
// MountOver follows no symbolic link. A protected path it left out
// because a link leads to it (the path itself, or a directory on the way)
// is bound at the link's target when that lies in the workspace: the
// guest resolves links in its own view, where nothing but the workspace
// is the host's writable files, so a target elsewhere is no way to the
// host's.
func protectWorkspace(prot *sandbox.Protection, emptyFile, emptyDir string) error {
	onHost, err := prot.MountOver(prot.Roots)
	if err != nil {
		return fmt.Errorf("microvm: protected paths: %w", err)
	}
	// linked binds src read-only (or over itself read-write, for a pin)
	// at the target in the workspace that the link-following path p
	// reaches, if any.
	linked := func(src, p string, ro bool) error {
		if onHost[p] {
			return nil
		}
		real, err := filepath.EvalSymlinks(p)
		if err != nil || !under(real, prot.Roots) || onHost[real] {
			return nil // nothing there, or not in the workspace
		}
		if src == "" {
			src = real
		}
		if err := bindOver(src, real, ro); err != nil {
			return fmt.Errorf("microvm: protected path %s: %w", p, err)
		}
		onHost[real] = true
		return nil
	}
	for _, p := range prot.Pin {
		if err := linked("", p, false); err != nil {
			return err
		}
	}
	for _, p := range prot.ReadOnly {
		if err := linked("", p, true); err != nil {
			return err
		}
	}
	for _, f := range prot.Files {
		if err := linked(f.Source, f.Target, true); err != nil {
			return err
		}
	}
	var hidden []string
	for _, d := range prot.DenyRead {
		if !under(d, prot.Roots) || under(d, hidden) {
			continue // hidden in the root's view, not shared, or under a directory hidden already
		}
		hidden = append(hidden, d)
		src := emptyFile
		if prot.Dirs[d] {
			src = emptyDir
		}
		if err := bindOver(src, d, true); err != nil {
			return fmt.Errorf("microvm: deny-read path %s: %w", d, err)
		}
	}
	return nil
}

// bindOver binds src at dst (both existing), read-only, nosuid and nodev
// with ro.
func bindOver(src, dst string, ro bool) error {
	if err := unix.Mount(src, dst, "", unix.MS_BIND, ""); err != nil {
		return err
	}
	if !ro {
		return nil
	}
	return unix.Mount("", dst, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, "")
}
