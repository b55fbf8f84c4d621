package sandbox

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/cgroups"
	"github.com/hutch-sandbox/hutch/internal/landlock"
	"github.com/hutch-sandbox/hutch/internal/policy"
)

// prepared is what hutch sets up on the host before the clone: the
// protected paths (the default names, the git scan) and the placeholders
// of the missing ones, and the Landlock ruleset; and the cgroup, to clean
// up with them.
type prepared struct {
	group        *cgroups.Group
	prot         protection
	placeholders placeholders
	ruleset      *landlock.Ruleset
	err          error
}

// prepare does the host-side setup: what to protect (protect, which walks
// the writable areas) and its placeholders, and the Landlock ruleset,
// concurrently.
func prepare(s policy.Spec, protect func() protection, roots []string, asRoot, layer bool, missing map[string]bool) *prepared {
	p := &prepared{}
	var phErr, llErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		p.prot = protect()
		phErr = p.placeholders.prepare(p.prot.prot, roots, asRoot)
	}()
	if !missing["landlock"] {
		llErr = p.landlock(s, roots, sandboxIdentity(asRoot), layer)
	}
	wg.Wait()
	p.err = errors.Join(phErr, llErr)
	return p
}

// limits decides how the spec's resource limits are enforced, before the
// sandbox is cloned. A cgroup is made when a limit needs one: memory and CPU
// always, the pids limit only where the pids controller is cgroup v2. On
// v2 the sandbox is cloned straight into the group (CLONE_INTO_CGROUP); on v1
// it has to be moved in after the clone, which costs the kernel an RCU grace
// period (milliseconds), so a pids limit alone is enforced there with
// RLIMIT_NPROC instead, which counts the same thing: the tasks of the
// sandbox's user in its own user namespace. Where no cgroup can be made (an
// ordinary user without a delegated cgroup), every limit falls back to
// rlimits; a CPU limit, which has none, then refuses to run without
// --best-effort. With always (Config.Cgroup) the cgroup is made even
// without a limit that needs one, so that the sandbox can be frozen, and
// failing to make it is an error.
func limits(r policy.Resources, bestEffort, always bool, name string) (g *cgroups.Group, rl []rlimit, dropped []string, err error) {
	if name == "" {
		name = "hutch-" + randomID()
	}
	l := cgroups.Limits{MemoryBytes: r.MemoryBytes, CPUs: r.CPUs}
	if r.Pids > 0 {
		info, _ := cgroups.Available()
		if c, ok := info.Controllers["pids"]; (ok && c.Version == 2) || l != (cgroups.Limits{}) {
			l.Pids = r.Pids
		} else {
			rl = append(rl, rlimit{Resource: unix.RLIMIT_NPROC, Value: uint64(r.Pids)})
		}
	}
	if always {
		g, err := cgroups.CreateAlways(name, l)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("sandbox cgroup: %w", err)
		}
		return g, rl, nil, nil
	}
	if l == (cgroups.Limits{}) {
		return nil, rl, nil, nil
	}
	g, cerr := cgroups.Create(name, l)
	if cerr == nil {
		return g, rl, nil, nil
	}
	rl, lost := rlimitFallback(r)
	if lost != "" && !bestEffort {
		return nil, nil, nil, fmt.Errorf("%s cannot be enforced without a cgroup (%v); pass --best-effort to run without it", lost, cerr)
	}
	if lost != "" {
		dropped = append(dropped, lost+" (no cgroup: "+cerr.Error()+")")
	}
	if r.MemoryBytes > 0 {
		dropped = append(dropped, fmt.Sprintf("a memory limit for the whole sandbox (no cgroup: %v); each process is limited to %s of data instead", cerr, policy.FormatSize(r.MemoryBytes)))
	}
	return nil, rl, dropped, nil
}

