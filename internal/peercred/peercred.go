// Package peercred tells who is at the other end of a unix socket
// connection: the peer's process, held by a pidfd so that a pid reused
// meanwhile never answers for it, and whether that process lives in the
// caller's own user namespace. hutch serve refuses, on its unix socket,
// every peer in another user namespace: every hutch sandbox is in one of
// its own, and a sandbox that can reach the daemon's socket through the
// file system must still not drive it.
package peercred

import (
	"errors"
	"fmt"
)

// ErrNotSupported is returned where peers cannot be identified (not
// Linux).
var ErrNotSupported = errors.New("peercred: not supported on this platform")

// Peer is the process at the other end of a connection, as it was when
// it connected.
type Peer struct {
	// PID is the peer's process id in the caller's pid namespace.
	PID int
	// UID and GID are the peer's ids when it connected, as the caller's
	// user namespace sees them.
	UID, GID uint32
	// SameUserNS says whether the peer lives in the caller's user
	// namespace. A process in a container without a user namespace of
	// its own does; every hutch sandbox does not.
	SameUserNS bool
}

// String describes the peer for logs and refusals.
func (p Peer) String() string {
	ns := "another user namespace"
	if p.SameUserNS {
		ns = "the same user namespace"
	}
	return fmt.Sprintf("pid %d uid %d gid %d in %s", p.PID, p.UID, p.GID, ns)
}
