// Package sandbox turns a policy.Spec into a running sandbox. hutch
// prepares the host side (cgroup, placeholders, the Landlock ruleset) and
// builds, in full, the list of system calls the sandbox's first process
// will make: mounts → pivot_root → hostname and loopback → capabilities →
// no_new_privs → Landlock → seccomp (last). It then clones that process in
// new user, mount, pid, net, ipc, uts and cgroup namespaces as a fork of
// itself that runs the list with raw system calls, without exec'ing a
// second program or starting a second Go runtime (child_linux.go), forks
// the command, and stays PID 1 of the sandbox, reaping orphans. When it
// exits, the kernel kills every process left in the sandbox's pid namespace
// (S4). Failures travel back over a control socket as the failing step and
// its errno; the sandbox never writes to the user's terminal on its own.
package sandbox

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/proxyconnect"
	"github.com/hutch-sandbox/hutch/internal/relay"
)

// Exit codes of `hutch run` that are hutch's own, not the command's.
const (
	// ExitTimeout is returned when the sandbox was killed by its timeout.
	ExitTimeout = 124
	// ExitHutchError means hutch itself failed (bad policy, missing kernel
	// feature, setup error); the command did not run.
	ExitHutchError = 125
	// ExitNotExecutable means the command exists but cannot be executed.
	ExitNotExecutable = 126
	// ExitNotFound means the command was not found inside the sandbox.
	ExitNotFound = 127
)

// ErrNotSupported is returned on platforms without Linux namespaces.
var ErrNotSupported = errors.New("sandbox: not supported on this platform")

// ErrKernelFeature wraps errors about a kernel feature hutch needs but the
// running kernel does not offer (S2: hutch then refuses to run).
var ErrKernelFeature = errors.New("missing kernel feature")

// SimulateMissingEnv names the environment variable with which tests make
// hutch act as if kernel features were missing: a comma-separated list of
// "userns", "idmap", "landlock" and "seccomp". It can only make hutch refuse
// to run (S2), or, with --best-effort, run with less and say so.
const SimulateMissingEnv = "HUTCH_TEST_MISSING"

