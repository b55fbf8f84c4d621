package sandbox

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// initConfig is everything the sandbox's first process is built from: the
// input of the builder (build_linux.go).
type initConfig struct {
	Args []string
	Env  []string
	Dir  string // the working directory, in the view
	// MakeDir makes Dir in the view when it is missing (an image's
	// working directory, as Docker makes it).
	MakeDir bool
	// Workspace is where the workspace is bound in the view: its host
	// path and where the view shows it (a sandbox from an image binds it
	// at /workspace). Every target the builder makes from a host path in
	// the workspace — the writable bind, pins, deny-write binds and
	// placeholders' covers, deny-read masks, excludes — is translated
	// with it (builder.view); sources never are.
	Workspace viewMap
	Root      string // "host" or a directory of the host
	Writable  []bindSrc
	DenyRead  []string
	AllowRead []string
	DenyWrite []string // bound read-only over themselves
	// Placeholders are the DenyWrite paths hutch created, each covered
	// with a stand-in of its kind.
	Placeholders map[string]placeholderKind
	Pin          []string // bound read-write over themselves
	TmpBytes     int64
	// PrivateHome, when set, gets a private tmpfs: the caller's home
	// directory that the sandbox's identity could not even enter.
	PrivateHome string
	// Shadows are directories on the way to a writable area that the
	// sandbox's identity may not search (a 0700 directory of root's, as
	// mktemp -d makes): each is covered in the view by an empty tmpfs that
	// holds only the way down to the writable area, so that the sandbox
	// reaches its workspace and nothing else of that directory.
	Shadows  []string
	Hostname string
	// Net is the network mode: "none" and "proxy" give the sandbox a
	// network namespace with loopback only; "host" keeps the host's
	// network.
	Net string
	// Listen makes the first process create, on that loopback, the
	// sockets hutch serves — the proxy's listeners and the DNS socket —
	// and send them to hutch, and bind a resolv.conf that names the DNS
	// socket: in mode "proxy", and in mode "none" with a proxy that
	// refuses everything.
	Listen bool
	// Files are host files bound read-only into the view: hutch's binary
	// (proxy mode), the trust bundle with the sandbox's CA (secrets).
	Files []fileBind
	Tty   bool
	// Streams, without Tty, are hutch's descriptors that become the
	// command's stdin, stdout and stderr (-1, or nil Streams: hutch's
	// own 0, 1 and 2).
	Streams []int
	// AgentFD, when >= 0, makes the first process exec hutch's agent (at
	// SandboxHutch) as PID 1 instead of forking Args, with this inherited
	// descriptor, its end of the agent connection, as descriptor 3.
	AgentFD int
	// KeepCaps are the capabilities the sandbox keeps in its own user
	// namespace (Config.RootCaps); none otherwise.
	KeepCaps []int
	// Home is the home directory the sandbox gets in one of the ways
	// below, "" for none (the view shows the host's, read-only, or it is
	// a writable area, or PrivateHome covers it).
	Home string
	// HomeLayer, when >= 0, is the index among the descriptors hutch sends
	// of the overlay it built over Home (root: an idmapped, read-only
	// lower, so that the sandbox reads a home its identity could not
	// enter); the first process attaches it.
	HomeLayer int
	// MasksLayer, when >= 0, is the index among the descriptors hutch sends
	// of the stand-ins hutch serves itself (see standIns): the masks and
	// placeholders are cloned from it instead of from a tmpfs.
	MasksLayer int
	// ImageLayers, when set, are the layer directories (bottom first) of
	// the image the first process stacks as its root itself (an ordinary
	// user: in its own user namespace, with userxattr), with writes on a
	// tmpfs of ImageSize; ImageAccess, when not 0, is the Landlock access
	// it gives that root in the ruleset before it is enforced.
	ImageLayers []string
	ImageSize   int64
	ImageAccess uint64
	// ReviewAccess, when not 0, is the Landlock access the first process
	// gives the overlay of review mode it builds (an ordinary user's; see
	// bindSrc.Review).
	ReviewAccess uint64
	// StandInsDevice makes the first process mount the stand-ins itself,
	// in its user namespace (an ordinary user's hutch may not), and hand
	// their FUSE device to hutch; without /dev/fuse it makes them on a
	// tmpfs, unseen.
	StandInsDevice bool
	// HomeOverlay makes the first process build that overlay itself (an
	// ordinary user, whose home the sandbox reads as it is): the real
	// home below, a tmpfs of TmpBytes above.
	HomeOverlay bool
	// HomePersist is a directory of the host bound read-write over Home
	// (--home persist); its FD is the index of hutch's idmapped mount of
	// it (root), or -1.
	HomePersist bindSrc
	// RootLayer, when >= 0, is the index among the descriptors hutch sends
	// after the clone of the writable root layer, attached as the root
	// instead of a read-only clone of Root.
	RootLayer  int
	Rows, Cols uint16
	BestEffort bool
	// Missing lists kernel features to act as if absent (tests only; see
	// SimulateMissingEnv).
	Missing map[string]bool
	// Rlimits are set just before the command starts: the fallback when
	// no cgroup could be made.
	Rlimits []rlimit
	// HostWrites marks a sandbox with host paths to write (Writable):
	// nothing it writes may grant or widen privilege on the host (package
	// hostperm). Its umask is Umask (the user's plus the withheld bits) and
	// its filter has the rules for host writes, which withhold Withheld and
	// hand umask calls that lack it to the sandbox's PID 1 (child.answer,
	// or the agent's seccomp.Supervisor).
	HostWrites bool
	Umask      uint32
	Withheld   uint32
	// Volumes are host directories bound read-write in the view
	// (Config.Volumes), attached last, after the masks: FD is the index
	// of hutch's idmapped mount of Dir among the descriptors it sends.
	Volumes []volumeBind
}

