package image

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// erofsDir is the store's directory of EROFS images, one an image
// (EROFS), named by its manifest digest's hex.
const erofsDir = "erofs"

// EROFS returns the path of a read-only EROFS filesystem image of img's
// root, its layers merged as a sandbox sees them stacked (whiteouts and
// opaque directories applied, owners, modes, times and extended attributes
// kept): what a virtual machine mounts as its root from a block device.
// It is built from the store's layers the first time (mkfs.erofs, of
// Debian's erofs-utils; seconds for an image of a GiB), kept in the store
// beside them, and found there after. The image and the file are held in
// use until release (idempotent) is called: Prune and Evict leave them
// alone until then.
func (s *Store) EROFS(img *Image) (path string, release func(), err error) {
	if !isDigest(img.Digest) {
		return "", nil, fmt.Errorf("image store: %q is not a sha256 digest", img.Digest)
	}
	dirs, releaseLayers, err := s.Stack(img)
	if err != nil {
		return "", nil, err
	}
	defer func() {
		if err != nil {
			releaseLayers()
		}
	}()
	dir := filepath.Join(s.dir, erofsDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", nil, fmt.Errorf("image store: %w", err)
	}
	hex := strings.TrimPrefix(img.Digest, "sha256:")
	path = filepath.Join(dir, hex+".erofs")
	// The use lock is held shared while the file is in use (and taken
	// exclusive, without waiting, by Prune to remove one no image names);
	// the build lock is held by the one building it.
	use, build := filepath.Join(dir, hex+".lock"), filepath.Join(dir, hex+".build")
	for {
		shared, err := flockHow(use, unix.LOCK_SH)
		if err != nil {
			return "", nil, err
		}
		if _, err := os.Stat(path); err == nil {
			var once sync.Once
			return path, func() { once.Do(func() { shared(); releaseLayers() }) }, nil
		}
		shared()
		building, err := flock(build)
		if err != nil {
			return "", nil, err
		}
		var berr error
		if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
			berr = buildEROFS(dirs, path)
		}
		building()
		if err := berr; err != nil {
			return "", nil, fmt.Errorf("image %s: its EROFS root: %w", img.Digest, err)
		}
	}
}

// BuildEROFS writes an EROFS filesystem image of the layer directories
// dirs (bottom first, in the store's form: whiteouts and opaque
// directories as overlayfs reads them) merged, to out, as EROFS builds an
// image's root: for a root of an image's layers and more (a snapshot's).
// out's directory holds the build's temporary files too.
func BuildEROFS(dirs []string, out string) error { return buildEROFS(dirs, out) }

// mkfsEROFS is erofs-utils' mkfs.erofs.
const mkfsEROFS = "mkfs.erofs"

// buildEROFS writes an EROFS image of the layer directories dirs (bottom
// first) stacked, to out (through a temporary file beside it, renamed
// when whole). The stack is a read-only overlay mount, attached while
// mkfs.erofs reads it.
func buildEROFS(dirs []string, out string) error {
	mkfs, err := exec.LookPath(mkfsEROFS)
	if err != nil {
		return fmt.Errorf("%s (Debian's package erofs-utils, which scripts/guest-kernel.sh installs): %w", mkfsEROFS, err)
	}
	if len(dirs) == 1 {
		// Overlayfs wants two lower layers without an upper one: an
		// empty one goes under the image's.
		empty := filepath.Join(filepath.Dir(out), "empty")
		if err := os.Mkdir(empty, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
		dirs = []string{empty, dirs[0]}
	}
	mnt, err := stackedView(dirs)
	if err != nil {
		return err
	}
	defer unix.Close(mnt)
	// mkfs.erofs resolves the path it is given: a detached mount would
	// resolve to the host's root. The view is attached for it, on a
	// directory of its own beside out (in the store, root's only), and
	// detached again after.
	at, err := os.MkdirTemp(filepath.Dir(out), "view-")
	if err != nil {
		return err
	}
	defer detachAll(at)
	if err := unix.MoveMount(mnt, "", unix.AT_FDCWD, at, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("attach the layers' view: %w", err)
	}
	tmp := out + ".tmp"
	_ = os.Remove(tmp)
	// The files' own times are kept.
	cmd := exec.Command(mkfs, "--quiet", "--preserve-mtime", tmp, at)
	if b, err := cmd.CombinedOutput(); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("%s: %w: %s", mkfsEROFS, err, strings.TrimSpace(string(b)))
	}
	if err := os.Chmod(tmp, 0o600); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, out); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return nil
}

