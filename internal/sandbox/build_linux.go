package sandbox

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/landlock"
	"github.com/hutch-sandbox/hutch/internal/maskfs"
	"github.com/hutch-sandbox/hutch/internal/seccomp"
)

// builder turns a sandbox's configuration into the prog its first process
// runs, in the fixed order: identity → mounts → pivot_root → hostname and
// loopback → capabilities → no_new_privs → Landlock → seccomp (last) → what
// the command needs (pty, rlimits, close-on-exec). TestBuildOrder holds it
// to that order.
type builder struct {
	p     prog
	root  int8 // slot: O_PATH descriptor of the new root while it is built
	masks int8 // slot: the detached read-only tmpfs of mask files, or hutch's stand-ins
	// served: the masks are hutch's stand-ins, a node for each path.
	served bool
	// ctl is the first process's end of the control socket.
	ctl int
	// who is the sandbox's identity in its user namespace (identity).
	who ids
	// ruleset is the Landlock ruleset's descriptor, -1 for none.
	ruleset int
	// listener is the slot of the seccomp filter's listener, which the
	// sandbox's PID 1 serves; -1 when the filter hands nothing over.
	listener int8
	// ws is where the view shows the workspace (initConfig.Workspace).
	ws viewMap
}

// view is where the view shows the host path p of a writable area: every
// mount target made from a host path goes through it (a protection bound
// at the host path while the workspace is elsewhere would protect
// nothing); the sources, host paths cloned before the view exists, never.
func (b *builder) view(p string) string { return b.ws.of(p) }

// msgBuf is a message between hutch and the first process, in memory the
// first process can use: one byte and descriptors (hutch's message carries
// one per writable root, the listeners message the proxy's two listeners
// and the DNS socket).
type msgBuf struct {
	hdr  unix.Msghdr
	iov  unix.Iovec
	data [1]byte
	oob  []byte
}

// newMsgBuf returns a message of one byte with oob as its control data.
func newMsgBuf(oob []byte) *msgBuf {
	m := &msgBuf{oob: oob}
	m.iov.Base = &m.data[0]
	m.iov.SetLen(1)
	m.hdr.Iov = &m.iov
	m.hdr.SetIovlen(1)
	m.hdr.Control = &m.oob[0]
	m.hdr.SetControllen(len(m.oob))
	return m
}

// O_PATH openat2 resolution of every mount target: inside the new root, so
// a symlink the sandbox planted in its workspace resolves in the view and
// never reaches the host (S5).
var inRoot = unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS}

// target opens path (absolute, in the view) into a new slot.
func (b *builder) target(desc, path string) (int8, int) {
	t := b.p.slot()
	i := b.p.call(desc, t, unix.SYS_OPENAT2, s(b.root), b.p.str(strings.TrimPrefix(path, "/")), keepPtr(&b.p, &inRoot), k(unix.SizeofOpenHow))
	return t, i
}

// fsmount creates a new filesystem of type fstype with string options and
// returns the slot of its detached mount.
func (b *builder) fsmount(desc, fstype string, opts [][2]string, attrs uintptr) int8 {
	mnt := b.p.slot()
	b.fsmountTo(mnt, desc, fstype, opts, attrs)
	return mnt
}

// fsmountTo is fsmount into the slot mnt.
func (b *builder) fsmountTo(mnt int8, desc, fstype string, opts [][2]string, attrs uintptr) {
	fs := b.p.slot()
	b.p.call(desc+": fsopen", fs, unix.SYS_FSOPEN, b.p.str(fstype), k(unix.FSOPEN_CLOEXEC))
	for _, o := range opts {
		if o[1] == "" {
			b.p.call(desc+": option "+o[0], -1, unix.SYS_FSCONFIG, s(fs), k(unix.FSCONFIG_SET_FLAG), b.p.str(o[0]), k(0), k(0))
			continue
		}
		b.p.call(desc+": option "+o[0], -1, unix.SYS_FSCONFIG, s(fs), k(unix.FSCONFIG_SET_STRING), b.p.str(o[0]), b.p.str(o[1]), k(0))
	}
	b.p.call(desc+": create", -1, unix.SYS_FSCONFIG, s(fs), k(unix.FSCONFIG_CMD_CREATE), k(0), k(0), k(0))
	b.p.call(desc+": fsmount", mnt, unix.SYS_FSMOUNT, s(fs), k(unix.FSMOUNT_CLOEXEC), k(attrs))
	b.p.close(fs)
}

// attach moves the detached mount in slot mnt onto path in the view,
// creating the mount point in the sandbox's own tmpfs when mkdir is set.
func (b *builder) attach(desc string, mnt int8, path string, mkdir bool) {
	if mkdir {
		b.mkdirAll(desc, path)
	}
	t, _ := b.target(fmt.Sprintf("mount point %q", path), path)
	b.p.call(desc+": attach", -1, unix.SYS_MOVE_MOUNT, s(mnt), b.p.str(""), s(t), b.p.str(""),
		k(unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH))
	b.p.close(t)
	b.p.close(mnt)
}

// mkdirAll creates path's components in the view; existing ones are fine.
func (b *builder) mkdirAll(desc, path string) {
	cur := ""
	for _, part := range strings.Split(strings.Trim(path, "/"), "/") {
		cur = strings.TrimPrefix(cur+"/"+part, "/")
		i := b.p.call(desc+": create mount point /"+cur, -1, unix.SYS_MKDIRAT, s(b.root), b.p.str(cur), k(0o755))
		b.p.skip(i, unix.EEXIST)
	}
}

// noLinks resolves a volume's mount point and the directories on its
// way: inside the new root, and no symbolic link at all, so that a link
// of the root (an image's /mnt -> /etc) moves the mount neither out of
// the view nor elsewhere in it.
var noLinks = unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
	Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}

// volumeDesc starts the description of every step of a volume's mount.
const volumeDesc = "volume at "

// volume attaches the idmapped mount of a volume's host directory (slot
// mnt) at v.At, nosuid and nodev, its mount point made in the sandbox's
// own root: each directory on the way is opened with noLinks and the
// next made in it (one that exists is fine), the last opened so too. A
// symbolic link on the way fails the step (ELOOP) with the volume named.
func (b *builder) volume(v volumeBind, mnt int8) {
	p := &b.p
	desc := volumeDesc + v.At
	b.setattr(desc+": attributes", mnt, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)
	parts := strings.Split(strings.Trim(v.At, "/"), "/")
	for i, part := range parts {
		parent := b.root
		if i > 0 {
			way := strings.Join(parts[:i], "/")
			parent = p.slot()
			p.call(desc+": open /"+way+" (no symbolic link allowed on the way)", parent, unix.SYS_OPENAT2, s(b.root), p.str(way), keepPtr(p, &noLinks), k(unix.SizeofOpenHow))
		}
		mk := p.call(desc+": create mount point /"+strings.Join(parts[:i+1], "/"), -1, unix.SYS_MKDIRAT, s(parent), p.str(part), k(0o755))
		p.skip(mk, unix.EEXIST)
		if i > 0 {
			p.close(parent)
		}
	}
	t := p.slot()
	p.call(desc+": open the mount point (no symbolic link allowed on the way)", t, unix.SYS_OPENAT2, s(b.root), p.str(strings.Join(parts, "/")), keepPtr(p, &noLinks), k(unix.SizeofOpenHow))
	p.call(desc+": attach", -1, unix.SYS_MOVE_MOUNT, s(mnt), p.str(""), s(t), p.str(""),
		k(unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH))
	p.close(t)
	p.close(mnt)
}

