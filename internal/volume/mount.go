package volume

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/mountinfo"
)

// loopMajor is the block major number of loop devices.
const loopMajor = 7

// mountedAt returns the mount at point, if any.
func mountedAt(point string) (mountinfo.Mount, bool, error) {
	ms, err := mountinfo.Read("/proc/self/mountinfo")
	if err != nil {
		return mountinfo.Mount{}, false, err
	}
	var found mountinfo.Mount
	ok := false
	for _, m := range ms {
		if m.Point == point {
			found, ok = m, true // the last one is on top
		}
	}
	return found, ok, nil
}

// backingFile is the file behind the loop device of a mount's device
// number ("7:N"), "" if it is not a loop device.
func backingFile(dev string) string {
	major, _, _ := strings.Cut(dev, ":")
	if major != fmt.Sprint(loopMajor) {
		return ""
	}
	b, err := os.ReadFile(filepath.Join("/sys/dev/block", dev, "loop", "backing_file"))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// mount mounts volume id's image at its mount point unless a live mount
// of that image is there already, and returns its data directory (made,
// root's and 0755, if missing). Under s.mu.
func (s *Store) mount(id string) (string, error) {
	img, point := s.ImagePath(id), s.MountPoint(id)
	data := filepath.Join(point, DataDir)
	m, ok, err := mountedAt(point)
	if err != nil {
		return "", fmt.Errorf("volume %s: %w", id, err)
	}
	if ok {
		if m.FSType != "ext4" || backingFile(m.Dev) != img {
			return "", fmt.Errorf("volume %s: %s is mounted, but not from %s (%s %s)", id, point, img, m.FSType, m.Source)
		}
	} else {
		if err := s.attachMount(img, point); err != nil {
			return "", fmt.Errorf("volume %s: %w", id, err)
		}
	}
	fi, err := os.Lstat(data)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := os.Mkdir(data, 0o755); err != nil {
			return "", fmt.Errorf("volume %s: %w", id, err)
		}
		if err := os.Chmod(data, 0o755); err != nil { // past the umask
			return "", fmt.Errorf("volume %s: %w", id, err)
		}
	case err != nil:
		return "", fmt.Errorf("volume %s: %w", id, err)
	case !fi.IsDir():
		return "", fmt.Errorf("volume %s: %s is not a directory", id, data)
	}
	return data, nil
}

// attachMount checks img's filesystem, attaches it to a free loop device
// (which the kernel frees at unmount: LO_FLAGS_AUTOCLEAR) and mounts it at
// point, nosuid and nodev.
func (s *Store) attachMount(img, point string) error {
	if _, err := os.Stat(img); err != nil {
		return err
	}
	if err := os.MkdirAll(point, 0o755); err != nil {
		return err
	}
	// A loop device that has the image already (its filesystem still
	// mounted somewhere: a sandbox's mount namespace that outlived our
	// mount) is mounted again, which shares that filesystem; attaching
	// the image to a second device would mount it twice, and corrupt it.
	loop, err := attachedLoop(img)
	if err != nil {
		return err
	}
	if loop == nil {
		// A repair of what a crash left (exit status 1 and 2: fixed).
		if out, err := exec.Command("e2fsck", "-p", img).CombinedOutput(); err != nil {
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() > 2 {
				return fmt.Errorf("e2fsck %s: %v: %s", img, err, strings.TrimSpace(string(out)))
			}
		}
		if loop, err = attach(img); err != nil {
			return err
		}
	}
	// Closing the device, mounted or not, lets autoclear free it once
	// nothing uses it.
	defer loop.Close()
	if err := unix.Mount(loop.Name(), point, "ext4", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOATIME, ""); err != nil {
		return fmt.Errorf("mount %s (%s) at %s: %w", img, loop.Name(), point, err)
	}
	return nil
}

// attachedLoop opens the loop device img is attached to, nil if none.
func attachedLoop(img string) (*os.File, error) {
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil || strings.TrimSpace(string(b)) != img {
			continue
		}
		dev := "/dev/" + filepath.Base(filepath.Dir(filepath.Dir(f)))
		loop, err := os.OpenFile(dev, os.O_RDWR, 0)
		if err != nil {
			return nil, fmt.Errorf("%s is attached to %s: %w", img, dev, err)
		}
		// Still its device once open (not cleared meanwhile)?
		if b, err := os.ReadFile(f); err == nil && strings.TrimSpace(string(b)) == img {
			return loop, nil
		}
		loop.Close()
	}
	return nil, nil
}

// attach attaches img to a free loop device, open in the returned file.
func attach(img string) (*os.File, error) {
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("loop devices: %w", err)
	}
	defer ctl.Close()
	f, err := os.OpenFile(img, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	for range 32 {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return nil, fmt.Errorf("loop devices: LOOP_CTL_GET_FREE: %w", err)
		}
		dev := fmt.Sprintf("/dev/loop%d", n)
		if _, err := os.Stat(dev); errors.Is(err, fs.ErrNotExist) {
			// No devtmpfs node for a new device (a container's /dev).
			if err := unix.Mknod(dev, unix.S_IFBLK|0o600, int(unix.Mkdev(loopMajor, uint32(n)))); err != nil && !errors.Is(err, fs.ErrExist) {
				return nil, fmt.Errorf("loop devices: mknod %s: %w", dev, err)
			}
		}
		loop, err := os.OpenFile(dev, os.O_RDWR, 0)
		if err != nil {
			return nil, fmt.Errorf("loop devices: %w", err)
		}
		cfg := unix.LoopConfig{Fd: uint32(f.Fd())}
		cfg.Info.Flags = unix.LO_FLAGS_AUTOCLEAR
		copy(cfg.Info.File_name[:len(cfg.Info.File_name)-1], img)
		err = unix.IoctlLoopConfigure(int(loop.Fd()), &cfg)
		if err == nil {
			return loop, nil
		}
		loop.Close()
		if !errors.Is(err, unix.EBUSY) {
			return nil, fmt.Errorf("loop devices: LOOP_CONFIGURE %s: %w", dev, err)
		}
		// Another process took it first: ask for another.
	}
	return nil, fmt.Errorf("loop devices: no free device for %s", img)
}

// unmount unmounts volume id (which frees its loop device) and removes
// its mount point. Under s.mu.
func (s *Store) unmount(id string) error {
	point := s.MountPoint(id)
	for {
		_, ok, err := mountedAt(point)
		if err != nil {
			return fmt.Errorf("volume %s: %w", id, err)
		}
		if !ok {
			break
		}
		if err := unix.Unmount(point, 0); err != nil {
			if errors.Is(err, unix.EBUSY) {
				return errorf(ErrBusy, "volume %s: its filesystem is busy", id)
			}
			return fmt.Errorf("volume %s: unmount: %w", id, err)
		}
	}
	// The empty mount point goes too, unless it is busy: a mount
	// namespace made while the volume was mounted (a gVisor sandbox's
	// runsc, another program's) may hold a copy of the mount there, which
	// the host cannot take away. The directory then stays, empty and
	// harmless, and goes at a later unmount.
	if err := os.Remove(point); err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, unix.EBUSY) {
		return fmt.Errorf("volume %s: %w", id, err)
	}
	return nil
}

// UnmountAll unmounts every volume, for an operator taking the store
// away (and for tests); volumes mount again when next used.
func (s *Store) UnmountAll() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	for _, v := range s.vols {
		errs = append(errs, s.unmount(v.ID))
	}
	return errors.Join(errs...)
}
