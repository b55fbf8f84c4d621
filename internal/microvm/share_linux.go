package microvm

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/hostperm"
	"github.com/hutch-sandbox/hutch/internal/sandbox"
)

// DefaultVirtiofsd is where Debian 12's qemu-system-common installs QEMU's
// virtiofsd.
const DefaultVirtiofsd = "/usr/lib/qemu/virtiofsd"

// SystemDirs are the host's top-level entries the guest's root is made
// of: the system's programs, libraries and configuration. A symbolic link
// among them (merged /usr) is made again as a link; anything else of the
// host's root (/home, /root, /var, /run, /tmp, /srv, /opt, /mnt, /media)
// is not shared.
var SystemDirs = []string{"bin", "sbin", "lib", "lib32", "lib64", "libx32", "usr", "etc"}

// Tags of the virtiofs shares, as the guest mounts them.
const (
	rootTag      = "root"
	workspaceTag = "workspace"
)

// Share gives the guest a root and a workspace of the host's over
// virtiofs: the host's SystemDirs read-only, under a writable layer in
// the guest's memory, and the directory Workspace read-write at its host
// path.
type Share struct {
	// Workspace is the host directory shared read-write, an absolute path
	// without white space (it travels on the kernel's command line).
	Workspace string
	// LocalWorkspace, when Workspace is "", is the workspace's path in
	// the guest, a directory made in the root's writable layer (in the
	// guest's memory) rather than a host directory: a sandbox of hutch
	// serve, whose workspace is its own. Same form as Workspace.
	LocalWorkspace string
	// Hide are host paths the guest must not read: each one under a
	// shared directory is covered by an empty directory or file (mode 0)
	// in the shared view.
	Hide []string
	// Virtiofsd is QEMU's virtiofsd; "" means DefaultVirtiofsd.
	Virtiofsd string
	// Mount, when set, runs on the thread whose mount namespace the
	// virtiofsd processes copy, once the root's view is built and before
	// any of them starts: what it mounts over Workspace there (hutch
	// run's protected paths, its deny-read paths in the workspace) is
	// what the guest is served, on the host's side, where nothing the
	// guest does can undo it. emptyFile and emptyDir are an empty file
	// and directory of mode 0, to bind over what must not be read.
	Mount func(emptyFile, emptyDir string) error
}

// guestWorkspace is the workspace's path in the guest.
func (s *Share) guestWorkspace() string {
	if s.Workspace != "" {
		return s.Workspace
	}
	return s.LocalWorkspace
}

func (s *Share) check() error {
	ws := s.guestWorkspace()
	if !filepath.IsAbs(ws) || strings.ContainsAny(ws, " \t\n\"'\\") {
		return fmt.Errorf("microvm: workspace %q: want an absolute path without white space, quotes or backslashes", ws)
	}
	if s.Workspace == "" {
		return nil
	}
	if st, err := os.Stat(s.Workspace); err != nil || !st.IsDir() {
		return fmt.Errorf("microvm: workspace %s is not a directory (%v)", s.Workspace, err)
	}
	return nil
}

// shareServer is the virtiofsd processes of a VM's shares, which run in a
// mount namespace of their own made on a locked thread: the thread stays
// until stop, and each virtiofsd dies with it (its parent-death signal)
// or when QEMU's connection ends.
type shareServer struct {
	socks map[string]string // tag → socket path
	stop  chan struct{}
	done  chan struct{}
}

// startShares starts one virtiofsd for the guest's root and one for the
// workspace (unless it is the guest's own, LocalWorkspace), with their
// sockets and logs in dir.
func startShares(s *Share, dir string) (*shareServer, error) {
	bin := s.Virtiofsd
	if bin == "" {
		bin = DefaultVirtiofsd
	}
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("microvm: virtiofsd (Debian's package qemu-system-common): %w", err)
	}
	srv := &shareServer{socks: map[string]string{}, stop: make(chan struct{}), done: make(chan struct{})}
	errc := make(chan error, 1)
	go func() {
		defer close(srv.done)
		// The thread is never unlocked: it ends with this goroutine,
		// taking its mount namespace and (parent-death signal) the
		// reapers of the virtiofsd processes forked from it.
		runtime.LockOSThread()
		cmds, err := srv.serve(s, bin, dir)
		errc <- err
		if err == nil {
			<-srv.stop
		}
		for _, c := range cmds {
			c.kill()
		}
	}()
	if err := <-errc; err != nil {
		<-srv.done
		return nil, err
	}
	return srv, nil
}

