package ociruntime

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"sync"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/mountinfo"
	"github.com/hutch-sandbox/hutch/internal/sandbox"
)

// The host ids of containers hutch-runc puts in a user namespace: block n
// of idBlock ids starts at idBase + n*idBlock, up to idBlocks blocks,
// above the ranges /etc/subuid and systemd hand out by default.
const (
	idBase   = 0x60000000
	idBlock  = 65536
	idBlocks = (0x7fff0000 - idBase) / idBlock
)

// mountsRoot holds, per container, the idmapped mounts hutch-runc makes
// for it and the files it binds into it: a directory that every id may
// enter (not list), because the low-level runtime mounts them from inside
// the container's user namespace, with its ids.
const mountsRoot = "/run/hutch-runc/c"

// mountsDir is the container's directory under mountsRoot: named after
// hutch-runc's root and the ID, which is unique only within one root.
// Each holds a back-reference to the container's state (ownerFile), by
// which sweepMounts removes those of containers gone without a delete.
func mountsDir(root, id string) string {
	return filepath.Join(mountsRoot, mountsName(root, id))
}

// mountsName is the name of mountsDir(root, id).
func mountsName(root, id string) string {
	h := sha256.Sum256([]byte(root))
	return hex.EncodeToString(h[:6]) + "-" + id
}

// needsUserns says whether hutch-runc gives the container a user
// namespace of its own: when the spec has none, and joins no process
// namespace. A container that joins another's network or IPC namespace
// (every container of a Kubernetes pod joins the one CRI made) gets one
// too: the low-level runtime joins those first, as host root, and then
// makes the user namespace; the file systems it could not mount from it
// (sysfs and mqueue, which belong to the joined namespace's owner) are
// mounted by hutch-runc in the joined namespace and bound in
// (joinedMounts). A joined process namespace keeps the spec's identity:
// its proc could not be mounted from a user namespace of the container's.
func needsUserns(s *specs.Spec) bool {
	for _, ns := range s.Linux.Namespaces {
		if ns.Type == specs.UserNamespace || ns.Type == specs.PIDNamespace && ns.Path != "" {
			return false
		}
	}
	return true
}

// joinedFS are the file systems whose instance belongs to a namespace
// the container may join, by their mount type: mounted from a user
// namespace other than the one that owns that namespace, they fail.
var joinedFS = map[string]struct {
	ns   specs.LinuxNamespaceType
	flag int
}{
	"sysfs":  {specs.NetworkNamespace, unix.CLONE_NEWNET},
	"mqueue": {specs.IPCNamespace, unix.CLONE_NEWIPC},
}

// joinedMounts mounts, for each sysfs and mqueue mount of s whose
// namespace the container joins by path, an instance of that file system
// in that namespace under mnt (host root's, from the joined namespace),
// and makes the spec bind it instead: nosuid, nodev, noexec, and
// read-only when the spec's mount was.
func joinedMounts(s *specs.Spec, mnt string) error {
	paths := map[specs.LinuxNamespaceType]string{}
	for _, ns := range s.Linux.Namespaces {
		if ns.Path != "" {
			paths[ns.Type] = ns.Path
		}
	}
	for i := range s.Mounts {
		m := &s.Mounts[i]
		fs, ok := joinedFS[m.Type]
		path := paths[fs.ns]
		if !ok || path == "" {
			continue
		}
		target := filepath.Join(mnt, m.Type)
		if err := os.Mkdir(target, 0o755); err != nil {
			return err
		}
		if err := mountIn(path, fs.flag, m.Type, target); err != nil {
			return fmt.Errorf("%s of the joined namespace %s: %w", m.Type, path, err)
		}
		opts := []string{"bind", "nosuid", "nodev", "noexec"}
		if slices.Contains(m.Options, "ro") {
			opts = append(opts, "ro")
		}
		*m = specs.Mount{Destination: m.Destination, Type: "bind", Source: target, Options: opts}
	}
	return nil
}

