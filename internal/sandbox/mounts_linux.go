package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// stagingDir is where init attaches the sandbox's new root before
// pivot_root. It is replaced only inside the sandbox's mount namespace.
const stagingDir = "/tmp"

// devices are the host device nodes bound into the sandbox's /dev.
var devices = []string{"null", "zero", "full", "random", "urandom", "tty"}

// devLinks are the symlinks of the sandbox's /dev.
var devLinks = [][2]string{
	{"ptmx", "pts/ptmx"}, {"fd", "/proc/self/fd"}, {"stdin", "/proc/self/fd/0"},
	{"stdout", "/proc/self/fd/1"}, {"stderr", "/proc/self/fd/2"},
}

// mounter builds the sandbox's filesystem view under root (a directory of
// the init's mount namespace) and pivots into it. Every mount target is
// resolved with RESOLVE_IN_ROOT, so a symlink in the view (say, one the
// sandbox planted in its workspace on an earlier run) resolves inside the
// view and never reaches the host (S5).
type mounter struct {
	root   string
	rootFD int
	masks  int // detached read-only tmpfs holding an empty file "f" and an empty directory "d"
}

// setupMounts builds the whole filesystem view and pivots into it.
func setupMounts(cfg initConfig, fds []int) (dropped []string, err error) {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return nil, fmt.Errorf("make mounts private: %w", err)
	}
	// Clone every source before the tree changes.
	src := "/"
	if cfg.Root != "" && cfg.Root != "host" {
		src = cfg.Root
	}
	rootTree, err := cloneTree(src, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)
	if err != nil {
		return nil, fmt.Errorf("root %q: %w", src, err)
	}
	defer unix.Close(rootTree)
	writable := make([]int, len(cfg.Writable))
	for i, w := range cfg.Writable {
		if w.FD >= 0 && w.FD < len(fds) {
			writable[i] = fds[w.FD]
			if err := setattr(writable[i], unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV, 0); err != nil {
				return nil, fmt.Errorf("writable %q: %w", w.Path, err)
			}
			continue
		}
		if writable[i], err = cloneTree(w.Path, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV); err != nil {
			return nil, fmt.Errorf("writable %q: %w", w.Path, err)
		}
		defer unix.Close(writable[i])
	}
	devs := make([]int, len(devices))
	for i, d := range devices {
		if devs[i], err = cloneTree("/dev/"+d, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NOEXEC); err != nil {
			return nil, fmt.Errorf("device /dev/%s: %w", d, err)
		}
		defer unix.Close(devs[i])
	}
	m := &mounter{root: stagingDir}
	if m.masks, err = newMasks(); err != nil {
		return nil, err
	}
	defer unix.Close(m.masks)

	if err := unix.MoveMount(rootTree, "", unix.AT_FDCWD, stagingDir, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return nil, fmt.Errorf("attach root: %w", err)
	}
	if m.rootFD, err = unix.Open(m.root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
		return nil, fmt.Errorf("open new root: %w", err)
	}
	defer unix.Close(m.rootFD)

	tmpOpts := "mode=1777"
	if cfg.TmpBytes > 0 {
		tmpOpts += fmt.Sprintf(",size=%d", cfg.TmpBytes)
	}
	if err := m.mount("tmpfs", "/tmp", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, tmpOpts); err != nil {
		return nil, err
	}
	if cfg.PrivateHome != "" {
		opts := "mode=0700"
		if cfg.TmpBytes > 0 {
			opts += fmt.Sprintf(",size=%d", cfg.TmpBytes)
		}
		if err := m.mount("tmpfs", cfg.PrivateHome, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
			return nil, err
		}
	}
	if err := m.mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return nil, err
	}
	if err := m.mount("sysfs", "/sys", "sysfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		// The cloned host /sys is already read-only; keep it.
		dropped = append(dropped, "a private /sys (the host's is shown read-only)")
	}
	if err := m.setupDev(devs, tmpOpts); err != nil {
		return nil, err
	}
	for i, w := range cfg.Writable {
		if err := m.attach(writable[i], w.Path); err != nil {
			return nil, fmt.Errorf("writable %q: %w", w.Path, err)
		}
	}
	for _, p := range cfg.Pin {
		if err := m.rebind(p, 0); err != nil {
			return nil, fmt.Errorf("pin %q: %w", p, err)
		}
	}
	for _, p := range cfg.DenyWrite {
		if err := m.rebind(p, unix.MOUNT_ATTR_RDONLY); err != nil {
			return nil, fmt.Errorf("protect %q: %w", p, err)
		}
	}
	for _, p := range effectiveDenyRead(cfg.DenyRead, cfg.AllowRead) {
		if err := m.mask(p); err != nil {
			return nil, fmt.Errorf("deny read %q: %w", p, err)
		}
	}
	return dropped, m.pivot(cfg.Dir)
}

