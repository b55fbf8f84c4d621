//go:build !linux

package peercred

import "syscall"

// Of returns ErrNotSupported outside Linux.
func Of(c syscall.Conn) (Peer, error) {
	return Peer{}, ErrNotSupported
}