// joinedSysctls writes the spec's sysctls of a namespace the container
// joins by path (net.* of a network namespace, IPC's kernel.shm*,
// kernel.msg*, kernel.sem, fs.mqueue.*) in that namespace itself, host
// root's, and takes them out of the spec: from its user namespace the
// container's runtime may not write them in a namespace another one
// owns (CRI sets net.ipv4.ip_unprivileged_port_start in every pod's).
// A name that is not plain (letters, digits, '_', '-' between dots) is
// left to the runtime.
func joinedSysctls(s *specs.Spec) error {
	paths := map[specs.LinuxNamespaceType]string{}
	for _, ns := range s.Linux.Namespaces {
		if ns.Path != "" {
			paths[ns.Type] = ns.Path
		}
	}
	for _, k := range slices.Sorted(maps.Keys(s.Linux.Sysctl)) {
		var typ specs.LinuxNamespaceType
		var flag int
		switch {
		case strings.HasPrefix(k, "net."):
			typ, flag = specs.NetworkNamespace, unix.CLONE_NEWNET
		case strings.HasPrefix(k, "kernel.shm"), strings.HasPrefix(k, "kernel.msg"), k == "kernel.sem", strings.HasPrefix(k, "fs.mqueue."):
			typ, flag = specs.IPCNamespace, unix.CLONE_NEWIPC
		default:
			continue
		}
		if paths[typ] == "" || !plainSysctl(k) {
			continue
		}
		if err := writeSysctlIn(paths[typ], flag, k, s.Linux.Sysctl[k]); err != nil {
			return fmt.Errorf("sysctl %s in the joined namespace %s: %w", k, paths[typ], err)
		}
		delete(s.Linux.Sysctl, k)
	}
	return nil
}

// plainSysctl reports whether a sysctl's name is dot-separated words of
// letters, digits, '_' and '-': one that names a file under /proc/sys and
// nothing else.
func plainSysctl(k string) bool {
	for _, w := range strings.Split(k, ".") {
		if w == "" {
			return false
		}
		for i := 0; i < len(w); i++ {
			if c := w[i]; !isAlnum(c) && c != '_' && c != '-' {
				return false
			}
		}
	}
	return true
}

// writeSysctlIn writes value to sysctl k from the namespace at nsPath (of
// kind flag).
func writeSysctlIn(nsPath string, flag int, k, value string) error {
	return inNamespace(nsPath, flag, func() error {
		return os.WriteFile("/proc/sys/"+strings.ReplaceAll(k, ".", "/"), []byte(value), 0)
	})
}

// mountIn mounts a new instance of the file system fstype at target, from
// the namespace at nsPath (of kind flag).
func mountIn(nsPath string, flag int, fstype, target string) error {
	return inNamespace(nsPath, flag, func() error {
		return unix.Mount(fstype, target, fstype, unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "")
	})
}

// inNamespace runs f on a thread that enters the namespace at nsPath (of
// kind flag) and ends with its goroutine, never serving another.
func inNamespace(nsPath string, flag int, f func() error) error {
	ns, err := os.Open(nsPath)
	if err != nil {
		return err
	}
	defer ns.Close()
	errc := make(chan error, 1)
	go func() {
		goruntime.LockOSThread()
		if err := unix.Setns(int(ns.Fd()), flag); err != nil {
			errc <- fmt.Errorf("enter it: %w", err)
			return
		}
		errc <- f()
	}()
	return <-errc
}

// allocateIDs takes the lowest free block of host ids for container id,
// recording it under dir (hutch-runc's root/hutch/ids); the block's file
// holds the container's state directory, which poststop releases.
func allocateIDs(dir, owner string) (uint32, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return 0, err
	}
	// One allocation at a time, so that a stale block is reclaimed by
	// one create only.
	lock, err := lockFile(filepath.Join(dir, ".lock"))
	if err != nil {
		return 0, fmt.Errorf("lock the blocks of ids: %w", err)
	}
	defer lock.Close()
	for n := 0; n < idBlocks; n++ {
		p := filepath.Join(dir, strconv.Itoa(n))
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, os.ErrExist) {
			// A block whose container's state is gone (its runtime
			// died before poststop) is free again: once it is
			// removed, the next try may take it.
			if b, rerr := os.ReadFile(p); rerr == nil && len(b) > 0 {
				if _, serr := os.Stat(string(b)); errors.Is(serr, os.ErrNotExist) && os.Remove(p) == nil {
					n--
				}
			}
			continue
		}
		if err != nil {
			return 0, err
		}
		_, err = f.WriteString(owner)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			os.Remove(f.Name())
			return 0, err
		}
		return uint32(idBase + n*idBlock), nil
	}
	return 0, fmt.Errorf("no free block of %d host ids for a user namespace (%d in use)", idBlock, idBlocks)
}

// releaseIDs frees the block of ids recorded for owner.
func releaseIDs(dir, owner string) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		if b, err := os.ReadFile(p); err == nil && string(b) == owner {
			os.Remove(p)
		}
	}
}

