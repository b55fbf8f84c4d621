// Package hostperm is hutch's one rule for the permissions of what a
// sandbox makes on the host: nothing a sandbox writes may grant or widen
// privilege there. A file that reaches the host from a sandbox — written
// into a writable host path, copied out of a served sandbox with hutch cp,
// extracted from an archive, applied from a change set — is never setuid,
// setgid or sticky, never writable by others, and writable by its group
// only when the user's umask allows group write.
//
// The sandbox package enforces the rule inside sandboxes with host paths
// to write (a umask and seccomp rules built from Withheld); the host-side
// copies apply Mode.
package hostperm

import "io/fs"

// Others' and the group's write permission bits.
const (
	GroupWrite  fs.FileMode = 0o020
	OthersWrite fs.FileMode = 0o002
)

// Withheld returns the write permissions no file from a sandbox gets on
// the host, given the user's umask: others' write always, the group's
// when the umask withholds it (with a umask of 002, as user-private
// groups use, the group is the user alone and keeps it).
func Withheld(umask fs.FileMode) fs.FileMode {
	return OthersWrite | umask&GroupWrite
}

// SandboxUmask returns the umask a sandbox with host paths to write runs with:
// the user's, with the withheld bits added.
func SandboxUmask(umask fs.FileMode) fs.FileMode {
	return (umask & fs.ModePerm) | Withheld(umask)
}

// Mode returns the mode a file or directory copied from a sandbox gets on
// the host: its permission bits without setuid, setgid and sticky, less
// the user's umask and the withheld bits.
func Mode(m, umask fs.FileMode) fs.FileMode {
	return m.Perm() &^ SandboxUmask(umask)
}

// FileMode is chmod's mode bits u (permissions, setuid, setgid, sticky)
// as Go's fs.FileMode.
func FileMode(u uint32) fs.FileMode {
	m := fs.FileMode(u & 0o777)
	if u&0o4000 != 0 {
		m |= fs.ModeSetuid
	}
	if u&0o2000 != 0 {
		m |= fs.ModeSetgid
	}
	if u&0o1000 != 0 {
		m |= fs.ModeSticky
	}
	return m
}
