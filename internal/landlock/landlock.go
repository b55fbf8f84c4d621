// Package landlock confines the sandbox's filesystem access with the Linux
// Landlock LSM, as a second layer behind the sandbox's mount namespace. It is
// unprivileged, works the same as root and as a normal user, and is applied
// by hutch's init after no_new_privs and before seccomp; the command it then
// starts inherits the restriction.
//
// Restrict works in two steps. Plan is pure planning: it turns a Config into
// the list of rules (a path and its access rights), reading directories but
// making no Landlock system call, so it is unit-testable on a temporary tree.
// Restrict then creates a ruleset handling every filesystem right the running
// kernel's ABI knows, adds the planned rules, and enforces it on the calling
// thread.
//
// Landlock can only grant. A path that must not be readable under a readable
// root (Config.DenyRead) is carved out: the root itself is not granted;
// instead every directory on the way from the root to the denied path gets
// only READ_DIR, and every other entry of those directories gets the full
// read rights. Because READ_DIR is inherited by a whole hierarchy, the
// sandbox can still list the names inside a denied directory, but it cannot
// read, write or execute anything in it. Symbolic links among those entries
// get no rule (a rule follows the link, and would grant its target), so they
// resolve to whatever their target's own position allows. Rules follow
// paths, not inodes: a hard link to a denied file from elsewhere under a
// readable root stays readable.
package landlock

import (
	"errors"
	"fmt"
	"path/filepath"
)

// ErrNotSupported is returned when the platform or the running kernel has no
// (enabled) Landlock.
var ErrNotSupported = errors.New("landlock not supported")

// Config says what the sandbox may do with files. Every path is absolute;
// symbolic links in it are resolved. Paths that do not exist are skipped
// silently, so optional paths can be listed unconditionally.
type Config struct {
	// ReadOnly lists hierarchies the sandbox may read and execute (normally
	// just "/"). A ReadOnly root strictly inside a DenyRead path is still
	// granted: the more specific path wins, which is how read exceptions to
	// a deny list are expressed.
	ReadOnly []string
	// ReadWrite lists hierarchies the sandbox may read, write, create in,
	// remove from and rename within: the workspace, /tmp, /dev/shm and the
	// policy's extra writable paths.
	ReadWrite []string
	// Devices lists device files (or directories of them, like /dev/pts)
	// the sandbox may open for reading and writing and use ioctl on:
	// /dev/null, /dev/zero, /dev/full, /dev/random, /dev/urandom, /dev/tty,
	// /dev/ptmx and /dev/pts. Ioctl on any other device is denied (ABI 5).
	Devices []string
	// DenyRead lists paths under ReadOnly roots that must not be readable.
	// A DenyRead path inside a ReadWrite or Devices path cannot be enforced
	// by Landlock and is reported in Status.Dropped (the sandbox's mounts
	// still mask it).
	DenyRead []string
	// Scope confines abstract unix sockets and signals to the sandbox: its
	// processes can neither connect to an abstract socket created outside
	// nor signal a process outside (ABI 6).
	Scope bool
}

// Validate reports the first path that is empty or not absolute.
func (c Config) Validate() error {
	lists := []struct {
		name  string
		paths []string
	}{
		{"read-only", c.ReadOnly},
		{"read-write", c.ReadWrite},
		{"device", c.Devices},
		{"deny-read", c.DenyRead},
	}
	for _, l := range lists {
		for _, p := range l.paths {
			if !filepath.IsAbs(p) {
				return fmt.Errorf("landlock %s path %q: not absolute", l.name, p)
			}
		}
	}
	return nil
}

// Status says what Restrict enforced.
type Status struct {
	// ABI is the running kernel's Landlock ABI version, 0 without Landlock.
	ABI int
	// Dropped describes, for humans, what the Config asked for but Landlock
	// could not enforce, e.g. "landlock ABI 5 < 6: abstract unix socket and
	// signal scoping".
	Dropped []string
}

// Rule grants Access (a set of the Access* bits) on the file or hierarchy
// at Path.
type Rule struct {
	Path   string
	Access uint64
}