// userns gives the container a user namespace whose ids 0–65535 are the
// host's base…base+65535, and makes its root and its bind mounts idmapped
// clones under mnt, so that the image's files (and a volume's) show their
// owners inside as on disk, and what the container writes lands on disk
// with the ids it has inside. A bind source whose filesystem cannot be
// idmapped is bound as it is (its files then show as nobody).
func userns(s *specs.Spec, base uint32, mnt string) (work string, err error) {
	m := []specs.LinuxIDMapping{{ContainerID: 0, HostID: base, Size: idBlock}}
	s.Linux.UIDMappings, s.Linux.GIDMappings = m, slices.Clone(m)
	s.Linux.Namespaces = append(s.Linux.Namespaces, specs.LinuxNamespace{Type: specs.UserNamespace})
	maps := fmt.Sprintf("0 %d %d", base, idBlock)
	// Group ids the namespace does not map cannot be named in its
	// sysctls (Docker lets every group ping).
	if v, ok := s.Linux.Sysctl["net.ipv4.ping_group_range"]; ok {
		if f := strings.Fields(v); len(f) == 2 {
			if hi, err := strconv.ParseUint(f[1], 10, 32); err == nil && hi >= idBlock {
				s.Linux.Sysctl["net.ipv4.ping_group_range"] = f[0] + " " + strconv.Itoa(idBlock-1)
			}
		}
	}
	rootfs := filepath.Join(mnt, "rootfs")
	if err := os.Mkdir(rootfs, 0o755); err != nil {
		return "", err
	}
	work, err = idmapRoot(s.Root.Path, rootfs, mnt, base)
	if err != nil {
		return work, fmt.Errorf("the container's root in its user namespace: %w", err)
	}
	s.Root.Path = rootfs
	if err := joinedMounts(s, mnt); err != nil {
		return work, err
	}
	if err := joinedSysctls(s); err != nil {
		return work, err
	}
	for i := range s.Mounts {
		mt := &s.Mounts[i]
		if !isBind(*mt) || !filepath.IsAbs(mt.Source) || mt.Destination == InitPath || filepath.Dir(mt.Source) == mnt {
			continue
		}
		fi, err := os.Stat(mt.Source)
		if err != nil {
			continue
		}
		target := filepath.Join(mnt, "bind-"+strconv.Itoa(i))
		if fi.IsDir() {
			err = os.Mkdir(target, 0o755)
		} else {
			err = os.WriteFile(target, nil, 0o644)
		}
		if err != nil {
			return work, err
		}
		// The flags of the source's mount that the clone keeps and the
		// container's namespace cannot clear: a remount must keep them.
		locked := []string{"nosuid", "nodev"}
		var st unix.Statfs_t
		if unix.Statfs(mt.Source, &st) == nil {
			if st.Flags&unix.ST_NOEXEC != 0 {
				locked = append(locked, "noexec")
			}
			if st.Flags&unix.ST_RDONLY != 0 {
				locked = append(locked, "ro")
			}
		}
		if err := sandbox.MountIdmapped([]string{mt.Source}, []string{target}, maps, maps); err == nil {
			mt.Source = target
			for _, o := range locked {
				if !slices.Contains(mt.Options, o) {
					mt.Options = append(mt.Options, o)
				}
			}
		}
	}
	return work, nil
}

// upperWork is the overlay work directory hutch-runc makes beside an
// engine's upper layer, for its own overlay of the same layers;
// upperWorkFile, in the container's state, says where it made it.
const (
	upperWork     = "hutch-work"
	upperWorkFile = "upper-work"
)