// Config is one sandboxed command.
type Config struct {
	// Spec is the validated, normalized policy.
	Spec policy.Spec
	// Args is the command and its arguments; Args[0] is looked up in the
	// sandbox's PATH.
	Args []string
	// Environ is the caller's environment, filtered by Spec.Env.
	Environ []string
	// Stdin, Stdout and Stderr are the command's streams. When Stdin is a
	// terminal the command gets a pty of its own.
	Stdin, Stdout, Stderr *os.File
	// Warn receives human warnings (layers dropped under best effort).
	Warn io.Writer
	// Log receives debug records; nil discards them.
	Log *slog.Logger
	// Proxy serves the sandbox's egress in network mode "proxy"; it is
	// required then. Run hands it the listeners and the DNS socket the
	// sandbox made in its own network namespace and closes it when the
	// sandbox has ended. In mode "none" it is optional: given, it answers
	// there too (a proxy that refuses everything, egress.Config.Offline),
	// so that clients fail at once and hutch knows where they tried to go;
	// without it the sandbox's lookups and connections just fail.
	Proxy Proxy
	// CABundle, in proxy mode, is a host file of trusted certificates
	// (the system's and the sandbox's own CA, which the proxy uses for
	// hosts a secret is bound to). It is bound over the system's bundle in
	// the sandbox, and SSL_CERT_FILE, REQUESTS_CA_BUNDLE,
	// NODE_EXTRA_CA_CERTS, CURL_CA_BUNDLE and GIT_SSL_CAINFO point at it.
	CABundle string
	// Wipe is memory of hutch that the sandbox's first process, a fork of
	// hutch, zeroes in its copy before anything else: the real values of
	// secrets.
	Wipe [][]byte
	// Cgroup makes a cgroup for the sandbox even without resource limits
	// (pause needs one): failing to make it is then an error, not a
	// fallback to rlimits.
	Cgroup bool
	// CgroupName names the sandbox's cgroup, if it gets one
	// ("hutch-RANDOM" when empty): a daemon names it after the sandbox,
	// so that the next daemon can find it after a crash.
	CgroupName string
	// RootCaps, with a RootLayer, leaves the sandbox's root (in its own
	// user namespace, over its own ids and files only) the capabilities
	// RootCapabilities names, which package managers and the like need;
	// without it the sandbox holds none.
	RootCaps bool
	// AgentBinary, for Start, is the binary bound at SandboxHutch and run
	// as the agent (it must serve "agent" and "proxy-connect" as hutch
	// does, like hutch-agent); hutch's own binary when empty.
	AgentBinary string
	// HostDir, for Start, is a directory of the daemon's for the sandbox
	// (its record's), which the daemon removes once the sandbox ended,
	// after a crash of its own included: a runtime may keep the
	// sandbox's host files there (the microVM tier's VM directory); ""
	// for none.
	HostDir string
	// Name is the daemon's ID of the sandbox, for runtimes that name
	// what they make for it after it (a cluster's pods); "" for hutch run.
	Name string
	// AgentSocket, for Start, makes the agent serve the daemon on a
	// unix socket at this host path (made here, mode 0600; its directory
	// must be the daemon's alone) rather than on a connection that ends
	// with hutch, and lets the sandbox outlive hutch: a daemon started
	// after this one ended connects to it again (Reattach). Connections
	// authenticate with AgentToken, which is required then. Empty: the
	// sandbox dies with hutch (S4), as every sandbox of hutch run does.
	AgentSocket string
	// AgentToken is the secret a connection to AgentSocket sends first.
	AgentToken string
	// BootID, when set, is a host file holding a boot ID (a UUID and a
	// newline) bound read-only over BootIDPath, so that the sandbox has a
	// boot ID of its own rather than the host's, which its owner writes
	// anew when the sandbox boots again (a cold boot after a pause
	// without memory). The sandbox can neither write nor unmount it.
	BootID string
	// RootLayer, when set, makes the sandbox's root filesystem writable:
	// a copy-on-write layer over the read-only root (root only). The
	// workspace (Spec.Filesystem.Workspace) is then a directory of the
	// view made in that layer, not a host path, and the policy's
	// allow_write and deny_write do not apply: nothing the sandbox writes
	// reaches the host. With ReviewDir, the workspace is a host directory
	// in review mode instead (see ReviewDir).
	RootLayer *RootLayer
	// Image, when set, is the root the sandbox starts from instead of the
	// host's (policy root "image:REF"): the image's layers stacked
	// read-only, with the sandbox's writes to its root kept in memory and
	// dropped at its end. The workspace is bound in at
	// Spec.Filesystem.WorkspaceAt (at its host path when that is empty),
	// allow_write paths at their host paths, and every protection of the
	// workspace applies where the view shows it.
	Image *ImageRoot
	// ReviewDir, when set, keeps the workspace as it is (review mode): the
	// sandbox sees it read-write through an overlay whose upper layer and
	// work directory are ReviewDir/upper and ReviewDir/work, host
	// directories of the invoking user on one filesystem that supports
	// user extended attributes. What the sandbox writes to its workspace
	// lands there (package changes reads it as a change set); its other
	// writable areas are written as usual.
	//
	// With a RootLayer (root only), Spec.Filesystem.Workspace is the host
	// directory under review, the overlay's lower layer, and
	// Spec.Filesystem.WorkspaceAt is where the view shows it (its host
	// path when empty), a directory made in the layer as a served
	// sandbox's workspace is, and the commands' working directory. The
	// workspace's protections (protected names, the git scan, deny_write,
	// placeholders, deny-read masks) are made there, as in review mode on
	// the host's root. Over the host's root, the host's copy of the
	// directory is hidden where the view shows it elsewhere, and ReviewDir
	// must be out of the view (below a RootLayer.Hide directory, or denied
	// to read). The overlay's upper directory belongs to the layer's
	// UID and GID (moved to the sandbox's host ids); the host's files show
	// their host owners through the layer's idmapping.
	ReviewDir string
	// Volumes are host directories shown read-write in the sandbox, each
	// at its own path of the view (with a RootLayer only). Each is bound
	// through an idmapped mount (host ids 0–65535 appear as themselves
	// inside: what the sandbox writes lands in Dir with the ids it has
	// there), nosuid and nodev, writable under Landlock. Its mount point
	// is made in the sandbox's own root: every component of At is looked
	// up in the view with symbolic links refused (openat2's
	// RESOLVE_IN_ROOT and RESOLVE_NO_SYMLINKS), so that a link of the
	// root (an image's /mnt -> /etc) can neither move the mount elsewhere
	// in the view nor out of it: such a sandbox fails to start, naming
	// the volume. CheckVolumes states what Dir and At must be.
	Volumes []Volume
}

