//go:build unix

package hostperm

import (
	"bytes"
	"io/fs"
	"os"
	"strconv"
	"sync"
	"syscall"
)

// umaskMu serializes the fallback's change and restore of the umask.
var umaskMu sync.Mutex

// Umask returns the process's umask without changing it: from
// /proc/self/status (Linux 4.7 and later). Elsewhere it sets the umask and
// sets it back, which a file created by another goroutine at that moment
// would see.
func Umask() fs.FileMode {
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		if i := bytes.Index(b, []byte("\nUmask:")); i >= 0 {
			line := b[i+len("\nUmask:"):]
			if j := bytes.IndexByte(line, '\n'); j >= 0 {
				line = line[:j]
			}
			if v, err := strconv.ParseUint(string(bytes.TrimSpace(line)), 8, 32); err == nil {
				return fs.FileMode(v) & fs.ModePerm
			}
		}
	}
	umaskMu.Lock()
	defer umaskMu.Unlock()
	old := syscall.Umask(0o077)
	syscall.Umask(old)
	return fs.FileMode(old) & fs.ModePerm
}