// close stops the virtiofsd processes and waits for them.
func (srv *shareServer) close() {
	close(srv.stop)
	<-srv.done
}

// serve runs on the locked thread: a private mount namespace, the root's
// view in it, and the virtiofsd processes.
func (srv *shareServer) serve(s *Share, bin, dir string) ([]*reaped, error) {
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return nil, fmt.Errorf("microvm: mount namespace for virtiofsd: %w", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return nil, fmt.Errorf("microvm: mount namespace for virtiofsd: %w", err)
	}
	root, hidden := filepath.Join(dir, "rootfs"), filepath.Join(dir, "hidden")
	if err := buildRootView(root, hidden, s.Hide); err != nil {
		return nil, err
	}
	if s.Mount != nil {
		if err := s.Mount(filepath.Join(hidden, "file"), filepath.Join(hidden, "dir")); err != nil {
			return nil, err
		}
	}
	var cmds []*reaped
	shares := []struct{ tag, src, cache string }{{rootTag, root, "always"}}
	if s.Workspace != "" {
		shares = append(shares, struct{ tag, src, cache string }{workspaceTag, s.Workspace, "auto"})
	}
	for _, sh := range shares {
		sock := filepath.Join(dir, "fs-"+sh.tag+".sock")
		c, err := startVirtiofsd(bin, sock, sh.src, sh.cache, filepath.Join(dir, "virtiofsd-"+sh.tag+".log"), sh.tag == workspaceTag)
		if err != nil {
			for _, c := range cmds {
				c.kill()
			}
			return nil, err
		}
		cmds = append(cmds, c)
		srv.socks[sh.tag] = sock
	}
	return cmds, nil
}

// startVirtiofsd starts virtiofsd serving src on a unix socket listening
// at sock, in its namespace sandbox (its own mount, pid and network
// namespaces, pivoted into src, capabilities dropped, under seccomp),
// under a reaper (startReaped): it dies with hutch. hostWrites, for the
// workspace the guest writes, confines what it writes there
// (startReapedHostWrites: the sandbox's umask, hostperm's seccomp rules)
// and drops its capability to make device nodes (and file capabilities,
// which it serves no extended attribute for anyway).
func startVirtiofsd(bin, sock, src, cache, logPath string, hostWrites bool) (*reaped, error) {
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("microvm: virtiofsd socket: %w", err)
	}
	l.SetUnlinkOnClose(false)
	f, err := l.File()
	l.Close()
	if err != nil {
		return nil, fmt.Errorf("microvm: virtiofsd socket: %w", err)
	}
	defer f.Close()
	lf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("microvm: %w", err)
	}
	defer lf.Close()
	args := []string{"--fd=3", "-o", "source=" + src, "-o", "sandbox=namespace",
		"-o", "cache=" + cache, "-o", "no_posix_lock", "-o", "no_flock", "-o", "log_level=warn"}
	if hostWrites {
		args = append(args, "-o", "modcaps=-mknod:-setfcap")
	} else {
		// The root's: no capability that bypasses file permissions, so
		// that it reads for the guest only what others may read
		// (rootOwnerMap); it writes nothing. CAP_FOWNER, which bypasses
		// none for reading, stays: without it the guest could execute
		// nothing (its opens of files it does not own fail).
		args = append(args, "-o", "modcaps=-dac_override:-dac_read_search:-chown:-fsetid:-mknod:-setfcap")
	}
	c := exec.Command(bin, args...)
	c.ExtraFiles = []*os.File{f}
	c.Stdout, c.Stderr = lf, lf
	c.Env = []string{}
	var r *reaped
	if hostWrites {
		r, err = startReapedHostWrites(c, hostperm.SandboxUmask(hostperm.Umask()))
	} else {
		r, err = startReaped(c, "")
	}
	if err != nil {
		return nil, fmt.Errorf("microvm: start virtiofsd: %w", err)
	}
	return r, nil
}