// Volume is a host directory shown in a sandbox (Config.Volumes).
type Volume struct {
	// Dir is the host directory: absolute, clean, an existing directory.
	Dir string
	// At is where the sandbox's view shows it: absolute, clean, not "/".
	At string
}

// ImageRoot is an image's unpacked layers, as the sandbox's root.
type ImageRoot struct {
	// Layers are the layers' directories in hutch's image store, bottom
	// first.
	Layers []string
	// SizeBytes bounds what the sandbox writes to its root (a tmpfs; its
	// pages count against the sandbox's memory limit).
	SizeBytes int64
	// Dir, when set, is the command's working directory (a path of the
	// view: the image's WorkingDir for its own command); the workspace
	// otherwise.
	Dir string
	// UID and GID are who the command runs as (the image's user; root
	// when both are 0), Groups its supplementary groups. Root: ids
	// 0–65535 of the image are mapped, and the workspace's owner is UID
	// and GID inside. An ordinary user: the one id the sandbox maps is
	// UID and GID (every file of the image and the workspace shows as
	// theirs), and Groups are not set (the kernel refuses setgroups in
	// such a namespace).
	UID, GID int
	Groups   []int

	// save is the RootLayer's Keep and From (MountLayerRoot).
	save layerSave
}

// ErrNotDirInRoot is the error of a path of a sandbox's root layer (its
// workspace) that goes through something other than a directory of the
// view: a file, a symbolic link.
var ErrNotDirInRoot = errors.New("not a directory in the sandbox's root")

// ErrVolumePath is wrapped by the error of a sandbox whose volume's path
// (Volume.At) goes, in the sandbox's root, through a symbolic link or
// something else than a directory: a link is never followed there.
var ErrVolumePath = errors.New("a volume's path goes through a symbolic link or a file of the sandbox's root")

// ErrFrozen is wrapped by the error of a save to disk that failed and
// left the sandbox frozen in memory (its runtime could not let it go on):
// thawing it (Freeze's counterpart) is what remains to do.
var ErrFrozen = errors.New("the sandbox stays frozen")