// volumeBind is one of Config.Volumes in the first process's plan.
type volumeBind struct {
	Dir, At string
	FD      int
}

// bindSrc is a writable host path. FD is the index of its idmapped detached
// mount among the descriptors hutch sends after the clone, or -1 when the
// sandbox clones the path itself.
type bindSrc struct {
	Path string
	FD   int
	// Review, when set, makes the area an overlay over Path with
	// Review/upper and Review/work above it (Config.ReviewDir): root's
	// hutch builds it and sends it as FD; an ordinary user's first process
	// builds it itself.
	Review string
	// ReviewOwner, with Review and root's hutch, is the host uid and gid
	// the upper directory gets: the owner of the workspace's root as the
	// sandbox sees it.
	ReviewOwner [2]int
	// Alone clones Path's mount without the mounts below it (a
	// directory of an engine's layers, with its merged view mounted in
	// it, which cannot be idmapped).
	Alone bool
}

// fileBind is a host file bound read-only over Target in the view. With
// Create the mount point is made in the sandbox's own /dev. FD is the index
// of its detached mount among the descriptors hutch sends after the clone
// (root: the sandbox's identity may not reach the file), or -1 when the
// sandbox clones the path itself.
type fileBind struct {
	Path, Target string
	Create       bool
	// HostTarget marks a Target that is a host path in a writable area
	// (a repository's info/exclude), which the view may show elsewhere
	// (initConfig.Workspace); other targets are paths of the view.
	HostTarget bool
	FD         int
	// Exec makes it executable in the sandbox (a Landlock rule).
	Exec bool
}

// viewMap maps the host directory Host to At in the sandbox's view; the
// zero viewMap maps nothing.
type viewMap struct {
	Host, At string
}

// of is where the view shows the host path p: below At for a path at or
// below Host, else p itself.
func (v viewMap) of(p string) string {
	if v.At == "" || v.Host == "" || v.At == v.Host {
		return p
	}
	if p == v.Host {
		return v.At
	}
	if rest, ok := strings.CutPrefix(p, strings.TrimSuffix(v.Host, "/")+"/"); ok {
		return v.At + "/" + rest
	}
	return p
}

type rlimit struct {
	Resource int
	Value    uint64
}

// stagingDir is where the sandbox attaches its new root before pivot_root.
// It is replaced only inside the sandbox's mount namespace.
const stagingDir = "/tmp"

// devices are the host device nodes bound into the sandbox's /dev.
var devices = []string{"null", "zero", "full", "random", "urandom", "tty"}

// devLinks are the symlinks of the sandbox's /dev.
var devLinks = [][2]string{
	{"ptmx", "pts/ptmx"}, {"fd", "/proc/self/fd"}, {"stdin", "/proc/self/fd/0"},
	{"stdout", "/proc/self/fd/1"}, {"stderr", "/proc/self/fd/2"},
}

// privateReadOnly and privateWritable are the sandbox's own filesystems,
// which only the sandbox can name: Landlock rules bind to inodes, and a rule
// on the host's /proc does not cover the sandbox's procfs mounted over it
// (Landlock skips mount points when it walks up a path).
var (
	privateReadOnly = []string{"/proc", "/sys"}
	privateWritable = []string{"/tmp", "/dev/shm"}
)

// forwardedSignals are passed on from hutch to the command.
var forwardedSignals = []os.Signal{unix.SIGINT, unix.SIGTERM, unix.SIGHUP, unix.SIGQUIT, unix.SIGUSR1, unix.SIGUSR2}

// Securebits that keep uid 0 in the sandbox from ever regaining capabilities
// through execve, locked so the command cannot change them back.
const (
	secbitNoroot            = 1 << 0
	secbitNorootLocked      = 1 << 1
	secbitNoSetuidFixupLock = 1 << 3
	secbitKeepCapsLocked    = 1 << 5
	secbitNoCapAmbientRaise = 1 << 6
	secbitNoCapAmbientLock  = 1 << 7
)

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

var errPeerClosed = errors.New("control socket closed")

func closeAll(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

func socketPair() (parent, child *os.File, err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("control socketpair: %w", err)
	}
	if fds[1], err = aboveStdio(fds[1]); err != nil {
		unix.Close(fds[0])
		return nil, nil, fmt.Errorf("control socketpair: %w", err)
	}
	return os.NewFile(uintptr(fds[0]), "hutch-control"), os.NewFile(uintptr(fds[1]), "hutch-sandbox-control"), nil
}

// aboveStdio returns fd, or, when it is 0, 1 or 2 (hutch was started with
// a standard stream closed), a close-on-exec copy of it above 2, closing
// fd: the first process of a served sandbox puts /dev/null on 0–2, which
// must not replace the descriptors it still needs.
func aboveStdio(fd int) (int, error) {
	if fd > 2 {
		return fd, nil
	}
	nfd, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 3)
	unix.Close(fd)
	if err != nil {
		return -1, fmt.Errorf("move descriptor %d above the standard streams: %w", fd, err)
	}
	return nfd, nil
}

// simulatedMissing reads SimulateMissingEnv.
func simulatedMissing() map[string]bool {
	out := map[string]bool{}
	for _, f := range strings.Split(os.Getenv(SimulateMissingEnv), ",") {
		if f = strings.TrimSpace(f); f != "" {
			out[f] = true
		}
	}
	return out
}