// setattr sets mount attributes on the detached tree in slot mnt.
func (b *builder) setattr(desc string, mnt int8, set uint64) {
	attr := &unix.MountAttr{Attr_set: set, Propagation: unix.MS_PRIVATE}
	b.p.call(desc, -1, unix.SYS_MOUNT_SETATTR, s(mnt), b.p.str(""), k(unix.AT_EMPTY_PATH|unix.AT_RECURSIVE),
		keepPtr(&b.p, attr), k(unsafe.Sizeof(*attr)))
}

// cloneTree clones the tree at host path (before the view exists).
func (b *builder) cloneTree(desc, path string, set uint64) int8 {
	t := b.p.slot()
	b.p.call(desc, t, unix.SYS_OPEN_TREE, k(uintptr(unix.AT_FDCWD&0xffffffff)), b.p.str(path),
		k(unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE))
	b.setattr(desc+": attributes", t, set)
	return t
}

// homeOverlay builds, as the first process, an overlay over the home
// directory: the real home (as the view shows it) below, read-only, and a
// tmpfs of size bytes above that takes what the sandbox writes, gone with
// it.
func (b *builder) homeOverlay(home string, size int64) {
	low, _ := b.target("home: "+home, home)
	mnt := b.tmpfsOverlay("home", size, false, func(fs int8) { b.lowerdir("home", fs, low) })
	b.p.close(low)
	b.attach("home", mnt, home, false)
}

// tmpfsOverlay appends the making of a detached overlay (nosuid, nodev)
// of the lower layers lowers adds (b.lowerdir, the top first) under an
// upper and a work directory on a fresh tmpfs of size bytes (no bound
// when 0); userxattr for one whose layers mark opaque directories with
// user.overlay.opaque. It returns the mount's slot.
func (b *builder) tmpfsOverlay(desc string, size int64, userxattr bool, lowers func(fs int8)) int8 {
	p := &b.p
	opts := [][2]string{{"mode", "0755"}}
	if size > 0 {
		opts = append(opts, [2]string{"size", fmt.Sprint(size)})
	}
	tm := b.fsmount(desc+": writes", "tmpfs", opts, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)
	p.call(desc+": upper", -1, unix.SYS_MKDIRAT, s(tm), p.str("upper"), k(0o755))
	p.call(desc+": work", -1, unix.SYS_MKDIRAT, s(tm), p.str("work"), k(0o700))
	up, wk := p.slot(), p.slot()
	p.call(desc+": upper", up, unix.SYS_OPENAT, s(tm), p.str("upper"), k(unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC), k(0))
	p.call(desc+": work", wk, unix.SYS_OPENAT, s(tm), p.str("work"), k(unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC), k(0))
	fs, mnt := p.slot(), p.slot()
	p.call(desc+": overlay", fs, unix.SYS_FSOPEN, p.str("overlay"), k(unix.FSOPEN_CLOEXEC))
	if userxattr {
		p.call(desc+": overlay userxattr", -1, unix.SYS_FSCONFIG, s(fs), k(unix.FSCONFIG_SET_FLAG), p.str("userxattr"), k(0), k(0))
	}
	lowers(fs)
	p.call(desc+": overlay upperdir", -1, unix.SYS_FSCONFIG, s(fs), k(unix.FSCONFIG_SET_FD), p.str("upperdir"), k(0), s(up))
	p.call(desc+": overlay workdir", -1, unix.SYS_FSCONFIG, s(fs), k(unix.FSCONFIG_SET_FD), p.str("workdir"), k(0), s(wk))
	p.call(desc+": overlay create", -1, unix.SYS_FSCONFIG, s(fs), k(unix.FSCONFIG_CMD_CREATE), k(0), k(0), k(0))
	p.call(desc+": overlay mount", mnt, unix.SYS_FSMOUNT, s(fs), k(unix.FSMOUNT_CLOEXEC), k(unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV))
	p.close(fs)
	p.close(up)
	p.close(wk)
	p.close(tm)
	return mnt
}

// lowerdir appends a lower layer, the directory in slot low, to the
// overlay being made in slot fs.
func (b *builder) lowerdir(desc string, fs, low int8) {
	b.p.call(desc+": overlay lowerdir+", -1, unix.SYS_FSCONFIG, s(fs), k(unix.FSCONFIG_SET_FD), b.p.str("lowerdir+"), k(0), s(low))
}

// imageOverlay stacks the image's layers (cfg.ImageLayers, host
// directories an ordinary user may read) as the sandbox's root, in the
// first process's own user namespace: the layers read-only, with
// userxattr (the layers mark opaque directories with user.overlay.opaque),
// writes on a tmpfs of cfg.ImageSize. The root exists only here, so the
// Landlock rule that lets the sandbox use it is added here too.
func (b *builder) imageOverlay(cfg initConfig) int8 {
	p := &b.p
	mnt := b.tmpfsOverlay("image root", cfg.ImageSize, true, func(fs int8) {
		// One layer open at a time: an image may have more layers than a
		// prog has slots.
		for i := len(cfg.ImageLayers) - 1; i >= 0; i-- { // overlayfs takes the top layer first
			low := p.slot()
			p.call("image root: layer "+cfg.ImageLayers[i], low, unix.SYS_OPENAT, k(uintptr(unix.AT_FDCWD&0xffffffff)), p.str(cfg.ImageLayers[i]),
				k(unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC), k(0))
			b.lowerdir("image root", fs, low)
			p.close(low)
		}
	})
	if cfg.ImageAccess != 0 && b.ruleset >= 0 {
		attr := &unix.LandlockPathBeneathAttr{Allowed_access: cfg.ImageAccess}
		p.keep = append(p.keep, attr)
		p.store(&attr.Parent_fd, mnt)
		p.call("image root: landlock rule", -1, unix.SYS_LANDLOCK_ADD_RULE, ci(b.ruleset), k(unix.LANDLOCK_RULE_PATH_BENEATH), ptr(attr), k(0))
	}
	return mnt
}

// rebind binds path over itself, read-only when ro.
func (b *builder) rebind(desc, path string, ro bool) {
	t, _ := b.target(desc, path)
	mnt := b.p.slot()
	b.p.call(desc+": clone", mnt, unix.SYS_OPEN_TREE, s(t), b.p.str(""),
		k(unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE|unix.AT_EMPTY_PATH))
	if ro {
		b.setattr(desc+": read-only", mnt, unix.MOUNT_ATTR_RDONLY)
	}
	b.p.call(desc+": attach", -1, unix.SYS_MOVE_MOUNT, s(mnt), b.p.str(""), s(t), b.p.str(""),
		k(unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH))
	b.p.close(mnt)
	b.p.close(t)
}

// cover mounts a read-only stand-in from the masks tmpfs over a
// placeholder, of its kind.
func (b *builder) cover(j int, desc, path string, kind placeholderKind) {
	name := "e"
	switch {
	case b.served:
		name = coverNodeName(j)
	case kind == placeholderDir:
		name = "ed"
	case kind == placeholderSelf:
		name = "es"
	}
	mnt := b.p.slot()
	b.p.call(desc+": clone", mnt, unix.SYS_OPEN_TREE, s(b.masks), b.p.str(name), k(unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC))
	b.attach(desc, mnt, path, false)
}