// RootLayer is the writable layer over a sandbox's read-only root. Files
// keep the owners they have on the host (host ids 0–65535 appear as
// themselves inside, through an idmapped mount), so that package managers
// work as in a container; everything written goes to a tmpfs of its own,
// which ends with the sandbox.
type RootLayer struct {
	// SizeBytes bounds what the sandbox can write into its root (the
	// tmpfs's size; its pages count against the sandbox's memory limit).
	// Required.
	SizeBytes int64
	// Hide lists directories of the root that the sandbox sees empty (and
	// may use as its own): what the host keeps there stays out of the
	// view, e.g. /root, /home, /var/tmp, a daemon's state directory.
	Hide []string
	// Remove lists files of the root that do not exist in the view (a
	// whiteout in the layer), such as files only their owner may read.
	Remove []string
	// Lowers, when set, are an image's layer directories (bottom first),
	// stacked instead of the host's root: Hide and Remove then do not
	// apply (nothing of the host's is in the view). A snapshot's layers
	// (SnapshotLayer) over an image are appended to them.
	Lowers []string
	// EROFS, with Lowers, is the image's root as one EROFS filesystem
	// image (image.Store.EROFS): what a tier that takes its root from a
	// block device (microvm) uses instead of Lowers.
	EROFS string
	// UID and GID own the workspace made in the layer (with Lowers: the
	// image's user, ids 0–65535; root when both are 0).
	UID, GID int
	// Keep and From are for a tier that saves a sandbox to disk and
	// restores it (gVisor, MountLayerRoot only). Keep, when set, is an
	// empty directory where the layer's tmpfs is attached too, so that
	// SaveLayer can copy what the sandbox wrote once it stopped. From,
	// when set, is a copy SaveLayer made: the new layer holds what it
	// holds (the workspace in it already) instead of a fresh one; Hide
	// directories it has no entry for, and Remove files, are added, since
	// the host may have closed more paths since.
	Keep, From string
	// FromSnapshot, without From, is a snapshot's layer (SnapshotLayer)
	// that the new layer starts as a copy of, as From's, its owners moved
	// to the sandbox's ids: how a sandbox over the host's root starts
	// from a snapshot (overlayfs refuses a lower layer below another, and
	// the snapshot store is below the host's root).
	FromSnapshot string
}

// Proxy is the egress proxy of one sandbox (package egress implements it).
type Proxy interface {
	// ServeHTTP serves the HTTP proxy protocol (forwarding and CONNECT)
	// on l until Close.
	ServeHTTP(l net.Listener) error
	// ServeSOCKS serves SOCKS5 on l until Close.
	ServeSOCKS(l net.Listener) error
	// ServeDNS answers the sandbox's name lookups on c (UDP) until Close.
	ServeDNS(c net.PacketConn) error
	// Close stops serving and ends every open connection.
	Close() error
}

// The proxy's addresses inside a sandbox in network mode "proxy" (and
// "none", where it refuses everything), the port of the sandbox's DNS
// server on 127.0.0.1, the sandbox's host name, and the path of hutch's
// own binary there (for ssh's ProxyCommand).
const (
	ProxyHTTPPort  = proxyconnect.Port
	ProxySOCKSPort = relay.SOCKSPort
	DNSPort        = relay.DNSPort
	Hostname       = "hutch"
	SandboxHutch   = "/dev/hutch"
	// BootIDPath is the kernel's boot ID, which Config.BootID covers.
	BootIDPath = "/proc/sys/kernel/random/boot_id"
)

// systemBundles are where distributions keep the bundle of trusted
// certificates that TLS clients read by default.
var systemBundles = []string{
	"/etc/ssl/certs/ca-certificates.crt", // Debian, Ubuntu, Alpine, Arch
	"/etc/pki/tls/certs/ca-bundle.crt",   // Fedora, RHEL
	"/etc/ssl/ca-bundle.pem",             // openSUSE
	"/etc/ssl/cert.pem",                  // Alpine, macOS-like layouts
}

// RootCapabilities are the capabilities a sandbox with Config.RootCaps keeps:
// those a container's root has over files and identities (chown, override
// file permissions, own any file, keep set-id bits, signal any of its
// processes, switch uid and gid among its own ids) and binding ports below
// 1024 in its own network namespace. None of them reaches the host: its ids
// map to unprivileged host ids, its root is its own layer, and it may not
// mount, trace, load modules or change the network (no CAP_SYS_ADMIN,
// CAP_NET_ADMIN, CAP_SYS_PTRACE …).
var RootCapabilities = []string{"chown", "dac_override", "fowner", "fsetid", "kill", "setgid", "setuid", "net_bind_service"}