// buildRootView makes root (in the current, private mount namespace) the
// guest's root as shared: a tmpfs holding the SystemDirs of the host's
// root, each a read-only bind mount or a symbolic link as on the host,
// with the paths of hide under them covered by empty, unreadable
// directories or files (made in hidden), then made read-only itself.
func buildRootView(root, hidden string, hide []string) error {
	if err := os.Mkdir(root, 0o755); err != nil {
		return fmt.Errorf("microvm: %w", err)
	}
	if err := unix.Mount("tmpfs", root, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,size=1m"); err != nil {
		return fmt.Errorf("microvm: root view: %w", err)
	}
	var shared []string
	for _, name := range SystemDirs {
		host := "/" + name
		st, err := os.Lstat(host)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("microvm: root view: %w", err)
		}
		dst := filepath.Join(root, name)
		switch {
		case st.Mode()&os.ModeSymlink != 0:
			target, err := os.Readlink(host)
			if err != nil {
				return fmt.Errorf("microvm: root view: %w", err)
			}
			if err := os.Symlink(target, dst); err != nil {
				return fmt.Errorf("microvm: root view: %w", err)
			}
		case st.IsDir():
			if err := bindSystemDir(host, dst); err != nil {
				return err
			}
			shared = append(shared, host)
		}
	}
	if err := os.Mkdir(hidden, 0o700); err != nil {
		return fmt.Errorf("microvm: %w", err)
	}
	emptyFile := filepath.Join(hidden, "file")
	emptyDir := filepath.Join(hidden, "dir")
	if err := os.WriteFile(emptyFile, nil, 0); err != nil {
		return fmt.Errorf("microvm: %w", err)
	}
	if err := os.Mkdir(emptyDir, 0); err != nil {
		return fmt.Errorf("microvm: %w", err)
	}
	for _, p := range hide {
		// The path the guest would reach: a link (/bin on a merged-/usr
		// system, a configuration file linked elsewhere) is followed on
		// the host, whose root the view's links mirror.
		p, err := filepath.EvalSymlinks(p)
		if err != nil || !under(p, shared) {
			continue // nothing there to hide, or not shared
		}
		st, err := os.Stat(p)
		if err != nil {
			continue
		}
		src := emptyFile
		if st.IsDir() {
			src = emptyDir
		}
		if err := bindReadOnly(src, filepath.Join(root, p), 0); err != nil {
			return err
		}
	}
	if err := unix.Mount("", root, "", unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		return fmt.Errorf("microvm: root view read-only: %w", err)
	}
	return nil
}

// rootOwnerMap shows the host's root's files in the guest's root as
// owned by sandbox.RootMappedID, an id of no one's, and every other
// owner's as nobody: the root's virtiofsd, without the capabilities that
// bypass permissions (startVirtiofsd), reads for the guest only what
// others may read on the host. A file of the system directories that
// only root may read (/etc/shadow-, a service's key) stays closed to the
// guest's root (S1), as to a sandbox of the other tiers, whatever the
// deny list names.
var rootOwnerMap = fmt.Sprintf("0 %d 1\n", sandbox.RootMappedID)

// bindSystemDir binds the host's system directory src (its mount alone)
// at dst, made as a directory, read-only, nosuid and nodev, idmapped
// with rootOwnerMap.
func bindSystemDir(src, dst string) error {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return fmt.Errorf("microvm: root view: %w", err)
	}
	if err := sandbox.MountIdmappedAlone(src, dst, rootOwnerMap, rootOwnerMap); err != nil {
		return fmt.Errorf("microvm: root view: %w", err)
	}
	if err := unix.Mount("", dst, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		return fmt.Errorf("microvm: root view: %s read-only: %w", src, err)
	}
	return nil
}

// bindReadOnly binds src at dst read-only, making dst (a directory of
// mode perm, or a file when src is not a directory) when it is missing.
func bindReadOnly(src, dst string, perm os.FileMode) error {
	if st, err := os.Stat(src); err == nil && !st.IsDir() {
		if _, err := os.Stat(dst); errors.Is(err, os.ErrNotExist) {
			if err := os.WriteFile(dst, nil, perm); err != nil {
				return fmt.Errorf("microvm: root view: %w", err)
			}
		}
	} else if err := os.MkdirAll(dst, perm); err != nil {
		return fmt.Errorf("microvm: root view: %w", err)
	}
	if err := unix.Mount(src, dst, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("microvm: root view: bind %s: %w", src, err)
	}
	if err := unix.Mount("", dst, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		return fmt.Errorf("microvm: root view: %s read-only: %w", src, err)
	}
	return nil
}

// under reports whether p is one of dirs or below one.
func under(p string, dirs []string) bool {
	p = filepath.Clean(p)
	for _, d := range dirs {
		if p == d || strings.HasPrefix(p, d+"/") {
			return true
		}
	}
	return false
}
