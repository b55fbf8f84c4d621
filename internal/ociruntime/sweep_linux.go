package ociruntime

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/mountinfo"
)

// Names in mountsRoot beside the containers' mounts directories (which
// never begin with a dot), and in each of those.
const (
	// ownerFile, in a container's mounts directory, is its back-reference
	// (mountsOwner): what the sweep needs to tell that the container is
	// gone.
	ownerFile = ".owner"
	// goneDir holds mounts directories that could not be removed yet
	// (retire), under names of their own.
	goneDir = ".gone"
	// mountsLock serialises the making of a mounts directory with the
	// sweep (sweepMounts).
	mountsLock = ".lock"
)

// initialPIDNS is the initial PID namespace's link, the same on every
// Linux (PROC_PID_INIT_INO): only there does /proc list every process.
const initialPIDNS = "pid:[4026531836]"

// mountsOwner is a mounts directory's back-reference: the container's
// state directory (ROOT/hutch/ID), and the mount namespace and the boot
// in which hutch-runc made it. The state is looked up from that
// namespace: an engine whose runtime root is private to its mount
// namespace (a test cluster's tmpfs on /run/containerd) has state that
// another namespace does not see, though the mounts directories of both
// are in the one /run.
type mountsOwner struct {
	State   string `json:"state"`
	MountNS string `json:"mount_ns"`
	Boot    string `json:"boot"`
}

// names reports whether o is the back-reference of the mounts directory
// named name: its state directory is one of hutch-runc's whose root and
// ID give that name, so that a back-reference written elsewhere cannot
// make the sweep judge this directory by another container's state.
func (o mountsOwner) names(name string) bool {
	s := o.State
	if !filepath.IsAbs(s) || filepath.Clean(s) != s || filepath.Base(filepath.Dir(s)) != "hutch" {
		return false
	}
	return mountsName(filepath.Dir(filepath.Dir(s)), filepath.Base(s)) == name
}

// whereAmI returns the calling process's mount namespace and the boot's
// id, "" for what cannot be read.
func whereAmI() (mountNS, boot string) {
	goruntime.LockOSThread()
	defer goruntime.UnlockOSThread()
	mountNS, _ = os.Readlink(threadSelf("ns/mnt"))
	b, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	return mountNS, strings.TrimSpace(string(b))
}