// landlock prepares the ruleset: rules bind to inodes, and the sandbox's
// root, workspace and device nodes are the host's. The sandbox adds its
// private /proc, /sys, /tmp, /dev/shm and /dev/pts before enforcing it.
// With a writable root layer (layer) only the device nodes are the host's:
// hutch adds the layer's rule once it exists, and the deny-read paths,
// inside that writable tree, are masked by mounts alone.
func (p *prepared) landlock(s policy.Spec, rw []string, id identity, layer bool) error {
	var ro, deny []string
	if !layer {
		root := rootDir(s.Root)
		ro = []string{root}
		deny = landlockDenyRead(s.Filesystem.DenyRead, s.Filesystem.AllowRead, rw)
		if root != "/" {
			// The sandbox's root is a directory of the host: its paths
			// are the same inodes below it.
			for i, d := range deny {
				deny[i] = filepath.Join(root, d)
			}
		}
	}
	rs, _, err := landlock.Prepare(landlock.Config{
		ReadOnly:  ro,
		ReadWrite: rw,
		Devices:   hostDevices(),
		DenyRead:  id.readable(deny),
		Scope:     true,
	})
	if errors.Is(err, landlock.ErrNotSupported) {
		return nil
	}
	if err != nil {
		return err
	}
	p.ruleset = rs
	return nil
}

// identity is who the sandbox is to the host's file permissions.
type identity struct {
	uid  uint32
	gids []uint32
}

// sandboxIdentity is the host identity of the sandbox's processes: the
// unused uid and gid RootMappedID without supplementary groups when root
// started it, else the caller (whose supplementary groups an unprivileged
// user namespace cannot drop).
func sandboxIdentity(asRoot bool) identity {
	if asRoot {
		return identity{uid: RootMappedID, gids: []uint32{RootMappedID}}
	}
	id := identity{uid: uint32(os.Getuid()), gids: []uint32{uint32(os.Getgid())}}
	if groups, err := os.Getgroups(); err == nil {
		for _, g := range groups {
			id.gids = append(id.gids, uint32(g))
		}
	}
	return id
}

// readable keeps the paths the identity could read (or enter) by their
// permission bits: Landlock need not carve out a path that ordinary
// permissions already close to the sandbox — /etc/shadow, or anything
// under a 0700 home of another user — and carving is what Landlock costs
// at start. A path with an ACL on the way is kept: its bits do not tell.
func (id identity) readable(paths []string) []string {
	var out []string
	for _, p := range paths {
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				out = append(out, p)
			}
			continue
		}
		if id.mayReach(real) {
			out = append(out, p)
		}
	}
	return out
}

// mayReach reports whether every directory on the way to p lets the
// identity through and p itself lets it read (a file) or enter (a
// directory). Whatever cannot be told is taken as reachable.
func (id identity) mayReach(p string) bool {
	dir := "/"
	for _, part := range strings.Split(strings.Trim(p, "/"), "/") {
		var st unix.Stat_t
		if unix.Stat(dir, &st) != nil || hasACL(dir) {
			return true
		}
		if !id.allows(&st, 1) {
			return false
		}
		dir = filepath.Join(dir, part)
	}
	var st unix.Stat_t
	if unix.Stat(p, &st) != nil || hasACL(p) {
		return true
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return id.allows(&st, 4)
	}
	if !id.allows(&st, 1) {
		return false
	}
	// A directory the identity may enter is reachable if one of its
	// entries is (like /run/user, whose per-user directories are 0700).
	ents, err := os.ReadDir(p)
	if err != nil {
		return true
	}
	for _, e := range ents {
		c := filepath.Join(p, e.Name())
		var cst unix.Stat_t
		if unix.Stat(c, &cst) != nil || hasACL(c) {
			return true
		}
		want := uint32(4)
		if cst.Mode&unix.S_IFMT == unix.S_IFDIR {
			want = 1
		}
		if id.allows(&cst, want) {
			return true
		}
	}
	return false
}

// allows reports whether st's permission bits grant the identity want
// (4 read, 2 write, 1 execute/search).
func (id identity) allows(st *unix.Stat_t, want uint32) bool {
	switch {
	case st.Uid == id.uid:
		return (st.Mode>>6)&want == want
	case slices.Contains(id.gids, st.Gid):
		return (st.Mode>>3)&want == want
	default:
		return st.Mode&want == want
	}
}