// mask hides path behind the empty directory or file of the masks tmpfs,
// whichever fits; a path that does not exist, or that not even the first process can
// reach (which can do all the command can), needs none.
func (b *builder) mask(i int, path string, dir bool) {
	desc := "deny read " + path
	first, second := "f", "d"
	if b.served {
		first, second = maskNodeName(i, false), maskNodeName(i, true)
	}
	if dir {
		first, second = second, first
	}
	t, open := b.target(desc, b.view(path))
	mnt := b.p.slot()
	b.p.call(desc+": clone mask", mnt, unix.SYS_OPEN_TREE, s(b.masks), b.p.str(first), k(unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC))
	move := b.p.call(desc+": attach mask", -1, unix.SYS_MOVE_MOUNT, s(mnt), b.p.str(""), s(t), b.p.str(""),
		k(unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH))
	b.p.closeKeep(mnt)
	b.p.closeKeep(t)
	done := b.p.jump()
	// The path changed kind since hutch looked, or went away: try the
	// other mask; a path that is gone needs none.
	b.p.skip(move, unix.ENOTDIR, unix.EISDIR, unix.ENOENT)
	b.p.closeKeep(mnt)
	b.p.call(desc+": clone mask", mnt, unix.SYS_OPEN_TREE, s(b.masks), b.p.str(second), k(unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC))
	move2 := b.p.call(desc+": attach mask", -1, unix.SYS_MOVE_MOUNT, s(mnt), b.p.str(""), s(t), b.p.str(""),
		k(unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH))
	b.p.skip(move2, unix.ENOENT)
	b.p.closeKeep(mnt)
	b.p.closeKeep(t)
	b.p.free = append(b.p.free, mnt, t)
	b.p.land(done)
	b.p.skip(open, unix.ENOENT, unix.ENOTDIR, unix.EACCES, unix.ELOOP)
}

// ids is who the sandbox's processes are inside their user namespace.
type ids struct {
	uid, gid  int
	setgroups bool  // may set supplementary groups (root started it)
	groups    []int // the supplementary groups (with setgroups; none otherwise)
}

// receive appends the wait for hutch's message after the clone (sent once
// the uid and gid maps are written): one byte and n descriptors, which land
// in slots.
func (b *builder) receive(ctl int, n int) []int8 {
	m := newMsgBuf(make([]byte, unix.CmsgSpace(4*max(n, 1))))
	b.p.keep = append(b.p.keep, m)
	got := b.p.slot()
	b.p.call("wait for hutch", got, unix.SYS_RECVMSG, ci(ctl), ptr(&m.hdr), k(unix.MSG_CMSG_CLOEXEC))
	b.p.expect("wait for hutch: hutch went away", got, 1)
	slots := make([]int8, n)
	for i := range slots {
		slots[i] = b.p.slot()
		// The descriptors follow the cmsghdr, 4 bytes each.
		b.p.load(slots[i], (*int32)(unsafe.Pointer(&m.oob[unix.CmsgLen(0)+4*i])))
	}
	return slots
}