// cloneTree makes a detached recursive copy of the mount tree at path with
// attrs set on every mount of it.
func cloneTree(path string, attrs uint64) (int, error) {
	fd, err := unix.OpenTree(unix.AT_FDCWD, path, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
	if err != nil {
		return -1, fmt.Errorf("clone mount: %w", err)
	}
	if err := setattr(fd, attrs, 0); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

func setattr(fd int, set, clr uint64) error {
	attr := unix.MountAttr{Attr_set: set, Attr_clr: clr, Propagation: unix.MS_PRIVATE}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &attr); err != nil {
		return fmt.Errorf("set mount attributes: %w", err)
	}
	return nil
}

// newMasks makes the detached read-only tmpfs whose empty file and empty
// directory (both mode 000) are mounted over deny-read paths.
func newMasks() (int, error) {
	fs, err := unix.Fsopen("tmpfs", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("masks: fsopen tmpfs: %w", err)
	}
	defer unix.Close(fs)
	if err := unix.FsconfigSetString(fs, "size", "4k"); err != nil {
		return -1, fmt.Errorf("masks: %w", err)
	}
	if err := unix.FsconfigSetString(fs, "mode", "0555"); err != nil {
		return -1, fmt.Errorf("masks: %w", err)
	}
	if err := unix.FsconfigCreate(fs); err != nil {
		return -1, fmt.Errorf("masks: create tmpfs: %w", err)
	}
	mnt, err := unix.Fsmount(fs, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC)
	if err != nil {
		return -1, fmt.Errorf("masks: fsmount: %w", err)
	}
	f, err := unix.Openat(mnt, "f", unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err == nil {
		unix.Close(f)
		err = unix.Mkdirat(mnt, "d", 0)
	}
	if err == nil {
		err = setattr(mnt, unix.MOUNT_ATTR_RDONLY, 0)
	}
	if err != nil {
		unix.Close(mnt)
		return -1, fmt.Errorf("masks: %w", err)
	}
	return mnt, nil
}

// target opens path inside the view, creating a missing directory when the
// parent is writable for init (one of its own tmpfs mounts).
func (m *mounter) target(path string, mkdir bool) (int, error) {
	how := &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS}
	fd, err := unix.Openat2(m.rootFD, path, how)
	if err == unix.ENOENT && mkdir {
		if err := m.mkdirAll(path); err != nil {
			return -1, err
		}
		fd, err = unix.Openat2(m.rootFD, path, how)
	}
	if err != nil {
		return -1, fmt.Errorf("mount point %q: %w", path, err)
	}
	return fd, nil
}

func (m *mounter) mkdirAll(path string) error {
	cur := ""
	for _, part := range strings.Split(strings.Trim(path, "/"), "/") {
		cur += "/" + part
		err := unix.Mkdir(filepath.Join(m.root, cur), 0o755)
		if err == unix.EROFS {
			return fmt.Errorf("mount point %q is missing in the read-only root: create it there (a root needs /tmp, /proc, /dev and /sys): %w", cur, err)
		}
		if err != nil && err != unix.EEXIST {
			return fmt.Errorf("create mount point %q: %w", cur, err)
		}
	}
	return nil
}

// attach moves the detached mount fd onto path in the view.
func (m *mounter) attach(fd int, path string) error {
	t, err := m.target(path, true)
	if err != nil {
		return err
	}
	defer unix.Close(t)
	if err := unix.MoveMount(fd, "", t, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
		return fmt.Errorf("attach at %q: %w", path, err)
	}
	return nil
}

// mount mounts a new filesystem at path in the view.
func (m *mounter) mount(source, path, fstype string, flags uintptr, data string) error {
	t, err := m.target(path, true)
	if err != nil {
		return err
	}
	defer unix.Close(t)
	if err := unix.Mount(source, fmt.Sprintf("/proc/self/fd/%d", t), fstype, flags, data); err != nil {
		return fmt.Errorf("mount %s at %q: %w", fstype, path, err)
	}
	return nil
}

// rebind bind-mounts path over itself with attrs, making it a mount point.
func (m *mounter) rebind(path string, attrs uint64) error {
	t, err := m.target(path, false)
	if err != nil {
		return err
	}
	defer unix.Close(t)
	fd, err := unix.OpenTree(t, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE|unix.AT_EMPTY_PATH)
	if err != nil {
		return fmt.Errorf("clone: %w", err)
	}
	defer unix.Close(fd)
	if attrs != 0 {
		if err := setattr(fd, attrs, 0); err != nil {
			return err
		}
	}
	return unix.MoveMount(fd, "", t, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH)
}

// mask hides path behind an empty read-only file or directory. A path that
// does not exist in the view needs no mask.
func (m *mounter) mask(path string) error {
	t, err := m.target(path, false)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.EACCES) {
		// Missing, or not reachable even by init, which can do everything
		// the command can: nothing to hide.
		return nil
	}
	if err != nil {
		return err
	}
	defer unix.Close(t)
	var st unix.Stat_t
	if err := unix.Fstat(t, &st); err != nil {
		return err
	}
	name := "f"
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		name = "d"
	}
	fd, err := unix.OpenTree(m.masks, name, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return fmt.Errorf("clone mask: %w", err)
	}
	defer unix.Close(fd)
	return unix.MoveMount(fd, "", t, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH)
}