// SystemRootsPEM returns the host's bundle of trusted certificates, the
// first of systemBundles that exists.
func SystemRootsPEM() []byte {
	for _, f := range systemBundles {
		if b, err := os.ReadFile(f); err == nil {
			return b
		}
	}
	return nil
}

// ProxyEnv is the environment that points a sandbox's tools at its proxy:
// HTTP(S)_PROXY, ALL_PROXY (SOCKS5 with names resolved by the proxy), their
// lower-case twins, NO_PROXY for the sandbox's own loopback (0.0.0.0 too:
// a connection to it reaches the sandbox's own listeners, as E2B's Code
// Interpreter checks its server at http://0.0.0.0:49999; through the proxy,
// which connects to no loopback address, it would be refused), and git over
// ssh through hutch's CONNECT helper.
func ProxyEnv() []string {
	return proxyEnv(true)
}

// proxyEnv is ProxyEnv, without GIT_SSH_COMMAND unless ssh is set.
func proxyEnv(ssh bool) []string {
	httpURL := "http://127.0.0.1:" + strconv.Itoa(ProxyHTTPPort)
	socksURL := "socks5h://127.0.0.1:" + strconv.Itoa(ProxySOCKSPort)
	const noProxy = "localhost,127.0.0.1,::1,0.0.0.0"
	env := []string{
		"HTTP_PROXY=" + httpURL, "http_proxy=" + httpURL,
		"HTTPS_PROXY=" + httpURL, "https_proxy=" + httpURL,
		"ALL_PROXY=" + socksURL, "all_proxy=" + socksURL,
		"NO_PROXY=" + noProxy, "no_proxy=" + noProxy,
	}
	if ssh {
		env = append(env, "GIT_SSH_COMMAND=ssh -o ProxyCommand='"+SandboxHutch+" proxy-connect %h %p'")
	}
	return env
}

// Result is how a sandboxed command ended.
type Result struct {
	// ExitCode is the command's exit code, 128+N when it was killed by
	// signal N, or one of hutch's own codes above.
	ExitCode int
	// TimedOut is true when the sandbox was killed by its timeout.
	TimedOut bool
	// OOMKilled is true when the kernel killed a process of the sandbox for
	// exceeding its memory limit.
	OOMKilled bool
	// Dropped lists the layers hutch could not set up under best effort.
	Dropped []string
	// SetAside lists what the sandbox made in its writable areas that would
	// run commands outside it, and that hutch renamed when it ended.
	SetAside []SetAside
	// Refused lists what the sandbox tried at the paths hutch hid or
	// protected and was refused, once per path and kind of access, in the
	// order of the first attempt. Empty when hutch could not watch them
	// (see FileRefusal).
	Refused []FileRefusal
	// RefusedMore counts the refusals beyond the maxFileRefusals distinct
	// ones Refused holds.
	RefusedMore int
}

// FileRefusal is what the sandbox tried at a path hutch hid (deny-read)
// or protected (a placeholder hutch put over a protected path that did not
// exist), and how often. hutch sees these when it serves the stand-ins
// itself (as root, with FUSE); a path that exists and is only bound
// read-only refuses writes in the kernel, unseen.
type FileRefusal struct {
	Path  string `json:"path"`            // in the sandbox's view
	Op    string `json:"op"`              // read, write, create, remove or change
	Rule  string `json:"rule"`            // what refused it
	Allow string `json:"allow,omitempty"` // the flag that would allow it, if one does
	Count int    `json:"count"`
}

// maxFileRefusals bounds the distinct refusals a sandbox's Result holds.
const maxFileRefusals = 1000

// fileRefusalsListed is how many distinct refusals RefusalReport lists.
const fileRefusalsListed = 5