// mounts appends the whole filesystem view and the pivot into it; fds are
// the slots of the idmapped writable mounts hutch sent (by Writable[i].FD).
func (b *builder) mounts(cfg initConfig, fds []int8, denyRead []pathKind) {
	p := &b.p
	b.ws = cfg.Workspace
	p.call("make mounts private", -1, unix.SYS_MOUNT, p.str(""), p.str("/"), p.str(""), k(unix.MS_REC|unix.MS_PRIVATE), k(0))
	src := rootDir(cfg.Root)
	var rootTree int8
	if cfg.RootLayer >= 0 && cfg.RootLayer < len(fds) {
		rootTree = fds[cfg.RootLayer] // nosuid and nodev already
	} else if len(cfg.ImageLayers) > 0 {
		rootTree = b.imageOverlay(cfg)
	} else {
		rootTree = b.cloneTree("root "+src, src, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)
	}
	writable := make([]int8, len(cfg.Writable))
	for i, w := range cfg.Writable {
		if w.FD >= 0 && w.FD < len(fds) {
			writable[i] = fds[w.FD]
			b.setattr("writable "+w.Path+": attributes", writable[i], unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)
			continue
		}
		if w.Review != "" {
			writable[i] = b.reviewOverlay(w.Path, w.Review, cfg.ReviewAccess)
			continue
		}
		writable[i] = b.cloneTree("writable "+w.Path, w.Path, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)
	}
	devs := make([]int8, len(devices))
	for i, d := range devices {
		devs[i] = b.cloneTree("device /dev/"+d, "/dev/"+d, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NOEXEC)
	}
	files := make([]int8, len(cfg.Files))
	const fileAttrs = unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV
	for i, f := range cfg.Files {
		if f.FD >= 0 && f.FD < len(fds) {
			files[i] = fds[f.FD]
			b.setattr(f.Target+": attributes", files[i], fileAttrs)
			continue
		}
		files[i] = b.cloneTree(f.Target+" from "+f.Path, f.Path, fileAttrs)
	}

	switch {
	case cfg.MasksLayer >= 0 && cfg.MasksLayer < len(fds):
		b.servedMasks(fds[cfg.MasksLayer], 2*len(denyRead)+len(cfg.Placeholders)+1)
	case cfg.StandInsDevice:
		b.userStandIns(cfg, denyRead)
	default:
		b.tmpfsMasks(cfg)
	}

	p.call("attach root", -1, unix.SYS_MOVE_MOUNT, s(rootTree), p.str(""), k(uintptr(unix.AT_FDCWD&0xffffffff)), p.str(stagingDir), k(unix.MOVE_MOUNT_F_EMPTY_PATH))
	p.close(rootTree)
	b.root = p.slot()
	p.call("open new root", b.root, unix.SYS_OPENAT, k(uintptr(unix.AT_FDCWD&0xffffffff)), p.str(stagingDir), k(unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC), k(0))

	size := func(opts [][2]string) [][2]string {
		if cfg.TmpBytes > 0 {
			opts = append(opts, [2]string{"size", fmt.Sprint(cfg.TmpBytes)})
		}
		return opts
	}
	b.attach("/tmp", b.fsmount("/tmp", "tmpfs", size([][2]string{{"mode", "1777"}}), unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV), "/tmp", false)
	if cfg.PrivateHome != "" {
		b.attach("private home", b.fsmount("private home", "tmpfs", size([][2]string{{"mode", "0700"}}), unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV), cfg.PrivateHome, false)
	}
	switch {
	case cfg.Home == "":
	case cfg.HomeLayer >= 0 && cfg.HomeLayer < len(fds):
		b.attach("home", fds[cfg.HomeLayer], cfg.Home, false)
	case cfg.HomeOverlay:
		b.homeOverlay(cfg.Home, cfg.TmpBytes)
	case cfg.HomePersist.Path != "":
		var tree int8
		if cfg.HomePersist.FD >= 0 && cfg.HomePersist.FD < len(fds) {
			tree = fds[cfg.HomePersist.FD]
			b.setattr("home "+cfg.HomePersist.Path+": attributes", tree, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)
		} else {
			tree = b.cloneTree("home "+cfg.HomePersist.Path, cfg.HomePersist.Path, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)
		}
		b.attach("home", tree, cfg.Home, false)
	}
	b.attach("/proc", b.fsmount("/proc", "proc", nil, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC), "/proc", false)
	if cfg.Net != "host" {
		// A sysfs belongs to a network namespace; with the host's network
		// the sandbox keeps the host's /sys of its read-only root.
		b.attach("/sys", b.fsmount("/sys", "sysfs", nil, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC), "/sys", false)
	}

	// /dev: a tmpfs with the host's device nodes bound in, a private
	// devpts and /dev/shm, made read-only.
	dev := b.fsmount("/dev", "tmpfs", [][2]string{{"mode", "0755"}, {"size", "64k"}}, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NOEXEC)
	b.attach("/dev", dev, "/dev", false)
	for i, d := range devices {
		node := p.slot()
		p.call("/dev/"+d+": mount point", node, unix.SYS_OPENAT, s(b.root), p.str("dev/"+d), k(unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC), k(0o644))
		p.close(node)
		b.attach("/dev/"+d, devs[i], "/dev/"+d, false)
	}
	for _, l := range devLinks {
		p.call("/dev/"+l[0], -1, unix.SYS_SYMLINKAT, p.str(l[1]), s(b.root), p.str("dev/"+l[0]))
	}
	for i, f := range cfg.Files {
		if f.Create {
			node := p.slot()
			p.call(f.Target+": mount point", node, unix.SYS_OPENAT, s(b.root), p.str(strings.TrimPrefix(f.Target, "/")), k(unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC), k(0o555))
			p.close(node)
			b.attach(f.Target, files[i], f.Target, false)
		}
	}
	b.attach("/dev/pts", b.fsmount("/dev/pts", "devpts", [][2]string{{"ptmxmode", "0666"}, {"mode", "0620"}}, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NOEXEC), "/dev/pts", true)
	b.attach("/dev/shm", b.fsmount("/dev/shm", "tmpfs", size([][2]string{{"mode", "1777"}}), unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV), "/dev/shm", true)
	devT, _ := b.target("/dev: read-only", "/dev")
	roAttr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}
	p.call("/dev: read-only", -1, unix.SYS_MOUNT_SETATTR, s(devT), p.str(""), k(unix.AT_EMPTY_PATH), keepPtr(p, roAttr), k(unsafe.Sizeof(*roAttr)))
	p.close(devT)

	for _, d := range cfg.Shadows {
		b.attach("the way to a writable area through "+d, b.fsmount("shadow "+d, "tmpfs", [][2]string{{"mode", "0755"}, {"size", "64k"}},
			unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC), d, false)
	}
	for i, w := range cfg.Writable {
		b.attach("writable "+w.Path, writable[i], b.view(w.Path), true)
	}
	for i, f := range cfg.Files {
		switch {
		case f.Create:
		case f.HostTarget:
			b.attach(f.Target, files[i], b.view(f.Target), false)
		default:
			b.attach(f.Target, files[i], f.Target, false)
		}
	}
	if cfg.Listen {
		b.bindResolvConf()
	}
	for _, path := range cfg.Pin {
		b.rebind("pin "+path, b.view(path), false)
	}
	for j, path := range cfg.DenyWrite {
		if ph, ok := cfg.Placeholders[path]; ok {
			b.cover(j, "protect "+path, b.view(path), ph)
			continue
		}
		b.rebind("protect "+path, b.view(path), true)
	}
	for i, d := range denyRead {
		b.mask(i, d.path, d.dir)
	}
	p.close(b.masks)
	for _, v := range cfg.Volumes {
		if v.FD < 0 || v.FD >= len(fds) {
			continue // launch sends one for each
		}
		b.volume(v, fds[v.FD])
	}
	if cfg.MakeDir {
		b.mkdirAll("working directory", cfg.Dir)
	}

	// pivot_root into the view and drop the old root.
	p.call("pivot_root: enter the new root", -1, unix.SYS_FCHDIR, s(b.root))
	p.call("pivot_root", -1, unix.SYS_PIVOT_ROOT, p.str("."), p.str("."))
	p.call("detach old root", -1, unix.SYS_UMOUNT2, p.str("."), k(unix.MNT_DETACH))
	p.close(b.root)
	p.call("enter working directory "+cfg.Dir, -1, unix.SYS_CHDIR, p.str(cfg.Dir))
}

// servedMasks takes the stand-ins hutch serves (mnt, their detached mount)
// as the masks: attached in the first process's own mount namespace where
// the new root is attached next, on top of them (a mount that came from
// another namespace cannot be cloned from until it is attached in this
// one), and gone with the old root.
func (b *builder) servedMasks(mnt int8, nodes int) {
	p := &b.p
	p.call("stand-ins: attach", -1, unix.SYS_MOVE_MOUNT, s(mnt), p.str(""), k(uintptr(unix.AT_FDCWD&0xffffffff)), p.str(stagingDir), k(unix.MOVE_MOUNT_F_EMPTY_PATH))
	p.close(mnt)
	b.masks = p.slot()
	p.call("stand-ins: open", b.masks, unix.SYS_OPENAT, k(uintptr(unix.AT_FDCWD&0xffffffff)), p.str(stagingDir), k(unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC), k(0))
	b.served = true
	// List the root once: hutch answers with every node's attributes,
	// which the kernel keeps, so that cloning the nodes below asks hutch
	// nothing more (one request for many, instead of one each).
	const bufLen = 64 << 10
	buf := make([]byte, bufLen)
	p.keep = append(p.keep, buf)
	dir := p.slot()
	p.call("stand-ins: open to list", dir, unix.SYS_OPENAT, s(b.masks), p.str("."), k(unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC), k(0))
	// A listed node takes at most about 200 bytes; the last call finds
	// the end.
	for range nodes*200/bufLen + 2 {
		p.call("stand-ins: list", -1, unix.SYS_GETDENTS64, s(dir), k(uintptr(unsafe.Pointer(&buf[0]))), k(bufLen))
	}
	p.close(dir)
}

// standInsFD is where the first process puts its FUSE device while it
// mounts the stand-ins: mount options name the device by number, and a
// prog's options are fixed when hutch builds it.
const standInsFD = 999

// standInsMsg is the byte of the message that hands the stand-ins' FUSE
// device to hutch.
const standInsMsg = 'F'