// detachAll detaches every mount on the directory at and removes it.
// Where at's parent is a shared mount, attaching the view there can
// stack a copy propagated back on it (seen once: the directory stayed
// busy after one detach), so it detaches until nothing is mounted there
// (EINVAL), a bounded number of times.
func detachAll(at string) {
	for i := 0; i < 16 && unix.Unmount(at, unix.MNT_DETACH) == nil; i++ {
	}
	_ = os.Remove(at)
}

// stackedView is a detached read-only overlay mount of the layer
// directories dirs (bottom first).
func stackedView(dirs []string) (int, error) {
	if len(dirs) == 0 {
		return -1, errors.New("an image without layers")
	}
	var fds []int
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	for i := len(dirs) - 1; i >= 0; i-- { // overlayfs takes the top layer first
		fd, err := unix.Open(dirs[i], unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return -1, fmt.Errorf("layer %s: %w", filepath.Base(dirs[i]), err)
		}
		fds = append(fds, fd)
	}
	fs, err := unix.Fsopen("overlay", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("overlay: %w", err)
	}
	defer unix.Close(fs)
	for _, fd := range fds {
		if err := unix.FsconfigSetFd(fs, "lowerdir+", fd); err != nil {
			return -1, fmt.Errorf("overlay: lowerdir+: %w", err)
		}
	}
	if err := unix.FsconfigCreate(fs); err != nil {
		return -1, fmt.Errorf("overlay of %d layers: %w", len(dirs), err)
	}
	mnt, err := unix.Fsmount(fs, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOSUID)
	if err != nil {
		return -1, fmt.Errorf("overlay: mount: %w", err)
	}
	return mnt, nil
}

// erofsBytes is the disk space the EROFS root of the image of manifest
// digest digest takes, 0 when none was built.
func (s *Store) erofsBytes(digest string) int64 {
	var st unix.Stat_t
	if unix.Stat(filepath.Join(s.dir, erofsDir, strings.TrimPrefix(digest, "sha256:")+".erofs"), &st) != nil {
		return 0
	}
	return st.Blocks * 512
}

// pruneEROFS removes the EROFS roots of images no longer in the store
// that no sandbox uses, with their locks, and the views a build killed
// left attached more than a minute ago.
func (s *Store) pruneEROFS() {
	dir := filepath.Join(s.dir, erofsDir)
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		name := e.Name()
		if strings.HasPrefix(name, "view-") {
			if fi, err := e.Info(); err == nil && time.Since(fi.ModTime()) > time.Minute {
				_ = unix.Unmount(filepath.Join(dir, name), unix.MNT_DETACH)
				_ = os.Remove(filepath.Join(dir, name))
			}
			continue
		}
		hex, ok := strings.CutSuffix(name, ".erofs")
		if !ok {
			continue
		}
		if _, err := os.Lstat(s.recordPath("sha256:" + hex)); !errors.Is(err, os.ErrNotExist) {
			continue // its image is in the store
		}
		release, err := flockHow(filepath.Join(dir, hex+".lock"), unix.LOCK_EX|unix.LOCK_NB)
		if err != nil {
			continue // a sandbox uses it
		}
		_ = os.Remove(filepath.Join(dir, name))
		_ = os.Remove(filepath.Join(dir, hex+".build"))
		_ = os.Remove(filepath.Join(dir, hex+".lock"))
		release()
	}
}