// Filesystem access rights, as defined by the kernel's
// include/uapi/linux/landlock.h (LANDLOCK_ACCESS_FS_*).
const (
	AccessExecute    uint64 = 1 << 0  // execute a file
	AccessWriteFile  uint64 = 1 << 1  // open a file for writing
	AccessReadFile   uint64 = 1 << 2  // open a file for reading
	AccessReadDir    uint64 = 1 << 3  // list a directory
	AccessRemoveDir  uint64 = 1 << 4  // remove an empty directory
	AccessRemoveFile uint64 = 1 << 5  // unlink a file
	AccessMakeChar   uint64 = 1 << 6  // create a character device
	AccessMakeDir    uint64 = 1 << 7  // create a directory
	AccessMakeReg    uint64 = 1 << 8  // create a regular file
	AccessMakeSock   uint64 = 1 << 9  // create a unix socket file
	AccessMakeFifo   uint64 = 1 << 10 // create a named pipe
	AccessMakeBlock  uint64 = 1 << 11 // create a block device
	AccessMakeSym    uint64 = 1 << 12 // create a symbolic link
	AccessRefer      uint64 = 1 << 13 // link or rename a file into another directory
	AccessTruncate   uint64 = 1 << 14 // truncate a file
	AccessIoctlDev   uint64 = 1 << 15 // ioctl on a character or block device
)

// Scopes, as defined by LANDLOCK_SCOPE_* in the same header.
const (
	scopeAbstractUnixSocket uint64 = 1 << 0
	scopeSignal             uint64 = 1 << 1
)

// Groups of rights the planner hands out (before masking with the ABI).
const (
	// readFileAccess is granted on readable files.
	readFileAccess = AccessReadFile | AccessExecute
	// readTreeAccess is granted on readable hierarchies.
	readTreeAccess = readFileAccess | AccessReadDir
	// deviceAccess is granted on Devices. Only file rights, so that one rule
	// fits both a device file and a directory of them (/dev/pts).
	deviceAccess = AccessReadFile | AccessWriteFile | AccessIoctlDev
	// writeTreeAccess is granted on ReadWrite hierarchies: everything but
	// device ioctl, which only Devices get.
	writeTreeAccess = ^AccessIoctlDev
)

// maxABI is the newest ABI hutch knows. A newer kernel is used as if it had
// this ABI: its additional rights stay unhandled (allowed).
const maxABI = 7

// abiFeatures is what each Landlock ABI added, oldest first. fs is the
// filesystem rights a ruleset handles from that ABI on; scoped the scopes;
// lost describes what goes unenforced on an older kernel (empty when an
// older kernel is stricter, not laxer).
var abiFeatures = []struct {
	abi    int
	fs     uint64
	scoped uint64
	lost   string
}{
	{abi: 1, fs: AccessExecute | AccessWriteFile | AccessReadFile | AccessReadDir |
		AccessRemoveDir | AccessRemoveFile | AccessMakeChar | AccessMakeDir |
		AccessMakeReg | AccessMakeSock | AccessMakeFifo | AccessMakeBlock | AccessMakeSym},
	// Under ABI 1 the kernel always denies linking or renaming a file into
	// another directory (EXDEV; mv falls back to copying). Stricter, so
	// nothing is lost.
	{abi: 2, fs: AccessRefer},
	{abi: 3, fs: AccessTruncate, lost: "truncation of files"},
	// ABI 4 adds TCP bind/connect rights. hutch does not handle them: the
	// sandbox has its own network namespace, whose only way out is the
	// egress proxy.
	//
	// ABI 5: device ioctl. Handled, and granted only on Devices. The right
	// is checked when a file is opened, so the terminal hutch passes in
	// (opened before Restrict) keeps working; a pty the sandbox opens later
	// (/dev/tty, /dev/ptmx, /dev/pts/N) works because Devices grants it.
	// Ioctl on pipes, sockets and regular files is not affected.
	{abi: 5, fs: AccessIoctlDev, lost: "ioctl on device files"},
	{abi: 6, scoped: scopeAbstractUnixSocket | scopeSignal, lost: "abstract unix socket and signal scoping"},
	// ABI 7 adds only audit-logging flags to landlock_restrict_self. hutch
	// keeps the kernel's defaults: denials of hutch's init are logged (they
	// would be hutch bugs), denials of the command after execve are not
	// (it is untrusted and could flood the audit log).
	//
	// Later ABIs: 8 can restrict all threads at once (hutch restricts the
	// init's one locked thread, which then starts the command); 9 controls
	// connecting to unix socket files, which would need the egress proxy's
	// socket granted first.
}

// handled returns the filesystem rights and scopes a ruleset handles under
// abi (capped at maxABI).
func handled(abi int) (fs, scoped uint64) {
	for _, f := range abiFeatures {
		if f.abi <= abi {
			fs |= f.fs
			scoped |= f.scoped
		}
	}
	return fs, scoped
}

// lostFeatures describes what abi cannot enforce of what hutch would use.
func lostFeatures(abi int, scope bool) []string {
	var lost []string
	for _, f := range abiFeatures {
		if f.abi <= abi || f.lost == "" || (f.fs == 0 && f.scoped != 0 && !scope) {
			continue
		}
		lost = append(lost, fmt.Sprintf("landlock ABI %d < %d: %s", abi, f.abi, f.lost))
	}
	return lost
}