// userStandIns makes the stand-ins when an ordinary user started hutch:
// the first process mounts them itself, in its own user namespace (the
// kernel takes a FUSE device only from the namespace of the mount, and
// the user may mount nothing outside it), and hands the device to hutch,
// which serves it from then on (readReply). Without /dev/fuse, or when
// the kernel refuses the mount, it makes the same nodes on a read-only
// tmpfs, which refuse unseen.
func (b *builder) userStandIns(cfg initConfig, denyRead []pathKind) {
	p := &b.p
	b.masks = p.slot()
	b.served = true
	dev := p.slot()
	open := p.call("stand-ins: open /dev/fuse", dev, unix.SYS_OPENAT, k(uintptr(unix.AT_FDCWD&0xffffffff)), p.str("/dev/fuse"), k(unix.O_RDWR|unix.O_CLOEXEC), k(0))
	dup := p.call("stand-ins: the device's number", -1, unix.SYS_DUP3, s(dev), k(standInsFD), k(unix.O_CLOEXEC))
	fs := p.slot()
	steps := []int{dup}
	steps = append(steps, p.call("stand-ins: fsopen", fs, unix.SYS_FSOPEN, p.str("fuse"), k(unix.FSOPEN_CLOEXEC)))
	for _, o := range maskfs.MountOptions(standInsFD, uint32(b.who.uid), uint32(b.who.gid)) {
		if o[1] == "" {
			steps = append(steps, p.call("stand-ins: option "+o[0], -1, unix.SYS_FSCONFIG, s(fs), k(unix.FSCONFIG_SET_FLAG), p.str(o[0]), k(0), k(0)))
			continue
		}
		steps = append(steps, p.call("stand-ins: option "+o[0], -1, unix.SYS_FSCONFIG, s(fs), k(unix.FSCONFIG_SET_STRING), p.str(o[0]), p.str(o[1]), k(0)))
	}
	steps = append(steps, p.call("stand-ins: create", -1, unix.SYS_FSCONFIG, s(fs), k(unix.FSCONFIG_CMD_CREATE), k(0), k(0), k(0)))
	steps = append(steps, p.call("stand-ins: fsmount", b.masks, unix.SYS_FSMOUNT, s(fs), k(unix.FSMOUNT_CLOEXEC),
		k(unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC)))
	p.closeKeep(fs)
	p.call("stand-ins: close the device's number", -1, unix.SYS_CLOSE, k(standInsFD))
	m := newMsgBuf(unix.UnixRights(0))
	m.data[0] = standInsMsg
	p.keep = append(p.keep, m)
	p.store((*int32)(unsafe.Pointer(&m.oob[unix.CmsgLen(0)])), dev)
	p.call("stand-ins: hand them to hutch", -1, unix.SYS_SENDMSG, ci(b.ctl), ptr(&m.hdr), k(0))
	p.closeKeep(dev)
	done := p.jump()
	// No FUSE here: the same nodes on a tmpfs.
	p.skip(open, unix.EACCES, unix.ENOENT, unix.EPERM, unix.ENXIO)
	for _, i := range steps {
		p.skip(i, unix.EPERM, unix.EINVAL, unix.ENODEV, unix.EACCES)
	}
	p.call("stand-ins: close the device's number", -1, unix.SYS_CLOSE, k(standInsFD))
	p.skip(len(p.ops)-1, unix.EBADF)
	b.fsmountTo(b.masks, "masks", "tmpfs", [][2]string{{"size", "64k"}, {"mode", "0555"}},
		unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC)
	file := func(name string, mode uintptr, data string) {
		f := p.slot()
		p.call("masks: "+name, f, unix.SYS_OPENAT, s(b.masks), p.str(name), k(unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC), k(mode))
		if data != "" {
			buf := []byte(data)
			p.keep = append(p.keep, buf)
			p.call("masks: "+name+": write", -1, unix.SYS_WRITE, s(f), k(uintptr(unsafe.Pointer(&buf[0]))), ci(len(buf)))
		}
		p.close(f)
	}
	for i := range denyRead {
		file(maskNodeName(i, false), 0, "")
		p.call("masks: "+maskNodeName(i, true), -1, unix.SYS_MKDIRAT, s(b.masks), p.str(maskNodeName(i, true)), k(0))
	}
	for j, path := range cfg.DenyWrite {
		kind, ok := cfg.Placeholders[path]
		switch {
		case !ok:
		case kind == placeholderDir:
			p.call("masks: "+coverNodeName(j), -1, unix.SYS_MKDIRAT, s(b.masks), p.str(coverNodeName(j)), k(0o555))
		case kind == placeholderSelf:
			file(coverNodeName(j), 0o444, ".")
		default:
			file(coverNodeName(j), 0o444, "")
		}
	}
	if cfg.Listen {
		file(resolvNodeName, 0o444, resolvConf)
	}
	b.setattr("masks: read-only", b.masks, unix.MOUNT_ATTR_RDONLY)
	p.land(done)
}

// tmpfsMasks makes the masks: an empty file and an empty directory, mode
// 000, on a detached read-only tmpfs that is never attached anywhere else,
// with the placeholders' stand-ins and the sandbox's resolv.conf.
func (b *builder) tmpfsMasks(cfg initConfig) {
	p := &b.p
	b.masks = b.fsmount("masks", "tmpfs", [][2]string{{"size", "16k"}, {"mode", "0555"}},
		unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC)
	f := p.slot()
	p.call("masks: file", f, unix.SYS_OPENAT, s(b.masks), p.str("f"), k(unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC), k(0))
	p.close(f)
	p.call("masks: directory", -1, unix.SYS_MKDIRAT, s(b.masks), p.str("d"), k(0))
	// Stand-ins for placeholders: empty but readable, as the placeholder
	// itself is (bound from here, they need no attribute change each).
	e := p.slot()
	p.call("masks: placeholder file", e, unix.SYS_OPENAT, s(b.masks), p.str("e"), k(unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC), k(0o444))
	p.close(e)
	p.call("masks: placeholder directory", -1, unix.SYS_MKDIRAT, s(b.masks), p.str("ed"), k(0o555))
	if hasKind(cfg.Placeholders, placeholderSelf) {
		es := p.slot()
		p.call("masks: placeholder commondir", es, unix.SYS_OPENAT, s(b.masks), p.str("es"), k(unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC), k(0o444))
		p.call("masks: placeholder commondir: write", -1, unix.SYS_WRITE, s(es), p.str("."), k(1))
		p.close(es)
	}
	if cfg.Listen {
		r := p.slot()
		conf := []byte(resolvConf)
		p.keep = append(p.keep, conf)
		p.call("masks: resolv.conf", r, unix.SYS_OPENAT, s(b.masks), p.str(resolvNodeName), k(unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC), k(0o444))
		p.call("masks: resolv.conf: write", -1, unix.SYS_WRITE, s(r), k(uintptr(unsafe.Pointer(&conf[0]))), ci(len(conf)))
		p.close(r)
	}
	b.setattr("masks: read-only", b.masks, unix.MOUNT_ATTR_RDONLY)
}

// pathKind is a deny-read path and whether it is a directory (as hutch saw
// it; the child copes if it changed).
type pathKind struct {
	path string
	dir  bool
}