// RefusalReport returns what hutch says about the file refusals at the
// end of a run: a line of what was refused, and one of what would allow
// it, when a flag would.
func RefusalReport(refused []FileRefusal, more int) []string {
	if len(refused) == 0 {
		return nil
	}
	total := more
	for _, r := range refused {
		total += r.Count
	}
	var b strings.Builder
	noun := "file accesses"
	if total == 1 {
		noun = "file access"
	}
	fmt.Fprintf(&b, "hutch: refused %d %s: ", total, noun)
	var fixes []string
	for i, r := range refused {
		if r.Allow != "" && !slices.Contains(fixes, r.Allow) {
			fixes = append(fixes, r.Allow)
		}
		if i == fileRefusalsListed {
			fmt.Fprintf(&b, ", and %d more", len(refused)-i)
			continue
		}
		if i > fileRefusalsListed {
			continue
		}
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %s (%s)", r.Op, r.Path, r.Rule)
		if r.Count > 1 {
			fmt.Fprintf(&b, " ×%d", r.Count)
		}
	}
	if more > 0 && len(refused) <= fileRefusalsListed {
		b.WriteString(", and more")
	}
	out := []string{b.String()}
	if len(fixes) > 0 {
		what := "them"
		if total == 1 {
			what = "it"
		}
		out = append(out, fmt.Sprintf("hutch: to allow %s: %s", what, strings.Join(fixes, " ")))
	}
	return out
}

// SetAside is a file or directory the sandbox made that hutch renamed when
// the sandbox ended, so that nothing on the host runs it until a person
// has looked at it: a repository whose configuration runs commands, an
// agent's or editor's settings.
type SetAside struct {
	Path string `json:"path"`          // where the sandbox made it
	To   string `json:"to,omitempty"`  // where it is now; empty when renaming failed
	Why  string `json:"why"`           // what it would have run
	Err  string `json:"err,omitempty"` // why it could not be renamed
}

// InitError is a failure inside the sandbox before the command started, with
// the exit code hutch should use (127 for a missing command and so on).
type InitError struct {
	Msg  string
	Code int
	// Err, when set, is the category of the failure (ErrVolumePath).
	Err error
}

func (e *InitError) Error() string { return e.Msg }

// Unwrap is the failure's category, nil for none.
func (e *InitError) Unwrap() error { return e.Err }

// SetAsideReport words what was set aside for the user, a line each.
func SetAsideReport(sa []SetAside) []string {
	var out []string
	for _, s := range sa {
		if s.To == "" {
			out = append(out, fmt.Sprintf("hutch: warning: could not set aside %s (%s): %s; do not use it before you have looked at it", s.Path, s.Why, s.Err))
			continue
		}
		out = append(out, fmt.Sprintf("hutch: set aside %s as %s: %s; look at it before you rename it back", s.Path, filepath.Base(s.To), s.Why))
	}
	return out
}

// AgentTokenEnv and AgentAuthPrefix are package agent's TokenEnv and
// AuthPrefix (which this package does not import: hutch run does not
// carry the agent): how the agent gets its token, and the line a
// connection authenticates with.
const (
	AgentTokenEnv   = "HUTCH_AGENT_TOKEN"
	AgentAuthPrefix = "hutch-agent/1 "
)

// ReattachConfig is what Reattach needs of a sandbox a previous hutch
// started with Config.AgentSocket and left running.
type ReattachConfig struct {
	// PIDFD is a pidfd of the sandbox's PID 1 (the caller checked that
	// it is that process); Reattach takes it over.
	PIDFD int
	// AgentSocket and AgentToken are the sandbox's Config's.
	AgentSocket, AgentToken string
	// CgroupName is its Config.CgroupName ("" for none).
	CgroupName string
	// Handle is what its instance's Handle said, for a runtime other
	// than the namespace tier's (gVisor's: the sandbox's directory).
	Handle string
	// Proxy, when set, serves its egress again (the sandbox's
	// Config.Proxy in network mode "proxy" or "none").
	Proxy Proxy
	// Log receives debug records; nil discards them.
	Log *slog.Logger
}