// lockFile opens (making it) the lock file at path and takes it,
// exclusively; closing the file lets it go.
func lockFile(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// makeMounts makes the mounts directory mnt of the container whose state
// directory is stateDir, with its back-reference in it, both at once for
// the sweep. The directory is root's, 0700, until prepareState gives it
// to the container's root.
func makeMounts(mnt, stateDir string) error {
	lock, err := lockFile(filepath.Join(filepath.Dir(mnt), mountsLock))
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := os.Mkdir(mnt, 0o700); err != nil {
		return err
	}
	ns, boot := whereAmI()
	return writeJSON(filepath.Join(mnt, ownerFile), mountsOwner{State: stateDir, MountNS: ns, Boot: boot})
}

// sweepMounts removes from root (mountsRoot) the mounts directories of
// containers that are gone without their runtime's delete or poststop
// hook (an engine killed, or whose mount namespace ended), and what
// goneDir holds that can be removed now. A directory is gone when its
// back-reference's state directory does not exist and the namespace that
// made it cannot see any more: it is this process's own (the state is
// looked up here), or it has ended — made in another boot, or no process
// is in it and no nsfs mount of it is here. A namespace that still lives
// and is not this one keeps its directories: its own hutch-runc sweeps
// them. Nothing that is mounted here is unmounted: a directory with a
// mount under it stays.
//
// A directory without a back-reference was made by a hutch-runc from
// before it wrote one: it is left, as neither its state nor its
// namespace can be told (a boot's start clears /run, where it is a
// tmpfs, as it should be).
//
// It is best effort: what it cannot read or remove stays for the next.
func sweepMounts(root string) {
	// The namespaces and mounts of this thread, the one that acts:
	// /proc/self is the main thread's, which a thread that entered a
	// namespace and ended may have left elsewhere.
	goruntime.LockOSThread()
	defer goruntime.UnlockOSThread()
	lock, err := lockFile(filepath.Join(root, mountsLock))
	if err != nil {
		return
	}
	defer lock.Close()
	entries, err := os.ReadDir(root)
	if err != nil {
		return
	}
	ns, boot := whereAmI()
	pidNS, _ := os.Readlink(threadSelf("ns/pid"))
	var stale []string
	foreign := map[string]string{}
	for _, e := range entries {
		name := e.Name()
		if name == goneDir {
			gone, _ := os.ReadDir(filepath.Join(root, goneDir))
			for _, g := range gone {
				stale = append(stale, filepath.Join(root, goneDir, g.Name()))
			}
			continue
		}
		if strings.HasPrefix(name, ".") || !e.IsDir() {
			continue
		}
		dir := filepath.Join(root, name)
		var o mountsOwner
		if readJSON(filepath.Join(dir, ownerFile), &o) != nil || !o.names(name) || o.MountNS == "" || o.Boot == "" || ns == "" || boot == "" {
			continue
		}
		if _, err := os.Lstat(o.State); !errors.Is(err, os.ErrNotExist) {
			continue
		}
		switch {
		case o.Boot != boot || o.MountNS == ns:
			stale = append(stale, dir)
		case pidNS == initialPIDNS:
			foreign[dir] = o.MountNS
		}
	}
	if len(stale) == 0 && len(foreign) == 0 {
		return
	}
	ms, err := ownMounts()
	if err != nil {
		return
	}
	if len(foreign) > 0 {
		live, known := liveMountNamespaces(ms)
		for dir, n := range foreign {
			if known && !live[n] {
				stale = append(stale, dir)
			}
		}
	}
	for _, dir := range stale {
		if len(pointsUnder(ms, dir)) > 0 {
			continue
		}
		if filepath.Base(filepath.Dir(dir)) == goneDir {
			// Already out of the way: tried again at the next.
			os.RemoveAll(dir)
		} else {
			retire(dir)
		}
	}
}

// threadSelf is name under /proc/thread-self: the calling thread's (lock
// it to its goroutine around the use). /proc/self is the main thread's,
// which Go parks, not ends, when a goroutine locked to it ends — with the
// root or the namespaces that goroutine took (trustBundleIn's chroot into
// an image): its mountinfo then shows that root's mounts only.
func threadSelf(name string) string { return "/proc/thread-self/" + name }

// ownMounts are the mounts as this thread sees them.
func ownMounts() ([]mountinfo.Mount, error) {
	goruntime.LockOSThread()
	defer goruntime.UnlockOSThread()
	return mountinfo.Read(threadSelf("mountinfo"))
}

// liveMountNamespaces are the mount namespaces that processes are in,
// and those that nsfs mounts of this namespace hold; known is false when
// a process's could not be read (but for one that ended meanwhile).
func liveMountNamespaces(ms []mountinfo.Mount) (live map[string]bool, known bool) {
	live = map[string]bool{}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return live, false
	}
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		l, err := os.Readlink(filepath.Join("/proc", e.Name(), "ns", "mnt"))
		switch {
		case err == nil:
			live[l] = true
		case !errors.Is(err, os.ErrNotExist) && !errors.Is(err, unix.ESRCH):
			return live, false
		}
	}
	for _, m := range ms {
		if m.FSType == "nsfs" {
			live[m.Root] = true
		}
	}
	return live, true
}

// retire removes dir, a mounts directory with no mount under it in this
// namespace. A mount point of it that the kernel will not remove yet
// (EBUSY: mounted again meanwhile, or held by another mount namespace
// where a kernel refuses that) does not fail the cleanup: what is left of
// dir goes to goneDir, out of the way of a container of the same name,
// and each sweep tries again.
func retire(dir string) error {
	err := os.RemoveAll(dir)
	if !errors.Is(err, unix.EBUSY) {
		return err
	}
	gone := filepath.Join(filepath.Dir(dir), goneDir)
	if err := os.MkdirAll(gone, 0o700); err != nil {
		return err
	}
	// An empty directory of a name of its own, which the rename
	// replaces (rename(2) does; os.Rename refuses a directory).
	to, err := os.MkdirTemp(gone, filepath.Base(dir)+"-")
	if err != nil {
		return err
	}
	if err := unix.Rename(dir, to); err != nil {
		os.Remove(to)
		return fmt.Errorf("move %s to %s: %w", dir, gone, err)
	}
	return nil
}