// netSockets appends the sockets hutch serves for the sandbox on its
// loopback — the proxy's listeners (HTTP, SOCKS5) and the UDP socket its
// resolv.conf names (127.0.0.1:53, DNS) — and sends them to hutch, which
// serves them from outside: no relay process runs in the sandbox, and the
// sandbox can neither stop nor replace them. They are made like any
// socket of the sandbox's network namespace, so that only the sandbox
// reaches them.
func (b *builder) netSockets(ctl int) {
	p := &b.p
	m := newMsgBuf(unix.UnixRights(0, 0, 0))
	m.data[0] = listenersMsg
	p.keep = append(p.keep, m)
	var socks []int8
	for i, sk := range []struct {
		port int
		typ  uintptr
		what string
	}{
		{ProxyHTTPPort, unix.SOCK_STREAM, "proxy: listen on"},
		{ProxySOCKSPort, unix.SOCK_STREAM, "proxy: listen on"},
		{DNSPort, unix.SOCK_DGRAM, "name lookups: bind"},
	} {
		l := p.slot()
		desc := fmt.Sprintf("%s 127.0.0.1:%d", sk.what, sk.port)
		addr := &unix.RawSockaddrInet4{Family: unix.AF_INET, Addr: [4]byte{127, 0, 0, 1}}
		addr.Port = uint16(sk.port>>8) | uint16(sk.port&0xff)<<8 // network byte order
		p.call(desc, l, unix.SYS_SOCKET, k(unix.AF_INET), k(sk.typ|unix.SOCK_CLOEXEC), k(0))
		if sk.typ == unix.SOCK_STREAM {
			// So that a later hutch can listen there again while the
			// connections of the one before linger in TIME_WAIT (a
			// sandbox that outlives hutch, netSocketsIn); no other socket
			// can bind the address while this one listens all the same.
			one := int32(1)
			p.call(desc, -1, unix.SYS_SETSOCKOPT, s(l), k(unix.SOL_SOCKET), k(unix.SO_REUSEADDR), keepPtr(p, &one), k(4))
		}
		p.call(desc, -1, unix.SYS_BIND, s(l), keepPtr(p, addr), k(unix.SizeofSockaddrInet4))
		if sk.typ == unix.SOCK_STREAM {
			p.call(desc, -1, unix.SYS_LISTEN, s(l), k(1024))
		}
		p.store((*int32)(unsafe.Pointer(&m.oob[unix.CmsgLen(0)+4*i])), l)
		socks = append(socks, l)
	}
	p.call("network: hand the proxy's and the name lookups' sockets to hutch", -1, unix.SYS_SENDMSG, ci(ctl), ptr(&m.hdr), k(0))
	for _, l := range socks {
		p.close(l)
	}
}

// listenersMsg is the byte of the message that carries the sockets of
// netSockets.
const listenersMsg = 'L'

// resolvConf is the sandbox's /etc/resolv.conf when hutch answers its
// name lookups (see egress.Proxy.ServeDNS): one nameserver, its own
// loopback, and no search domains, whose names would only be refused too.
const resolvConf = "# hutch: names are resolved by hutch's egress proxy, not in the sandbox;\n" +
	"# this server answers every lookup \"no such host\" at once.\n" +
	"nameserver 127.0.0.1\n" +
	"options timeout:1 attempts:1\n"

// resolvConfPath is where resolvers read their configuration.
const resolvConfPath = "/etc/resolv.conf"

// bindResolvConf binds the masks tmpfs's resolv.conf read-only over the
// view's /etc/resolv.conf, or over what it links to in the view (a
// resolv.conf managed by systemd-resolved or NetworkManager is a symbolic
// link into /run). A view without one needs none: resolvers then ask
// 127.0.0.1 by default.
func (b *builder) bindResolvConf() {
	p := &b.p
	desc := "name lookups: " + resolvConfPath
	mnt := p.slot()
	p.call(desc+": clone", mnt, unix.SYS_OPEN_TREE, s(b.masks), p.str("r"), k(unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC))
	t, open := b.target(desc, resolvConfPath)
	move := p.call(desc+": attach", -1, unix.SYS_MOVE_MOUNT, s(mnt), p.str(""), s(t), p.str(""),
		k(unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH))
	p.skip(move, unix.EISDIR, unix.ENOTDIR, unix.EINVAL)
	p.closeKeep(t)
	p.free = append(p.free, t)
	p.skip(open, unix.ENOENT, unix.ENOTDIR, unix.EACCES, unix.ELOOP)
	p.close(mnt)
}

// identity appends the switch to the inside identity. The child was forked
// with hutch's credentials, which for root are the host's root: it sheds
// them first, before it creates any file, keeping its capabilities in the
// sandbox's user namespace (whose root is not the id it leaves) until it
// drops them all in harden.
func (b *builder) identity(id ids) {
	p := &b.p
	b.who = id
	if id.setgroups {
		list := make([]uint32, len(id.groups)+1) // never empty: a pointer to keep
		for i, g := range id.groups {
			list[i] = uint32(g)
		}
		p.keep = append(p.keep, list)
		p.call("identity: groups", -1, unix.SYS_SETGROUPS, ci(len(id.groups)), k(uintptr(unsafe.Pointer(&list[0]))))
	}
	p.call("identity: gid", -1, unix.SYS_SETRESGID, ci(id.gid), ci(id.gid), ci(id.gid))
	p.call("identity: uid", -1, unix.SYS_SETRESUID, ci(id.uid), ci(id.uid), ci(id.uid))
}

// dieWithHutch appends the parent-death signal (after the identity switch,
// which clears it), unless die is false (a sandbox that outlives hutch,
// Config.AgentSocket), and a check that hutch did not die before it was
// set: hutch's end of the control socket is then closed.
func (b *builder) dieWithHutch(ctl int, die bool) {
	p := &b.p
	if die {
		p.call("die with hutch", -1, unix.SYS_PRCTL, k(unix.PR_SET_PDEATHSIG), k(uintptr(unix.SIGKILL)), k(0), k(0), k(0))
	}
	var buf [1]byte
	got := p.slot()
	i := p.call("check that hutch lives", got, unix.SYS_RECVFROM, ci(ctl), keepPtr(p, &buf), k(1), k(unix.MSG_DONTWAIT|unix.MSG_PEEK), k(0), k(0))
	p.expect("hutch went away", got, 1)
	p.skip(i, unix.EAGAIN)
}

// hideArgs overwrites hutch's command line and environment in the first
// process's memory: /proc/1/cmdline is readable by the sandbox, and hutch's
// arguments may hold values (--env) meant for the command alone. It also
// zeroes the regions of wipe (real secret values, which the fork copied
// from hutch's memory).
func (b *builder) hideArgs(wipe [][]byte) error {
	stat, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return fmt.Errorf("read own command line bounds: %w", err)
	}
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return errors.New("read own command line bounds: bad /proc/self/stat")
	}
	f := strings.Fields(string(stat[i+1:])) // f[0] is field 3
	if len(f) < 49 {
		return errors.New("read own command line bounds: short /proc/self/stat")
	}
	p := &b.p
	mem := p.slot()
	p.call("hide hutch's arguments: open memory", mem, unix.SYS_OPENAT, k(uintptr(unix.AT_FDCWD&0xffffffff)), p.str("/proc/self/mem"), k(unix.O_RDWR|unix.O_CLOEXEC), k(0))
	for _, r := range [][2]int{{45, 46}, {47, 48}} { // arg_start, arg_end; env_start, env_end
		start, err1 := strconv.ParseUint(f[r[0]], 10, 64)
		end, err2 := strconv.ParseUint(f[r[1]], 10, 64)
		if err1 != nil || err2 != nil || end <= start || end-start > 1<<20 {
			return errors.New("read own command line bounds: bad values")
		}
		fill := make([]byte, end-start)
		if r[0] == 45 {
			copy(fill, "hutch:init")
		}
		p.keep = append(p.keep, fill)
		p.call("hide hutch's arguments", -1, unix.SYS_PWRITE64, s(mem), k(uintptr(unsafe.Pointer(&fill[0]))), ci(len(fill)), k(uintptr(start)))
	}
	for _, w := range wipe {
		if len(w) == 0 {
			continue
		}
		zero := make([]byte, len(w))
		p.keep = append(p.keep, zero, w)
		p.call("wipe a secret's value", -1, unix.SYS_PWRITE64, s(mem), k(uintptr(unsafe.Pointer(&zero[0]))), ci(len(zero)), k(uintptr(unsafe.Pointer(&w[0]))))
	}
	p.close(mem)
	return nil
}