// setupDev builds a minimal /dev: host device nodes, a private devpts, shm.
func (m *mounter) setupDev(devs []int, shmOpts string) error {
	if err := m.mount("tmpfs", "/dev", "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "mode=0755,size=64k"); err != nil {
		return err
	}
	dev := filepath.Join(m.root, "dev")
	for i, d := range devices {
		f, err := os.OpenFile(filepath.Join(dev, d), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err != nil {
			return fmt.Errorf("/dev/%s: %w", d, err)
		}
		f.Close()
		if err := m.attach(devs[i], "/dev/"+d); err != nil {
			return err
		}
	}
	for _, l := range devLinks {
		if err := os.Symlink(l[1], filepath.Join(dev, l[0])); err != nil {
			return fmt.Errorf("/dev/%s: %w", l[0], err)
		}
	}
	if err := m.mount("devpts", "/dev/pts", "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620"); err != nil {
		return err
	}
	if err := m.mount("tmpfs", "/dev/shm", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, shmOpts); err != nil {
		return err
	}
	t, err := m.target("/dev", false)
	if err != nil {
		return err
	}
	defer unix.Close(t)
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}
	if err := unix.MountSetattr(t, "", unix.AT_EMPTY_PATH, &attr); err != nil {
		return fmt.Errorf("make /dev read-only: %w", err)
	}
	return nil
}

// pivot makes the view the root and drops the old one.
func (m *mounter) pivot(dir string) error {
	if err := unix.Chdir(m.root); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach old root: %w", err)
	}
	if err := unix.Chdir(dir); err != nil {
		return fmt.Errorf("enter workspace %q: %w", dir, err)
	}
	return nil
}

// effectiveDenyRead drops the deny-read paths that an allow-read path equals
// or contains.
func effectiveDenyRead(deny, allow []string) []string {
	var out []string
	for _, d := range deny {
		if !under(d, allow) {
			out = append(out, d)
		}
	}
	return out
}
