package sandbox

import (
	"fmt"
	"log/slog"
	"os"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/policy"
)

// Start is Start.
func (Namespaces) Start(c Config) (Instance, error) {
	sb, err := Start(c)
	if err != nil {
		return nil, err
	}
	return sb, nil
}

// checkTier refuses a spec of another tier: the namespace tier never runs
// what was meant for a stronger one (S2).
func checkTier(s policy.Spec) error {
	if s.Tier != "" && s.Tier != policy.TierNamespace {
		return fmt.Errorf("tier %q: the namespace tier does not run it (choose that tier's runtime)", s.Tier)
	}
	return nil
}

// Protection is the host side of a sandbox's writable areas for a tier
// that builds its own view with mounts of its own (internal/gvisor): the
// same protected paths as the namespace tier's (the default deny-write
// names, every git directory and what its configuration names, the
// policy's deny_write), the placeholders standing for the missing ones
// while the sandbox runs, and the check of what it made once it has ended.
type Protection struct {
	// Spec is the spec the paths were computed for: the workspace and
	// allow_write paths by their real paths, the deny-read paths that
	// exist or may appear (see DenyRead).
	Spec policy.Spec
	// Roots are the writable areas: the workspace and the allow_write
	// paths that exist.
	Roots []string
	// ReadOnly are the paths to bind read-only over themselves, the
	// placeholders among them; Pin the directories to bind read-write
	// over themselves (so that they cannot be renamed away). Both sorted,
	// parents first.
	ReadOnly, Pin []string
	// Files are files to bind read-only at Target (a repository's
	// info/exclude with the placeholders added, so that git does not see
	// them).
	Files []BoundFile
	// DenyRead are the deny-read paths the view must hide, those an
	// allow_read path lifts removed, each there on the host; Dirs says
	// which are directories.
	DenyRead []string
	Dirs     map[string]bool
	// Warnings are for the user (a git scan cut short).
	Warnings []string

	prep    *prepared
	after   *aftercare
	closers []func()
	log     *slog.Logger
}

// BoundFile is a host file bound read-only at Target in the sandbox.
type BoundFile struct{ Source, Target string }

// Protect computes and prepares the host side of the writable areas of s
// (validated and normalized) for a sandbox whose home is home (a path of
// the view, empty when the sandbox's home holds nothing of the host's).
// The caller must call Finish once the sandbox has ended, even after an
// error of its own.
func Protect(s policy.Spec, home string, log *slog.Logger) (*Protection, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := realPaths(&s); err != nil {
		return nil, err
	}
	roots := writableRoots(s)
	s.Filesystem.DenyRead = append(slices.Clip(s.Filesystem.DenyRead), resolverSockets...)
	s.Filesystem.DenyRead = withAliases(s.Filesystem.DenyRead)
	s.Filesystem.DenyRead = presentOrOwn(s.Filesystem.DenyRead, append(slices.Clone(ownFilesystems), roots...), home)
	asRoot := os.Geteuid() == 0
	prot := func() protection { return protectedPaths(s, roots, home) }
	// No Landlock ruleset: the tier enforces the view itself.
	p := prepare(s, prot, roots, asRoot, true, map[string]bool{"landlock": true})
	pr := &Protection{Spec: s, Roots: roots, prep: p, log: log, Dirs: map[string]bool{}}
	if p.err != nil {
		pr.Finish()
		return nil, p.err
	}
	kinds := p.placeholders.kinds()
	pr.after = &aftercare{git: p.prot.git, created: p.prot.created, whys: p.prot.whys, placeholders: kinds}
	if p.prot.git != nil && p.prot.git.truncated {
		pr.Warnings = append(pr.Warnings, fmt.Sprintf("the writable areas hold more than %d directories (or deeper than %d): git repositories beyond them are neither protected nor checked; run hutch in the project's own directory", maxScanDirs, maxScanDepth))
	}
	pr.ReadOnly, pr.Pin = protectionPlan(p.prot.prot, kinds)
	if len(kinds) > 0 {
		binds, remove := excludeBinds(kinds)
		pr.closers = append(pr.closers, remove)
		for _, b := range binds {
			pr.Files = append(pr.Files, BoundFile{Source: b.Path, Target: b.Target})
		}
	}
	for _, d := range effectiveDenyRead(s.Filesystem.DenyRead, s.Filesystem.AllowRead) {
		st, err := os.Lstat(d)
		if err != nil {
			continue // nothing there to hide
		}
		pr.DenyRead = append(pr.DenyRead, d)
		pr.Dirs[d] = st.IsDir()
	}
	return pr, nil
}

// Finish, once the sandbox has ended, sets aside what it made that would
// run commands outside it, removes the placeholders and releases the
// locks. It returns what it set aside.
func (p *Protection) Finish() []SetAside {
	var sa []SetAside
	if p.after != nil {
		sa = p.after.run()
		p.after = nil
	}
	for i := len(p.closers) - 1; i >= 0; i-- {
		p.closers[i]()
	}
	p.closers = nil
	if p.prep != nil {
		p.prep.cleanup(p.log)
		p.prep = nil
	}
	return sa
}

// EnvHome is HOME of environ when it is an absolute path, cleaned; ""
// otherwise.
func EnvHome(environ []string) string { return envHome(environ) }

// RandomID is a random name for a sandbox's resources (12 hex digits).
func RandomID() string { return randomID() }

// RelayTerminal puts the caller's terminal in raw mode and relays bytes and
// window sizes between it (in, out) and a pty master the sandbox's tier
// handed over. drain waits until the command's output has been relayed;
// restore gives the caller's terminal back and closes master.
func RelayTerminal(master, in, out *os.File) (drain, restore func()) {
	r := startPtyRelay(master, in, out)
	return r.Drain, r.Close
}

// ReadOnlyHostRoot mounts at target a copy of the host's mount tree from
// "/", every mount of it read-only, nosuid and nodev, and private: the
// root of a tier whose runtime reads its root through a host directory
// (gVisor's gofer), so that no write can reach the host's root whatever the
// runtime makes of its mount options. unmount detaches it.
func ReadOnlyHostRoot(target string) (unmount func() error, err error) {
	fd, err := unix.OpenTree(unix.AT_FDCWD, "/", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
	if err != nil {
		return nil, fmt.Errorf("clone the host's root: %w", err)
	}
	defer unix.Close(fd)
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV, Propagation: unix.MS_PRIVATE}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &attr); err != nil {
		return nil, fmt.Errorf("make the host's root read-only: %w", err)
	}
	if err := unix.MoveMount(fd, "", unix.AT_FDCWD, target, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return nil, fmt.Errorf("mount the host's root at %s: %w", target, err)
	}
	return func() error { return unix.Unmount(target, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW) }, nil
}