// harden appends, after the mounts: hostname, loopback (and the sockets
// hutch serves there), not dumpable,
// capabilities, no_new_privs, Landlock, seccomp.
func (b *builder) harden(cfg initConfig, ruleset, ctl int) error {
	p := &b.p
	b.listener = -1
	host := []byte(cfg.Hostname)
	p.keep = append(p.keep, host)
	p.call("hostname", -1, unix.SYS_SETHOSTNAME, k(uintptr(unsafe.Pointer(&host[0]))), ci(len(host)))
	if cfg.Net != "host" {
		ifr, err := unix.NewIfreq("lo")
		if err != nil {
			return err
		}
		ifr.SetUint16(unix.IFF_UP | unix.IFF_RUNNING)
		sock := p.slot()
		p.call("network: socket", sock, unix.SYS_SOCKET, k(unix.AF_INET), k(unix.SOCK_DGRAM|unix.SOCK_CLOEXEC), k(0))
		p.call("network: bring up lo", -1, unix.SYS_IOCTL, s(sock), k(unix.SIOCSIFFLAGS), keepPtr(p, ifr))
		p.close(sock)
	}
	if cfg.Listen {
		b.netSockets(ctl)
	}

	p.call("not dumpable", -1, unix.SYS_PRCTL, k(unix.PR_SET_DUMPABLE), k(0), k(0), k(0), k(0))

	// Root of the user namespace gains nothing by being root (NOROOT), and
	// every capability goes — but the ones of Keep, which stay in every
	// set, ambient included, so that the programs the sandbox runs keep
	// them too (and lose them, as usual, when they switch to another uid).
	bits := secbitNoroot | secbitNorootLocked | secbitNoSetuidFixupLock | secbitNoCapAmbientLock
	if len(cfg.KeepCaps) == 0 {
		bits |= secbitKeepCapsLocked | secbitNoCapAmbientRaise
	}
	// With capabilities kept, a program may still ask to keep them across
	// a switch to another uid (PR_SET_KEEPCAPS, as setpriv does): they are
	// only those of Keep.
	p.call("capabilities: securebits", -1, unix.SYS_PRCTL, k(unix.PR_SET_SECUREBITS), ci(bits), k(0), k(0), k(0))
	var keep uint64
	for _, cp := range cfg.KeepCaps {
		keep |= 1 << cp
	}
	for cp := 0; cp <= unix.CAP_LAST_CAP; cp++ {
		if keep&(1<<cp) != 0 {
			continue
		}
		i := p.call(fmt.Sprintf("capabilities: drop %d from the bounding set", cp), -1, unix.SYS_PRCTL, k(unix.PR_CAPBSET_DROP), ci(cp), k(0), k(0), k(0))
		p.skip(i, unix.EINVAL) // a capability this kernel does not know
	}
	p.call("capabilities: clear ambient", -1, unix.SYS_PRCTL, k(unix.PR_CAP_AMBIENT), k(unix.PR_CAP_AMBIENT_CLEAR_ALL), k(0), k(0), k(0))
	hdr := &unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	data := &[2]unix.CapUserData{}
	for i := range data {
		set := uint32(keep >> (32 * i))
		data[i] = unix.CapUserData{Effective: set, Permitted: set, Inheritable: set}
	}
	p.call("capabilities: capset", -1, unix.SYS_CAPSET, keepPtr(p, hdr), keepPtr(p, data))
	for _, cp := range cfg.KeepCaps {
		p.call(fmt.Sprintf("capabilities: keep %d (ambient)", cp), -1, unix.SYS_PRCTL, k(unix.PR_CAP_AMBIENT), k(unix.PR_CAP_AMBIENT_RAISE), ci(cp), k(0), k(0))
	}
	p.call("no_new_privs", -1, unix.SYS_PRCTL, k(unix.PR_SET_NO_NEW_PRIVS), k(1), k(0), k(0), k(0))

	if ruleset >= 0 {
		// The ruleset hutch prepared for the host's inodes, plus the
		// sandbox's own filesystems (see applyLandlock).
		rw := privateWritable
		if cfg.PrivateHome != "" {
			rw = append(rw[:len(rw):len(rw)], cfg.PrivateHome)
		}
		if cfg.Home != "" {
			rw = append(rw[:len(rw):len(rw)], cfg.Home)
		}
		rules, _, err := landlock.Plan(landlock.Config{ReadOnly: privateReadOnly, ReadWrite: rw, Devices: []string{"/dev/pts"}}, landlock.ABI())
		if err != nil {
			return err
		}
		for _, f := range cfg.Files {
			if f.Exec {
				// hutch's binary bound into /dev, which is not
				// executable otherwise.
				rules = append(rules, landlock.Rule{Path: f.Target, Access: landlock.AccessReadFile | landlock.AccessExecute})
			}
		}
		for _, r := range rules {
			t := p.slot()
			i := p.call("landlock: open "+r.Path, t, unix.SYS_OPENAT, k(uintptr(unix.AT_FDCWD&0xffffffff)), p.str(r.Path), k(unix.O_PATH|unix.O_CLOEXEC), k(0))
			attr := &unix.LandlockPathBeneathAttr{Allowed_access: r.Access}
			p.store(&attr.Parent_fd, t)
			p.call("landlock: rule for "+r.Path, -1, unix.SYS_LANDLOCK_ADD_RULE, ci(ruleset), k(unix.LANDLOCK_RULE_PATH_BENEATH), keepPtr(p, attr), k(0))
			p.close(t)
			p.skip(i, unix.ENOENT)
		}
		p.call("landlock: restrict", -1, unix.SYS_LANDLOCK_RESTRICT_SELF, ci(ruleset), k(0))
	}
	if cfg.HostWrites {
		// Files the sandbox makes are never writable to others (nor to
		// the group when the user's umask withholds it); the filter keeps
		// a umask that lacks those bits from being set.
		p.call("umask", -1, unix.SYS_UMASK, k(uintptr(cfg.Umask)))
	}
	if !cfg.Missing["seccomp"] {
		o := seccomp.Options{HostWrites: cfg.HostWrites, Withheld: cfg.Withheld}
		filter, err := seccomp.Build(o)
		if err != nil {
			return err
		}
		fprog := &unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
		p.keep = append(p.keep, filter)
		if !o.Listener() {
			p.call("seccomp", -1, unix.SYS_SECCOMP, k(unix.SECCOMP_SET_MODE_FILTER), k(0), keepPtr(p, fprog))
			return nil
		}
		// The sandbox's PID 1 answers the calls the filter hands over (see
		// child.answer; the agent, seccomp.Supervisor): no work for hutch
		// at start, and a sandbox that keeps asking spends its own time.
		b.listener = p.slot()
		p.call("seccomp", b.listener, unix.SYS_SECCOMP, k(unix.SECCOMP_SET_MODE_FILTER), k(unix.SECCOMP_FILTER_FLAG_NEW_LISTENER), keepPtr(p, fprog))
		if cfg.AgentFD >= 0 {
			// Above the descriptors the agent gets (0–3), so that the
			// moves to 3 and agent.ListenerFD never replace it.
			high := p.slot()
			p.call("seccomp: listener above the agent's descriptors", high, unix.SYS_FCNTL, s(b.listener), k(unix.F_DUPFD_CLOEXEC), k(10))
			p.close(b.listener)
			b.listener = high
		}
	}
	return nil
}

