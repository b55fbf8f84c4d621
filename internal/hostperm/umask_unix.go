//go:build unix

package hostperm

import (
	"io/fs"
	"syscall"
)

// atStart is the umask the process started with, read during package
// initialization: the umask is read only by setting it (and setting it
// back), and no goroutine creates files that early. /proc/self/status has
// it too, but costs a hundred times more on hutch run's start.
var atStart = current()

// Umask returns the umask the process started with: the user's. hutch
// never changes its own.
func Umask() fs.FileMode { return atStart }

// current reads the umask by setting a strict one for a moment (a file
// created meanwhile would be private, not more open) and setting the old
// one back.
func current() fs.FileMode {
	old := syscall.Umask(0o077)
	syscall.Umask(old)
	return fs.FileMode(old) & fs.ModePerm
}