// idmapRoot mounts at target the container's root, root, idmapped with
// maps. An overlay (the image's layers and the container's upper layer,
// as containerd's and Docker's are) cannot be idmapped itself: its layers
// are, each, and a new overlay of them is mounted at target, with a work
// directory of its own beside the upper layer (the engine's overlay
// keeps its own; the container writes through hutch-runc's only).
func idmapRoot(root, target, mnt string, base uint32) (work string, err error) {
	maps := fmt.Sprintf("0 %d %d", base, idBlock)
	ms, err := ownMounts()
	if err != nil {
		return "", err
	}
	var top *mountinfo.Mount
	for i := range ms {
		if ms[i].Point == root {
			top = &ms[i]
		}
	}
	if top == nil || top.FSType != "overlay" {
		return "", sandbox.MountIdmapped([]string{root}, []string{target}, maps, maps)
	}
	var lowers []string
	var upper, engineWork string
	for _, o := range top.SuperOptions {
		k, v, _ := strings.Cut(o, "=")
		if strings.Contains(v, `\`) {
			return "", fmt.Errorf("overlay option %s: escaped paths are not supported", k)
		}
		switch k {
		case "lowerdir":
			lowers = strings.Split(v, ":")
		case "upperdir":
			upper = v
		case "workdir":
			engineWork = v
		}
	}
	if len(lowers) == 0 || upper == "" || filepath.Dir(upper) != filepath.Dir(engineWork) {
		return "", fmt.Errorf("overlay at %s: want lowerdir, and upperdir and workdir in one directory: %v", root, top.SuperOptions)
	}
	var lower []string
	for i, l := range lowers {
		t := filepath.Join(mnt, "lower-"+strconv.Itoa(i))
		if err := os.Mkdir(t, 0o755); err != nil {
			return "", err
		}
		if err := sandbox.MountIdmapped([]string{l}, []string{t}, maps, maps); err != nil {
			return "", err
		}
		lower = append(lower, t)
	}
	layer := filepath.Join(mnt, "upper")
	if err := os.Mkdir(layer, 0o755); err != nil {
		return "", err
	}
	// Without the engine's overlay, mounted in that directory.
	if err := sandbox.MountIdmappedAlone(filepath.Dir(upper), layer, maps, maps); err != nil {
		return "", err
	}
	// Made through the engine's path: through the idmapped one, host
	// root's files would have no on-disk owner.
	hostWork := filepath.Join(filepath.Dir(upper), upperWork)
	if err := os.RemoveAll(hostWork); err != nil {
		return "", err
	}
	if err := os.Mkdir(hostWork, 0o700); err != nil {
		return "", err
	}
	opts := "lowerdir=" + strings.Join(lower, ":") + ",upperdir=" + filepath.Join(layer, filepath.Base(upper)) + ",workdir=" + filepath.Join(layer, upperWork)
	// The overlay works in its upper layer with the credentials of the
	// one who mounted it: host root's capabilities, with the file-system
	// ids of the container's root, which the layer's idmapping turns
	// into the on-disk root.
	errc := make(chan error, 1)
	go func() {
		// The thread's ids stay changed: it ends with the goroutine.
		goruntime.LockOSThread()
		unix.Setfsuid(int(base))
		unix.Setfsgid(int(base))
		// Leaving file-system uid 0 dropped the file-system
		// capabilities (DAC override, mknod for whiteouts, ...): the
		// overlay needs them back.
		if err := raiseEffective(); err != nil {
			errc <- err
			return
		}
		errc <- unix.Mount("overlay", target, "overlay", 0, opts)
	}()
	if err := <-errc; err != nil {
		return hostWork, fmt.Errorf("overlay of idmapped layers at %s: %w", target, err)
	}
	return hostWork, nil
}

// removeMounts unmounts everything under mnt, removes work (the overlay
// work directory hutch-runc made in the engine's layer, if any), then
// removes mnt, or moves what is left of it out of the way when a mount
// point of it cannot be removed yet (retire). It never removes
// across a mount it could not undo (the container's root!).
func removeMounts(mnt, work string) error {
	points, err := mountsUnder(mnt)
	if err != nil {
		return err
	}
	// The overlay first, then the work directory hutch-runc made in the
	// engine's layer, through the layer's mount.
	if root := filepath.Join(mnt, "rootfs"); slices.Contains(points, root) {
		if err := unix.Unmount(root, unix.MNT_DETACH); err != nil {
			return fmt.Errorf("unmount %s: %w", root, err)
		}
	}
	if work != "" && filepath.Base(work) == upperWork {
		os.RemoveAll(work)
	}
	for i := len(points) - 1; i >= 0; i-- {
		if err := unix.Unmount(points[i], unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("unmount %s: %w", points[i], err)
		}
	}
	if left, err := mountsUnder(mnt); err != nil || len(left) > 0 {
		return fmt.Errorf("mounts left under %s: %v %v", mnt, left, err)
	}
	return retire(mnt)
}

// mountsUnder lists the mount points at or under dir, in mount order.
func mountsUnder(dir string) ([]string, error) {
	ms, err := ownMounts()
	if err != nil {
		return nil, err
	}
	return pointsUnder(ms, dir), nil
}

// pointsUnder lists the mount points of ms at or under dir, in order.
func pointsUnder(ms []mountinfo.Mount, dir string) []string {
	var out []string
	for _, m := range ms {
		if m.Point == dir || strings.HasPrefix(m.Point, dir+"/") {
			out = append(out, m.Point)
		}
	}
	return out
}

// Directories of hutch-runc's root beside the containers' state
// directories (ROOT/hutch/ID), derived from one: the blocks of host ids
// in use, and the network namespaces' proxies.
func idsDir(stateDir string) string {
	return filepath.Join(filepath.Dir(filepath.Dir(stateDir)), "hutch-ids")
}

// containerMounts is the mounts directory of the container whose state
// directory is stateDir (ROOT/hutch/ID).
func containerMounts(stateDir string) string {
	return mountsDir(filepath.Dir(filepath.Dir(stateDir)), filepath.Base(stateDir))
}

// prepareState makes the container's state directory and its mounts
// directory, its user namespace when it gets one, and its egress.
func prepareState(s *specs.Spec, dir string, plan egressPlan, backend string) error {
	if err := os.MkdirAll(filepath.Join(dir, "bundle"), 0o700); err != nil {
		return err
	}
	for _, d := range []string{filepath.Dir(mountsRoot), mountsRoot} {
		if err := os.MkdirAll(d, 0o711); err != nil {
			return err
		}
		if err := os.Chmod(d, 0o711); err != nil {
			return err
		}
	}
	// The container's own directory: root's, or, in a user namespace,
	// its root's host id's alone (the low-level runtime mounts from it
	// with those ids); no one else on the host enters it.
	if err := makeMounts(plan.Files, dir); err != nil {
		return err
	}
	if needsUserns(s) && plan.Tier != TierGVisor && (!joinsByPath(s) || joinsUserLast(backend)) {
		base, err := allocateIDs(idsDir(dir), dir)
		if err != nil {
			return err
		}
		if err := os.Chown(plan.Files, int(base), int(base)); err != nil {
			return err
		}
		work, err := userns(s, base, plan.Files)
		if work != "" {
			// Where removeMounts finds it: in the state, which only
			// root can change.
			if werr := os.WriteFile(filepath.Join(dir, upperWorkFile), []byte(work), 0o600); err == nil {
				err = werr
			}
		}
		if err != nil {
			return err
		}
	}
	return prepareEgress(s, dir, plan)
}

// cleanupState ends what the container's state holds — its proxy, its
// mounts, its block of ids — and removes its state.
func cleanupState(dir string) error {
	err := stopEgress(dir)
	work, _ := os.ReadFile(filepath.Join(dir, upperWorkFile))
	if merr := removeMounts(containerMounts(dir), string(work)); err == nil {
		err = merr
	}
	releaseIDs(idsDir(dir), dir)
	if err != nil {
		// The state stays, for a next try: never removed across a
		// mount that could not be undone.
		return err
	}
	return os.RemoveAll(dir)
}

// raiseEffective makes the calling thread's effective capabilities its
// permitted ones.
func raiseEffective() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	for i := range data {
		data[i].Effective = data[i].Permitted
	}
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	return nil
}

// joinsByPath reports whether the container joins a namespace by path.
func joinsByPath(s *specs.Spec) bool {
	for _, ns := range s.Linux.Namespaces {
		if ns.Path != "" {
			return true
		}
	}
	return false
}

// joinsUserLast reports whether the low-level runtime can start a process
// in a container whose user namespace does not own the namespaces it
// joined (a pod's network namespace, which CRI made as host root): runc
// before 1.2 joins an exec's user namespace first, and from it may not
// join the others, so such a container could not be exec'd into (kubectl
// exec, probes). runc 1.2 and later join the other namespaces first, then
// the user namespace, as crun does: under them every container of a pod
// gets a user namespace of hutch-runc's; under runc 1.1 (Debian 12's) a
// container that joins a namespace by path gets none
// (docs/oci-runtime.md). A runtime not named runc is taken to be crun.
//
// The answer is kept per runtime path: `runc --version` runs once per
// hutch-runc process and binary, however many containers it creates.
func joinsUserLast(backend string) bool {
	if filepath.Base(backend) != "runc" {
		return true
	}
	if v, ok := joinsUserLastOf.Load(backend); ok {
		return v.(bool)
	}
	v, _ := joinsUserLastOf.LoadOrStore(backend, runcJoinsUserLast(backend))
	return v.(bool)
}

// joinsUserLastOf caches joinsUserLast's answers, by runtime path.
var joinsUserLastOf sync.Map

// runcJoinsUserLast asks runc at path for its version: 1.2 or later.
func runcJoinsUserLast(path string) bool {
	out, err := exec.Command(path, "--version").Output()
	if err != nil {
		return false
	}
	return runcVersionJoinsUserLast(string(out))
}

// runcVersionJoinsUserLast reports whether runc's --version output out is
// of runc 1.2 or later.
func runcVersionJoinsUserLast(out string) bool {
	var major, minor int
	if _, err := fmt.Sscanf(out, "runc version %d.%d", &major, &minor); err != nil {
		return false
	}
	return major > 1 || major == 1 && minor >= 2
}