// command appends the last steps before the command's fork — the pty, the
// fallback rlimits, close-on-exec for every descriptor above 2, the pipe
// that reports a failed exec — and returns the first process around it.
func (b *builder) command(cfg initConfig, ctl int) (*child, error) {
	p := &b.p
	master, slave := int8(-1), int8(-1)
	if cfg.Tty {
		master, slave = p.slot(), p.slot()
		p.call("terminal: open /dev/ptmx", master, unix.SYS_OPENAT, k(uintptr(unix.AT_FDCWD&0xffffffff)), p.str("/dev/ptmx"), k(unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC), k(0))
		var unlock int32
		p.call("terminal: unlock", -1, unix.SYS_IOCTL, s(master), k(unix.TIOCSPTLCK), keepPtr(p, &unlock))
		if cfg.Rows > 0 && cfg.Cols > 0 {
			p.call("terminal: size", -1, unix.SYS_IOCTL, s(master), k(unix.TIOCSWINSZ), keepPtr(p, &unix.Winsize{Row: cfg.Rows, Col: cfg.Cols}))
		}
		p.call("terminal: open its other end", slave, unix.SYS_IOCTL, s(master), k(unix.TIOCGPTPEER), k(unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC))
	}
	for _, r := range cfg.Rlimits {
		var cur unix.Rlimit
		if err := unix.Getrlimit(r.Resource, &cur); err != nil {
			return nil, fmt.Errorf("rlimit %d: %w", r.Resource, err)
		}
		v := min(r.Value, cur.Max) // a limit above the caller's hard limit is lowered to it
		p.call(fmt.Sprintf("rlimit %d", r.Resource), -1, unix.SYS_PRLIMIT64, k(0), ci(r.Resource), keepPtr(p, &unix.Rlimit{Cur: v, Max: v}), k(0))
	}
	if cfg.AgentFD >= 0 {
		// The agent gets the sandbox's /dev/null as its streams, not the
		// daemon's (its log): nothing of the host's through PID 1.
		null := p.slot()
		p.call("agent: open /dev/null", null, unix.SYS_OPENAT, k(uintptr(unix.AT_FDCWD&0xffffffff)), p.str("/dev/null"), k(unix.O_RDWR|unix.O_CLOEXEC), k(0))
		for fd := range 3 {
			p.call(fmt.Sprintf("agent: /dev/null as descriptor %d", fd), -1, unix.SYS_DUP3, s(null), ci(fd), k(0))
		}
		p.close(null)
	}
	if cfg.AgentFD < 0 && !cfg.Tty {
		b.streams(cfg.Streams)
	}
	// No descriptor but the three streams reaches the command: not the
	// control socket, not whatever hutch inherited without close-on-exec.
	p.call("close inherited descriptors", -1, unix.SYS_CLOSE_RANGE, k(3), k(^uintptr(0)), k(unix.CLOSE_RANGE_CLOEXEC))
	pipe := &[2]int32{}
	p.call("exec pipe", -1, unix.SYS_PIPE2, keepPtr(p, pipe), k(unix.O_CLOEXEC))
	execR, execW := p.slot(), p.slot()
	p.load(execR, &pipe[0])
	p.load(execW, &pipe[1])

	ch, err := newChild(b, cfg, ctl)
	if err != nil {
		return nil, err
	}
	ch.master, ch.slave, ch.execR, ch.execW = master, slave, execR, execW
	ch.listener = b.listener
	ch.ops = p.ops
	return ch, nil
}

// streams makes hutch's descriptors fds descriptors 0, 1 and 2, in the
// first process and so in the command, where they are not already: each
// is first copied above them (10 or more), so that one stream's move
// never replaces another before it moved.
func (b *builder) streams(fds []int) {
	p := &b.p
	var high []int8
	var to []int
	for i, fd := range fds {
		if i > 2 || fd < 0 || fd == i {
			continue
		}
		h := p.slot()
		p.call(fmt.Sprintf("stream %d: copy descriptor %d", i, fd), h, unix.SYS_FCNTL, ci(fd), k(unix.F_DUPFD_CLOEXEC), k(10))
		high, to = append(high, h), append(to, i)
	}
	for j, h := range high {
		p.call(fmt.Sprintf("stream %d: in place", to[j]), -1, unix.SYS_DUP3, s(h), ci(to[j]), k(0))
		p.close(h)
	}
}

// failure turns the first process's report into an error with the exit
// code hutch should use.
func (b *builder) failure(r reply, name string) *InitError {
	errno := unix.Errno(r.Errno)
	switch r.Kind {
	case replyExec:
		if r.Code == ExitNotFound {
			return &InitError{Msg: name + ": command not found", Code: ExitNotFound}
		}
		return &InitError{Msg: fmt.Sprintf("%s: cannot execute: %v", name, errno), Code: ExitNotExecutable}
	case replyFailed:
		desc := "start the command"
		if r.Op >= 0 && int(r.Op) < len(b.p.descs) {
			desc = b.p.descs[r.Op]
		}
		msg := fmt.Sprintf("sandbox setup: %s: %v", desc, errno)
		if (errno == unix.EROFS || errno == unix.ENOENT) && strings.Contains(desc, "mount point") {
			msg += " (a read-only root needs every mount point the sandbox uses: create it there)"
		}
		var category error
		if strings.HasPrefix(desc, volumeDesc) && (errno == unix.ELOOP || errno == unix.ENOTDIR) {
			msg, category = msg+" ("+ErrVolumePath.Error()+")", ErrVolumePath
		}
		return &InitError{Msg: msg, Code: ExitHutchError, Err: category}
	}
	return &InitError{Msg: fmt.Sprintf("sandbox setup: unexpected report %d", r.Kind), Code: ExitHutchError}
}

// denyReadKinds lists the deny-read paths to mask and whether each is a
// directory, as the host sees them. A path missing on the host needs no
// mask, except in the sandbox's own filesystems and the writable areas,
// where it may differ or appear; there the sandbox looks for itself.
func denyReadKinds(paths []string, writable []bindSrc) []pathKind {
	own := []string{"/tmp", "/proc", "/dev", "/sys"}
	for _, w := range writable {
		own = append(own, w.Path)
	}
	out := make([]pathKind, 0, len(paths))
	for _, p := range paths {
		var st unix.Stat_t
		err := unix.Stat(p, &st)
		if errors.Is(err, unix.ENOENT) && !under(p, own) {
			continue
		}
		out = append(out, pathKind{path: p, dir: err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR})
	}
	return out
}

// seccompAvailable reports whether the seccomp layer can be set up.
func seccompAvailable(missing map[string]bool) error {
	if missing["seccomp"] {
		return fmt.Errorf("%w (simulated by %s)", seccomp.ErrNotSupported, SimulateMissingEnv)
	}
	return seccomp.Supported()
}

// withMissing returns m with feature added.
func withMissing(m map[string]bool, feature string) map[string]bool {
	out := map[string]bool{feature: true}
	for k, v := range m {
		out[k] = v
	}
	return out
}

// hasKind reports whether a placeholder of kind k is among m.
func hasKind(m map[string]placeholderKind, k placeholderKind) bool {
	for _, v := range m {
		if v == k {
			return true
		}
	}
	return false
}
