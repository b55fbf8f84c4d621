//go:build !unix

package hostperm

import "io/fs"

// Umask returns 022 where processes have no umask.
func Umask() fs.FileMode { return 0o022 }