func hasACL(p string) bool {
	_, err := unix.Getxattr(p, "system.posix_acl_access", nil)
	return err == nil
}

// hostDevices are the device nodes the sandbox binds from the host.
func hostDevices() []string {
	out := make([]string, len(devices))
	for i, d := range devices {
		out[i] = "/dev/" + d
	}
	return out
}

// landlockDenyRead is the deny-read list Landlock enforces: paths inside
// writable areas are masked by mounts alone (Landlock cannot carve them out
// of a writable hierarchy).
func landlockDenyRead(deny, allow, writable []string) []string {
	var out []string
	for _, p := range effectiveDenyRead(deny, allow) {
		if !under(p, writable) {
			out = append(out, p)
		}
	}
	return out
}

// closeRuleset closes hutch's copy of the ruleset once the sandbox holds
// its own.
func (p *prepared) closeRuleset() {
	if p.ruleset != nil {
		p.ruleset.Close()
		p.ruleset = nil
	}
}

// cleanup undoes the host-side setup after the sandbox ended.
func (p *prepared) cleanup(log *slog.Logger) {
	p.closeRuleset()
	var wg sync.WaitGroup
	if p.group != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := p.group.Destroy(); err != nil {
				log.Debug("destroy cgroup", "err", err)
			}
		}()
	}
	p.placeholders.remove(log)
	wg.Wait()
}

// rlimitFallback turns the resource limits into per-process rlimits for
// when no cgroup can be made. The pids limit holds for the whole sandbox
// (RLIMIT_NPROC counts the sandbox user's processes in its own user
// namespace); memory becomes RLIMIT_DATA per process. A CPU limit has no
// rlimit equivalent: it is returned as lost.
func rlimitFallback(r policy.Resources) ([]rlimit, string) {
	var rl []rlimit
	if r.Pids > 0 {
		rl = append(rl, rlimit{Resource: unix.RLIMIT_NPROC, Value: uint64(r.Pids)})
	}
	if r.MemoryBytes > 0 {
		rl = append(rl, rlimit{Resource: unix.RLIMIT_DATA, Value: uint64(r.MemoryBytes)})
	}
	if r.CPUs > 0 {
		return rl, fmt.Sprintf("the cpu limit of %g", r.CPUs)
	}
	return rl, ""
}

// idmapWritable prepares one detached, idmapped clone of every writable path
// for the sandbox's user namespace, so that files the sandbox writes appear
// on the host owned by the path's owner while the sandbox runs as an
// unprivileged host uid.
func idmapWritable(pid int, w []bindSrc) ([]int, error) {
	userns, err := sandboxUserns(pid)
	if err != nil {
		return nil, err
	}
	defer unix.Close(userns)
	return idmapWith(userns, w)
}

// idmapWith is idmapWritable with the user namespace userns.
func idmapWith(userns int, w []bindSrc) ([]int, error) {
	var fds []int
	for i := range w {
		if w[i].Review != "" {
			fd, err := reviewLayer(userns, w[i].Path, w[i].Review, w[i].ReviewOwner[0], w[i].ReviewOwner[1])
			if err != nil {
				closeAll(fds)
				return nil, err
			}
			fds = append(fds, fd)
			continue
		}
		recursive := uint(recursiveUnless(w[i].Alone))
		fd, err := unix.OpenTree(unix.AT_FDCWD, w[i].Path, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|recursive)
		if err != nil {
			closeAll(fds)
			return nil, fmt.Errorf("clone mount of %q: %w", w[i].Path, err)
		}
		attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP, Userns_fd: uint64(userns)}
		if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|recursive, &attr); err != nil {
			unix.Close(fd)
			closeAll(fds)
			return nil, fmt.Errorf("idmapped mount of %q (filesystem without idmap support?): %w: %w", w[i].Path, ErrKernelFeature, err)
		}
		fds = append(fds, fd)
	}
	return fds, nil
}
